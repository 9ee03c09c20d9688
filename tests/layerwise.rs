//! Layerwise loads with real agent processes (docs/LAYERWISE.md): a group of PP 2 × TP 2 with
//! 32-layer blocks (16 layers per rank), one engine per rank that waits for a layerwise load
//! layer by layer and checks each layer's bytes as soon as it is signalled; and a rank whose
//! tier stalls before a layer (the test-only hook `TANDEM_FAULT_LAYER_STALL`, in the
//! `tandem-fault-hooks` binary) makes the task fail the same way on every rank by the
//! deadline, with typed `wait_layer` errors and nothing hanging. The same load from the disk
//! tier (ranged reads of each shard's slot) arrives layer by layer too, and a disk read error
//! on one rank's layer (`TANDEM_FAULT_DISK`) fails the task the same way.
//!
//! Ranks are numbered `stage × tp_size + tp_rank`: ranks 2 and 3 hold model layers 16..31, so
//! their layer 1 is model layer 17.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tandem_client::api::LayerError;
use tandem_client::{AgentError, ClientError, EngineClient, PagePool};
use tandem_proto::frame::{OutcomeResult, TaskOutcome};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::{connect_engine, fill};
use tandem_tests::{serial, tandem_fault_bin, ChildGuard};

const DEADLINE: Duration = Duration::from_secs(5);
const BLOCKS: u32 = 8;
const LAYERS: u32 = 16;
const WORLD: u32 = 4;

/// PP 2 × TP 2, 32 model layers, every shard in the host tier (or, with `disk`, in the disk
/// tier: no host tier); rank 3 runs the fault binary with `VAR=value` when given.
fn start(disk: bool, fault: Option<(&std::path::Path, &str, &str)>) -> Group {
    let mut spec = GroupSpec::new(2, 2);
    (spec.host_capacity_blocks, spec.disk_capacity_blocks) = if disk { (0, 64) } else { (64, 0) };
    let mut g = Group::configure(&spec);
    g.use_small_shards();
    g.edit_config("num_layers = 8", "num_layers = 32");
    for rank in 0..WORLD {
        let child = match fault {
            Some((bin, var, value)) if rank == 3 => {
                let log = std::fs::File::create(g.log_path(rank)).expect("log");
                std::process::Command::new(bin)
                    .args(["agent", "--rank", "3", "--config"])
                    .arg(&g.config)
                    .env(var, value)
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
            }
            _ => g.agent_command(rank).spawn(),
        }
        .expect("spawn agent");
        g.agents.push(Some(ChildGuard(child)));
    }
    g.wait_ready(Duration::from_secs(30));
    g
}

fn hashes() -> Vec<BlockHash> {
    (0..u64::from(BLOCKS))
        .map(|i| BlockHash::from(0x1a7e_0000 + i * 7919))
        .collect()
}

/// Source pages (computed by every engine before the store) and load pages.
fn src() -> Vec<PageId> {
    (0..BLOCKS).map(PageId).collect()
}
fn dst() -> Vec<PageId> {
    (BLOCKS..2 * BLOCKS).map(PageId).collect()
}

/// True when layer `layer` of every load page holds that layer of the block's shard on `rank`.
fn layer_holds(pool: &PagePool, rank: u32, layer: u32) -> bool {
    hashes().iter().zip(dst()).all(|(h, p)| {
        let page = pool.page(p).expect("page");
        let seg = page.len() / LAYERS as usize;
        let mut want = vec![0u8; page.len()];
        fill(&mut want, h.0, rank);
        let r = layer as usize * seg..(layer as usize + 1) * seg;
        page[r.clone()] == want[r]
    })
}

/// What each engine saw of the layerwise load.
#[derive(Default, Debug)]
struct Seen {
    /// Layers verified right after their signal: (rank, layer).
    verified: Vec<(u32, u32)>,
    /// Layers signalled whose bytes were wrong: (rank, layer).
    bad: Vec<(u32, u32)>,
    /// `wait_layer` errors: (rank, layer, error).
    errors: Vec<(u32, u32, LayerError)>,
    /// The task's outcome as each rank read it.
    outcomes: BTreeMap<u32, TaskOutcome>,
    /// After the outcome: what a `wait_layer` for the last layer answered, by rank.
    after: BTreeMap<u32, Result<u32, String>>,
}

/// Wait for every layer of `task` in order, checking each layer's bytes at once; stops at the
/// first error.
fn wait_layers(c: &mut EngineClient, pool: &PagePool, rank: u32, task: TaskId, seen: &Mutex<Seen>) {
    for layer in 0..LAYERS {
        match c.wait_layer(task, layer, DEADLINE) {
            Ok(ready) => {
                assert!(
                    ready > layer,
                    "rank {rank}: layer {layer} ready with {ready} layers"
                );
                let ok = layer_holds(pool, rank, layer);
                let mut s = seen.lock().unwrap();
                if ok {
                    s.verified.push((rank, layer));
                } else {
                    s.bad.push((rank, layer));
                }
            }
            Err(ClientError::Agent(AgentError::Layer(e))) => {
                seen.lock().unwrap().errors.push((rank, layer, e));
                return;
            }
            Err(e) => panic!("rank {rank} wait_layer {layer}: {e}"),
        }
    }
}

/// After the outcome: `wait_layer` of the last layer, as text when refused.
fn after_outcome(c: &mut EngineClient, rank: u32, task: TaskId, seen: &Mutex<Seen>) {
    let r = c
        .wait_layer(task, LAYERS - 1, DEADLINE)
        .map_err(|e| match e {
            ClientError::Agent(AgentError::Layer(l @ LayerError::Failed { .. })) => {
                format!("failed: {l}")
            }
            other => format!("other: {other}"),
        });
    seen.lock().unwrap().after.insert(rank, r);
}

/// A follower engine: reads every frame, acknowledges it (which releases its copies), waits
/// for every layer of each layerwise load it starts, and records the task's outcome.
fn follower(
    rank: u32,
    mut c: EngineClient,
    pool: PagePool,
    stop: Arc<AtomicU64>,
    seen: Arc<Mutex<Seen>>,
) {
    let mut step = 0u64;
    let mut layerwise = Vec::new();
    while step <= stop.load(Ordering::SeqCst) {
        let frame = match c.frame(Step(step), DEADLINE) {
            Ok(f) => f,
            Err(ClientError::Agent(AgentError::LeaderBehind { .. })) => continue,
            Err(e) => panic!("rank {rank} frame {step}: {e}"),
        };
        c.ack(Step(step)).expect("ack");
        for plan in &frame.layerwise {
            assert_eq!(plan.layers, LAYERS, "rank {rank}: the leader's plan");
            layerwise.push(plan.task);
            wait_layers(&mut c, &pool, rank, plan.task, &seen);
        }
        for o in frame.outcomes() {
            if layerwise.contains(&o.task) {
                seen.lock().unwrap().outcomes.insert(rank, o.clone());
                after_outcome(&mut c, rank, o.task, &seen);
            }
        }
        step += 1;
    }
}

/// The leader's engine: steps until a frame reveals `task`'s outcome; that outcome.
fn until_outcome(c: &mut EngineClient, step: &mut u64, task: TaskId) -> TaskOutcome {
    for _ in 0..2_000 {
        let f = c.end_step(Step(*step), DEADLINE).expect("end_step");
        c.ack(Step(*step)).expect("leader ack");
        *step += 1;
        if let Some(o) = f.outcomes().find(|o| o.task == task) {
            return o.clone();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("no outcome for {task}");
}

/// Every rank's engine computes its shards and the leader stores them; then the leader loads
/// them back layerwise (each layer within `layer_timeout`) and every engine waits layer by
/// layer. Returns what the engines saw and the load's outcome on the leader.
fn run(g: &Group, layer_timeout: Duration) -> (Seen, TaskOutcome) {
    let stop = Arc::new(AtomicU64::new(u64::MAX));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut engines: Vec<(EngineClient, PagePool)> = (0..WORLD)
        .map(|r| connect_engine(&g.socket(r), &g.pool_path(r), r, u64::from(2 * BLOCKS)))
        .collect();
    for (rank, (_, pool)) in engines.iter_mut().enumerate() {
        for (h, p) in hashes().iter().zip(src()) {
            fill(pool.page_mut(p).unwrap(), h.0, rank as u32);
        }
    }
    let (mut leader, pool) = engines.remove(0);
    let followers: Vec<_> = engines
        .into_iter()
        .enumerate()
        .map(|(i, (c, pool))| {
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::spawn(move || follower(i as u32 + 1, c, pool, stop, seen))
        })
        .collect();
    let mut step = 0u64;
    let store = leader
        .store(Step(0), RequestId(1), hashes(), src())
        .expect("store");
    let o = until_outcome(&mut leader, &mut step, store);
    assert_eq!(o.result, OutcomeResult::Ok, "store: {o:?}");
    let l = leader
        .lookup(Step(step), RequestId(2), hashes())
        .expect("lookup");
    assert_eq!(l.matched_blocks, BLOCKS);
    let load = leader
        .load_layerwise(Step(step), RequestId(2), hashes(), dst(), layer_timeout)
        .expect("load_layerwise");
    // The frame that starts the load carries the leader's plan.
    let f = leader.end_step(Step(step), DEADLINE).expect("end_step");
    leader.ack(Step(step)).expect("ack");
    step += 1;
    let plan = f
        .layerwise_plan(load)
        .unwrap_or_else(|| panic!("the starting frame carries the plan: {f:?}"));
    assert_eq!((plan.layers, plan.order.len()), (LAYERS, LAYERS as usize));
    wait_layers(&mut leader, &pool, 0, load, &seen);
    let outcome = until_outcome(&mut leader, &mut step, load);
    seen.lock().unwrap().outcomes.insert(0, outcome.clone());
    after_outcome(&mut leader, 0, load, &seen);
    // One more step, so that every follower has read the outcome's frame.
    leader.end_step(Step(step), DEADLINE).expect("end_step");
    stop.store(step, Ordering::SeqCst);
    for f in followers {
        f.join().expect("follower engine");
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (seen, outcome)
}

/// Every layer of every rank arrived with its bytes, and the outcome is `Ok` everywhere.
fn every_layer_arrived(seen: &Seen, outcome: &TaskOutcome) {
    assert_eq!(outcome.result, OutcomeResult::Ok, "{outcome:?}");
    assert!(
        seen.bad.is_empty(),
        "layers with other bytes: {:?}",
        seen.bad
    );
    assert!(
        seen.errors.is_empty(),
        "wait_layer errors: {:?}",
        seen.errors
    );
    assert_eq!(
        seen.verified.len(),
        (WORLD * LAYERS) as usize,
        "every layer of every rank verified: {:?}",
        seen.verified
    );
    for rank in 0..WORLD {
        assert_eq!(seen.outcomes.get(&rank), Some(outcome), "rank {rank}");
        assert_eq!(
            seen.after.get(&rank),
            Some(&Ok(LAYERS)),
            "rank {rank}: after Ok every layer is ready"
        );
    }
}

#[test]
fn every_rank_gets_each_layer_as_it_is_signalled_on_pp2_tp2() {
    let _serial = serial();
    let g = start(false, None);
    let (seen, outcome) = run(&g, DEADLINE);
    every_layer_arrived(&seen, &outcome);
}

#[test]
fn every_rank_gets_each_layer_from_the_disk_tier() {
    let _serial = serial();
    let g = start(true, None);
    let (seen, outcome) = run(&g, DEADLINE);
    every_layer_arrived(&seen, &outcome);
}

#[test]
fn a_read_error_on_a_disk_layer_fails_the_task_on_every_rank() {
    let _serial = serial();
    let Some(bin) = tandem_fault_bin() else {
        println!(
            "SKIPPED a failing disk layer read: no target/debug/tandem-fault-hooks \
             (cargo build -p tandem-cli --bin tandem --features fault-hooks, then copy it there)"
        );
        return;
    };
    // Rank 3's disk reads fail after the first 8: one read per block and layer, so layer 0
    // of its 8 blocks arrives and layer 1 fails.
    let g = start(true, Some((&bin, "TANDEM_FAULT_DISK", "read-error:8")));
    let (seen, outcome) = run(&g, DEADLINE);
    let reason = match &outcome.result {
        OutcomeResult::Failed { reason } => reason.clone(),
        other => panic!("expected Failed, got {other:?}; rank 3 log:\n{}", g.log(3)),
    };
    assert!(reason.contains("layer 1: disk tier: read"), "{reason}");
    assert!(
        seen.bad.is_empty(),
        "layers with other bytes: {:?}",
        seen.bad
    );
    for rank in 0..WORLD {
        assert_eq!(seen.outcomes.get(&rank), Some(&outcome), "rank {rank}");
    }
    let verified3: Vec<u32> = seen
        .verified
        .iter()
        .filter(|(r, _)| *r == 3)
        .map(|(_, l)| *l)
        .collect();
    // Rank 3's copy got layer 0 and failed on layer 1. Its engine asks for layer 0 either
    // before the failure (layer 0 verified, then `Failed` for layer 1) or after it, when a
    // failed task's pages hold no defined data and layer 0 is refused too (docs/LAYERWISE.md):
    // either way one typed `Failed`, and nothing verified from the failed layer on.
    let errs3: Vec<_> = seen.errors.iter().filter(|(r, ..)| *r == 3).collect();
    let failed_at = match errs3.as_slice() {
        [(_, asked, LayerError::Failed { layer, ready, .. })] if asked == layer && *ready <= 1 => {
            *layer
        }
        other => panic!("rank 3's wait_layer errors: {other:?}"),
    };
    assert!(failed_at <= 1, "rank 3 failed at layer {failed_at}");
    assert_eq!(
        verified3,
        (0..failed_at).collect::<Vec<u32>>(),
        "{:?}",
        seen.verified
    );
}

#[test]
fn a_rank_stalled_on_model_layer_17_fails_the_task_on_every_rank_by_the_deadline() {
    let _serial = serial();
    let Some(bin) = tandem_fault_bin() else {
        println!(
            "SKIPPED a stalled layer: no target/debug/tandem-fault-hooks \
             (cargo build -p tandem-cli --bin tandem --features fault-hooks, then copy it there)"
        );
        return;
    };
    // Rank 3's layer 1 (model layer 17) stalls for 3 s; each layer may take 300 ms.
    let g = start(false, Some((&bin, "TANDEM_FAULT_LAYER_STALL", "1:3000")));
    let (seen, outcome) = run(&g, Duration::from_millis(300));
    let reason = match &outcome.result {
        OutcomeResult::Failed { reason } => reason.clone(),
        other => panic!("expected Failed, got {other:?}; rank 3 log:\n{}", g.log(3)),
    };
    assert!(reason.contains("rank 3"), "{reason}");
    assert!(reason.contains("layer 1 of task"), "{reason}");
    assert!(
        seen.bad.is_empty(),
        "layers with other bytes: {:?}",
        seen.bad
    );
    // Every rank read the same outcome, and after it wait_layer answers the typed failure.
    for rank in 0..WORLD {
        assert_eq!(seen.outcomes.get(&rank), Some(&outcome), "rank {rank}");
        match seen.after.get(&rank) {
            Some(Err(e)) => assert!(e.starts_with("failed: "), "rank {rank}: {e}"),
            other => panic!("rank {rank}: after Failed, wait_layer answered {other:?}"),
        }
    }
    // Rank 3 got layer 0, then a typed failure for layer 1 naming both positions.
    let verified3: Vec<u32> = seen
        .verified
        .iter()
        .filter(|(r, _)| *r == 3)
        .map(|(_, l)| *l)
        .collect();
    assert_eq!(verified3, vec![0], "{:?}", seen.verified);
    let errs3: Vec<_> = seen.errors.iter().filter(|(r, ..)| *r == 3).collect();
    match errs3.as_slice() {
        [(
            _,
            1,
            LayerError::Failed {
                layer,
                ready,
                asked,
                ..
            },
        )] => {
            assert_eq!((*layer, *ready, *asked), (1, 1, 2));
        }
        other => panic!("rank 3's wait_layer errors: {other:?}"),
    }
}
