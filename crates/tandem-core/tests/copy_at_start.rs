//! The leader copies its own shard when a task starts (docs/DESIGN.md invariants 3 and 5): a
//! store or load started with page ids goes to the leader's store at once, behind the tier
//! operations decided before it; its outcome is appended with or after its start, never before
//! (whatever the log answers); and a task whose every shard is done before its start's append
//! is answered finishes in the frame that starts it (one more append, waited for within
//! `append_wait_ms`). Followers still copy only from the frame, once their engine acknowledged
//! it.

mod support;

use support::{started, Group, Spec};
use tandem_core::{EpochStart, StoreCommand};
use tandem_proto::engine::EngineReply;
use tandem_proto::{BlockHash, Frame, TaskId, TierOp};

/// A durable group of `world` with `most` appends in flight and `wait_ms` of append wait.
fn group(world: u32, most: u32, wait_ms: u64) -> Group {
    let mut spec = Spec::new(world);
    spec.durable = true;
    spec.max_appends_in_flight = most;
    spec.append_wait_ms = wait_ms;
    let mut g = Group::new(spec, EpochStart::default());
    for r in 0..world {
        g.publish(r, &[]);
    }
    g.join_all();
    // A group of one rank reads its manifest at its first timer.
    g.advance(0);
    g
}

/// The tasks rank `r`'s store was told to copy, in order.
fn copies(g: &Group, r: usize) -> Vec<TaskId> {
    g.nodes[r]
        .store
        .commands
        .iter()
        .flat_map(|c| match c {
            StoreCommand::CopyStores { tasks, .. } | StoreCommand::CopyLoads { tasks, .. } => {
                tasks.iter().map(|t| t.task).collect()
            }
            _ => Vec::new(),
        })
        .collect()
}

fn starts(f: &Frame) -> Vec<TaskId> {
    f.started().map(|(_, s)| s.task).collect()
}

fn outcomes(f: &Frame) -> Vec<TaskId> {
    f.finished.iter().map(|o| o.task).collect()
}

/// Let rank `r`'s store report the copies it carried out.
fn report(g: &mut Group, r: usize) {
    while let Some((task, result)) = g.nodes[r].store.done.pop_front() {
        let now = g.now_ms;
        g.nodes[r].core.handle_shard_done(task, result, now);
    }
    g.drive();
}

#[test]
fn a_leader_alone_copies_when_a_task_starts_and_reveals_it_finished_in_its_start_frame() {
    let mut g = group(1, 8, 5);
    let a = started(g.store(10, &[1]));
    assert_eq!(
        copies(&g, 0),
        vec![a],
        "copied at the request, before any seal"
    );
    let f = g.step();
    assert_eq!((starts(&f), outcomes(&f)), (vec![a], vec![a]));
    assert_eq!(copies(&g, 0), vec![a], "the seal copies nothing again");
    assert!(matches!(g.lookup(11, &[1]), EngineReply::Lookup(l) if l.matched_blocks == 1));
    let b = started(g.load(11, &[1]));
    let f = g.step();
    assert_eq!((starts(&f), outcomes(&f)), (vec![b], vec![b]));
    assert_eq!(copies(&g, 0), vec![a, b]);
    // One append per step, each holding a start and its outcome.
    let held: Vec<(usize, usize)> = g
        .log
        .appends
        .iter()
        .map(|a| (a.started.len(), a.finished.len()))
        .collect();
    assert_eq!(held, vec![(1, 1), (1, 1)]);
}

#[test]
fn an_outcome_known_while_its_start_is_appended_rides_one_more_append() {
    let mut g = group(1, 8, 5);
    g.hold_appends = true;
    g.nodes[0].store.hold_reports = true;
    let a = started(g.store(10, &[1]));
    let call = g.end_step_call(1_000);
    assert_eq!(g.pending_appends.len(), 1, "the start goes out");
    report(&mut g, 0);
    assert_eq!(
        g.pending_appends.len(),
        1,
        "the outcome waits for its start's append"
    );
    g.answer_append();
    assert_eq!(g.reply(0, call), None, "the end_step waits for the ride");
    let ride = g.pending_appends.front().expect("one more append");
    assert!(ride.started.is_empty());
    assert_eq!(
        ride.finished.iter().map(|o| o.task).collect::<Vec<_>>(),
        vec![a]
    );
    g.answer_append();
    match g.reply(0, call) {
        Some(EngineReply::Frame(f)) => {
            assert_eq!((starts(&f), outcomes(&f)), (vec![a], vec![a]));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_ride_not_answered_within_the_append_wait_is_revealed_later() {
    let mut g = group(1, 8, 5);
    g.hold_appends = true;
    g.nodes[0].store.hold_reports = true;
    let a = started(g.store(10, &[1]));
    let call = g.end_step_call(1_000);
    report(&mut g, 0);
    g.answer_append();
    assert_eq!(g.reply(0, call), None);
    g.advance(10);
    match g.reply(0, call) {
        Some(EngineReply::Frame(f)) => {
            assert_eq!((starts(&f), outcomes(&f)), (vec![a], vec![]));
        }
        other => panic!("{other:?}"),
    }
    g.answer_append();
    let f = g.end_step();
    assert_eq!((starts(&f), outcomes(&f)), (vec![], vec![a]));
}

#[test]
fn an_outcome_never_reaches_the_log_before_its_start_even_when_the_start_is_refused() {
    // No wait for its own append: the end_step seals with the start still out.
    let mut g = group(1, 8, 0);
    g.hold_appends = true;
    g.nodes[0].store.hold_reports = true;
    let a = started(g.store(10, &[1]));
    let f = g.end_step();
    assert!(starts(&f).is_empty(), "not durable yet");
    report(&mut g, 0);
    let f = g.end_step();
    assert!(starts(&f).is_empty() && outcomes(&f).is_empty());
    assert_eq!(
        g.pending_appends.len(),
        1,
        "nothing more goes out while the start is out"
    );
    g.refuse_append("redis timed out");
    g.end_step();
    let again = g.pending_appends.front().expect("appended again");
    assert_eq!(
        again
            .started
            .iter()
            .map(|s| s.start.task)
            .collect::<Vec<_>>(),
        vec![a]
    );
    assert_eq!(
        again.finished.iter().map(|o| o.task).collect::<Vec<_>>(),
        vec![a],
        "start and outcome together"
    );
    g.answer_append();
    let f = g.end_step();
    assert_eq!((starts(&f), outcomes(&f)), (vec![a], vec![a]));
}

#[test]
fn the_early_copy_follows_the_tier_operations_decided_before_it_and_the_seal_repeats_none() {
    let mut spec = Spec::new(1);
    spec.host = 1;
    spec.disk = 1;
    let mut g = Group::start(spec);
    started(g.store(10, &[1]));
    g.step();
    started(g.store(11, &[2]));
    g.step();
    let before = g.nodes[0].store.commands.len();
    // Both tiers are full: block 1, the oldest, is evicted for block 3.
    let c = started(g.store(12, &[3]));
    let f = g.step();
    assert_eq!(f.tier_ops, vec![TierOp::Evict(BlockHash::from(1))]);
    let after: Vec<&StoreCommand> = g.nodes[0].store.commands[before..].iter().collect();
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(
        matches!(after[0], StoreCommand::ApplyTierOps { ops, .. } if *ops == f.tier_ops),
        "{after:?}"
    );
    assert!(
        matches!(after[1], StoreCommand::CopyStores { tasks, .. } if tasks[0].task == c),
        "{after:?}"
    );
    assert!(!g.nodes[0].store.blocks.contains_key(&BlockHash::from(1)));
}

#[test]
fn with_followers_the_leader_copies_at_the_seal_and_followers_from_the_frame() {
    let mut g = group(2, 8, 5);
    let a = started(g.store(10, &[1]));
    assert!(
        copies(&g, 0).is_empty(),
        "with followers the leader copies at the seal"
    );
    assert!(copies(&g, 1).is_empty());
    let f = g.step();
    assert_eq!((starts(&f), outcomes(&f)), (vec![a], vec![]));
    assert_eq!((copies(&g, 0), copies(&g, 1)), (vec![a], vec![a]));
    let f = g.step();
    assert_eq!(outcomes(&f), vec![a]);
}
