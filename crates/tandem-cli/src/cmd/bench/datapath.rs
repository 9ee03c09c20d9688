//! `tandem bench datapath`: a block from engine pages to every rank's tier and back, through a
//! real local cluster (the code of `tandem up`), timed from the engine's `store` / `load` call
//! to the frame that reports the task finished.
//!
//! Cases: groups of 1, 2 and 4 ranks (1 and 2 with `--quick`) × shard sizes 64 KiB, 1 MiB and
//! 8 MiB × tasks of 1 block and of [`multi_blocks`] blocks × host tier and disk tier. One
//! cluster per (ranks, shard, tier); both task sizes run in it, each on its own working set,
//! stored then loaded one task at a time. The host case keeps everything in the host tier
//! (in /dev/shm); the disk case gives the host tier room for one task only, so that, as the
//! group index places blocks, every later store writes to the disk tier and its load reads from
//! there. `--tier` and `--shards` run a part of the sweep.
//!
//! Baselines of the same run, with the same bytes: memcpy between two shared-memory files
//! (the copy floor, one thread: the floor the goals name), the same as one memcpy per rank at
//! once (the concurrent copy floor of a group of N ranks on this machine, host tier, printed
//! beside it), one pwrite / pread per shard in the disk tier's directory, and one engine round
//! trip (the control floor, measured in each cluster). Targets are printed with
//! pass/fail marks, never asserted. Owns the sweep, the table and the plot's data.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tandem_bench::datapath::{
    concurrent_copy_floor, concurrent_disk_floor, copy_floor, disk_floor, drive_case, CaseFigures,
    DriveOptions, Floor, StatusProbe,
};
use tokio_util::sync::CancellationToken;

use super::report::{mark, Table};
use super::stats::ratio;
use super::{BenchArgs, PartOutput};
use crate::local::{http_get, LocalCluster, LocalSpec, LocalTuning};

/// Rank counts of the full run.
const RANKS: [u32; 3] = [1, 2, 4];
/// Rank counts of `--quick`.
const QUICK_RANKS: [u32; 2] = [1, 2];
/// Shard sizes, bytes.
pub(super) const SHARDS: [usize; 3] = [64 << 10, 1 << 20, 8 << 20];
/// Blocks of a multi-block task, at most.
const MULTI: usize = 64;
/// Bytes of one multi-block task per rank, at most (full run; a 64-block task of 8 MiB shards
/// would be 512 MiB per rank, 4 GiB of pools and slabs with 4 ranks on a shared machine).
const TASK_CAP: usize = 64 << 20;
/// The same cap with `--quick`.
const QUICK_TASK_CAP: usize = 16 << 20;
/// Working set per rank and task size: 4× the L3 cache of the machines this runs on (32 MiB).
const WORKING_SET: usize = 128 << 20;
/// The same with `--quick`.
const QUICK_WORKING_SET: usize = 8 << 20;
/// Samples of the control floor and of each lookup size, per case.
const SAMPLES: usize = 200;
/// Deadline of each `end_step` and `frame` call.
const DEADLINE: Duration = Duration::from_secs(10);
/// Heartbeat interval and timeout of the clusters, ms: the interval of `tandem up`, a timeout
/// long enough that a 2-core machine busy copying never restarts a group (this measures the
/// data path, not failure detection; `tandem bench recovery` measures that).
const HEARTBEAT_MS: (u64, u64) = (100, 5_000);

/// Target: multi-block tasks of 1 MiB and 8 MiB, host tier, ≥ this × memcpy per rank.
const HOST_TARGET: f64 = 0.8;
/// Target: the same on the disk tier, ≥ this × pwrite / pread.
const DISK_TARGET: f64 = 0.7;
/// Target: a single-block task finishes within this many steps of the call.
const STEPS_TARGET: f64 = 2.0;
/// The peer store's figures (docs/BENCHMARKS.md): single 64 KiB put p50 (low end), µs.
const PEER_PUT_64K_US: f64 = 440.0;
/// Single 64 KiB get p50 (low end), µs.
const PEER_GET_64K_US: f64 = 270.0;
/// Existence check of 128 keys p50 (low end), µs.
const PEER_EXIST_128_US: f64 = 200.0;

/// Which tier a case's blocks live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TierCase {
    /// Everything in the host tier.
    Host,
    /// The host tier holds one task; the rest goes to disk and is loaded from there.
    Disk,
}

impl TierCase {
    /// `host` for the host case, `disk` for the disk case (the floor a row is measured against).
    fn pick<T>(self, host: T, disk: T) -> T {
        match self {
            TierCase::Host => host,
            TierCase::Disk => disk,
        }
    }
}

/// Blocks of a multi-block task of `shard` bytes.
pub(super) fn multi_blocks(shard: usize, quick: bool) -> usize {
    let cap = if quick { QUICK_TASK_CAP } else { TASK_CAP };
    (cap / shard).clamp(1, MULTI)
}

/// Blocks of the working set for tasks of `blocks` blocks of `shard` bytes: the working-set
/// bytes, at least two tasks, a whole number of tasks.
fn working_set(shard: usize, blocks: usize, quick: bool) -> usize {
    let bytes = if quick {
        QUICK_WORKING_SET
    } else {
        WORKING_SET
    };
    let w = bytes.div_ceil(shard).max(2 * blocks);
    w.div_ceil(blocks) * blocks
}

/// One case's figures.
#[derive(Clone, Debug, Serialize)]
pub(super) struct CaseRow {
    /// Ranks in the group.
    pub ranks: u32,
    /// Where the blocks live.
    pub tier: TierCase,
    /// Bytes of one shard.
    pub shard_bytes: usize,
    /// Blocks per task.
    pub blocks_per_task: usize,
    /// Blocks of the working set, per rank.
    pub working_set_blocks: usize,
    /// What the agents measured.
    pub figures: CaseFigures,
    /// The floor of the same bytes (memcpy for host, pwrite / pread for disk).
    pub floor: Floor,
    /// Store GB/s per rank ÷ the floor's store.
    pub store_ratio: f64,
    /// Load GB/s per rank ÷ the floor's load.
    pub load_ratio: f64,
    /// The concurrent floor, GB/s per copy: host tier, `ranks` memcpys at once, one thread per
    /// rank, each of one rank's bytes; disk tier, `ranks` pwrite / pread loops at once, each on
    /// its own file (for 1 rank, [`CaseRow::floor`]).
    pub floor_concurrent: Option<Floor>,
    /// Store GB/s per rank ÷ the concurrent floor's store (0 without one).
    pub store_ratio_concurrent: f64,
    /// Load GB/s per rank ÷ the concurrent floor's load (0 without one).
    pub load_ratio_concurrent: f64,
}

/// The whole sweep.
#[derive(Clone, Debug, Serialize)]
pub(super) struct DatapathReport {
    /// Copy workers per rank (`store.copy_workers`) of every cluster of the run.
    pub copy_workers: u32,
    /// The leader's pause between two `end_step` calls, µs (0: back to back).
    pub step_gap_us: u64,
    /// One row per case that ran.
    pub rows: Vec<CaseRow>,
    /// Cases that could not run, with why.
    pub not_measured: Vec<String>,
    /// Where the disk tiers and the pwrite baseline were.
    pub disk_dir: String,
}

/// Run the sweep (every case, once per `--copy-workers` value).
///
/// # Errors
/// Only when nothing at all could be measured.
pub(super) fn run(args: &BenchArgs) -> anyhow::Result<PartOutput> {
    let workers = if args.copy_workers.is_empty() {
        vec![0]
    } else {
        args.copy_workers.clone()
    };
    let mut reports = Vec::new();
    for &k in &workers {
        reports.push(sweep(args, k)?);
    }
    if let Some(path) = &args.plot {
        super::plot::datapath_svg(&reports, path)?;
        eprintln!("  datapath: plot written to {}", path.display());
    }
    let table = reports.iter().map(table).collect::<Vec<_>>().join("\n");
    let json = if reports.len() == 1 {
        serde_json::to_value(&reports[0])?
    } else {
        serde_json::json!({ "by_copy_workers": reports })
    };
    Ok(PartOutput { table, json })
}

/// Every case with `copy_workers` copy workers per rank (0: the agent's default).
fn sweep(args: &BenchArgs, copy_workers: u32) -> anyhow::Result<DatapathReport> {
    let ranks: &[u32] = if !args.ranks.is_empty() {
        &args.ranks
    } else if args.quick {
        &QUICK_RANKS
    } else {
        &RANKS
    };
    let disk_root = args.disk_dir.clone().unwrap_or_else(std::env::temp_dir);
    let shm_root = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let step_gap = Duration::from_micros(args.step_gap_us);
    let mut rows = Vec::new();
    let mut not_measured = Vec::new();
    let mut seed = 1u64;
    let shards: Vec<usize> = if args.shards.is_empty() {
        SHARDS.to_vec()
    } else {
        args.shards.iter().map(|k| k << 10).collect()
    };
    let tiers: &[TierCase] = if args.tier.is_empty() {
        &[TierCase::Host, TierCase::Disk]
    } else {
        &args.tier
    };
    for &shard in &shards {
        let sizes = [1, multi_blocks(shard, args.quick)];
        // Floors once per shard and task size (no agent is running while they are measured);
        // the concurrent floors once per rank count above 1 too, for the tiers that run.
        let mut floors = Vec::new();
        let mut concurrent = Vec::new();
        for &b in &sizes {
            let w = working_set(shard, b, args.quick);
            let host = copy_floor(&shm_root, shard, w).context("memcpy floor")?;
            let disk = disk_floor(&disk_root, &shm_root, shard, w).context("pwrite floor")?;
            floors.push((host, disk));
            let mut by_ranks = Vec::new();
            for &n in ranks {
                let host_n = if n <= 1 || !tiers.contains(&TierCase::Host) {
                    host
                } else {
                    concurrent_copy_floor(&shm_root, shard, w, n as usize)
                        .context("concurrent memcpy floor")?
                };
                let disk_n = if n <= 1 || !tiers.contains(&TierCase::Disk) {
                    disk
                } else {
                    concurrent_disk_floor(&disk_root, &shm_root, shard, w, n as usize)
                        .context("concurrent pwrite floor")?
                };
                by_ranks.push((n, host_n, disk_n));
            }
            concurrent.push(by_ranks);
        }
        for &n in ranks {
            for &tier in tiers {
                eprintln!(
                    "  datapath: {n} ranks, {} shards, {tier:?} tier, copy workers {copy_workers} ...",
                    size_label(shard)
                );
                let plan: Vec<(usize, usize)> = sizes
                    .iter()
                    .map(|&b| (b, working_set(shard, b, args.quick)))
                    .collect();
                match one_cluster(
                    n,
                    shard,
                    tier,
                    &plan,
                    copy_workers,
                    step_gap,
                    &disk_root,
                    &shm_root,
                    &mut seed,
                ) {
                    Ok(figs) => {
                        for (((b, w), (f, (host, disk))), by_ranks) in plan
                            .iter()
                            .zip(figs.into_iter().zip(&floors))
                            .zip(&concurrent)
                        {
                            let floor = tier.pick(*host, *disk);
                            let together = by_ranks
                                .iter()
                                .find(|(k, _, _)| *k == n)
                                .map(|&(_, host_n, disk_n)| tier.pick(host_n, disk_n));
                            let versus = |gbps: f64, of: fn(&Floor) -> f64| {
                                together.map_or(0.0, |c| ratio(gbps, of(&c)))
                            };
                            rows.push(CaseRow {
                                ranks: n,
                                tier,
                                shard_bytes: shard,
                                blocks_per_task: *b,
                                working_set_blocks: *w,
                                store_ratio: ratio(f.store.gbps_per_rank, floor.store_gbps),
                                load_ratio: ratio(f.load.gbps_per_rank, floor.load_gbps),
                                store_ratio_concurrent: versus(f.store.gbps_per_rank, |c| {
                                    c.store_gbps
                                }),
                                load_ratio_concurrent: versus(f.load.gbps_per_rank, |c| {
                                    c.load_gbps
                                }),
                                floor_concurrent: together,
                                figures: f,
                                floor,
                            });
                        }
                    }
                    Err(e) => {
                        let why =
                            format!("{n} ranks, {} shards, {tier:?}: {e:#}", size_label(shard));
                        eprintln!("  datapath: not measured: {why}");
                        not_measured.push(why);
                    }
                }
            }
        }
    }
    if rows.is_empty() {
        anyhow::bail!("no case could be measured: {not_measured:?}");
    }
    Ok(DatapathReport {
        copy_workers,
        step_gap_us: args.step_gap_us,
        rows,
        not_measured,
        disk_dir: disk_root.display().to_string(),
    })
}

/// Writes every rank's disk-tier file (bytes of no block, the exact size the tier opens and
/// keeps) before the agents start, as the pwrite floor's file is written before it is timed:
/// both then measure writes into a file in use. A fresh preallocated file has unwritten
/// extents, and the first write into each costs ext4 an extent conversion (a tier in service
/// pays it once). The bytes come from memory written first, as the floor's do: a write from
/// pages never touched faults inside the kernel's copy, which then fills the page cache one
/// 4 KiB folio at a time, and later writes into such folios are slower than into the large
/// folios the floor's file gets (docs/BENCHMARKS.md, Datapath, "On a quiet machine, and what
/// the disk tier's own figures were missing").
fn prewrite_slabs(dir: &Path, ranks: u32, shard: usize, blocks: u64) -> anyhow::Result<()> {
    use std::io::Write;
    let bytes = tandem_store::disk::DiskTier::file_bytes(shard, blocks)
        .context("disk tier size overflows")?;
    let filler = vec![0xa5u8; 8 << 20];
    for r in 0..ranks {
        let d = dir.join(format!("rank{r}")).join("disk");
        std::fs::create_dir_all(&d)?;
        let mut f = std::fs::File::create(d.join(tandem_store::disk::DISK_SLAB_FILE))?;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(filler.len() as u64) as usize;
            f.write_all(&filler[..n])?;
            left -= n as u64;
        }
        f.sync_all()?;
    }
    Ok(())
}

/// One cluster of `n` ranks, `shard`-byte shards; runs each `(blocks per task, working set)`
/// of `plan` in turn.
#[allow(clippy::too_many_arguments)]
fn one_cluster(
    n: u32,
    shard: usize,
    tier: TierCase,
    plan: &[(usize, usize)],
    copy_workers: u32,
    step_gap: Duration,
    disk_root: &Path,
    shm_root: &Path,
    seed: &mut u64,
) -> anyhow::Result<Vec<CaseFigures>> {
    let total: usize = plan.iter().map(|(_, w)| w).sum();
    let largest_task = plan.iter().map(|(b, _)| *b).max().unwrap_or(1);
    let (host, disk) = match tier {
        TierCase::Host => (total as u64, 0),
        TierCase::Disk => (largest_task as u64, total as u64),
    };
    // Shard bytes = 2 (K and V) × head_dim × 2 (dtype) × 512 tokens, one layer, one head per rank.
    let head_dim = (shard / (2 * 2 * 512)) as u32;
    let hb = tandem_config::SupervisorConfig::default();
    let cluster_dir = tempfile::Builder::new()
        .prefix("tandem-datapath-")
        .tempdir_in(disk_root)
        .context("cluster dir")?;
    let host_dir = tempfile::Builder::new()
        .prefix("tandem-datapath-")
        .tempdir_in(shm_root)
        .context("host tier dir")?;
    if disk > 0 {
        prewrite_slabs(cluster_dir.path(), n, shard, disk).context("disk tier files")?;
    }
    let spec = LocalSpec {
        max_restarts: hb.max_restarts,
        pp: 1,
        tp: n,
        host_capacity_blocks: host,
        disk_capacity_blocks: disk,
        tokens_per_block: 512,
        model_toml: crate::cmd::up::small_model(1, n, head_dim),
        heartbeat_ms: HEARTBEAT_MS,
        dir: Some(cluster_dir.path().to_path_buf()),
    };
    let tuning = LocalTuning {
        host_dir: Some(host_dir.path().to_path_buf()),
        store_lines: if copy_workers > 0 {
            format!("copy_workers = {copy_workers}")
        } else {
            String::new()
        },
    };
    let mut cluster = LocalCluster::start_tuned(&spec, &tuning, CancellationToken::new())?;
    let sockets: Vec<PathBuf> = (0..n).map(|r| cluster.socket(r)).collect();
    let probe = status_probe(
        (0..n).map(|r| cluster.agent_http(r)).collect(),
        cluster.supervisor_http().to_string(),
    );
    let mut out = Vec::new();
    for &(blocks, w) in plan {
        let opts = DriveOptions {
            sockets: sockets.clone(),
            pool_dir: host_dir.path().join("pools"),
            shard_bytes: shard,
            blocks_per_task: blocks,
            working_set_blocks: w,
            step_gap,
            deadline: DEADLINE,
            samples: SAMPLES,
            seed: *seed,
            probe: Some(probe.clone()),
        };
        *seed += 1;
        match drive_case(&opts) {
            Ok(f) => out.push(f),
            Err(e) => anyhow::bail!(
                "tasks of {blocks} blocks: {e}\n--- cluster log (last lines) ---\n{}",
                cluster.log_tail(20)
            ),
        }
    }
    cluster.stop();
    Ok(out)
}

/// Every rank's `/status` and the supervisor's, read when a case fails (before its engines
/// stop), so that its report says whether each agent had the frames its engine waited for.
fn status_probe(agents: Vec<String>, supervisor: String) -> StatusProbe {
    StatusProbe(std::sync::Arc::new(move || {
        let get = |what: String, addr: &str| match http_get(&format!("http://{addr}/status")) {
            Some((code, body)) => format!("{what} /status ({code}): {}", body.trim()),
            None => format!("{what} /status: no answer from {addr}"),
        };
        let mut lines: Vec<String> = agents
            .iter()
            .enumerate()
            .map(|(r, a)| get(format!("rank {r}"), a))
            .collect();
        lines.push(get("supervisor".into(), &supervisor));
        lines.join("\n")
    }))
}

/// `64K`, `1M`, `8M`.
pub(super) fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{}M", bytes >> 20)
    } else {
        format!("{}K", bytes >> 10)
    }
}

/// The table printed on stdout.
fn table(r: &DatapathReport) -> String {
    let mut t = Table::new(&[
        "ranks",
        "tier",
        "shard",
        "blk/task",
        "MiB/rank",
        "store GB/s/rank",
        "group",
        "floor",
        "ratio",
        "floor N",
        "ratio N",
        "p50 µs",
        "p99 µs",
        "steps p50",
        "load GB/s/rank",
        "group",
        "floor",
        "ratio",
        "floor N",
        "ratio N",
        "p50 µs",
        "p99 µs",
        "steps p50",
    ]);
    for row in &r.rows {
        let f = &row.figures;
        let conc = |of: fn(&Floor) -> f64, ratio: f64| match row.floor_concurrent {
            Some(c) => (format!("{:.2}", of(&c)), format!("{ratio:.2}")),
            None => ("-".to_string(), "-".to_string()),
        };
        let (store_floor_n, store_ratio_n) = conc(|c| c.store_gbps, row.store_ratio_concurrent);
        let (load_floor_n, load_ratio_n) = conc(|c| c.load_gbps, row.load_ratio_concurrent);
        t.row(vec![
            row.ranks.to_string(),
            format!("{:?}", row.tier).to_lowercase(),
            size_label(row.shard_bytes),
            row.blocks_per_task.to_string(),
            format!("{}", (row.working_set_blocks * row.shard_bytes) >> 20),
            format!("{:.2}", f.store.gbps_per_rank),
            format!("{:.2}", f.store.gbps_group),
            format!("{:.2}", row.floor.store_gbps),
            format!("{:.2}", row.store_ratio),
            store_floor_n,
            store_ratio_n,
            format!("{:.0}", f.store.task_us.p50),
            format!("{:.0}", f.store.task_us.p99),
            format!("{:.0}", f.store.task_steps.p50),
            format!("{:.2}", f.load.gbps_per_rank),
            format!("{:.2}", f.load.gbps_group),
            format!("{:.2}", row.floor.load_gbps),
            format!("{:.2}", row.load_ratio),
            load_floor_n,
            load_ratio_n,
            format!("{:.0}", f.load.task_us.p50),
            format!("{:.0}", f.load.task_us.p99),
            format!("{:.0}", f.load.task_steps.p50),
        ]);
    }
    let mut out = format!(
        "datapath (copy workers per rank: {}; leader seals steps {}): GB/s = 10^9 B/s of one task at a time, call → the frame that reports it finished; floor = memcpy (host, one thread) or pwrite/pread (disk) of the same bytes in this run; ratio = per rank ÷ floor; floor N = N memcpys (host) or N pwrite/pread loops (disk) at once, one thread per rank, each of one rank's bytes (the floor of an N-rank group on this machine); ratio N = per rank ÷ floor N\n",
        if r.copy_workers == 0 { "default".to_string() } else { r.copy_workers.to_string() },
        if r.step_gap_us == 0 { "back to back".to_string() } else { format!("with {} µs between them", r.step_gap_us) },
    );
    out += &t.render();
    let mut c = Table::new(&[
        "ranks",
        "shard",
        "control p50 µs",
        "p99",
        "lookup 1 p50 µs",
        "p99",
        "lookup 128 p50 µs",
        "p99",
        "step period µs",
    ]);
    for row in r
        .rows
        .iter()
        .filter(|row| row.blocks_per_task == 1 && row.tier == TierCase::Host)
    {
        let f = &row.figures;
        c.row(vec![
            row.ranks.to_string(),
            size_label(row.shard_bytes),
            format!("{:.0}", f.control_us.p50),
            format!("{:.0}", f.control_us.p99),
            format!("{:.0}", f.lookup_1_us.p50),
            format!("{:.0}", f.lookup_1_us.p99),
            format!("{:.0}", f.lookup_128_us.p50),
            format!("{:.0}", f.lookup_128_us.p99),
            format!("{:.0}", f.store.step_period_us),
        ]);
    }
    out += "control floor (one engine round trip) and lookups, host-tier clusters:\n";
    out += &c.render();
    out += &targets(r);
    for why in &r.not_measured {
        out += &format!("not measured: {}\n", why.lines().next().unwrap_or(""));
    }
    out
}

/// The goals of docs/BENCHMARKS.md, with pass/fail marks. A goal whose cases did not run in
/// this sweep (a tier, shard size or rank count left out) reads "not measured", never a mark.
fn targets(r: &DatapathReport) -> String {
    // The lowest (or highest, with `f64::max`) of some figures, None when no case gave one.
    fn extreme(it: impl Iterator<Item = f64>, pick: fn(f64, f64) -> f64) -> Option<f64> {
        it.reduce(pick)
    }
    let multi_block = |row: &&CaseRow| row.blocks_per_task > 1 && row.shard_bytes >= 1 << 20;
    let multi = |tier: TierCase| {
        extreme(
            r.rows
                .iter()
                .filter(|row| row.tier == tier)
                .filter(multi_block)
                .flat_map(|row| [row.store_ratio, row.load_ratio]),
            f64::min,
        )
    };
    let (host_min, disk_min) = (multi(TierCase::Host), multi(TierCase::Disk));
    let min_concurrent = |tier: TierCase| {
        extreme(
            r.rows
                .iter()
                .filter(|row| row.tier == tier && row.ranks > 1)
                .filter(multi_block)
                .flat_map(|row| [row.store_ratio_concurrent, row.load_ratio_concurrent]),
            f64::min,
        )
    };
    let host_min_concurrent = min_concurrent(TierCase::Host);
    let disk_min_concurrent = min_concurrent(TierCase::Disk);
    let single_steps = extreme(
        r.rows
            .iter()
            .filter(|row| row.blocks_per_task == 1)
            .flat_map(|row| {
                [
                    row.figures.store.task_steps.p50,
                    row.figures.load.task_steps.p50,
                ]
            }),
        f64::max,
    );
    let small = |f: fn(&CaseRow) -> f64| {
        extreme(
            r.rows
                .iter()
                .filter(|row| {
                    row.blocks_per_task == 1
                        && row.shard_bytes == 64 << 10
                        && row.tier == TierCase::Host
                })
                .map(f),
            f64::max,
        )
    };
    let put = small(|row| row.figures.store.task_us.p50);
    let get = small(|row| row.figures.load.task_us.p50);
    let look = extreme(
        r.rows.iter().map(|row| row.figures.lookup_128_us.p50),
        f64::max,
    );
    // One goal's line: the figure and its mark, or "not measured".
    let line =
        |goal: String, figure: Option<f64>, unit: &str, met: &dyn Fn(f64) -> bool| match figure {
            Some(v) => format!("{goal}: {v:.2}{unit} {}\n", mark(met(v))),
            None => format!("{goal}: not measured in this sweep\n"),
        };
    let mut out = String::from("targets:\n");
    out += &line(
        format!("  multi-block 1M/8M host ≥ {HOST_TARGET}× memcpy per rank, lowest"),
        host_min,
        "",
        &|v| v >= HOST_TARGET,
    );
    if host_min_concurrent.is_some() {
        out += &line(
            "    (not the goal) the same at 2+ ranks against N memcpys at once, lowest".into(),
            host_min_concurrent,
            "",
            &|v| v >= HOST_TARGET,
        );
    }
    out += &line(
        format!("  multi-block 1M/8M disk ≥ {DISK_TARGET}× pwrite/pread, lowest"),
        disk_min,
        "",
        &|v| v >= DISK_TARGET,
    );
    if disk_min_concurrent.is_some() {
        out += &line(
            "    (not the goal) the same at 2+ ranks against N pwrite/pread loops at once, lowest"
                .into(),
            disk_min_concurrent,
            "",
            &|v| v >= DISK_TARGET,
        );
    }
    out += &line(
        format!("  single-block task within {STEPS_TARGET} steps (p50), worst"),
        single_steps,
        " steps",
        &|v| v <= STEPS_TARGET,
    );
    out += &line(
        format!("  64K single-block store p50 < peer put {PEER_PUT_64K_US} µs, worst"),
        put,
        " µs",
        &|v| v < PEER_PUT_64K_US,
    );
    out += &line(
        format!("  64K single-block load p50 < peer get {PEER_GET_64K_US} µs, worst"),
        get,
        " µs",
        &|v| v < PEER_GET_64K_US,
    );
    out += &line(
        format!("  lookup of 128 blocks p50 < peer's 128-key check {PEER_EXIST_128_US} µs, worst"),
        look,
        " µs",
        &|v| v < PEER_EXIST_128_US,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_and_working_set_sizes() {
        assert_eq!(multi_blocks(64 << 10, false), 64);
        assert_eq!(multi_blocks(8 << 20, false), 8);
        assert_eq!(multi_blocks(8 << 20, true), 2);
        assert_eq!(working_set(64 << 10, 1, false), 2048);
        assert_eq!(working_set(8 << 20, 8, false), 16);
        assert_eq!(working_set(8 << 20, 2, true), 4);
        assert_eq!(working_set(1 << 20, 16, true), 32);
        assert_eq!(size_label(64 << 10), "64K");
    }

    #[test]
    fn goals_whose_cases_did_not_run_are_not_marked() {
        let report = DatapathReport {
            copy_workers: 0,
            step_gap_us: 0,
            rows: Vec::new(),
            not_measured: Vec::new(),
            disk_dir: String::new(),
        };
        let text = targets(&report);
        assert_eq!(
            text.matches("not measured in this sweep").count(),
            6,
            "{text}"
        );
        assert!(!text.contains("pass") && !text.contains("FAIL"), "{text}");
        assert!(!text.contains("inf"), "{text}");
    }
}
