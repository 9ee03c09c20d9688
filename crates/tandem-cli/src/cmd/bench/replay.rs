//! `tandem bench replay`: blocks per second and step latency over the conversation trace with
//! 4 ranks, through the code path of `tandem replay` (a local cluster and
//! `tandem_replay::run_replay` with the same cluster shape and defaults).
//!
//! Baseline from the same run, on the same cluster just before the replay: empty steps driven
//! by [`super::engines`] with the replay's own pause between steps (1 ms). Its `end_step` p50 is
//! what a step costs when it carries nothing, so `step_ratio_p50` is what the trace's lookups,
//! stores, loads and window waits add. `hit_ratio_vs_expected` compares the observed block
//! prefix-hit ratio with the simulator's (1.0 when the group decided exactly as the simulator).
//! Owns the run and its table; nothing is asserted.

use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use tandem_replay::{
    pool_pages_needed, run_replay, Capacity, ReplayParams, ReplayProgress, ReplaySummary, Speed,
};
use tandem_trace::{open_trace, MalformedPolicy, TraceRecord};

use super::engines::{drive_empty_steps, StepOptions};
use super::report::Table;
use super::stats::{ratio, Summary};
use super::{BenchArgs, PartOutput};
use crate::cmd::up::small_model;
use crate::local::{LocalCluster, LocalSpec};

/// The conversation trace as the repository ships it (`data/traces/README.md`), relative to
/// the repository root.
pub(super) const DEFAULT_TRACE: &str = "data/traces/mooncake_conversation_trace.jsonl.gz";
/// Ranks of the cluster.
const RANKS: u32 = 4;
/// Requests replayed with `--quick`.
const QUICK_REQUESTS: usize = 500;

/// The part's figures.
#[derive(Clone, Debug, Serialize)]
pub(super) struct ReplayReport {
    /// The trace file.
    pub trace: String,
    /// Ranks (pp 1 × tp 4).
    pub ranks: u32,
    /// Requests replayed.
    pub requests: u64,
    /// Steps the leader sealed.
    pub steps: u64,
    /// Blocks stored plus loaded (each one shard on every rank) per second of the run.
    pub blocks_per_s: f64,
    /// Blocks stored.
    pub blocks_stored: u64,
    /// Blocks loaded.
    pub blocks_loaded: u64,
    /// Steps per second.
    pub steps_per_s: f64,
    /// Wall-clock length of the replay, s.
    pub wall_seconds: f64,
    /// The leader's `end_step` latency in the replay, µs (window-full retries included).
    pub step_latency_us: tandem_replay::LatencySummary,
    /// The leader's `end_step` latency of empty steps on the same cluster just before, µs.
    pub empty_step_us: Summary,
    /// `step_latency_us.p50 / empty_step_us.p50`.
    pub step_ratio_p50: f64,
    /// Observed block prefix-hit ratio.
    pub block_hit_ratio: f64,
    /// The simulator's expected block prefix-hit ratio.
    pub expected_block_hit_ratio: f64,
    /// `block_hit_ratio / expected_block_hit_ratio`.
    pub hit_ratio_vs_expected: f64,
    /// Verify failures + lost + duplicate completions + mismatches (0 for a correct run).
    pub errors: u64,
}

/// Run the replay.
///
/// # Errors
/// When the trace cannot be read, the cluster does not start, or the replay fails.
pub(super) fn run(args: &BenchArgs) -> anyhow::Result<PartOutput> {
    let limit = args.quick.then_some(QUICK_REQUESTS);
    let records = read_trace(&args.trace, limit)?;
    let distinct: std::collections::BTreeSet<u64> = records
        .iter()
        .flat_map(|r| r.hash_ids.iter().copied())
        .collect();
    let hb = tandem_config::SupervisorConfig::default();
    let spec = LocalSpec {
        max_restarts: tandem_config::SupervisorConfig::default().max_restarts,
        pp: 1,
        tp: RANKS,
        host_capacity_blocks: distinct.len() as u64 + 16,
        disk_capacity_blocks: 0,
        tokens_per_block: tandem_trace::TOKENS_PER_BLOCK as u32,
        model_toml: small_model(1, RANKS, 1),
        heartbeat_ms: (hb.heartbeat_interval_ms, hb.heartbeat_timeout_ms),
        dir: None,
    };
    eprintln!(
        "  replay: {} requests, {} distinct blocks, {RANKS} ranks",
        records.len(),
        distinct.len()
    );
    let mut cluster = LocalCluster::start(&spec)?;
    let sockets: Vec<PathBuf> = (0..RANKS).map(|r| cluster.socket(r)).collect();
    let mut params = ReplayParams::new(sockets.clone());
    let opts = StepOptions {
        steps: 300,
        warmup: 30,
        gap: params.min_step_interval,
        deadline: Duration::from_secs(5),
    };
    let empty = drive_empty_steps(&sockets, &opts).context("empty-step baseline")?;
    params.speed = Speed::MaxRate;
    params.pool_pages = pool_pages_needed(&records);
    params.pool_dir = cluster.dir().join("pools");
    params.expected_capacity = Capacity::Unlimited;
    let last = Cell::new(Instant::now());
    let progress = |p: &ReplayProgress| {
        if last.get().elapsed() >= Duration::from_secs(15) {
            last.set(Instant::now());
            eprintln!(
                "  replay: {} of {} requests, {} steps",
                p.requests_done,
                p.requests_total.map_or("?".into(), |t| t.to_string()),
                p.steps
            );
        }
    };
    let summary = match run_replay(&params, records, Some(&progress)) {
        Ok(s) => s,
        Err(e) => bail!(
            "replay failed: {e}\n--- cluster log (last lines) ---\n{}",
            cluster.log_tail(20)
        ),
    };
    cluster.stop();
    let report = report(&args.trace, &summary, Summary::of(&empty.end_step_us));
    Ok(PartOutput {
        table: table(&report),
        json: serde_json::to_value(&report)?,
    })
}

fn read_trace(path: &std::path::Path, limit: Option<usize>) -> anyhow::Result<Vec<TraceRecord>> {
    let mut reader = open_trace(path, MalformedPolicy::Skip).context(
        "bench replay reads its trace relative to the repository root unless --trace is given",
    )?;
    let mut out = Vec::new();
    for record in reader.by_ref() {
        out.push(record.with_context(|| format!("trace {}", path.display()))?);
        if limit.is_some_and(|n| out.len() >= n) {
            break;
        }
    }
    if out.is_empty() {
        bail!("trace {} has no requests", path.display());
    }
    Ok(out)
}

fn report(trace: &std::path::Path, s: &ReplaySummary, empty_step_us: Summary) -> ReplayReport {
    let blocks = s.blocks_stored + s.blocks_loaded;
    ReplayReport {
        trace: trace.display().to_string(),
        ranks: s.ranks,
        requests: s.requests,
        steps: s.steps,
        blocks_per_s: ratio(blocks as f64, s.wall_seconds),
        blocks_stored: s.blocks_stored,
        blocks_loaded: s.blocks_loaded,
        steps_per_s: ratio(s.steps as f64, s.wall_seconds),
        wall_seconds: s.wall_seconds,
        step_latency_us: s.step_latency_us,
        step_ratio_p50: ratio(s.step_latency_us.p50 as f64, empty_step_us.p50),
        empty_step_us,
        block_hit_ratio: s.block_prefix_hit_ratio,
        expected_block_hit_ratio: s.expected_block_prefix_hit_ratio,
        hit_ratio_vs_expected: ratio(s.block_prefix_hit_ratio, s.expected_block_prefix_hit_ratio),
        errors: s.verify_failures + s.lost_completions + s.duplicate_completions + s.mismatches,
    }
}

fn table(r: &ReplayReport) -> String {
    let mut t = Table::new(&[
        "ranks",
        "requests",
        "steps",
        "wall s",
        "blocks/s",
        "steps/s",
        "step p50 µs",
        "p99 µs",
        "max µs",
        "empty p50 µs",
        "ratio p50",
        "block hit",
        "expected",
        "ratio",
        "errors",
    ]);
    t.row(vec![
        r.ranks.to_string(),
        r.requests.to_string(),
        r.steps.to_string(),
        format!("{:.1}", r.wall_seconds),
        format!("{:.0}", r.blocks_per_s),
        format!("{:.0}", r.steps_per_s),
        r.step_latency_us.p50.to_string(),
        r.step_latency_us.p99.to_string(),
        r.step_latency_us.max.to_string(),
        format!("{:.0}", r.empty_step_us.p50),
        format!("{:.2}", r.step_ratio_p50),
        format!("{:.4}", r.block_hit_ratio),
        format!("{:.4}", r.expected_block_hit_ratio),
        format!("{:.3}", r.hit_ratio_vs_expected),
        r.errors.to_string(),
    ]);
    format!(
        "replay: {} through {} ranks (blocks/s = blocks stored + loaded per second, each block one shard on every rank; step = the leader's end_step; empty = empty steps on the same cluster just before)\n{}",
        r.trace,
        r.ranks,
        t.render()
    )
}
