//! `tandem bench frame`: leader seals → last follower holds the frame, with 2, 4, 8 and 16
//! agent processes on loopback, against the TCP fan-out ping-pong of [`super::fanout`].
//!
//! Per rank count: a local cluster (redis, supervisor, one agent per rank, pp 1 × tp N, the
//! smallest model), empty steps driven by [`super::engines`], then the cluster is stopped and
//! the baseline runs with the frame's payload size between the same number of processes,
//! then the hop floor of [`super::relay`] (the frame path's three hops with nothing in them).
//! Owns the sweep and its table; targets are printed, never asserted.

use std::time::Duration;

use serde::Serialize;

use super::engines::{drive_empty_steps, StepOptions};
use super::fanout::fanout_baseline;
use super::relay::relay_floor;
use super::report::{mark, Table};
use super::stats::{ratio, Summary};
use super::{BenchArgs, PartOutput};
use crate::cmd::up::small_model;
use crate::local::{LocalCluster, LocalSpec};

/// Rank counts measured.
pub(super) const RANKS: [u32; 4] = [2, 4, 8, 16];
/// Target: frame p50 ≤ this × baseline p50.
const P50_TARGET: f64 = 1.5;
/// Target: frame p99 ≤ this × baseline p99.
const P99_TARGET: f64 = 3.0;
/// Target: frame p50 at 16 ranks ≤ this × frame p50 at 2 ranks.
const SCALE_TARGET: f64 = 3.0;
/// Target: the frame's p50 increment per follower ≤ this × the baseline's.
const INCREMENT_TARGET: f64 = 1.5;
/// The leader's pause before each step (the followers' requests are waiting by then).
const GAP: Duration = Duration::from_millis(2);

/// Figures for one rank count, µs.
#[derive(Clone, Debug, Serialize)]
pub(super) struct FrameRow {
    /// Agent processes (pp 1 × tp N).
    pub ranks: u32,
    /// Timed steps (after the warm-up).
    pub steps: usize,
    /// Bytes of the frame as a peer message; the baseline sends the same.
    pub payload_bytes: usize,
    /// `t0` (just before `end_step`) → the last follower's `frame(s)` returned.
    pub frame_us: Summary,
    /// `t0` → the first follower's `frame(s)` returned.
    pub first_follower_us: Summary,
    /// `t0` → the leader's `end_step(s)` returned (its Unix-socket round trip and the seal).
    pub end_step_us: Summary,
    /// Median `t0` → `frame(s)` returned of each follower, rank 1 first (the order in which
    /// the leader's agent writes to its links is not fixed by this list).
    pub by_rank_p50_us: Vec<f64>,
    /// The TCP fan-out ping-pong, `t0` → the last reply.
    pub baseline_us: Summary,
    /// The hop floor (bench → hub → `ranks − 1` leaves → bench), `t0` → the last leaf's
    /// payload; no target, it shows what an agent process between the engines costs at least.
    pub relay_us: Summary,
    /// `frame_us.p50 / relay_us.p50`.
    pub relay_ratio_p50: f64,
    /// `frame_us.p50 / baseline_us.p50` (target ≤ 1.5).
    pub p50_ratio: f64,
    /// `frame_us.p99 / baseline_us.p99` (target ≤ 3).
    pub p99_ratio: f64,
    /// The machine's busy CPU time per timed step of each of the three, µs.
    pub cpu_us_per_step: CpuPerStep,
}

/// The machine's busy CPU time (all CPUs, every process on the machine) per timed step, µs,
/// of the frame path and of its two baselines at one rank count (`None` where `/proc/stat` is
/// not readable). The frame's figure includes the step's untimed acknowledgements and barrier.
/// No target: with fewer CPUs than processes in a step, the step cannot be shorter than this
/// divided by the CPUs.
#[derive(Clone, Copy, Debug, Serialize)]
pub(super) struct CpuPerStep {
    /// The frame path: agents, engine threads, Redis, supervisor.
    pub frame: Option<f64>,
    /// The TCP fan-out baseline.
    pub baseline: Option<f64>,
    /// The hop floor.
    pub floor: Option<f64>,
}

/// The whole sweep.
#[derive(Clone, Debug, Serialize)]
pub(super) struct FrameReport {
    /// One row per rank count that ran.
    pub rows: Vec<FrameRow>,
    /// Rank counts that could not run, with why.
    pub not_measured: Vec<(u32, String)>,
    /// `p50(16) / p50(2)` of the frame (target ≤ 3), when both ran.
    pub scale_ratio_p50: Option<f64>,
    /// The same ratio for the baseline, for comparison.
    pub baseline_scale_ratio_p50: Option<f64>,
    /// What one more follower adds to the frame's p50, µs: the slope between the smallest and
    /// the largest rank count that ran (`None` with fewer than two).
    pub increment_us: Option<f64>,
    /// The same slope for the baseline's p50, µs.
    pub baseline_increment_us: Option<f64>,
    /// `increment_us / baseline_increment_us` (target ≤ 1.5).
    pub increment_ratio: Option<f64>,
    /// The leader's pause before each step, µs.
    pub gap_us: u64,
}

/// Run the sweep.
///
/// # Errors
/// Only when nothing at all could be measured; a rank count that fails is reported in
/// `not_measured`.
pub(super) fn run(args: &BenchArgs) -> anyhow::Result<PartOutput> {
    let (warmup, steps) = if args.quick { (30, 300) } else { (100, 2000) };
    let mut rows = Vec::new();
    let mut not_measured = Vec::new();
    let ranks = if args.ranks.is_empty() {
        RANKS.to_vec()
    } else {
        args.ranks.clone()
    };
    for &n in &ranks {
        eprintln!("  frame: {n} ranks ...");
        match one(n, warmup, steps) {
            Ok(row) => rows.push(row),
            Err(e) => {
                eprintln!("  frame: {n} ranks not measured: {e:#}");
                not_measured.push((n, format!("{e:#}")));
            }
        }
    }
    if rows.is_empty() {
        anyhow::bail!("no rank count could be measured: {not_measured:?}");
    }
    let at = |n: u32, f: fn(&FrameRow) -> f64| rows.iter().find(|r| r.ranks == n).map(f);
    let scale = |f: fn(&FrameRow) -> f64| match (at(16, f), at(2, f)) {
        (Some(a), Some(b)) => Some(ratio(a, b)),
        _ => None,
    };
    let slope = |f: fn(&FrameRow) -> f64| {
        let lo = rows.iter().min_by_key(|r| r.ranks)?;
        let hi = rows.iter().max_by_key(|r| r.ranks)?;
        (hi.ranks > lo.ranks).then(|| (f(hi) - f(lo)) / f64::from(hi.ranks - lo.ranks))
    };
    let increment_us = slope(|r| r.frame_us.p50);
    let baseline_increment_us = slope(|r| r.baseline_us.p50);
    let report = FrameReport {
        increment_ratio: increment_us
            .zip(baseline_increment_us)
            .map(|(a, b)| ratio(a, b)),
        increment_us,
        baseline_increment_us,
        scale_ratio_p50: scale(|r| r.frame_us.p50),
        baseline_scale_ratio_p50: scale(|r| r.baseline_us.p50),
        rows,
        not_measured,
        gap_us: GAP.as_micros() as u64,
    };
    if let Some(path) = &args.plot {
        super::plot::frame_svg(&report, path)?;
        eprintln!("  frame: plot written to {}", path.display());
    }
    Ok(PartOutput {
        table: table(&report),
        json: serde_json::to_value(&report)?,
    })
}

fn one(n: u32, warmup: usize, steps: usize) -> anyhow::Result<FrameRow> {
    let heartbeat = tandem_config::SupervisorConfig::default();
    let spec = LocalSpec {
        max_restarts: tandem_config::SupervisorConfig::default().max_restarts,
        pp: 1,
        tp: n,
        host_capacity_blocks: 64,
        disk_capacity_blocks: 0,
        tokens_per_block: 512,
        model_toml: small_model(1, n, 1),
        heartbeat_ms: (
            heartbeat.heartbeat_interval_ms,
            heartbeat.heartbeat_timeout_ms,
        ),
        dir: None,
    };
    let mut cluster = LocalCluster::start(&spec)?;
    let sockets: Vec<_> = (0..n).map(|r| cluster.socket(r)).collect();
    let opts = StepOptions {
        steps,
        warmup,
        gap: GAP,
        deadline: Duration::from_secs(5),
    };
    let samples = match drive_empty_steps(&sockets, &opts) {
        Ok(s) => s,
        Err(e) => anyhow::bail!(
            "{e:#}\n--- cluster log (first warnings) ---\n{}\n--- cluster log (last lines) ---\n{}",
            first_warnings(&cluster, 20),
            cluster.log_tail(20)
        ),
    };
    cluster.stop();
    drop(cluster);
    let baseline = fanout_baseline(n, samples.payload_bytes, warmup, steps, GAP)?;
    let relay = relay_floor(n, samples.payload_bytes, warmup, steps, GAP)?;
    let frame_us = Summary::of(&samples.last_follower_us);
    let baseline_us = Summary::of(&baseline.samples_us);
    let relay_us = Summary::of(&relay.samples_us);
    let cpu_us_per_step = CpuPerStep {
        frame: samples.cpu_us_per_step,
        baseline: baseline.cpu_us_per_step,
        floor: relay.cpu_us_per_step,
    };
    Ok(FrameRow {
        ranks: n,
        steps: frame_us.n,
        payload_bytes: samples.payload_bytes,
        first_follower_us: Summary::of(&samples.first_follower_us),
        end_step_us: Summary::of(&samples.end_step_us),
        by_rank_p50_us: samples
            .by_rank_us
            .iter()
            .map(|v| Summary::of(v).p50)
            .collect(),
        relay_ratio_p50: ratio(frame_us.p50, relay_us.p50),
        relay_us,
        p50_ratio: ratio(frame_us.p50, baseline_us.p50),
        p99_ratio: ratio(frame_us.p99, baseline_us.p99),
        cpu_us_per_step,
        frame_us,
        baseline_us,
    })
}

/// The machine's CPU time per step beside the latencies (no target).
fn cpu_table(r: &FrameReport) -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut t = Table::new(&[
        "ranks",
        "cpu µs/step: frame",
        "baseline",
        "floor",
        "frame ÷ baseline",
    ]);
    let us = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
    for row in &r.rows {
        let c = row.cpu_us_per_step;
        t.row(vec![
            row.ranks.to_string(),
            us(c.frame),
            us(c.baseline),
            us(c.floor),
            c.frame
                .zip(c.baseline)
                .map_or_else(|| "-".to_string(), |(f, b)| format!("{:.2}", ratio(f, b))),
        ]);
    }
    format!(
        "cpu: busy CPU time of the whole machine per timed step ({cpus} CPUs; the frame's includes its untimed acks and barrier); no target\n{}",
        t.render()
    )
}

/// The first `n` warning or error lines of the cluster's log: what moved a group to a new
/// epoch is there, long before the last lines.
fn first_warnings(cluster: &LocalCluster, n: usize) -> String {
    let text = std::fs::read_to_string(cluster.dir().join("cluster.log")).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .take(n)
        .collect();
    lines.join("\n")
}

/// The table printed on stdout.
pub(super) fn table(r: &FrameReport) -> String {
    let mut t = Table::new(&[
        "ranks",
        "bytes",
        "steps",
        "frame p50",
        "p99",
        "max",
        "base p50",
        "p99",
        "max",
        "ratio p50",
        "ratio p99",
        "end_step p50",
        "1st flw p50",
        "floor p50",
        "÷ floor",
    ]);
    for row in &r.rows {
        t.row(vec![
            row.ranks.to_string(),
            row.payload_bytes.to_string(),
            row.steps.to_string(),
            format!("{:.0}", row.frame_us.p50),
            format!("{:.0}", row.frame_us.p99),
            format!("{:.0}", row.frame_us.max),
            format!("{:.0}", row.baseline_us.p50),
            format!("{:.0}", row.baseline_us.p99),
            format!("{:.0}", row.baseline_us.max),
            format!("{:.2} {}", row.p50_ratio, mark(row.p50_ratio <= P50_TARGET)),
            format!("{:.2} {}", row.p99_ratio, mark(row.p99_ratio <= P99_TARGET)),
            format!("{:.0}", row.end_step_us.p50),
            format!("{:.0}", row.first_follower_us.p50),
            format!("{:.0}", row.relay_us.p50),
            format!("{:.2}", row.relay_ratio_p50),
        ]);
    }
    let mut out = format!("frame: µs from just before end_step(s) to the last follower's frame(s) return; baseline: TCP fan-out ping-pong of the same bytes (leader pause {} µs before each step)\n", r.gap_us);
    out += &t.render();
    out += "floor: the same hops as the frame path with nothing in them (bench → Unix socket → hub → TCP → each leaf → Unix socket → bench); no target\n";
    out += &cpu_table(r);
    out += &format!("targets: ratio p50 ≤ {P50_TARGET}, ratio p99 ≤ {P99_TARGET}\n");
    match r.scale_ratio_p50 {
        Some(s) => {
            out += &format!(
                "scale: frame p50(16)/p50(2) = {s:.2} {} (target ≤ {SCALE_TARGET}); baseline p50(16)/p50(2) = {:.2}\n",
                mark(s <= SCALE_TARGET),
                r.baseline_scale_ratio_p50.unwrap_or(0.0)
            )
        }
        None => out += "scale: p50(16)/p50(2) not available (a rank count did not run)\n",
    }
    if let (Some(a), Some(b), Some(x)) =
        (r.increment_us, r.baseline_increment_us, r.increment_ratio)
    {
        out += &format!(
            "per follower: frame p50 +{a:.1} µs, baseline +{b:.1} µs, ratio {x:.2} {} (target ≤ {INCREMENT_TARGET})\n",
            mark(x <= INCREMENT_TARGET)
        );
    }
    for (n, why) in &r.not_measured {
        out += &format!(
            "{n} ranks: not measured: {}\n",
            why.lines().next().unwrap_or("")
        );
    }
    out
}
