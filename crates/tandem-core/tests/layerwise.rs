//! Layerwise loads, driven on a virtual clock (no processes, no sleeps): the leader decides
//! the plan in the frame and every rank copies by it (no rank picks anything); `wait_layer` is
//! answered when this rank's copy has the layer, or with a typed error naming task, layer and
//! both positions by its deadline; one rank whose layer does not arrive within the plan's
//! per-layer deadline fails the task on every rank, and every waiting engine hears of it.

mod support;

use support::{started, Group, Spec};
use tandem_core::{CallRef, StoreCommand};
use tandem_proto::engine::{AgentError, EngineReply, EngineRequest, LayerError};
use tandem_proto::{BlockHash, LayerwiseLoad, OutcomeResult, PageId, RequestId, TaskId, TaskStart};

const LAYERS: u32 = 4;
const BLOCKS: [u64; 2] = [0xa1, 0xa2];

/// A group of `world` ranks with 4 layers per block; the blocks stored and every frame read.
fn group(world: u32) -> Group {
    let mut spec = Spec::new(world);
    spec.layers = LAYERS;
    let mut g = Group::start(spec);
    started(g.store(1, &BLOCKS));
    g.step();
    g.step();
    g
}

/// Leader: look the blocks up and load them layerwise; the frame that starts the load.
fn load_layerwise(
    g: &mut Group,
    request: u64,
    layer_timeout_ms: u64,
) -> (TaskId, tandem_proto::Frame) {
    g.lookup(request, &BLOCKS);
    let req = EngineRequest::LoadLayerwise {
        epoch: g.epoch(),
        step: g.open_step(),
        request: RequestId(request),
        block_hashes: BLOCKS.iter().map(|b| BlockHash::from(*b)).collect(),
        page_ids: vec![PageId(5), PageId(6)],
        layer_timeout_ms,
    };
    let task = started(g.call(0, req));
    (task, g.step())
}

/// The layerwise copies rank `r`'s store was given.
fn layer_copies(g: &Group, r: u32) -> Vec<(TaskStart, LayerwiseLoad)> {
    g.nodes[r as usize]
        .store
        .commands
        .iter()
        .filter_map(|c| match c {
            StoreCommand::CopyLayers { task, plan, .. } => Some((task.clone(), plan.clone())),
            _ => None,
        })
        .collect()
}

/// Whether rank `r`'s store was given `task` as a whole-task load.
fn whole_copy(g: &Group, r: u32, task: TaskId) -> bool {
    g.nodes[r as usize].store.commands.iter().any(|c| {
        matches!(c, StoreCommand::CopyLoads { tasks, .. } if tasks.iter().any(|t| t.task == task))
    })
}

fn wait(g: &mut Group, r: u32, task: TaskId, layer: u32, deadline_ms: u64) -> CallRef {
    let req = EngineRequest::WaitLayer {
        epoch: g.epoch(),
        task,
        layer,
        deadline_ms,
    };
    let call = g.ask(r, req);
    g.drive();
    call
}

/// Rank `r`'s store copied `ready` layers of `task`.
fn copied(g: &mut Group, r: u32, task: TaskId, ready: u32) {
    let now = g.now_ms;
    g.nodes[r as usize]
        .core
        .handle_layers_copied(task, ready, now);
    g.drive();
}

/// Rank `r`'s store finished its shard of `task`.
fn shard_done(g: &mut Group, r: u32, task: TaskId, result: Result<(), String>) {
    let now = g.now_ms;
    g.nodes[r as usize]
        .core
        .handle_shard_done(task, result, now);
    g.drive();
}

fn layer_error(reply: Option<EngineReply>) -> LayerError {
    match reply {
        Some(EngineReply::Error(AgentError::Layer(e))) => e,
        other => panic!("expected a layer error, got {other:?}"),
    }
}

#[test]
fn the_leader_decides_the_plan_and_every_rank_copies_by_it() {
    let mut g = group(3);
    let (task, frame) = load_layerwise(&mut g, 2, 250);
    let plan = frame
        .layerwise_plan(task)
        .expect("the frame carries the plan")
        .clone();
    assert_eq!(plan, LayerwiseLoad::ascending(task, LAYERS, 250));
    assert!(frame.loads.iter().any(|t| t.task == task));
    for r in 0..3 {
        let copies = layer_copies(&g, r);
        assert_eq!(copies.len(), 1, "rank {r}: {copies:?}");
        assert_eq!(copies[0].0.task, task);
        assert_eq!(copies[0].1, plan, "rank {r} copies by the leader's plan");
        assert!(!whole_copy(&g, r, task), "rank {r} does not copy it whole");
    }
    // A follower's engine waits for layer 2: answered once its store has copied 3 layers.
    let call = wait(&mut g, 1, task, 2, 1_000);
    copied(&mut g, 1, task, 0);
    copied(&mut g, 1, task, 2);
    assert_eq!(g.reply(1, call), None, "2 layers copied, layer 2 needs 3");
    copied(&mut g, 1, task, 3);
    assert_eq!(
        g.reply(1, call),
        Some(EngineReply::LayerReady {
            task,
            layer: 2,
            layers_ready: 3
        })
    );
    // A layer already there is answered at once; a layer out of the plan and an unknown task
    // are typed refusals.
    let call = wait(&mut g, 1, task, 0, 0);
    assert!(matches!(
        g.reply(1, call),
        Some(EngineReply::LayerReady { .. })
    ));
    let call = wait(&mut g, 1, task, LAYERS, 1_000);
    assert_eq!(
        layer_error(g.reply(1, call)),
        LayerError::OutOfRange {
            task,
            layer: LAYERS,
            layers: LAYERS
        }
    );
    let other = TaskId { epoch: 1, seq: 999 };
    let call = wait(&mut g, 2, other, 0, 1_000);
    assert_eq!(
        layer_error(g.reply(2, call)),
        LayerError::UnknownTask {
            task: other,
            layer: 0
        }
    );
    // A plan whose layers could never be late is refused.
    let req = EngineRequest::LoadLayerwise {
        epoch: g.epoch(),
        step: g.open_step(),
        request: RequestId(3),
        block_hashes: vec![BlockHash::from(BLOCKS[0])],
        page_ids: vec![PageId(7)],
        layer_timeout_ms: 0,
    };
    assert!(matches!(
        g.call(0, req),
        EngineReply::Error(AgentError::BadRequest { .. })
    ));
    // Every rank finishes: the group outcome is Ok.
    for r in 0..3 {
        copied(&mut g, r, task, LAYERS);
        shard_done(&mut g, r, task, Ok(()));
    }
    let f = g.step();
    let o = f.outcomes().find(|o| o.task == task).expect("outcome");
    assert_eq!(o.result, OutcomeResult::Ok);
}

#[test]
fn a_wait_past_its_deadline_names_task_layer_and_both_positions() {
    let mut g = group(2);
    let (task, _) = load_layerwise(&mut g, 2, 10_000);
    copied(&mut g, 1, task, 1);
    let call = wait(&mut g, 1, task, 3, 50);
    g.advance(49);
    assert_eq!(g.reply(1, call), None);
    g.advance(1);
    let e = layer_error(g.reply(1, call));
    assert_eq!(
        e,
        LayerError::Timeout {
            task,
            layer: 3,
            ready: 1,
            asked: 4
        }
    );
    assert_eq!(
        e.to_string(),
        format!("layer 3 of task {task} not ready by the deadline: this rank has copied 1 layers, the layer needs 4")
    );
}

#[test]
fn one_ranks_stalled_layer_fails_the_task_on_every_rank() {
    let mut g = group(3);
    let (task, _) = load_layerwise(&mut g, 2, 100);
    // Ranks 0 and 1 copy every layer; rank 2 copies one and stalls.
    for r in 0..2 {
        copied(&mut g, r, task, 0);
        copied(&mut g, r, task, LAYERS);
        shard_done(&mut g, r, task, Ok(()));
    }
    copied(&mut g, 2, task, 0);
    copied(&mut g, 2, task, 1);
    let stalled = wait(&mut g, 2, task, 1, 10_000);
    let follower_waits = wait(&mut g, 1, task, LAYERS - 1, 10_000);
    assert!(
        matches!(
            g.reply(1, follower_waits),
            Some(EngineReply::LayerReady { .. })
        ),
        "rank 1 has its layers"
    );
    // The plan's 100 ms pass without progress: rank 2 fails its shard, its engine hears at
    // once, naming the layer and both positions.
    g.advance(100);
    match layer_error(g.reply(2, stalled)) {
        LayerError::Failed {
            task: t,
            layer,
            ready,
            asked,
            reason,
        } => {
            assert_eq!((t, layer, ready, asked), (task, 1, 1, 2));
            assert!(reason.contains("rank 2: layer 1 of task"), "{reason}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    // The store's late report (after the stall) is not reported again.
    shard_done(&mut g, 2, task, Err("stopped".into()));
    // The leader's quorum fails the task; every rank's frame says so, and every engine's
    // wait_layer, even for layers its own rank copied, now answers the failure at once.
    g.drive();
    let f = g.step();
    let o = f.outcomes().find(|o| o.task == task).expect("outcome");
    let OutcomeResult::Failed { reason } = &o.result else {
        panic!("expected Failed, got {o:?}")
    };
    assert!(reason.contains("rank 2: layer 1 of task"), "{reason}");
    assert!(reason.contains("layer_timeout_ms = 100"), "{reason}");
    for r in 0..3 {
        let call = wait(&mut g, r, task, 0, 10_000);
        match layer_error(g.reply(r, call)) {
            LayerError::Failed {
                task: t, layer: 0, ..
            } => assert_eq!(t, task),
            other => panic!("rank {r}: expected Failed, got {other:?}"),
        }
    }
    // The epoch goes on.
    for r in 0..3 {
        assert!(g.failed(r).is_none(), "rank {r}");
    }
}
