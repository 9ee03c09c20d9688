//! Per-rank page binding, idempotent lookups and the engine protocol version, driven on a
//! virtual clock (no processes, no sleeps): each rank copies a task started without page ids
//! into or from the pages its own engine bound; a rank whose engine never binds fails its
//! shard at its deadline and every engine sees the same failed outcome; bad binds are typed
//! refusals; a request's repeated lookups hold one pin set until its load or release.

mod support;

use support::{error, started, Group, Spec};
use tandem_core::{Role, StoreCommand};
use tandem_proto::engine::{
    AgentError, BindError, EngineReply, EngineRequest, ENGINE_PROTOCOL_VERSION,
};
use tandem_proto::{
    BlockHash, OutcomeResult, PageId, RequestId, Step, TaskId, TaskOutcome, TaskStart,
};

fn hashes(blocks: &[u64]) -> Vec<BlockHash> {
    blocks.iter().map(|b| BlockHash::from(*b)).collect()
}

fn pages(p: &[u32]) -> Vec<PageId> {
    p.iter().map(|p| PageId(*p)).collect()
}

/// A group whose every engine registered a pool of `pool[r]` pages.
fn group(world: u32, pool: &[u64]) -> Group {
    let mut g = Group::start(Spec::new(world));
    for (r, n) in g.nodes.iter_mut().enumerate() {
        n.core.handle_pool(Some(pool[r]));
    }
    g
}

/// Leader: a store of `blocks` started without page ids.
fn unbound_store(g: &mut Group, request: u64, blocks: &[u64]) -> TaskId {
    let req = EngineRequest::Store {
        epoch: g.epoch(),
        step: g.open_step(),
        request: RequestId(request),
        block_hashes: hashes(blocks),
        page_ids: Vec::new(),
    };
    started(g.call(0, req))
}

fn bind(g: &mut Group, r: u32, task: TaskId, p: &[u32]) -> EngineReply {
    let req = EngineRequest::Bind {
        epoch: g.epoch(),
        task,
        page_ids: pages(p),
    };
    g.call(r, req)
}

/// The copies rank `r`'s store was given for `task`.
fn copies(g: &Group, r: u32, task: TaskId) -> Vec<TaskStart> {
    g.nodes[r as usize]
        .store
        .commands
        .iter()
        .flat_map(|c| match c {
            StoreCommand::CopyStores { tasks, .. } | StoreCommand::CopyLoads { tasks, .. } => {
                tasks.clone()
            }
            _ => Vec::new(),
        })
        .filter(|t| t.task == task)
        .collect()
}

/// Rank `r` reads and acknowledges `step`; the frame.
fn read_and_ack(g: &mut Group, r: u32, step: u64) -> tandem_proto::Frame {
    let call = g.frame_call(r, step, 1_000);
    let Some(EngineReply::Frame(f)) = g.reply(r, call) else {
        panic!("rank {r} reads step {step}")
    };
    assert_eq!(g.ack(r, step), EngineReply::Acked);
    *f
}

/// Steps (every rank reading and acknowledging) until a frame reveals `task`'s outcome, as
/// every rank read it.
fn outcome_everywhere(g: &mut Group, task: TaskId) -> Vec<TaskOutcome> {
    for _ in 0..10 {
        let f = g.end_step();
        let s = f.step.0;
        let mut seen = Vec::new();
        if let Some(o) = f.outcomes().find(|o| o.task == task) {
            seen.push(o.clone());
        }
        for r in 1..g.spec.world {
            let read = read_and_ack(g, r, s);
            let o = read.outcomes().find(|o| o.task == task).cloned();
            seen.extend(o);
        }
        assert_eq!(g.ack(0, s), EngineReply::Acked);
        if !seen.is_empty() {
            assert_eq!(seen.len(), g.spec.world as usize, "every rank reads it");
            return seen;
        }
    }
    panic!("no outcome for {task}");
}

#[test]
fn every_rank_copies_from_the_pages_its_own_engine_bound_and_only_once_bound() {
    let mut g = group(3, &[16, 16, 8]);
    let task = unbound_store(&mut g, 7, &[1, 2]);
    // The leader's engine binds before the seal; rank 2's before it acknowledges the step,
    // rank 1's after.
    assert_eq!(bind(&mut g, 0, task, &[3, 4]), EngineReply::Bound { task });
    let f = g.end_step();
    assert!(f.stores[0].page_ids.is_empty(), "the frame names no page");
    assert_eq!(copies(&g, 0, task)[0].page_ids, pages(&[3, 4]));
    let call = g.frame_call(2, 0, 1_000);
    assert!(matches!(g.reply(2, call), Some(EngineReply::Frame(_))));
    assert_eq!(bind(&mut g, 2, task, &[6, 7]), EngineReply::Bound { task });
    assert!(
        copies(&g, 2, task).is_empty(),
        "held until the step is acknowledged"
    );
    assert_eq!(g.ack(2, 0), EngineReply::Acked);
    assert_eq!(copies(&g, 2, task)[0].page_ids, pages(&[6, 7]));
    read_and_ack(&mut g, 1, 0);
    assert!(
        copies(&g, 1, task).is_empty(),
        "acknowledged, not bound: waits"
    );
    assert_eq!(
        bind(&mut g, 1, task, &[10, 11]),
        EngineReply::Bound { task }
    );
    assert_eq!(copies(&g, 1, task)[0].page_ids, pages(&[10, 11]));
    // The same bind again is answered the same (a retried call) and copies nothing more.
    assert_eq!(
        bind(&mut g, 1, task, &[10, 11]),
        EngineReply::Bound { task }
    );
    assert_eq!(copies(&g, 1, task).len(), 1);
    assert_eq!(g.ack(0, 0), EngineReply::Acked);
    for o in outcome_everywhere(&mut g, task) {
        assert_eq!(o.result, OutcomeResult::Ok);
    }
    // Every rank holds the blocks: a load without page ids, bound per rank, too.
    let EngineReply::Lookup(l) = g.lookup(8, &[1, 2]) else {
        panic!("lookup")
    };
    assert_eq!(l.matched_blocks, 2);
    let req = EngineRequest::Load {
        epoch: g.epoch(),
        step: g.open_step(),
        request: RequestId(8),
        block_hashes: hashes(&[1, 2]),
        page_ids: Vec::new(),
    };
    let load = started(g.call(0, req));
    // The leader's engine binds at once; a follower's once the frame starting the load
    // reached its rank (before that its agent does not know the task).
    assert_eq!(
        bind(&mut g, 1, load, &[12, 13]),
        EngineReply::Error(AgentError::Bind(BindError::UnknownTask { task: load }))
    );
    assert_eq!(
        bind(&mut g, 0, load, &[0, 1]),
        EngineReply::Bound { task: load }
    );
    let s = g.end_step().step.0;
    for (r, p) in [(1, [12, 13]), (2, [0, 7])] {
        let call = g.frame_call(r, s, 1_000);
        assert!(matches!(g.reply(r, call), Some(EngineReply::Frame(_))));
        assert_eq!(bind(&mut g, r, load, &p), EngineReply::Bound { task: load });
        assert_eq!(g.ack(r, s), EngineReply::Acked);
    }
    assert_eq!(g.ack(0, s), EngineReply::Acked);
    for o in outcome_everywhere(&mut g, load) {
        assert_eq!(o.result, OutcomeResult::Ok);
    }
    assert_eq!(copies(&g, 1, load)[0].page_ids, pages(&[12, 13]));
    assert_eq!(copies(&g, 2, load)[0].page_ids, pages(&[0, 7]));
}

#[test]
fn a_rank_that_never_binds_fails_the_task_on_every_rank_at_its_deadline() {
    let mut g = group(3, &[16, 16, 16]);
    let deadline = g.spec.bind_timeout_ms;
    let task = unbound_store(&mut g, 7, &[1, 2]);
    assert_eq!(bind(&mut g, 0, task, &[0, 1]), EngineReply::Bound { task });
    let f = g.end_step();
    for r in 1..3 {
        read_and_ack(&mut g, r, 0);
    }
    assert_eq!(g.ack(0, 0), EngineReply::Acked);
    assert_eq!(bind(&mut g, 1, task, &[2, 3]), EngineReply::Bound { task });
    // Rank 2's engine never binds: nothing happens before the deadline...
    g.advance(deadline - 1);
    assert!(copies(&g, 2, task).is_empty());
    assert_eq!(f.stores[0].task, task);
    // ...and at it rank 2's shard fails, so the task fails on every rank, the same way.
    g.advance(1);
    let seen = outcome_everywhere(&mut g, task);
    for o in &seen {
        assert_eq!(o, &seen[0], "every rank sees the same outcome");
        match &o.result {
            OutcomeResult::Failed { reason } => {
                assert!(reason.contains("rank 2"), "{reason}");
                assert!(reason.contains("bind_timeout_ms"), "{reason}");
            }
            other => panic!("expected Failed, got {other:?}"),
        }
    }
    // The epoch goes on (nothing restarts), the failed store's blocks left the group, and a
    // late bind is refused by name.
    for r in 0..3 {
        assert_eq!(g.failed(r), None, "rank {r} still serves");
    }
    let Role::Leader(l) = g.nodes[0].core.role() else {
        unreachable!()
    };
    assert!(!l.index().contains(BlockHash::from(1u64)));
    match error(bind(&mut g, 2, task, &[0, 1])) {
        AgentError::Bind(BindError::UnknownTask { task: t }) => assert_eq!(t, task),
        other => panic!("expected UnknownTask once the outcome is known, got {other:?}"),
    }
}

#[test]
fn a_late_bind_before_the_outcome_is_refused_as_expired() {
    let mut g = group(2, &[16, 16]);
    let deadline = g.spec.bind_timeout_ms;
    let task = unbound_store(&mut g, 7, &[1]);
    assert_eq!(bind(&mut g, 0, task, &[0]), EngineReply::Bound { task });
    g.end_step();
    // The follower receives the frame but its engine is slow: it reads nothing yet.
    g.advance(deadline);
    assert_eq!(
        error(bind(&mut g, 1, task, &[0])),
        AgentError::Bind(BindError::Expired {
            task,
            bind_timeout_ms: deadline
        })
    );
}

#[test]
fn bad_binds_are_typed_refusals_that_record_nothing() {
    let mut g = group(2, &[16, 4]);
    let task = unbound_store(&mut g, 7, &[1, 2]);
    assert_eq!(bind(&mut g, 0, task, &[0, 1]), EngineReply::Bound { task });
    g.end_step();
    read_and_ack(&mut g, 1, 0);
    let unknown = TaskId {
        epoch: task.epoch,
        seq: 99,
    };
    assert_eq!(
        error(bind(&mut g, 1, unknown, &[0, 1])),
        AgentError::Bind(BindError::UnknownTask { task: unknown })
    );
    assert_eq!(
        error(bind(&mut g, 1, task, &[0])),
        AgentError::Bind(BindError::WrongCount {
            task,
            blocks: 2,
            pages: 1
        })
    );
    // Rank 1's pool is smaller than the leader's: page 4 is out of its range.
    assert_eq!(
        error(bind(&mut g, 1, task, &[3, 4])),
        AgentError::Bind(BindError::PageOutOfRange {
            task,
            page: 4,
            pool_pages: 4
        })
    );
    assert_eq!(
        error(bind(&mut g, 0, task, &[2, 3])),
        AgentError::Bind(BindError::AlreadyBound { task })
    );
    g.nodes[1].core.handle_pool(None);
    assert_eq!(
        error(bind(&mut g, 1, task, &[0, 1])),
        AgentError::Bind(BindError::PageOutOfRange {
            task,
            page: 0,
            pool_pages: 0
        })
    );
    g.nodes[1].core.handle_pool(Some(4));
    // Nothing was recorded: a good bind goes through and the copy uses it.
    assert_eq!(bind(&mut g, 1, task, &[2, 3]), EngineReply::Bound { task });
    assert_eq!(copies(&g, 1, task)[0].page_ids, pages(&[2, 3]));
    // A task that started with page ids needs no bind.
    let named = started(g.store(8, &[5]));
    g.end_step();
    read_and_ack(&mut g, 1, 1);
    assert_eq!(
        error(bind(&mut g, 1, named, &[0])),
        AgentError::Bind(BindError::AlreadyBound { task: named })
    );
    // Release is the leader's.
    let req = EngineRequest::Release {
        epoch: g.epoch(),
        request: RequestId(7),
    };
    assert_eq!(error(g.call(1, req)), AgentError::NotLeader { rank: 1 });
}

fn release(g: &mut Group, request: u64) -> EngineReply {
    let req = EngineRequest::Release {
        epoch: g.epoch(),
        request: RequestId(request),
    };
    g.call(0, req)
}

#[test]
fn repeated_lookups_hold_one_pin_set_until_the_release_and_the_tier_fills_again() {
    let mut spec = Spec::new(2);
    (spec.host, spec.disk) = (4, 0);
    let mut g = Group::start(spec);
    let t = started(g.store(1, &[1, 2, 3, 4]));
    outcome_everywhere(&mut g, t);
    let pinned = |g: &Group, b: u64| {
        let Role::Leader(l) = g.nodes[0].core.role() else {
            unreachable!()
        };
        l.index().is_pinned(BlockHash::from(b))
    };
    let EngineReply::Lookup(first) = g.lookup(9, &[1, 2, 3, 4, 5]) else {
        panic!("lookup")
    };
    assert_eq!(first.matched_blocks, 4);
    // The same request asks again, in this step and in later ones: the same answer, recorded
    // once, on the same pins.
    for i in 0..50 {
        assert_eq!(
            g.lookup(9, &[1, 2, 3, 4, 5]),
            EngineReply::Lookup(first.clone())
        );
        if i % 10 == 0 {
            let f = g.step();
            assert!(
                f.lookups.len() <= 1,
                "one record per lookup: {:?}",
                f.lookups
            );
        }
    }
    assert!((1..=4).all(|b| pinned(&g, b)), "pins last across steps");
    // Every pinned block refuses eviction: a new store finds the host tier full.
    let refused = started(g.store(2, &[10]));
    assert!(matches!(
        outcome_everywhere(&mut g, refused)[0].result,
        OutcomeResult::Failed { .. }
    ));
    assert_eq!(release(&mut g, 9), EngineReply::Released { blocks: 4 });
    assert_eq!(release(&mut g, 9), EngineReply::Released { blocks: 0 });
    assert!((1..=4).all(|b| !pinned(&g, b)));
    // No pin leaked: four new blocks fill the tier, every one accepted.
    let fill = started(g.store(3, &[11, 12, 13, 14]));
    assert_eq!(
        outcome_everywhere(&mut g, fill)[0].result,
        OutcomeResult::Ok
    );
}

#[test]
fn a_load_spends_its_lookups_pins_however_often_it_looked_up() {
    let mut spec = Spec::new(2);
    (spec.host, spec.disk) = (2, 0);
    let mut g = Group::start(spec);
    let t = started(g.store(1, &[1, 2]));
    outcome_everywhere(&mut g, t);
    for _ in 0..20 {
        g.lookup(9, &[1, 2]);
        g.step();
    }
    let load = started(g.load(9, &[1, 2]));
    assert_eq!(
        outcome_everywhere(&mut g, load)[0].result,
        OutcomeResult::Ok
    );
    assert_eq!(release(&mut g, 9), EngineReply::Released { blocks: 0 });
    let fill = started(g.store(3, &[3, 4]));
    assert_eq!(
        outcome_everywhere(&mut g, fill)[0].result,
        OutcomeResult::Ok
    );
    // A lookup that matched nothing is looked up afresh in a later step.
    let EngineReply::Lookup(miss) = g.lookup(4, &[5]) else {
        panic!("lookup")
    };
    assert_eq!(miss.matched_blocks, 0);
    let t = started(g.store(4, &[5]));
    outcome_everywhere(&mut g, t);
    let EngineReply::Lookup(hit) = g.lookup(4, &[5]) else {
        panic!("lookup")
    };
    assert_eq!(hit.matched_blocks, 1);
}

#[test]
fn a_hello_of_another_engine_protocol_version_is_refused_naming_both() {
    let mut g = Group::start(Spec::new(2));
    match error(g.call(1, EngineRequest::Hello { rank: 1 })) {
        AgentError::BadRequest { reason } => assert_eq!(
            reason,
            format!("engine protocol version differs: the agent speaks {ENGINE_PROTOCOL_VERSION}, the engine speaks 1; run an engine and an agent of the same Tandem release")
        ),
        other => panic!("expected BadRequest, got {other:?}"),
    }
    let req = EngineRequest::HelloVersioned {
        rank: 0,
        protocol_version: 99,
    };
    assert_eq!(
        error(g.call(0, req)),
        AgentError::ProtocolVersion {
            agent: ENGINE_PROTOCOL_VERSION,
            engine: 99
        }
    );
    assert!(matches!(
        g.call(0, EngineRequest::hello(0)),
        EngineReply::Welcome {
            next_step: Step(0),
            ..
        }
    ));
}
