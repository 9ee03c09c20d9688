use super::*;
use tandem_proto::frame::TaskStart;
use tandem_proto::ids::{BlockHash, PageId, RequestId, TaskId, TaskKind};

fn started(epoch: u64, seq: u64) -> StartedTask {
    StartedTask {
        kind: TaskKind::Store,
        start: TaskStart {
            task: TaskId { epoch, seq },
            request: RequestId(seq),
            block_hashes: vec![BlockHash::from(seq)],
            page_ids: vec![PageId(0)],
            tiers: vec![],
        },
    }
}

fn view(epoch: u64, step: u64, digest: u64) -> FrameView {
    FrameView {
        epoch,
        step,
        digest,
        starts: vec![],
        outcomes: vec![],
        lookups: vec![],
    }
}

#[test]
fn the_session_counters_become_the_replay_definitions() {
    let mut l = Ledger::new();
    l.observe(&view(1, 0, 10));
    l.observe(&view(1, 1, 11));
    let tally = TaskTally {
        outcomes: 5,
        duplicates: 1,
        redelivered_unacked: 2,
        unseen_outcomes: 3,
        lost: 4,
        not_started: 6,
        repeated_starts: 0,
    };
    let report = l.finish(tally, &[]);
    assert_eq!(
        report.tally,
        LedgerTally {
            outcomes: 5,
            duplicate_completions: 1,
            redelivered_unacked: 2,
            unseen_outcomes: 3,
            lost_completions: 4,
            reread_mismatches: 0,
        }
    );
    assert_eq!(report.frames.len(), 2);
}

#[test]
fn lost_tasks_are_described_with_when() {
    let mut l = Ledger::new();
    l.lost(&[started(1, 1)], "by the first frame of epoch 2");
    let report = l.finish(TaskTally::default(), &[started(2, 0)]);
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
fn reread_mismatches_are_counted() {
    let mut l = Ledger::new();
    l.observe(&view(3, 0, 3000));
    assert!(l.check_reread(3, 0, 3000));
    assert!(!l.check_reread(3, 0, 1));
    l.reread(true);
    l.reread(false);
    assert_eq!(
        l.finish(TaskTally::default(), &[]).tally.reread_mismatches,
        2
    );
}
