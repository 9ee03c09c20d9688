//! `tandem bench tiers`: the store engine's host and disk tiers against memcpy and plain
//! positional I/O of the same sizes, measured in the same run.
//!
//! Wraps `tandem_bench::run_tier_bench`, which owns the measurement, its baselines and
//! its table; this module only picks the directories and adds the pass/fail marks.

use std::path::PathBuf;

use tandem_bench::{run_tier_bench, TierBenchOptions};

use super::report::mark;
use super::{BenchArgs, PartOutput};

/// Target: host tier ≥ this × memcpy.
const HOST_TARGET: f64 = 0.8;
/// Target: disk tier ≥ this × plain positional I/O.
const DISK_TARGET: f64 = 0.7;

/// Run the tier benchmark.
///
/// # Errors
/// When a file cannot be created or a tier fails (`tandem_bench::BenchError`).
pub(super) fn run(args: &BenchArgs) -> anyhow::Result<PartOutput> {
    let shm = PathBuf::from("/dev/shm");
    let opts = TierBenchOptions {
        disk_dir: args.disk_dir.clone().unwrap_or_else(std::env::temp_dir),
        shm_dir: if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        },
        quick: args.quick,
    };
    let report = run_tier_bench(&opts)?;
    let mut table = format!(
        "disk files in {}, host slab in {}\n{report}",
        opts.disk_dir.display(),
        opts.shm_dir.display()
    );
    let host_min = report
        .rows
        .iter()
        .flat_map(|r| [r.host_store_ratio, r.host_load_ratio])
        .fold(f64::INFINITY, f64::min);
    let disk_min = report
        .rows
        .iter()
        .flat_map(|r| [r.disk_store_ratio, r.disk_load_ratio])
        .fold(f64::INFINITY, f64::min);
    table += &format!(
        "targets: host ≥ {HOST_TARGET}× memcpy (lowest {host_min:.2} {}), disk ≥ {DISK_TARGET}× positional I/O (lowest {disk_min:.2} {})\n",
        mark(host_min >= HOST_TARGET),
        mark(disk_min >= DISK_TARGET)
    );
    Ok(PartOutput {
        table,
        json: serde_json::to_value(&report)?,
    })
}
