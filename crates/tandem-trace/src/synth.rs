//! A small deterministic synthetic multi-turn workload in the Mooncake record format, used by
//! `tandem replay` when no `--trace` is given so the README's main command works on a fresh
//! clone.
//!
//! Shape (every number below is a token count unless it says otherwise):
//! - every conversation starts with the same system prompt of [`SYSTEM_PROMPT_BLOCKS`] full
//!   blocks (hash ids `0..SYSTEM_PROMPT_BLOCKS`), followed by a user message of 64..=1536;
//! - a later turn's prompt is the previous prompt + the previous answer (32..=512) + a new
//!   user message; it reuses the previous prompt's *full* blocks (their chained hashes are
//!   unchanged) and gets fresh hash ids for everything after them, including the block that
//!   was partial last turn (its content, hence its hash, changed);
//! - a conversation lasts 1..=6 turns and stops early rather than exceed
//!   [`MAX_INPUT_TOKENS`]; up to [`MAX_ACTIVE_CONVERSATIONS`] are interleaved, a new one
//!   starting with probability 35% while there is room;
//! - timestamps (ms) start at 0 and advance by 0..=400 per request, so they never decrease.
//!
//! The generator owns its pseudo-random stream (SplitMix64, defined here), so the output for
//! a seed is fixed by this file alone, not by a dependency's version. It does no IO.

use crate::record::{TraceRecord, TOKENS_PER_BLOCK};

/// Full blocks of the system prompt every conversation shares (hash ids `0..2`).
pub const SYSTEM_PROMPT_BLOCKS: u64 = 2;
/// Longest prompt a conversation may reach, in tokens (16 blocks).
pub const MAX_INPUT_TOKENS: u64 = 16 * TOKENS_PER_BLOCK;
/// Most conversations in progress at once.
pub const MAX_ACTIVE_CONVERSATIONS: usize = 8;

const USER_TOKENS: (u64, u64) = (64, 1536);
const OUTPUT_TOKENS: (u64, u64) = (32, 512);
const TURNS: (u64, u64) = (1, 6);
const GAP_MS: (u64, u64) = (0, 400);
/// Chance, in percent, that a request starts a new conversation while there is room.
const NEW_CONVERSATION_PERCENT: u64 = 35;

/// Seeded iterator of synthetic requests, exactly `requests` long.
///
/// The same `(requests, seed)` always yields the same records; a shorter run is a prefix of a
/// longer one with the same seed.
#[derive(Debug, Clone)]
pub struct SynthWorkload {
    remaining: usize,
    rng: SplitMix64,
    clock_ms: u64,
    next_hash: u64,
    active: Vec<Conversation>,
}

#[derive(Debug, Clone)]
struct Conversation {
    hash_ids: Vec<u64>,
    input_length: u64,
    last_output: u64,
    turns_left: u64,
}

impl SynthWorkload {
    /// A suggested default length for `tandem replay` without `--trace`, in requests.
    pub const DEFAULT_REQUESTS: usize = 300;

    /// A workload of `requests` requests from `seed`.
    pub fn new(requests: usize, seed: u64) -> Self {
        SynthWorkload {
            remaining: requests,
            rng: SplitMix64(seed),
            clock_ms: 0,
            next_hash: SYSTEM_PROMPT_BLOCKS,
            active: Vec::new(),
        }
    }

    fn fresh_hashes(&mut self, hash_ids: &mut Vec<u64>, until_blocks: u64) {
        while (hash_ids.len() as u64) < until_blocks {
            hash_ids.push(self.next_hash);
            self.next_hash += 1;
        }
    }

    fn start_conversation(&mut self) -> Conversation {
        let user = self.rng.in_range(USER_TOKENS);
        let input_length = SYSTEM_PROMPT_BLOCKS * TOKENS_PER_BLOCK + user;
        let mut hash_ids: Vec<u64> = (0..SYSTEM_PROMPT_BLOCKS).collect();
        self.fresh_hashes(&mut hash_ids, TraceRecord::blocks_for_tokens(input_length));
        Conversation {
            hash_ids,
            input_length,
            last_output: 0,
            turns_left: self.rng.in_range(TURNS),
        }
    }

    /// The next turn of `conversation`, or `None` if it would exceed [`MAX_INPUT_TOKENS`].
    fn continue_conversation(&mut self, mut conversation: Conversation) -> Option<Conversation> {
        let user = self.rng.in_range(USER_TOKENS);
        let input_length = conversation.input_length + conversation.last_output + user;
        if input_length > MAX_INPUT_TOKENS {
            return None;
        }
        let full_blocks = conversation.input_length / TOKENS_PER_BLOCK;
        conversation.hash_ids.truncate(full_blocks as usize);
        self.fresh_hashes(
            &mut conversation.hash_ids,
            TraceRecord::blocks_for_tokens(input_length),
        );
        conversation.input_length = input_length;
        Some(conversation)
    }

    fn next_conversation_turn(&mut self) -> Conversation {
        let room = self.active.len() < MAX_ACTIVE_CONVERSATIONS;
        let start_new = self.active.is_empty()
            || (room && self.rng.in_range((0, 99)) < NEW_CONVERSATION_PERCENT);
        if start_new {
            return self.start_conversation();
        }
        let index = self.rng.below(self.active.len() as u64) as usize;
        let conversation = self.active.swap_remove(index);
        match self.continue_conversation(conversation) {
            Some(next) => next,
            None => self.start_conversation(),
        }
    }
}

impl Iterator for SynthWorkload {
    type Item = TraceRecord;

    fn next(&mut self) -> Option<TraceRecord> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let mut conversation = self.next_conversation_turn();
        let output_length = self.rng.in_range(OUTPUT_TOKENS);
        let record = TraceRecord {
            timestamp: self.clock_ms,
            input_length: conversation.input_length,
            output_length,
            hash_ids: conversation.hash_ids.clone(),
        };
        self.clock_ms += self.rng.in_range(GAP_MS);
        conversation.last_output = output_length;
        conversation.turns_left = conversation.turns_left.saturating_sub(1);
        if conversation.turns_left > 0 {
            self.active.push(conversation);
        }
        Some(record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for SynthWorkload {}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and fixed forever by this code.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-high (Lemire), without modulo bias worth
    /// speaking of at these sizes.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in the inclusive range `lo..=hi` (`lo <= hi`).
    fn in_range(&mut self, (lo, hi): (u64, u64)) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hit::{ArrivalOrder, Capacity, PrefixCacheSim};
    use crate::parse::{read_trace, MalformedPolicy};

    #[test]
    fn deterministic_for_a_seed_and_different_across_seeds() {
        let a: Vec<TraceRecord> = SynthWorkload::new(500, 7).collect();
        let b: Vec<TraceRecord> = SynthWorkload::new(500, 7).collect();
        let c: Vec<TraceRecord> = SynthWorkload::new(500, 8).collect();
        assert_eq!(a.len(), 500);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let shorter: Vec<TraceRecord> = SynthWorkload::new(120, 7).collect();
        assert_eq!(shorter[..], a[..120], "a shorter run is a prefix");
        assert_eq!(SynthWorkload::new(42, 1).len(), 42);
    }

    #[test]
    fn records_are_well_formed_and_share_the_system_prompt() {
        let records: Vec<TraceRecord> = SynthWorkload::new(1000, 3).collect();
        for pair in records.windows(2) {
            assert!(pair[0].timestamp <= pair[1].timestamp);
        }
        for r in &records {
            assert!(r.is_consistent(), "{r:?}");
            assert!(r.input_length <= MAX_INPUT_TOKENS);
            assert_eq!(r.hash_ids[..2], [0, 1]);
            assert!((OUTPUT_TOKENS.0..=OUTPUT_TOKENS.1).contains(&r.output_length));
        }
    }

    #[test]
    fn yields_prefix_reuse_beyond_the_system_prompt() {
        let records: Vec<TraceRecord> =
            SynthWorkload::new(SynthWorkload::DEFAULT_REQUESTS, 0).collect();
        let totals = PrefixCacheSim::simulate(&records, Capacity::Unlimited, ArrivalOrder::File);
        let system_only = (records.len() as u64 - 1) * SYSTEM_PROMPT_BLOCKS * TOKENS_PER_BLOCK;
        println!(
            "synthetic default workload: token {:.4} block {:.4} ({} requests)",
            totals.token_prefix_hit_ratio(),
            totals.block_prefix_hit_ratio(),
            totals.requests
        );
        assert!(
            totals.hit_tokens > system_only,
            "multi-turn reuse adds to the system prompt"
        );
        assert!(totals.token_prefix_hit_ratio() > 0.5);
        assert!(totals.token_prefix_hit_ratio() < 0.95);
    }

    #[test]
    fn json_lines_round_trip_through_the_parser() {
        let records: Vec<TraceRecord> = SynthWorkload::new(200, 11).collect();
        let text: String = records.iter().map(|r| r.to_json_line() + "\n").collect();
        let trace = read_trace(text.as_bytes(), MalformedPolicy::Fail).expect("own output parses");
        assert_eq!(trace.records, records);
        assert_eq!(trace.report.malformed, vec![]);
    }

    #[test]
    fn splitmix_stays_in_range() {
        let mut rng = SplitMix64(5);
        for _ in 0..10_000 {
            let v = rng.in_range((3, 9));
            assert!((3..=9).contains(&v));
        }
        assert_eq!(rng.below(1), 0);
    }
}
