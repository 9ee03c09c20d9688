//! The follower core's rules, driven with its leader on a virtual clock: positional reads and
//! bounded waits, copies held until the engine acknowledged the step that started them, the
//! frame-0 redelivery filter, heartbeats, and what fails the epoch.

mod support;

use std::collections::BTreeSet;

use support::{error, started, Group, Spec};
use tandem_core::{
    EpochStart, Event, LogHealth, NotReady, Output, Peer, RoleCounters, StoreCommand,
};
use tandem_proto::engine::{AgentError, EngineReply};
use tandem_proto::{
    BlockHash, Epoch, Frame, Message, OutcomeResult, RequestId, Step, TaskId, TaskKind, TaskOutcome,
};

fn frame_of(reply: Option<EngineReply>) -> Frame {
    match reply {
        Some(EngineReply::Frame(f)) => *f,
        other => panic!("expected a frame, got {other:?}"),
    }
}

#[test]
fn reads_are_positional_and_a_wait_ends_with_its_frame_or_at_its_deadline() {
    let mut g = Group::start(Spec::new(2));
    // A wait for a step not sealed yet ends when its frame arrives.
    let wait = g.frame_call(1, 0, 500);
    assert_eq!(g.reply(1, wait), None);
    let f0 = g.end_step();
    assert_eq!(frame_of(g.reply(1, wait)), f0);
    // Reading it again gives the same frame.
    let again = g.frame_call(1, 0, 500);
    assert_eq!(frame_of(g.reply(1, again)), f0);
    // A wait the leader does not answer in time names both positions.
    let late = g.frame_call(1, 5, 300);
    g.advance(299);
    assert_eq!(g.reply(1, late), None);
    g.advance(1);
    assert_eq!(
        g.reply(1, late).map(error),
        Some(AgentError::LeaderBehind {
            rank: 1,
            epoch: Epoch(1),
            wanted: Step(5),
            sealed: Some(Step(0))
        })
    );
    match g.nodes[1].core.counters().role {
        RoleCounters::Follower {
            wait_timeouts,
            engine_frames_read,
        } => assert_eq!((wait_timeouts, engine_frames_read), (1, 3)),
        RoleCounters::Leader { .. } => unreachable!(),
    }
}

#[test]
fn a_read_that_may_not_wait_is_answered_at_once() {
    let mut g = Group::start(Spec::new(2));
    let f0 = g.end_step();
    // Deadline 0 and the frame here: the frame.
    let here = g.frame_call(1, 0, 0);
    assert_eq!(frame_of(g.reply(1, here)), f0);
    // Deadline 0 and the step not sealed: `LeaderBehind` with both positions, with the clock
    // not moved and no timer fired.
    let ahead = g.frame_call(1, 1, 0);
    assert_eq!(
        g.reply(1, ahead).map(error),
        Some(AgentError::LeaderBehind {
            rank: 1,
            epoch: Epoch(1),
            wanted: Step(1),
            sealed: Some(Step(0))
        })
    );
    // A wait with a deadline still waits for its frame.
    let wait = g.frame_call(1, 1, 50);
    assert_eq!(g.reply(1, wait), None);
    let f1 = g.end_step();
    assert_eq!(frame_of(g.reply(1, wait)), f1);
}

#[test]
fn copies_are_held_until_the_engine_acknowledged_the_step_that_started_them() {
    let mut g = Group::start(Spec::new(2));
    let task = started(g.store(7, &[1]));
    let f0 = g.end_step();
    assert_eq!(f0.stores[0].task, task);
    let copies = |g: &Group| {
        g.nodes[1]
            .store
            .commands
            .iter()
            .filter(|c| matches!(c, StoreCommand::CopyStores { .. }))
            .count()
    };
    assert_eq!(copies(&g), 0, "the engine has not applied step 0");
    let read = g.frame_call(1, 0, 100);
    frame_of(g.reply(1, read));
    assert_eq!(copies(&g), 0, "read, not acknowledged");
    assert_eq!(g.ack(1, 0), EngineReply::Acked);
    assert_eq!(copies(&g), 1, "copied once acknowledged");
    // The leader copied at once: its engine wrote the pages before asking.
    assert!(g.nodes[0]
        .store
        .commands
        .iter()
        .any(|c| matches!(c, StoreCommand::CopyStores { .. })));
}

/// Found by the simulator (`tandem-sim`): a frame delivered twice was ignored by the protocol
/// state machine but its copies were held, and carried out, a second time; the second copy of
/// a store read pages the engine had already reused after the store's outcome.
#[test]
fn a_frame_delivered_twice_starts_its_copies_and_tier_ops_once() {
    let mut g = Group::start(Spec::new(2));
    started(g.store(7, &[1]));
    let f0 = g.end_step();
    // The same frame arrives again (a retransmission) before the engine reads it.
    g.nodes[1]
        .core
        .handle_leader_message(Message::Frame(f0.clone()), g.now_ms);
    g.drive();
    let read = g.frame_call(1, 0, 100);
    assert_eq!(frame_of(g.reply(1, read)), f0);
    assert_eq!(g.ack(1, 0), EngineReply::Acked);
    let copied: usize = g.nodes[1]
        .store
        .commands
        .iter()
        .map(|c| match c {
            StoreCommand::CopyStores { tasks, .. } => tasks.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(copied, 1, "one store, copied once");
}

#[test]
fn a_held_store_of_an_evicted_block_copies_nothing_of_it() {
    let mut spec = Spec::new(2);
    spec.host = 1;
    spec.disk = 0;
    let mut g = Group::start(spec);
    // Block 1 is stored and finished on every rank but the follower has not applied anything.
    for n in &mut g.nodes {
        n.store.hold_reports = true;
    }
    let a = started(g.store(1, &[1]));
    g.end_step();
    // The follower reports its shard failed: the store fails and block 1 leaves the group.
    g.nodes[1]
        .core
        .handle_shard_done(a, Err("disk full".into()), 0);
    g.nodes[0].store.hold_reports = false;
    g.drive();
    let f1 = g.end_step();
    assert_eq!(
        f1.tier_ops,
        vec![tandem_proto::TierOp::Evict(BlockHash::from(1u64))]
    );
    // The follower's engine applies both frames: its held copy of block 1 is emptied.
    for s in 0..2 {
        let read = g.frame_call(1, s, 100);
        frame_of(g.reply(1, read));
        g.ack(1, s);
    }
    let stored: Vec<BlockHash> = g.nodes[1]
        .store
        .commands
        .iter()
        .filter_map(|c| match c {
            StoreCommand::CopyStores { tasks, .. } => Some(tasks.clone()),
            _ => None,
        })
        .flatten()
        .flat_map(|t| t.block_hashes)
        .collect();
    assert!(
        stored.is_empty(),
        "nothing of block 1 is written: {stored:?}"
    );
}

#[test]
fn frame_zero_leaves_out_the_redeliveries_each_engine_acknowledged() {
    let outcome = |seq| TaskOutcome {
        task: TaskId { epoch: 1, seq },
        kind: TaskKind::Store,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    };
    let mut spec = Spec::new(2);
    spec.epoch = Epoch(2);
    let rec = tandem_proto::reconcile(&[outcome(1), outcome(2)], &[]);
    let acked: BTreeSet<TaskId> = [TaskId { epoch: 1, seq: 1 }].into();
    let start = EpochStart {
        reconciliation: Some(rec),
        aborted: Vec::new(),
        acknowledged: acked,
    };
    let mut g = Group::new(spec, start);
    g.join_all();
    let f0 = g.end_step();
    let left: Vec<u64> = f0
        .reconciliation
        .as_ref()
        .unwrap()
        .redelivered
        .iter()
        .map(|o| o.task.seq)
        .collect();
    assert_eq!(left, vec![2], "the leader's engine acknowledged task 1.1");
    let read = g.frame_call(1, 0, 100);
    let f = frame_of(g.reply(1, read));
    let left: Vec<u64> = f
        .reconciliation
        .unwrap()
        .redelivered
        .iter()
        .map(|o| o.task.seq)
        .collect();
    assert_eq!(left, vec![2]);
    // Later frames pass unfiltered; only step 0 carries a reconciliation.
    let f1 = g.end_step();
    assert!(f1.reconciliation.is_none());
}

#[test]
fn a_follower_heartbeats_every_interval_once_admitted() {
    let spec = Spec::new(2);
    let mut g = Group::new(spec, EpochStart::default());
    assert_eq!(
        g.nodes[1].core.poll_timeout(),
        None,
        "nothing before admission"
    );
    g.join_all();
    assert_eq!(g.nodes[1].core.poll_timeout(), Some(100));
    let beats = |g: &mut Group| {
        let mut n = 0;
        g.nodes[1].core.handle_timeout(g.now_ms);
        while let Some(o) = g.nodes[1].core.poll_output() {
            if matches!(
                o,
                Output::Send {
                    to: Peer::Leader,
                    msg: Message::Heartbeat(_)
                }
            ) {
                n += 1;
            }
        }
        n
    };
    g.now_ms = 99;
    assert_eq!(beats(&mut g), 0);
    g.now_ms = 100;
    assert_eq!(beats(&mut g), 1);
    assert_eq!(g.nodes[1].core.poll_timeout(), Some(200));
}

#[test]
fn a_refused_frame_fails_the_epoch_and_a_stale_one_is_only_counted() {
    let mut g = Group::start(Spec::new(2));
    let stale = Frame::empty(Epoch(0), Step(0));
    g.nodes[1]
        .core
        .handle_leader_message(Message::Frame(stale), 0);
    g.drive();
    assert_eq!(g.failed(1), None);
    assert_eq!(g.nodes[1].core.counters().stale_epoch_rejected, 1);
    let gap = Frame::empty(Epoch(1), Step(3));
    g.nodes[1]
        .core
        .handle_leader_message(Message::Frame(gap), 0);
    g.drive();
    assert_eq!(
        g.failed(1).as_deref(),
        Some("frame from the leader refused: frame gap: expected the frame of step 0, got step 3")
    );
}

#[test]
fn a_lost_leader_fails_the_epoch_and_answers_the_waits() {
    let mut g = Group::start(Spec::new(2));
    let wait = g.frame_call(1, 0, 10_000);
    g.nodes[1].core.handle_leader_lost("eof", 0);
    g.drive();
    let want = "connection to the leader lost: eof";
    assert_eq!(g.failed(1).as_deref(), Some(want));
    assert_eq!(
        g.reply(1, wait).map(error),
        Some(AgentError::NotReady {
            reason: format!("epoch 1 failed: {want}")
        })
    );
    g.nodes[1].core.handle_leader_lost("again", 0);
    g.drive();
    let failures = g.nodes[1]
        .events
        .iter()
        .filter(|e| matches!(e, Event::Failed { .. }))
        .count();
    assert_eq!(failures, 1, "an epoch fails once");
}

#[test]
fn an_ack_of_a_step_not_received_is_not_ready_and_sends_nothing() {
    let mut g = Group::start(Spec::new(2));
    match error(g.ack(1, 4)) {
        AgentError::NotReady { reason } => assert_eq!(
            reason,
            "cannot acknowledge step 4: the follower has received no step yet"
        ),
        other => panic!("{other:?}"),
    }
    assert!(g.nodes[1]
        .events
        .iter()
        .any(|e| matches!(e, Event::EngineAcked { step: Step(4), .. })));
}

/// Redis stopped: the follower's own heartbeats fail while the leader keeps sealing frames.
/// Before, only the leader's appends made a rank not ready, so a follower said ready with the
/// log unreachable (docs/RELIABILITY.md, "Redis unreachable 10 s"). Every rank now follows
/// its epoch loop's view of the log, and a stream that is gone fails the epoch.
#[test]
fn a_rank_whose_log_does_not_answer_is_not_ready_and_a_lost_stream_fails_the_epoch() {
    let mut g = Group::start(Spec::new(2));
    let why = "redis heartbeat timed out after 1000 ms";
    for r in 0..2u32 {
        assert!(g.ready(r), "rank {r} ready before");
        let now = g.now_ms;
        let core = &mut g.nodes[r as usize].core;
        core.handle_log_health(LogHealth::Unavailable(why.into()), now);
        let s = core.status();
        assert!(!s.ready, "rank {r}");
        assert_eq!(
            s.reason.as_deref(),
            Some(format!("completion log unavailable: {why}").as_str()),
            "rank {r}"
        );
        assert_eq!(core.counters().not_ready, Some(NotReady::CompletionLog));
        core.handle_log_health(LogHealth::Up, now);
        assert!(core.status().ready, "rank {r} ready again");
        assert!(core.failure().is_none(), "an outage alone fails nothing");
    }
    // A store in flight (started, no outcome yet) when the stream goes.
    let started = g.store(1, &[7]);
    let task = support::started(started);
    let now = g.now_ms;
    let gone = "the completion stream tandem:{g}:completions is gone";
    // A follower says so; the leader ends the epoch.
    g.nodes[1]
        .core
        .handle_log_health(LogHealth::StreamLost(gone.into()), now);
    g.drive();
    assert!(g.failed(1).is_none(), "a follower does not end the epoch");
    let s = g.nodes[1].core.status();
    assert!(!s.ready);
    assert!(s.reason.unwrap_or_default().contains("is lost"));
    g.nodes[0]
        .core
        .handle_log_health(LogHealth::StreamLost(gone.into()), now);
    g.drive();
    let failed = g.failed(0).expect("the leader's epoch failed");
    assert!(failed.contains("completion stream is lost"), "{failed}");
    let history = g.nodes[0].events.iter().find_map(|e| match e {
        Event::HistoryLost { in_flight, .. } => Some(in_flight.clone()),
        _ => None,
    });
    let in_flight = history.expect("the leader handed on what it knew");
    assert!(
        in_flight.iter().any(|t| t.task == task),
        "the store in flight is handed on: {in_flight:?}"
    );
}

/// A follower's engine left with frames it had not acknowledged, enough to fill the leader's
/// window, and a new engine joined: it is welcomed at the first frame its rank has not
/// acknowledged, and reading on from there opens the window. Welcomed at the step after the
/// last frame received (the next one the leader would seal), it waited for a frame the leader
/// could never seal while the window waited for it: the 40 s stall of `tandem bench datapath`
/// (docs/BENCHMARKS.md, "Found on the way").
#[test]
fn a_new_engine_is_welcomed_at_the_first_frame_its_rank_has_not_acknowledged() {
    let spec = Spec::new(2);
    let window = spec.window;
    let mut g = Group::start(spec);
    let hello = tandem_proto::engine::EngineRequest::hello(1);
    assert!(matches!(
        g.call(1, hello.clone()),
        EngineReply::Welcome { .. }
    ));
    g.step();
    g.step();
    // The follower's engine applies nothing more; the leader seals until its window is full.
    for _ in 0..window {
        let f = g.end_step();
        assert_eq!(g.ack(0, f.step.0), EngineReply::Acked);
    }
    let refused = g.end_step_call(0);
    assert!(matches!(
        g.reply(0, refused).map(error),
        Some(AgentError::WindowFull { .. })
    ));
    // That engine leaves with no task in flight (nothing fails), and a new one says hello.
    let now = g.now_ms;
    g.nodes[1]
        .core
        .handle_engine_disconnect(true, "engine closed the connection", now);
    assert_eq!(g.failed(1), None);
    let next = match g.call(1, hello) {
        EngineReply::Welcome { next_step, .. } => next_step,
        other => panic!("hello answered {other:?}"),
    };
    assert_eq!(next, Step(2), "the first frame rank 1 has not acknowledged");
    // The new engine reads on from its welcome and acknowledges: the window opens.
    for s in next.0..next.0 + window {
        let read = g.frame_call(1, s, 100);
        assert_eq!(frame_of(g.reply(1, read)).step, Step(s));
        assert_eq!(g.ack(1, s), EngineReply::Acked);
    }
    assert_eq!(g.end_step().step, Step(2 + window));
}
