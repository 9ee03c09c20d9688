//! The tier benchmark behind `tandem bench tiers`: store and load throughput of the host and
//! disk tiers against plain copies of the same sizes measured in the same run.
//!
//! Owns [`run_tier_bench`], its options and its report (a table via `Display`, JSON via
//! serde). Every figure is a ratio against a baseline from the same run, because the machines
//! are shared and noisy; nothing here asserts a time. It must never be called from a test.
//!
//! # Layout
//! - this file: options, report, errors and the run over [`SHARD_SIZES`];
//! - `size`: one shard size's engine region, stores, baseline pool and files, and the timed
//!   bursts;
//! - `table`: the report as a text table.
//!
//! Baselines (the floor each tier is held to):
//! - **memcpy**: `copy_from_slice` of one shard between the same engine pages and a pool of the
//!   same size as the host slab, visiting slots in the same order. Host store and load copy
//!   the same bytes and also checksum them, plus the store's bookkeeping.
//! - **pwrite / pread**: `write_all_at` / `read_exact_at` of one shard per call between the same
//!   engine pages and a file of the same size, preallocated the same way, on the same file
//!   system, same slot order. The
//!   disk tier does the same I/O plus the checksum and its bookkeeping.
//! - **O_DIRECT**: the same plain calls on a file opened with O_DIRECT, next to the disk tier in
//!   direct mode; both are compared with the buffered baselines, which is the question "does
//!   O_DIRECT help here".

mod size;
mod table;

use std::path::PathBuf;

use serde::Serialize;
use tandem_store::store::StoreError;

use size::SizeBench;

/// Shard sizes measured, in bytes.
pub const SHARD_SIZES: [usize; 3] = [64 << 10, 1 << 20, 8 << 20];

/// Where and how long to run.
#[derive(Clone, Debug)]
pub struct TierBenchOptions {
    /// Directory for the disk files (tier and baseline share its file system).
    pub disk_dir: PathBuf,
    /// Directory for the host slab and the engine region (normally under /dev/shm).
    pub shm_dir: PathBuf,
    /// Smaller pools and fewer bytes per figure (a few seconds).
    pub quick: bool,
}

/// Throughputs for one shard size, in GB/s (10^9 bytes per second): bytes moved over the
/// summed time of that operation's bursts.
#[derive(Clone, Debug, Serialize)]
pub struct TierBenchRow {
    /// Shard size in bytes.
    pub shard_bytes: usize,
    /// Baseline: plain copy engine page → pool slot.
    pub memcpy_store_gbps: f64,
    /// Host tier store (copy + checksum + bookkeeping).
    pub host_store_gbps: f64,
    /// `host_store_gbps / memcpy_store_gbps` (target ≥ 0.8).
    pub host_store_ratio: f64,
    /// Baseline: plain copy pool slot → engine page.
    pub memcpy_load_gbps: f64,
    /// Host tier load (copy + checksum verification).
    pub host_load_gbps: f64,
    /// `host_load_gbps / memcpy_load_gbps` (target ≥ 0.8).
    pub host_load_ratio: f64,
    /// Baseline: buffered positional write of one shard.
    pub pwrite_gbps: f64,
    /// Disk tier store, buffered mode.
    pub disk_store_gbps: f64,
    /// `disk_store_gbps / pwrite_gbps` (target ≥ 0.7).
    pub disk_store_ratio: f64,
    /// Baseline: buffered positional read of one shard.
    pub pread_gbps: f64,
    /// Disk tier load, buffered mode.
    pub disk_load_gbps: f64,
    /// `disk_load_gbps / pread_gbps` (target ≥ 0.7).
    pub disk_load_ratio: f64,
    /// The O_DIRECT figures, when the file system supports it.
    pub direct: Option<DirectRow>,
}

/// O_DIRECT figures for one shard size, in GB/s.
#[derive(Clone, Debug, Serialize)]
pub struct DirectRow {
    /// Plain O_DIRECT positional write.
    pub pwrite_gbps: f64,
    /// Plain O_DIRECT positional read.
    pub pread_gbps: f64,
    /// Disk tier store in direct mode.
    pub disk_store_gbps: f64,
    /// Disk tier load in direct mode.
    pub disk_load_gbps: f64,
}

/// The whole benchmark.
#[derive(Clone, Debug, Serialize)]
pub struct TierBenchReport {
    /// Whether `--quick` sizes were used.
    pub quick: bool,
    /// Bytes of the host slab, the memcpy pool and each disk file, per shard size.
    pub pool_bytes: u64,
    /// Bytes moved per figure per repetition.
    pub bytes_per_figure: u64,
    /// Bytes per burst: each tier alternates with its baseline in bursts of this size.
    pub burst_bytes: u64,
    /// One row per shard size.
    pub rows: Vec<TierBenchRow>,
    /// Why the O_DIRECT figures are missing, if they are.
    pub direct_unsupported: Option<String>,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Setting up or driving a tier failed.
    #[error("tier benchmark: {0}")]
    Store(#[from] StoreError),
    /// A baseline file or the engine region could not be used.
    #[error("tier benchmark: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

/// Runs the tier benchmark for [`SHARD_SIZES`]; prints nothing.
///
/// Errors: [`BenchError`] when a file cannot be created or a tier fails.
pub fn run_tier_bench(opts: &TierBenchOptions) -> Result<TierBenchReport, BenchError> {
    let (pool_bytes, bytes_per_figure, burst_bytes) = if opts.quick {
        (32u64 << 20, 256u64 << 20, 16u64 << 20)
    } else {
        (256u64 << 20, 2u64 << 30, 32u64 << 20)
    };
    let work = tempfile::Builder::new()
        .prefix("tandem-bench-")
        .tempdir_in(&opts.disk_dir)
        .map_err(io("disk dir"))?;
    let shm = tempfile::Builder::new()
        .prefix("tandem-bench-")
        .tempdir_in(&opts.shm_dir)
        .map_err(io("shm dir"))?;
    let mut rows = Vec::new();
    let mut direct_unsupported = None;
    for &shard in &SHARD_SIZES {
        // Per-size directories, removed after the size is measured (declared before the bench
        // so that they outlive it): /dev/shm never holds more than one size's files.
        let size_work = tempfile::tempdir_in(work.path()).map_err(io("disk dir"))?;
        let size_shm = tempfile::tempdir_in(shm.path()).map_err(io("shm dir"))?;
        let mut bench = SizeBench::new(
            shard,
            pool_bytes,
            bytes_per_figure,
            burst_bytes,
            size_work.path(),
            size_shm.path(),
        )?;
        let best = bench.measure(&mut direct_unsupported)?;
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        rows.push(TierBenchRow {
            shard_bytes: shard,
            memcpy_store_gbps: best[0],
            host_store_gbps: best[1],
            host_store_ratio: ratio(best[1], best[0]),
            memcpy_load_gbps: best[2],
            host_load_gbps: best[3],
            host_load_ratio: ratio(best[3], best[2]),
            pwrite_gbps: best[4],
            disk_store_gbps: best[5],
            disk_store_ratio: ratio(best[5], best[4]),
            pread_gbps: best[6],
            disk_load_gbps: best[7],
            disk_load_ratio: ratio(best[7], best[6]),
            direct: direct_unsupported.is_none().then_some(DirectRow {
                pwrite_gbps: best[8],
                pread_gbps: best[9],
                disk_store_gbps: best[10],
                disk_load_gbps: best[11],
            }),
        });
    }
    Ok(TierBenchReport {
        quick: opts.quick,
        pool_bytes,
        bytes_per_figure,
        burst_bytes,
        rows,
        direct_unsupported,
    })
}

#[cfg(test)]
mod tests {
    use super::table::size_label;
    use super::*;

    #[test]
    fn error_messages_and_labels() {
        let e = BenchError::Io {
            what: "pwrite".into(),
            source: std::io::Error::other("x"),
        };
        assert_eq!(e.to_string(), "tier benchmark: pwrite: x");
        let e: BenchError = StoreError::ZeroShard.into();
        assert_eq!(
            e.to_string(),
            "tier benchmark: store: shard size must be at least one byte"
        );
        assert_eq!(size_label(64 << 10), "64K");
        assert_eq!(size_label(8 << 20), "8M");
    }
}
