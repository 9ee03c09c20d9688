//! The leader's write-ahead pipeline (docs/DESIGN.md invariant 5): several appends in flight,
//! confirmed in the order they went out, a frame revealing only what confirmed appends hold,
//! a refusal in the middle failing every later append, frame 0 and a drain waiting, and how
//! long an `end_step` waits for its own append.

mod support;

use support::{started, Group, Spec};
use tandem_core::{CallRef, EpochStart, Role};
use tandem_proto::engine::EngineReply;
use tandem_proto::{InFlightTask, OutcomeResult, RequestId, Step, TaskId, TaskKind, TaskOutcome};

/// A durable group of 2 with `most` appends in flight and `wait_ms` of append wait.
fn group(most: u32, wait_ms: u64, start: EpochStart) -> Group {
    let mut spec = Spec::new(2);
    spec.durable = true;
    spec.max_appends_in_flight = most;
    spec.append_wait_ms = wait_ms;
    let mut g = Group::new(spec, start);
    g.publish(0, &[]);
    g.publish(1, &[]);
    g.join_all();
    g
}

fn out(g: &Group) -> usize {
    match g.nodes[0].core.role() {
        Role::Leader(l) => l.appends_in_flight(),
        Role::Follower(_) => unreachable!(),
    }
}

fn stores(f: &tandem_proto::Frame) -> Vec<TaskId> {
    f.stores.iter().map(|s| s.task).collect()
}

fn started_in(a: &tandem_core::Append) -> Vec<TaskId> {
    a.started.iter().map(|s| s.start.task).collect()
}

fn frame(g: &mut Group, call: CallRef) -> tandem_proto::Frame {
    match g.reply(0, call) {
        Some(EngineReply::Frame(f)) => *f,
        other => panic!("{other:?}"),
    }
}

#[test]
fn appends_pipeline_up_to_the_limit_and_frames_reveal_only_confirmed_ones_in_order() {
    let mut g = group(3, 0, EpochStart::default());
    g.hold_appends = true;
    let a = started(g.store(10, &[1]));
    assert!(g.step().stores.is_empty(), "not confirmed yet");
    let b = started(g.store(11, &[2]));
    assert!(g.step().stores.is_empty(), "not confirmed yet");
    assert_eq!(out(&g), 2);
    // Appends are stamped 2 steps ahead (3 in flight): step 2 waits for the first one.
    let c = started(g.store(12, &[3]));
    let call = g.end_step_call(1_000);
    assert_eq!(out(&g), 3);
    let stamps: Vec<Step> = g.pending_appends.iter().map(|a| a.step).collect();
    assert_eq!(stamps, vec![Step(2), Step(3), Step(4)]);
    assert_eq!(
        g.reply(0, call),
        None,
        "frame 2 waits for the append stamped 2"
    );
    g.answer_append();
    assert_eq!(
        stores(&frame(&mut g, call)),
        vec![a],
        "only the confirmed append"
    );
    let call = g.end_step_call(1_000);
    assert_eq!(
        g.reply(0, call),
        None,
        "frame 3 waits for the append stamped 3"
    );
    g.answer_append();
    assert_eq!(stores(&frame(&mut g, call)), vec![b]);
    g.answer_append();
    assert_eq!(stores(&g.end_step()), vec![c]);
}

#[test]
fn a_refusal_in_the_middle_queues_its_content_again_and_later_appends_stand_on_their_own() {
    let mut g = group(4, 0, EpochStart::default());
    g.hold_appends = true;
    let mut tasks = Vec::new();
    for i in 0..3 {
        tasks.push(started(g.store(10 + i, &[i + 1])));
        assert!(g.step().stores.is_empty());
    }
    assert_eq!(out(&g), 3);
    g.answer_append();
    g.refuse_append("redis timed out");
    let status = g.nodes[0].core.status();
    assert_eq!(
        status.reason.as_deref(),
        Some("completion log unavailable: redis timed out")
    );
    g.answer_append();
    assert_eq!(
        g.log.appends.len(),
        2,
        "the log took the first and the third"
    );
    let f = g.step();
    assert_eq!(
        stores(&f),
        vec![tasks[0], tasks[2]],
        "the refused start is not revealed; the later confirmed one is"
    );
    // That step appended the refused start again, stamped after every earlier append.
    let again = g.pending_appends.back().expect("appended again");
    assert_eq!(started_in(again), vec![tasks[1]]);
    assert_eq!(again.step, Step(6));
    g.answer_append();
    assert_eq!(stores(&g.step()), vec![tasks[1]]);
    assert!(g.nodes[0].core.status().ready);
}

#[test]
fn an_end_step_waits_for_its_own_append_until_the_append_wait_then_seals_without_it() {
    let mut g = group(2, 5, EpochStart::default());
    g.hold_appends = true;
    let a = started(g.store(10, &[1]));
    let call = g.end_step_call(1_000);
    assert_eq!(g.reply(0, call), None, "waits for its append");
    g.answer_append();
    match g.reply(0, call) {
        Some(EngineReply::Frame(f)) => assert_eq!(stores(&f), vec![a]),
        other => panic!("{other:?}"),
    }
    let b = started(g.store(11, &[2]));
    let call = g.end_step_call(1_000);
    g.advance(5);
    assert_eq!(
        g.reply(0, call),
        None,
        "5 ms on a whole-ms clock may be less than 5 ms"
    );
    g.advance(1);
    match g.reply(0, call) {
        Some(EngineReply::Frame(f)) => assert!(f.stores.is_empty(), "{f:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(out(&g), 1, "its append is still out");
    g.answer_append();
    let f = g.step();
    assert_eq!(
        stores(&f),
        vec![b],
        "revealed by the next frame once confirmed"
    );
}

#[test]
fn a_single_block_store_finishes_within_two_steps_when_the_log_answers_promptly() {
    let mut g = group(8, 1, EpochStart::default());
    let task = started(g.store(10, &[1]));
    let f0 = g.step();
    assert_eq!(stores(&f0), vec![task]);
    let f1 = g.step();
    let outcome = f1.finished.iter().find(|o| o.task == task);
    assert_eq!(
        outcome.map(|o| &o.result),
        Some(&OutcomeResult::Ok),
        "{f1:?}"
    );
}

#[test]
fn frame_zero_waits_for_its_aborts_even_when_end_steps_never_wait() {
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
    let mut g = group(4, 0, start);
    g.hold_appends = true;
    let call = g.end_step_call(1_000);
    g.advance(100);
    assert_eq!(g.reply(0, call), None, "frame 0 waits for its aborts");
    g.answer_append();
    match g.reply(0, call) {
        Some(EngineReply::Frame(f)) => {
            assert_eq!(f.reconciliation.unwrap().aborted, vec![aborted.clone()])
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(g.log.appends[0].finished, vec![aborted]);
}

#[test]
fn a_drain_waits_for_every_append_out_and_reveals_what_they_hold() {
    let mut g = group(4, 0, EpochStart::default());
    g.hold_appends = true;
    let a = started(g.store(10, &[1]));
    g.step();
    let b = started(g.store(11, &[2]));
    assert_eq!(out(&g), 1);
    let now = g.now_ms;
    g.nodes[0].core.handle_drain(CallRef(9_999), now);
    g.drive();
    assert_eq!(out(&g), 2, "the drain appended what was pending");
    assert!(g.reply(0, CallRef(9_999)).is_none(), "and waits for it");
    g.answer_append();
    assert!(
        g.reply(0, CallRef(9_999)).is_none(),
        "and for every append out"
    );
    g.answer_append();
    match g.reply(0, CallRef(9_999)) {
        Some(EngineReply::Frame(f)) => assert_eq!(stores(&f), vec![a, b]),
        other => panic!("{other:?}"),
    }
}
