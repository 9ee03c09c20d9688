use super::*;
use tandem_proto::frame::OutcomeResult;
use tandem_proto::ids::{BlockHash, PageId, RequestId, TaskKind};

fn start(epoch: u64, seq: u64) -> StartView {
    StartView {
        task: TaskId { epoch, seq },
        kind: TaskKind::Store,
        request: RequestId(seq),
        hashes: vec![BlockHash::from(seq)],
        pages: vec![PageId(0)],
    }
}

fn outcome(epoch: u64, seq: u64, result: OutcomeResult) -> TaskOutcome {
    TaskOutcome {
        task: TaskId { epoch, seq },
        kind: TaskKind::Store,
        request: RequestId(seq),
        result,
    }
}

fn frame(epoch: u64, step: u64, starts: Vec<StartView>, outcomes: Vec<TaskOutcome>) -> FrameView {
    FrameView {
        epoch,
        step,
        digest: epoch * 1000 + step,
        starts,
        outcomes,
        lookups: vec![],
    }
}

#[test]
fn each_outcome_is_fresh_once_and_carries_its_start() {
    let mut l = Ledger::new();
    let o = l.observe(&frame(1, 0, vec![start(1, 0)], vec![]));
    assert!(o.fresh.is_empty() && o.lost.is_empty());
    assert_eq!(l.open_tasks(), 1);
    let o = l.observe(&frame(1, 1, vec![], vec![outcome(1, 0, OutcomeResult::Ok)]));
    assert_eq!(o.fresh.len(), 1);
    assert_eq!(o.fresh[0].1, Some(start(1, 0)));
    assert_eq!(l.open_tasks(), 0);
    let report = l.finish();
    assert_eq!(
        report.tally,
        LedgerTally {
            outcomes: 1,
            ..LedgerTally::default()
        }
    );
    assert_eq!(report.frames.len(), 2);
}

#[test]
fn repeats_after_an_ack_are_duplicates_and_before_it_are_redeliveries() {
    let mut l = Ledger::new();
    l.observe(&frame(1, 0, vec![start(1, 0), start(1, 1)], vec![]));
    l.observe(&frame(1, 1, vec![], vec![outcome(1, 0, OutcomeResult::Ok)]));
    l.acked(1, 1);
    l.observe(&frame(1, 2, vec![], vec![outcome(1, 1, OutcomeResult::Ok)]));
    // The ack of step 2 never succeeded; the group restarts and redelivers both outcomes.
    let o = l.observe(&frame(
        2,
        0,
        vec![],
        vec![
            outcome(1, 0, OutcomeResult::Ok),
            outcome(1, 1, OutcomeResult::Ok),
        ],
    ));
    assert!(o.fresh.is_empty(), "nothing is applied twice");
    let t = l.tally();
    assert_eq!((t.duplicate_completions, t.redelivered_unacked), (1, 1));
}

#[test]
fn tasks_not_settled_by_a_later_epoch_are_lost() {
    let mut l = Ledger::new();
    l.observe(&frame(
        1,
        0,
        vec![start(1, 0), start(1, 1), start(1, 2)],
        vec![],
    ));
    // Frame 0 of epoch 2 aborts task 0 only; task 1 was never settled; task 2 settled earlier.
    l.observe(&frame(1, 1, vec![], vec![outcome(1, 2, OutcomeResult::Ok)]));
    let o = l.observe(&frame(
        2,
        0,
        vec![start(2, 0)],
        vec![outcome(1, 0, OutcomeResult::Aborted)],
    ));
    assert_eq!(o.fresh.len(), 1);
    assert_eq!(o.lost, vec![start(1, 1)]);
    assert_eq!(l.tally().lost_completions, 1);
    // Task 2.0 stays open to the end: lost too.
    let report = l.finish();
    assert_eq!(report.tally.lost_completions, 2);
    assert_eq!(
        report.lost_samples,
        vec![
            "task 1.1 (store of request 1, 1 blocks): no outcome by the first frame of epoch 2"
                .to_string(),
            "task 2.0 (store of request 0, 1 blocks): no outcome by the end of the run".to_string(),
        ]
    );
}

#[test]
fn unseen_outcomes_and_reread_mismatches_are_counted() {
    let mut l = Ledger::new();
    let o = l.observe(&frame(
        3,
        0,
        vec![],
        vec![outcome(2, 7, OutcomeResult::Aborted)],
    ));
    assert_eq!(o.fresh[0].1, None);
    assert_eq!(l.tally().unseen_outcomes, 1);
    assert!(l.check_reread(3, 0, 3000));
    assert!(!l.check_reread(3, 0, 1));
    assert_eq!(l.tally().reread_mismatches, 1);
    l.reread(true);
    l.reread(false);
    assert_eq!(l.tally().reread_mismatches, 2);
}

#[test]
fn the_leader_notes_its_tasks_before_their_frame() {
    let mut l = Ledger::new();
    l.note_started(start(1, 0));
    l.note_started(start(1, 0));
    assert_eq!(l.open_tasks(), 1);
    // Its step was never sealed; the next epoch's reconciliation settles it.
    let o = l.observe(&frame(
        2,
        0,
        vec![],
        vec![outcome(1, 0, OutcomeResult::Aborted)],
    ));
    assert_eq!(o.fresh[0].1, Some(start(1, 0)));
    assert!(o.lost.is_empty());
}
