//! `tandem bench layerwise`: a 64-block prefix of a 32-layer model loaded from the host tier,
//! whole and layerwise, in the same run on a two-rank local cluster (TP 2; each rank holds all
//! 32 layers of its heads) (docs/LAYERWISE.md); then the same from the disk tier (a cluster
//! without a host tier, buffered I/O: a layer is a ranged read of each shard's slot).
//!
//! Each trial loads the same 64 blocks twice into the engine's pages: once as a whole-task
//! load (`load`, then `end_step` until a frame reveals the outcome `Ok`: when an engine may
//! use the pages) and once layerwise (`load_layerwise`, `end_step` for the frame that starts
//! it, then `wait_layer(0)` and `wait_layer(31)`). The figures are the time from the load
//! request to the whole task's outcome, to the first layer and to the last layer, and the
//! ratios of the two layer figures to the whole-task time (goal: first layer ≤ 1/8). The
//! follower's engine (a thread) reads and acknowledges every frame, which releases its copies.
//! Owns the trials and their table; targets are printed, never asserted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use tandem_client::{EngineClient, PagePool};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId};
use tandem_proto::OutcomeResult;

use super::report::{mark, Table};
use super::stats::{ratio, Summary};
use super::{BenchArgs, PartOutput};
use crate::local::{LocalCluster, LocalSpec};

/// Blocks of the prefix.
const BLOCKS: u32 = 64;
/// Ranks (TP).
const RANKS: u32 = 2;
/// Layers of the model (every rank holds all of them).
const LAYERS: u32 = 32;
/// Tokens per block: with 8 KV heads (4 per rank) of 128 elements in bf16, a 1 MiB shard.
const TOKENS_PER_BLOCK: u32 = 16;
/// Goal: first layer ≤ this fraction of the whole-task time.
const TARGET_RATIO: f64 = 1.0 / 8.0;
/// Longest wait of one call.
const DEADLINE: Duration = Duration::from_secs(10);

/// One tier's trials.
#[derive(Clone, Debug, Serialize)]
pub(super) struct LayerwiseReport {
    /// The tier the prefix is loaded from: `host` or `disk`.
    pub tier: &'static str,
    /// Blocks loaded per trial.
    pub blocks: u32,
    /// Layers per block shard.
    pub layers: u32,
    /// Bytes of one block shard.
    pub shard_bytes: u64,
    /// Whole-task load: request → outcome `Ok` in a frame, ms.
    pub whole_ms: Summary,
    /// Layerwise: request → `wait_layer(0)` answered, ms.
    pub first_layer_ms: Summary,
    /// Layerwise: request → `wait_layer(31)` answered, ms.
    pub last_layer_ms: Summary,
    /// `first_layer_ms.p50 / whole_ms.p50` (goal ≤ 0.125).
    pub first_ratio: f64,
    /// `last_layer_ms.p50 / whole_ms.p50`.
    pub last_ratio: f64,
}

/// Run the trials, from the host tier then from the disk tier.
///
/// # Errors
/// When a cluster does not start, or a load fails or does not finish in time.
pub(super) fn run(args: &BenchArgs) -> anyhow::Result<PartOutput> {
    let reports = vec![measure(args, "host")?, measure(args, "disk")?];
    Ok(PartOutput {
        table: table(&reports),
        json: serde_json::to_value(&reports)?,
    })
}

/// The trials of one tier (`host` or `disk`) on a fresh cluster whose only tier it is.
fn measure(args: &BenchArgs, tier: &'static str) -> anyhow::Result<LayerwiseReport> {
    let trials: u64 = if args.quick { 3 } else { 10 };
    let (host, disk) = if tier == "disk" {
        (0, u64::from(BLOCKS))
    } else {
        (u64::from(BLOCKS), 0)
    };
    let spec = LocalSpec {
        max_restarts: tandem_config::SupervisorConfig::default().max_restarts,
        pp: 1,
        tp: RANKS,
        host_capacity_blocks: host,
        disk_capacity_blocks: disk,
        tokens_per_block: TOKENS_PER_BLOCK,
        model_toml: format!(
            "num_layers = {LAYERS}\nnum_kv_heads = 8\nhead_dim = 128\ndtype_bytes = 2"
        ),
        heartbeat_ms: (100, 1000),
        dir: None,
    };
    let cluster = LocalCluster::start(&spec)?;
    let mut c = EngineClient::connect(cluster.socket(0), 0, Duration::from_secs(30))
        .context("engine connects")?;
    let shard = c.welcome().shard_bytes;
    let pool = PagePool::create(
        cluster.dir().join("bench-pool0"),
        u64::from(2 * BLOCKS),
        shard,
    )?;
    c.register_buffer(&pool)?;
    let stop = Arc::new(AtomicBool::new(false));
    let follower = {
        let mut f = EngineClient::connect(cluster.socket(1), 1, Duration::from_secs(30))
            .context("follower engine connects")?;
        let fpool = PagePool::create(
            cluster.dir().join("bench-pool1"),
            u64::from(2 * BLOCKS),
            shard,
        )?;
        f.register_buffer(&fpool)?;
        let stop = stop.clone();
        std::thread::spawn(move || follow(f, fpool, stop))
    };
    let hashes: Vec<BlockHash> = (0..u64::from(BLOCKS))
        .map(|i| BlockHash::from(0x1a7e_b000 + i))
        .collect();
    let src: Vec<PageId> = (0..BLOCKS).map(PageId).collect();
    let dst: Vec<PageId> = (BLOCKS..2 * BLOCKS).map(PageId).collect();
    let mut step = c.welcome().next_step.0;
    let store = c.store(Step(step), RequestId(1), hashes.clone(), src)?;
    until_ok(&mut c, &mut step, store)?;
    let (mut whole, mut first, mut last) = (Vec::new(), Vec::new(), Vec::new());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for trial in 0..trials {
        let request = 10 + 2 * trial;
        c.lookup(Step(step), RequestId(request), hashes.clone())?;
        let t0 = Instant::now();
        let task = c.load(Step(step), RequestId(request), hashes.clone(), dst.clone())?;
        until_ok(&mut c, &mut step, task)?;
        whole.push(ms(t0.elapsed()));

        c.lookup(Step(step), RequestId(request + 1), hashes.clone())?;
        let t0 = Instant::now();
        let task = c.load_layerwise(
            Step(step),
            RequestId(request + 1),
            hashes.clone(),
            dst.clone(),
            DEADLINE,
        )?;
        let f = c.end_step(Step(step), DEADLINE)?;
        c.ack(Step(step))?;
        step += 1;
        if f.layerwise_plan(task).is_none() {
            bail!("the frame sealed after load_layerwise does not start task {task}");
        }
        c.wait_layer(task, 0, DEADLINE)?;
        first.push(ms(t0.elapsed()));
        c.wait_layer(task, LAYERS - 1, DEADLINE)?;
        last.push(ms(t0.elapsed()));
        until_ok(&mut c, &mut step, task)?;
        eprintln!(
            "  layerwise ({tier}): trial {}: whole {:.1} ms, first layer {:.1} ms, last layer {:.1} ms",
            trial + 1,
            whole[whole.len() - 1],
            first[first.len() - 1],
            last[last.len() - 1]
        );
    }
    let (whole_ms, first_layer_ms, last_layer_ms) =
        (Summary::of(&whole), Summary::of(&first), Summary::of(&last));
    let report = LayerwiseReport {
        tier,
        blocks: BLOCKS,
        layers: LAYERS,
        shard_bytes: shard,
        first_ratio: ratio(first_layer_ms.p50, whole_ms.p50),
        last_ratio: ratio(last_layer_ms.p50, whole_ms.p50),
        whole_ms,
        first_layer_ms,
        last_layer_ms,
    };
    drop(pool);
    stop.store(true, Ordering::SeqCst);
    follower
        .join()
        .map_err(|_| anyhow::anyhow!("the follower engine thread panicked"))??;
    Ok(report)
}

/// The follower's engine: read and acknowledge every frame (which releases its copies) until
/// `stop`.
fn follow(mut c: EngineClient, _pool: PagePool, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let mut step = c.welcome().next_step.0;
    while !stop.load(Ordering::SeqCst) {
        match c.frame(Step(step), Duration::from_millis(100)) {
            Ok(_) => {
                c.ack(Step(step))?;
                step += 1;
            }
            Err(tandem_client::ClientError::Agent(tandem_client::AgentError::LeaderBehind {
                ..
            })) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Step until a frame reveals `task`'s outcome; an error unless it is `Ok`.
fn until_ok(c: &mut EngineClient, step: &mut u64, task: TaskId) -> anyhow::Result<()> {
    let started = Instant::now();
    while started.elapsed() < DEADLINE {
        let f = c.end_step(Step(*step), DEADLINE)?;
        c.ack(Step(*step))?;
        *step += 1;
        let result = f
            .outcomes()
            .find(|o| o.task == task)
            .map(|o| o.result.clone());
        match result {
            Some(OutcomeResult::Ok) => return Ok(()),
            Some(other) => bail!("task {task} ended {other:?}"),
            None => {}
        }
    }
    bail!("task {task} had no outcome within {DEADLINE:?}")
}

fn table(reports: &[LayerwiseReport]) -> String {
    let mut t = Table::new(&[
        "tier",
        "blocks",
        "layers",
        "shard KiB",
        "whole p50 ms",
        "first layer p50 ms",
        "last layer p50 ms",
        "first / whole",
        "last / whole",
    ]);
    for r in reports {
        t.row(vec![
            r.tier.to_string(),
            r.blocks.to_string(),
            r.layers.to_string(),
            (r.shard_bytes / 1024).to_string(),
            format!("{:.2}", r.whole_ms.p50),
            format!("{:.2}", r.first_layer_ms.p50),
            format!("{:.2}", r.last_layer_ms.p50),
            format!(
                "{:.3} {}",
                r.first_ratio,
                mark(r.first_ratio <= TARGET_RATIO)
            ),
            format!("{:.3}", r.last_ratio),
        ]);
    }
    let (blocks, trials) = reports.first().map_or((0, 0), |r| (r.blocks, r.whole_ms.n));
    format!(
        "layerwise: a {blocks}-block prefix from the host tier, then the disk tier (buffered), on 2 ranks (TP 2), whole-task load (request → outcome Ok) against a layerwise load (request → first and last layer ready), {trials} trials each\n{}goal: first layer ≤ 1/8 of the whole-task time\n",
        t.render()
    )
}
