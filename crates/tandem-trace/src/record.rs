//! One request of a Mooncake FAST'25 trace and its block/token arithmetic.
//!
//! Owns the record shape and the rule that ties `input_length` to `hash_ids`: a request of
//! `input_length` tokens has `ceil(input_length / 512)` prefix blocks, every block full except
//! possibly the last, which holds `input_length − 512·(n−1)` tokens. Never parses text (that is
//! [`crate::parse`]) and never decides what is cached (that is [`crate::hit`]).

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Tokens per prefix block in the Mooncake trace format (fixed by the published traces).
pub const TOKENS_PER_BLOCK: u64 = 512;

/// One request of a Mooncake trace, one JSON object per line:
/// `{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ...]}`.
///
/// Identical ids in two requests' `hash_ids` are the same (chained-hash) prefix block, so they
/// can be reused. Records built by [`crate::parse`] and [`crate::synth`] always satisfy
/// [`TraceRecord::is_consistent`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Arrival time in ms since the trace's first request (ties are allowed).
    pub timestamp: u64,
    /// Prompt length in tokens.
    pub input_length: u64,
    /// Generated length in tokens (0 when the trace line omitted it).
    pub output_length: u64,
    /// Prefix block hashes, one per [`TOKENS_PER_BLOCK`] tokens of the prompt, in order.
    pub hash_ids: Vec<u64>,
}

impl TraceRecord {
    /// Number of prefix blocks `input_length` tokens need: `ceil(input_length / 512)`.
    pub fn blocks_for_tokens(input_length: u64) -> u64 {
        input_length.div_ceil(TOKENS_PER_BLOCK)
    }

    /// Number of prefix blocks of this request (`hash_ids.len()`).
    pub fn blocks(&self) -> u64 {
        self.hash_ids.len() as u64
    }

    /// Whether `hash_ids` has exactly `ceil(input_length / 512)` entries.
    pub fn is_consistent(&self) -> bool {
        self.blocks() == Self::blocks_for_tokens(self.input_length)
    }

    /// Tokens held by the last block: `input_length − 512·(n−1)` (0 for a request with no
    /// blocks). Saturates on an inconsistent record instead of underflowing.
    pub fn last_block_tokens(&self) -> u64 {
        match self.blocks() {
            0 => 0,
            n => self.input_length.saturating_sub(TOKENS_PER_BLOCK * (n - 1)),
        }
    }

    /// Tokens covered by the first `blocks` blocks: `min(512·blocks, input_length)`, so a
    /// prefix that includes a partial last block counts that block by its tokens.
    pub fn prefix_tokens(&self, blocks: u64) -> u64 {
        blocks
            .saturating_mul(TOKENS_PER_BLOCK)
            .min(self.input_length)
    }

    /// The record as one Mooncake-format JSON line (no trailing newline), with the field
    /// order and spacing of the published traces.
    pub fn to_json_line(&self) -> String {
        let mut line = format!(
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [",
            self.timestamp, self.input_length, self.output_length
        );
        for (i, id) in self.hash_ids.iter().enumerate() {
            if i > 0 {
                line.push_str(", ");
            }
            // Writing into a String cannot fail.
            let _ = write!(line, "{id}");
        }
        line.push_str("]}");
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(input_length: u64, blocks: u64) -> TraceRecord {
        TraceRecord {
            timestamp: 0,
            input_length,
            output_length: 1,
            hash_ids: (0..blocks).collect(),
        }
    }

    #[test]
    fn block_arithmetic_counts_a_partial_last_block_by_its_tokens() {
        let r = record(1300, 3);
        assert!(r.is_consistent());
        assert_eq!(r.last_block_tokens(), 276);
        assert_eq!(r.prefix_tokens(0), 0);
        assert_eq!(r.prefix_tokens(2), 1024);
        assert_eq!(r.prefix_tokens(3), 1300);
        assert_eq!(TraceRecord::blocks_for_tokens(1024), 2);
        assert_eq!(TraceRecord::blocks_for_tokens(1025), 3);
        assert_eq!(TraceRecord::blocks_for_tokens(0), 0);
    }

    #[test]
    fn full_last_block_and_empty_request() {
        assert_eq!(record(1024, 2).last_block_tokens(), 512);
        let empty = record(0, 0);
        assert!(empty.is_consistent());
        assert_eq!(empty.last_block_tokens(), 0);
        assert!(!record(100, 2).is_consistent());
        assert_eq!(record(100, 2).last_block_tokens(), 0);
    }

    #[test]
    fn json_line_matches_the_published_format_and_round_trips() {
        let r = TraceRecord {
            timestamp: 27482,
            input_length: 6955,
            output_length: 52,
            hash_ids: vec![46, 47, 2353],
        };
        let line = r.to_json_line();
        assert_eq!(
            line,
            "{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [46, 47, 2353]}"
        );
        let back: TraceRecord = serde_json::from_str(&line).expect("own output parses");
        assert_eq!(back, r);
    }
}
