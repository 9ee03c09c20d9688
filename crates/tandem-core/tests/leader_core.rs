//! The leader core's rules, driven with its followers on a virtual clock (no processes, no
//! sleeps): lookups and pins, stores and loads refused, the window and its deadline, durable
//! against volatile, the rebuild from manifests, fencing, liveness, failures and the drain.

mod support;

use support::{error, started, Group, Spec};
use tandem_core::{
    CallRef, ConnId, EpochStart, Event, NotReady, Output, Peer, RankCore, Role, RoleCounters,
    StoreCommand,
};
use tandem_proto::engine::{AgentError, EngineReply, EngineRequest};
use tandem_proto::{
    BlockHash, Epoch, InFlightTask, Message, OutcomeResult, PageId, Rank, RequestId, Step, TaskId,
    TaskKind, TaskOutcome, Tier, TierOp,
};

fn leader(g: &Group) -> &tandem_core::LeaderCore {
    match g.nodes[0].core.role() {
        Role::Leader(l) => l,
        Role::Follower(_) => unreachable!(),
    }
}

fn tasks(g: &Group) -> tandem_core::TaskCounts {
    match g.nodes[0].core.counters().role {
        RoleCounters::Leader { tasks, .. } => tasks,
        RoleCounters::Follower { .. } => unreachable!(),
    }
}

/// Step until the outcome of `task` is in a frame; returns it.
fn until_outcome(g: &mut Group, task: TaskId) -> TaskOutcome {
    for _ in 0..10 {
        let f = g.step();
        let found = f.outcomes().find(|o| o.task == task).cloned();
        if let Some(o) = found {
            return o;
        }
    }
    panic!("no outcome for {task}");
}

#[test]
fn a_store_reaches_every_rank_and_its_outcome_follows_every_shard() {
    let mut g = Group::start(Spec::new(3));
    assert!(g.ready(0) && g.ready(1) && g.ready(2));
    let task = started(g.store(7, &[1, 2]));
    let f0 = g.step();
    assert_eq!(f0.stores[0].task, task);
    assert_eq!(f0.stores[0].tiers, vec![Tier::Host, Tier::Host]);
    let outcome = until_outcome(&mut g, task);
    assert_eq!(outcome.result, OutcomeResult::Ok);
    for n in &g.nodes {
        let held: Vec<_> = n.store.blocks.keys().copied().collect();
        assert_eq!(held, vec![BlockHash::from(1u64), BlockHash::from(2u64)]);
    }
    assert!(leader(&g).index().contains(BlockHash::from(1u64)));
    assert_eq!(tasks(&g).started, [1, 0]);
    assert_eq!(tasks(&g).finished[0], [1, 0, 0]);
}

#[test]
fn a_lookup_pins_its_prefix_for_its_load_and_a_release_gives_back_what_no_load_took() {
    let mut g = Group::start(Spec::new(2));
    let t = started(g.store(1, &[1, 2, 3]));
    until_outcome(&mut g, t);
    // A lookup pins the cached prefix; the load of part of it keeps those pins, the rest go.
    let EngineReply::Lookup(l) = g.lookup(9, &[1, 2, 3, 4]) else {
        panic!("lookup")
    };
    assert_eq!((l.matched_blocks, l.pinned), (3, true));
    let pinned = |g: &Group, b: u64| leader(g).index().is_pinned(BlockHash::from(b));
    assert!(pinned(&g, 1) && pinned(&g, 2) && pinned(&g, 3));
    let load = started(g.load(9, &[1, 2]));
    assert!(pinned(&g, 1) && pinned(&g, 2) && !pinned(&g, 3));
    let f = g.step();
    assert_eq!(f.lookups, vec![l]);
    assert_eq!(f.loads[0].task, load);
    let outcome = until_outcome(&mut g, load);
    assert_eq!(outcome.result, OutcomeResult::Ok);
    assert!(!pinned(&g, 1) && !pinned(&g, 2));
    // A lookup with no load: its pins outlast the step, until the request's release.
    g.lookup(10, &[3]);
    assert!(pinned(&g, 3));
    g.step();
    assert!(pinned(&g, 3));
    let release = EngineRequest::Release {
        epoch: g.epoch(),
        request: RequestId(10),
    };
    assert_eq!(g.call(0, release), EngineReply::Released { blocks: 1 });
    assert!(!pinned(&g, 3));
    assert_eq!(tasks(&g).lookup_blocks, [4, 1]);
}

#[test]
fn a_load_of_blocks_its_lookup_did_not_match_is_refused_and_copies_nothing() {
    let mut g = Group::start(Spec::new(2));
    let t = started(g.store(1, &[1]));
    until_outcome(&mut g, t);
    let load = started(g.load(5, &[1]));
    let outcome = until_outcome(&mut g, load);
    match outcome.result {
        OutcomeResult::Failed { reason } => assert!(
            reason.contains("did not pin"),
            "the reason names the rule: {reason}"
        ),
        other => panic!("load of an unpinned block: {other:?}"),
    }
    for n in &g.nodes {
        assert!(
            !n.store
                .commands
                .iter()
                .any(|c| matches!(c, StoreCommand::CopyLoads { .. })),
            "no rank copied anything"
        );
    }
    assert_eq!(tasks(&g).finished[1], [0, 1, 0]);
}

#[test]
fn a_full_tier_of_pinned_blocks_refuses_the_store_and_changes_nothing() {
    let mut spec = Spec::new(2);
    spec.host = 2;
    spec.disk = 0;
    let mut g = Group::start(spec);
    // Two stores in flight pin the whole host tier (reports held back).
    for n in &mut g.nodes {
        n.store.hold_reports = true;
    }
    let a = started(g.store(1, &[1, 2]));
    g.step();
    let before = leader(&g).index().clone();
    let refused = started(g.store(2, &[3]));
    assert_eq!(leader(&g).index(), &before, "the index is unchanged");
    for n in &mut g.nodes {
        n.store.hold_reports = false;
    }
    let outcome = until_outcome(&mut g, refused);
    match outcome.result {
        OutcomeResult::Failed { reason } => {
            assert!(reason.contains("host tier full"), "{reason}")
        }
        other => panic!("store into a full tier: {other:?}"),
    }
    assert_eq!(tasks(&g).stores_refused, [1, 0]);
    assert_eq!(until_outcome(&mut g, a).result, OutcomeResult::Ok);
}

#[test]
fn stores_fill_host_then_disk_on_every_rank_and_evict_the_oldest() {
    let mut spec = Spec::new(2);
    spec.host = 1;
    spec.disk = 2;
    let mut g = Group::start(spec);
    for b in 1..=3u64 {
        let t = started(g.store(b, &[b]));
        until_outcome(&mut g, t);
    }
    // Host holds the first block; disk the two after it: nothing was moved.
    for n in &g.nodes {
        for (b, tier) in [(1u64, Tier::Host), (2, Tier::Disk), (3, Tier::Disk)] {
            assert_eq!(n.store.blocks.get(&BlockHash::from(b)), Some(&tier), "{b}");
        }
    }
    // A fourth block evicts the oldest for the whole group and takes its place on host.
    let t = started(g.store(4, &[4]));
    until_outcome(&mut g, t);
    for n in &g.nodes {
        assert!(!n.store.blocks.contains_key(&BlockHash::from(1u64)));
        assert_eq!(
            n.store.blocks.get(&BlockHash::from(4u64)),
            Some(&Tier::Host)
        );
    }
    match g.nodes[0].core.counters().role {
        RoleCounters::Leader { evictions, .. } => assert_eq!(evictions, 1),
        RoleCounters::Follower { .. } => unreachable!(),
    }
}

#[test]
fn a_full_window_holds_end_step_until_an_ack_opens_it() {
    let mut spec = Spec::new(2);
    spec.window = 2;
    let mut g = Group::start(spec);
    g.end_step();
    g.end_step();
    let call = g.end_step_call(5_000);
    assert_eq!(g.reply(0, call), None, "step 2 waits for the window");
    let read = g.frame_call(1, 0, 100);
    assert!(matches!(g.reply(1, read), Some(EngineReply::Frame(_))));
    assert_eq!(g.ack(1, 0), EngineReply::Acked);
    match g.reply(0, call) {
        Some(EngineReply::Frame(f)) => assert_eq!(f.step, Step(2)),
        other => panic!("the ack opened the window: {other:?}"),
    }
}

#[test]
fn a_full_window_ends_end_step_at_its_deadline_naming_the_slowest_ack() {
    let mut spec = Spec::new(2);
    spec.window = 1;
    let mut g = Group::start(spec);
    g.step();
    g.end_step();
    let call = g.end_step_call(300);
    assert_eq!(g.reply(0, call), None);
    assert_eq!(
        g.nodes[0].core.poll_timeout(),
        Some(300),
        "the wait's deadline"
    );
    g.advance(299);
    assert_eq!(g.reply(0, call), None, "not before its deadline");
    g.advance(1);
    assert_eq!(
        g.reply(0, call).map(error),
        Some(AgentError::WindowFull {
            step: Step(2),
            rank: 1,
            slowest_ack: Some(Step(0)),
            window: 1
        })
    );
}

/// The window-stall counters of the leader: (stalls declared, the stalled follower).
fn window_stall(g: &Group) -> (u64, Option<u32>) {
    match g.nodes[0].core.counters().role {
        RoleCounters::Leader {
            window_stalls,
            window_stalled_rank,
            ..
        } => (window_stalls, window_stalled_rank),
        RoleCounters::Follower { .. } => unreachable!(),
    }
}

#[test]
fn a_window_full_past_the_heartbeat_timeout_is_a_stall_naming_the_rank() {
    let mut spec = Spec::new(3);
    spec.window = 2;
    let mut g = Group::start(spec);
    g.step();
    // Rank 1 keeps acknowledging; rank 2's engine stops at step 0.
    for s in 1..3 {
        g.end_step();
        let read = g.frame_call(1, s, 100);
        assert!(matches!(g.reply(1, read), Some(EngineReply::Frame(_))));
        assert_eq!(g.ack(1, s), EngineReply::Acked);
    }
    let call = g.end_step_call(200);
    g.advance(200);
    assert_eq!(
        g.reply(0, call).map(error),
        Some(AgentError::WindowFull {
            step: Step(3),
            rank: 2,
            slowest_ack: Some(Step(0)),
            window: 2
        }),
        "the refusal names the rank holding the window"
    );
    // Full, but not for the grace (the heartbeat timeout, 1,000 ms) yet: still ready.
    assert!(g.nodes[0].core.status().ready);
    assert_eq!(window_stall(&g), (0, None));
    g.advance(800);
    assert_eq!(window_stall(&g), (1, Some(2)));
    let status = g.nodes[0].core.status();
    assert!(!status.ready);
    assert_eq!(
        status.reason.as_deref(),
        Some("window stalled: rank 2 acknowledged step 0, the leader cannot seal step 3 (window 2 steps)")
    );
    assert_eq!(
        g.nodes[0].core.counters().not_ready,
        Some(NotReady::WindowStalled)
    );
    assert!(g.failed(0).is_none(), "a stall never fails the epoch");
    // Rank 2 catches up: the window opens, the leader is ready again; the count stays.
    for s in 1..3 {
        let read = g.frame_call(2, s, 100);
        assert!(matches!(g.reply(2, read), Some(EngineReply::Frame(_))));
        assert_eq!(g.ack(2, s), EngineReply::Acked);
    }
    assert_eq!(window_stall(&g), (1, None));
    let status = g.nodes[0].core.status();
    assert!(status.ready, "{status:?}");
    assert_eq!(g.nodes[0].core.counters().not_ready, None);
}

#[test]
fn an_end_step_that_may_not_wait_is_refused_at_once_when_the_window_is_full() {
    let mut spec = Spec::new(2);
    spec.window = 1;
    let mut g = Group::start(spec);
    g.step();
    g.end_step();
    let timer = g.nodes[0].core.poll_timeout();
    // Deadline 0: answered now, with the clock not moved and no timer fired.
    let call = g.end_step_call(0);
    assert_eq!(
        g.reply(0, call).map(error),
        Some(AgentError::WindowFull {
            step: Step(2),
            rank: 1,
            slowest_ack: Some(Step(0)),
            window: 1
        })
    );
    assert_eq!(g.nodes[0].core.poll_timeout(), timer, "no wait armed");
}

/// A durable group whose ranks published empty manifests, every follower admitted.
fn durable_group(world: u32) -> Group {
    let mut spec = Spec::new(world);
    spec.durable = true;
    let mut g = Group::new(spec, EpochStart::default());
    for r in 0..world {
        g.publish(r, &[]);
    }
    g.join_all();
    g
}

#[test]
fn with_a_log_starts_and_outcomes_are_appended_before_a_frame_reveals_them() {
    let mut g = durable_group(2);
    assert!(g.ready(0));
    g.hold_appends = true;
    let task = started(g.store(7, &[1]));
    let call = g.end_step_call(1_000);
    assert_eq!(g.reply(0, call), None, "sealed only after the append");
    g.answer_append();
    let f0 = match g.reply(0, call) {
        Some(EngineReply::Frame(f)) => f,
        other => panic!("{other:?}"),
    };
    assert_eq!(f0.stores[0].task, task);
    assert_eq!(g.log.appends[0].started[0].start.task, task);
    assert_eq!(g.log.appends[0].step, Step(0));
    g.hold_appends = false;
    let outcome = until_outcome(&mut g, task);
    let appended: Vec<TaskId> = g
        .log
        .appends
        .iter()
        .flat_map(|a| a.finished.iter().map(|o| o.task))
        .collect();
    assert_eq!(
        appended,
        vec![outcome.task],
        "the outcome was appended first"
    );
}

#[test]
fn without_a_log_nothing_is_appended_and_a_new_epoch_wipes_the_store() {
    let mut g = Group::start(Spec::new(2));
    let task = started(g.store(7, &[1]));
    until_outcome(&mut g, task);
    assert!(g.log.appends.is_empty());
    assert_eq!(
        g.nodes[1].store.commands[0],
        StoreCommand::BeginEpoch {
            epoch: Epoch(1),
            wipe: true
        }
    );
    let d = durable_group(2);
    assert_eq!(
        d.nodes[1].store.commands[0],
        StoreCommand::BeginEpoch {
            epoch: Epoch(1),
            wipe: false
        }
    );
}

#[test]
fn a_refused_append_seals_on_revealing_nothing_new_then_catches_up() {
    let mut g = durable_group(2);
    g.log.refuse = Some("redis down".into());
    let task = started(g.store(7, &[1]));
    let f = g.step();
    assert!(
        f.stores.is_empty(),
        "the start is not durable: not revealed"
    );
    let status = g.nodes[0].core.status();
    assert!(!status.ready);
    assert_eq!(
        status.reason.as_deref(),
        Some("completion log unavailable: redis down")
    );
    assert_eq!(
        g.nodes[0].core.counters().not_ready,
        Some(NotReady::CompletionLog)
    );
    g.log.refuse = None;
    let f = g.step();
    assert_eq!(f.stores[0].task, task, "revealed once durable");
    assert!(g.nodes[0].core.status().ready);
}

#[test]
fn frame_zero_waits_until_its_aborts_are_durable() {
    let mut spec = Spec::new(2);
    spec.durable = true;
    let aborted = TaskOutcome {
        task: TaskId { epoch: 0, seq: 3 },
        kind: TaskKind::Store,
        request: RequestId(3),
        result: OutcomeResult::Aborted,
    };
    let flying = InFlightTask {
        task: aborted.task,
        kind: TaskKind::Store,
        request: RequestId(3),
    };
    let start = EpochStart {
        reconciliation: Some(tandem_proto::reconcile(&[], &[flying])),
        aborted: vec![aborted.clone()],
        acknowledged: Default::default(),
    };
    let mut g = Group::new(spec, start);
    g.publish(0, &[]);
    g.publish(1, &[]);
    g.join_all();
    g.log.refuse = Some("redis down".into());
    let call = g.end_step_call(1_000);
    match g.reply(0, call).map(error) {
        Some(AgentError::NotReady { reason }) => {
            assert!(
                reason.contains("reconciliation of epoch 1 is not durable yet"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(g.open_step(), Step(0), "nothing sealed");
    g.log.refuse = None;
    let f0 = g.end_step();
    assert_eq!(f0.reconciliation.unwrap().aborted, vec![aborted.clone()]);
    assert_eq!(g.log.appends[0].finished, vec![aborted]);
}

#[test]
fn the_index_is_rebuilt_from_every_manifest_before_engines_are_served() {
    let mut spec = Spec::new(2);
    spec.durable = true;
    let mut g = Group::new(spec, EpochStart::default());
    g.answer_manifests = false;
    g.publish(0, &[(1, Tier::Host), (2, Tier::Host), (3, Tier::Disk)]);
    g.join_all();
    assert!(!g.ready(0));
    let req = EngineRequest::Lookup {
        epoch: Epoch(1),
        step: Step(0),
        request: RequestId(1),
        block_hashes: vec![BlockHash::from(1u64)],
    };
    match error(g.call(0, req.clone())) {
        AgentError::NotReady { reason } => assert!(reason.contains("rebuilding"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Rank 1 has not published: the leader reads again a little later.
    g.answer_manifests_now();
    assert!(!g.ready(0));
    let retry = g.nodes[0].core.poll_timeout().expect("a read again");
    assert!(retry <= g.now_ms + 20);
    g.publish(1, &[(1, Tier::Host), (3, Tier::Host)]);
    g.advance(20);
    g.answer_manifests_now();
    assert!(g.ready(0), "rebuilt");
    // The intersection is kept; frame 0 evicts what some rank lacks and demotes what some
    // rank holds on disk.
    let f0 = g.end_step();
    assert_eq!(
        f0.tier_ops,
        vec![
            TierOp::Evict(BlockHash::from(2u64)),
            TierOp::Demote(BlockHash::from(3u64))
        ]
    );
    let EngineReply::Lookup(l) = g.lookup(1, &[1, 3]) else {
        panic!()
    };
    assert_eq!(l.matched_blocks, 2);
}

#[test]
fn a_manifest_missing_after_the_wait_counts_as_empty() {
    let mut spec = Spec::new(2);
    spec.durable = true;
    let mut g = Group::new(spec, EpochStart::default());
    g.publish(0, &[(1, Tier::Host)]);
    g.join_all();
    assert!(!g.ready(0));
    g.advance(tandem_core::cadence::MANIFEST_WAIT_MS + 100);
    assert!(g.ready(0));
    let f0 = g.end_step();
    assert_eq!(f0.tier_ops, vec![TierOp::Evict(BlockHash::from(1u64))]);
}

#[test]
fn requests_of_another_epoch_are_refused_counted_and_never_applied() {
    let mut g = Group::start(Spec::new(2));
    for epoch in [Epoch(0), Epoch(2)] {
        let req = EngineRequest::Store {
            epoch,
            step: Step(0),
            request: RequestId(1),
            block_hashes: vec![BlockHash::from(1u64)],
            page_ids: vec![PageId(0)],
        };
        assert_eq!(
            error(g.call(0, req)),
            AgentError::StaleEpoch {
                ours: Epoch(1),
                theirs: epoch
            }
        );
    }
    assert_eq!(g.nodes[0].core.counters().stale_epoch_rejected, 2);
    assert_eq!(g.nodes[0].core.status().stale_epoch_rejected, 2);
    assert!(g.end_step().stores.is_empty(), "nothing applied");
}

#[test]
fn messages_and_losses_of_a_connection_not_admitted_are_ignored() {
    let mut g = Group::start(Spec::new(2));
    let ack = Message::Ack(tandem_proto::Ack {
        epoch: Epoch(1),
        rank: Rank(1),
        step: Step(0),
    });
    g.end_step();
    g.nodes[0]
        .core
        .handle_peer_message(ConnId(999), Rank(1), &ack, 0);
    assert_eq!(leader(&g).leader().slowest_ack(), None, "stale connection");
    g.nodes[0]
        .core
        .handle_peer_lost(ConnId(999), Rank(1), "old socket", 0);
    assert_eq!(g.nodes[0].core.failure(), None);
    let conn = g.conns[1];
    g.nodes[0].core.handle_peer_lost(conn, Rank(1), "reset", 0);
    g.drive();
    assert_eq!(
        g.failed(0).as_deref(),
        Some("rank 1 connection lost: reset")
    );
}

#[test]
fn a_silent_follower_fails_the_epoch_after_the_heartbeat_timeout() {
    let mut g = Group::start(Spec::new(2));
    g.advance(5_000);
    assert_eq!(g.failed(0), None, "heartbeats keep it alive");
    // The follower's messages stop arriving.
    let before = g.now_ms;
    for _ in 0..20 {
        g.now_ms += 100;
        g.nodes[1].core.handle_timeout(g.now_ms);
        while g.nodes[1].core.poll_output().is_some() {}
        let now = g.now_ms;
        if g.nodes[0].core.poll_timeout().is_some_and(|t| t <= now) {
            g.nodes[0].core.handle_timeout(now);
        }
        g.drive();
    }
    let reason = g.failed(0).expect("failed");
    assert!(reason.starts_with("rank 1 silent for"), "{reason}");
    assert!(g.now_ms - before >= 1_000);
}

#[test]
fn an_engine_disconnect_fails_the_epoch_only_with_tasks_in_flight() {
    let mut g = Group::start(Spec::new(2));
    let hello = EngineRequest::hello(0);
    assert!(matches!(
        g.call(0, hello.clone()),
        EngineReply::Welcome { .. }
    ));
    g.nodes[0].core.handle_engine_disconnect(true, "closed", 0);
    g.drive();
    assert_eq!(g.failed(0), None, "no task in flight: detached");
    g.call(0, hello);
    for n in &mut g.nodes {
        n.store.hold_reports = true;
    }
    started(g.store(1, &[1]));
    g.step();
    // A connection that never said hello is not an engine.
    g.nodes[0].core.handle_engine_disconnect(false, "probe", 0);
    g.drive();
    assert_eq!(g.failed(0), None);
    g.nodes[0]
        .core
        .handle_engine_disconnect(true, "broken pipe", 0);
    g.drive();
    assert_eq!(
        g.failed(0).as_deref(),
        Some("engine of rank 0 disconnected with 1 tasks in flight: broken pipe")
    );
}

#[test]
fn a_failed_epoch_answers_waiting_calls_and_refuses_new_ones() {
    let mut spec = Spec::new(2);
    spec.window = 1;
    let mut g = Group::start(spec);
    g.end_step();
    let call = g.end_step_call(10_000);
    assert_eq!(g.reply(0, call), None);
    let conn = g.conns[1];
    g.nodes[0].core.handle_peer_lost(conn, Rank(1), "reset", 0);
    g.drive();
    let want = "epoch 1 failed: rank 1 connection lost: reset".to_string();
    assert_eq!(
        g.reply(0, call).map(error),
        Some(AgentError::NotReady {
            reason: want.clone()
        })
    );
    assert_eq!(
        error(g.store(2, &[2])),
        AgentError::NotReady {
            reason: want.clone()
        }
    );
    let status = g.nodes[0].core.status();
    assert_eq!((status.ready, status.reason), (false, Some(want)));
    let failures = g.nodes[0]
        .events
        .iter()
        .filter(|e| matches!(e, Event::Failed { .. }))
        .count();
    assert_eq!(failures, 1, "one failure per epoch");
}

#[test]
fn a_drain_seals_the_open_step_with_what_was_decided() {
    let mut g = Group::start(Spec::new(2));
    let task = started(g.store(1, &[1]));
    g.nodes[0].core.handle_drain(CallRef(500), 0);
    g.drive();
    match g.reply(0, CallRef(500)) {
        Some(EngineReply::Frame(f)) => assert_eq!(f.stores[0].task, task),
        other => panic!("{other:?}"),
    }
    // A follower has nothing to drain.
    g.nodes[1].core.handle_drain(CallRef(501), 0);
    g.drive();
    assert_eq!(g.reply(1, CallRef(501)), Some(EngineReply::Acked));
}

#[test]
fn a_request_that_could_make_a_frame_too_large_is_refused_and_records_nothing() {
    let mut spec = Spec::new(2);
    spec.max_frame_bytes = 512;
    let mut g = Group::start(spec);
    let blocks: Vec<u64> = (0..64).collect();
    match error(g.store(1, &blocks)) {
        AgentError::FrameTooLarge { limit, .. } => assert_eq!(limit, 512),
        other => panic!("{other:?}"),
    }
    assert_eq!(leader(&g).index().occupancy(Tier::Host), 0);
    assert!(g.end_step().is_empty());
}

#[test]
fn hello_names_the_next_step_and_a_wrong_rank_or_follower_request_is_refused() {
    let mut g = Group::start(Spec::new(2));
    g.step();
    match g.call(1, EngineRequest::hello(1)) {
        EngineReply::Welcome {
            next_step, rank, ..
        } => assert_eq!((next_step, rank), (Step(1), 1)),
        other => panic!("{other:?}"),
    }
    match error(g.call(1, EngineRequest::hello(0))) {
        AgentError::BadRequest { reason } => {
            assert_eq!(reason, "engine says rank 0, this agent is rank 1")
        }
        other => panic!("{other:?}"),
    }
    let store = EngineRequest::Store {
        epoch: Epoch(1),
        step: Step(1),
        request: RequestId(1),
        block_hashes: vec![],
        page_ids: vec![],
    };
    assert_eq!(error(g.call(1, store)), AgentError::NotLeader { rank: 1 });
}

#[test]
fn a_bad_hello_is_refused_naming_the_field_and_its_connection_closed() {
    let g = Group::start(Spec::new(2));
    let mut spec = g.spec.clone();
    spec.world = 3;
    let mut core = RankCore::new(support::config(&spec, 0), EpochStart::default(), 0).unwrap();
    let mut wrong = support::membership(&spec);
    wrong.secret = tandem_proto::GroupSecret::new(b"not it".to_vec());
    let nonce = [1u8; 32];
    let refused = core.handle_admit(ConnId(7), &nonce, &wrong.hello(&nonce, Rank(1)), 0);
    assert_eq!(refused, Err(tandem_proto::HandshakeError::BadSecret));
    let outs: Vec<Output> = std::iter::from_fn(|| core.poll_output()).collect();
    assert!(outs.contains(&Output::Send {
        to: Peer::Followers(vec![ConnId(7)]),
        msg: Message::Refused {
            reason: tandem_proto::HandshakeError::BadSecret
        }
    }));
    assert!(outs.contains(&Output::Close { conn: ConnId(7) }));
    assert!(!outs.iter().any(|o| matches!(o, Output::Event(_))));
}

#[test]
fn a_core_is_a_value_copies_driven_alike_stay_equal() {
    use std::hash::{Hash, Hasher};
    let mut g = Group::start(Spec::new(2));
    started(g.store(1, &[1, 2]));
    let mut a = g.nodes[0].core.clone();
    let mut b = a.clone();
    let end = EngineRequest::EndStep {
        epoch: Epoch(1),
        step: Step(0),
        deadline_ms: 100,
    };
    let mut outputs = Vec::new();
    for core in [&mut a, &mut b] {
        core.handle_engine(CallRef(9), end.clone(), 5);
        core.handle_shard_done(TaskId { epoch: 1, seq: 0 }, Ok(()), 6);
        core.handle_timeout(200);
        outputs.push(std::iter::from_fn(|| core.poll_output()).collect::<Vec<_>>());
    }
    assert_eq!(
        outputs[0], outputs[1],
        "the same inputs give the same outputs"
    );
    assert!(!outputs[0].is_empty());
    assert_eq!(a, b);
    let hash = |c: &RankCore| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        c.hash(&mut h);
        h.finish()
    };
    assert_eq!(hash(&a), hash(&b));
}

#[test]
fn a_durable_group_of_one_rank_rebuilds_its_index_without_a_follower_join() {
    // No follower ever joins a group of one rank: the rebuild, which a join starts in a larger
    // group, starts from the leader's own timer, and the rank becomes ready.
    let mut g = durable_group(1);
    assert!(!g.ready(0), "not before its index is rebuilt");
    g.advance(1);
    assert!(g.ready(0), "ready once its own manifest is read");
    let task = started(g.store(1, &[1]));
    let outcome = until_outcome(&mut g, task);
    assert_eq!(outcome.task, task);
}
