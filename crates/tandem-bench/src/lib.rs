//! Tandem's library benchmarks, kept out of the library crates they measure: the store tiers
//! (`tandem_store`) and the write-ahead append (`tandem_durable`). `tandem bench tiers` and
//! `tandem bench redis` call them and add the targets' pass/fail marks (docs/BENCHMARKS.md).
//!
//! Every figure sits next to a baseline measured in the same run, because the machines are
//! shared and noisy; nothing here asserts a time, and nothing here may be called from a test.
//! Each benchmark uses only the public API of the crate it measures.
//!
//! # Layout
//! - [`tiers`]: [`run_tier_bench`], host and disk tiers against memcpy and plain positional
//!   I/O (buffered and O_DIRECT) for shard sizes of 64 KiB, 1 MiB and 8 MiB.
//! - [`datapath`]: [`datapath::drive_case`], a block from engine pages to every rank's tier and
//!   back through real agents, timed to the frame that reports it, with its memcpy, pwrite/pread
//!   and control floors (`tandem bench datapath`).
//! - [`append`]: [`bench_append`], `append_step` against a PING round trip, one plain XADD of
//!   the same bytes, and pipelined plain XADDs.
//! - [`scale`]: what a large tier, a large index and many groups on one Redis cost
//!   (`tandem bench scale`).
//!
//! The examples `tier_bench` and `bench_append` run each one alone:
//! `cargo run --release -p tandem-bench --example tier_bench -- --quick`.

pub mod append;
pub mod datapath;
pub mod scale;
pub mod tiers;

pub use append::{bench_append, AppendBench, AppendBenchError, AppendBenchRow};
pub use tiers::{
    run_tier_bench, BenchError, DirectRow, TierBenchOptions, TierBenchReport, TierBenchRow,
    SHARD_SIZES,
};
