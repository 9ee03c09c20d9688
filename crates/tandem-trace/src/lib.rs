//! Request traces for `tandem replay`: the Mooncake FAST'25 record format, a streaming parser
//! that survives messy real-world files, a deterministic synthetic multi-turn workload in the
//! same format, and the prefix-cache simulator that defines the expected hit ratios.
//!
//! This crate is IO-light: it reads from any [`std::io::BufRead`] the caller opens, or opens a
//! trace file by path (plain `.jsonl` or gzip `.jsonl.gz`, as the shipped traces in
//! `data/traces/` are), and never touches sockets, clocks or threads. Timestamps are data
//! (ms), never waited on.
//!
//! # Layout
//! - [`record`]: [`TraceRecord`], one request (`timestamp` ms, `input_length` and
//!   `output_length` tokens, `hash_ids` prefix block hashes of [`TOKENS_PER_BLOCK`] tokens),
//!   and its block/token arithmetic.
//! - [`error`]: [`LineError`] (one malformed line, with its 1-based line number and field) and
//!   [`TraceError`] (what a reader returns: a malformed line under
//!   [`MalformedPolicy::Fail`], a read failure, a file that cannot be opened, a corrupt gzip).
//! - [`parse`]: [`TraceReader`], the streaming reader, its [`MalformedPolicy`] and the
//!   [`ParseReport`] of everything tolerated or skipped.
//! - [`open`]: [`TraceFile`], a trace file by path, plain or gzip (told apart by the gzip
//!   magic bytes), and [`open_trace`] / [`read_trace_file`] over it.
//! - [`synth`]: [`SynthWorkload`], the seeded synthetic multi-turn workload used when
//!   `tandem replay` runs without `--trace`.
//! - [`lru`]: [`LruBlockSet`], the set of cached block hashes with least-recently-used eviction.
//! - [`hit`]: [`PrefixCacheSim`], the hit-ratio definition (prefix semantics, partial last
//!   block counted by its tokens) with unlimited or LRU-bounded capacity.
//!
//! # Example
//! ```
//! use tandem_trace::{Capacity, MalformedPolicy, PrefixCacheSim, TraceReader};
//!
//! let text = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n\
//!             {\"timestamp\": 9, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [1, 3]}\n";
//! let mut sim = PrefixCacheSim::new(Capacity::Unlimited);
//! for record in TraceReader::new(text.as_bytes(), MalformedPolicy::Fail) {
//!     sim.observe(&record?);
//! }
//! // The second request hits block 1 (512 of its 700 tokens).
//! assert_eq!(sim.totals().hit_tokens, 512);
//! # Ok::<(), tandem_trace::TraceError>(())
//! ```

pub mod error;
pub mod hit;
pub mod lru;
pub mod open;
pub mod parse;
pub mod record;
pub mod synth;

pub use error::{LineError, TraceError};
pub use hit::{ArrivalOrder, Capacity, HitTotals, PrefixCacheSim, RequestHits};
pub use lru::LruBlockSet;
pub use open::{open_trace, read_trace_file, Compression, TraceFile, GZIP_MAGIC};
pub use parse::{read_trace, MalformedPolicy, ParseReport, Trace, TraceReader};
pub use record::{TraceRecord, TOKENS_PER_BLOCK};
pub use synth::SynthWorkload;
