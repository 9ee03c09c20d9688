use super::*;
use tandem_proto::{
    OutcomeResult, PageId, Reconciliation, RequestId, Step, TaskOutcome, TaskStart,
};

fn h(n: u128) -> BlockHash {
    BlockHash(n)
}

fn store(seq: u64, blocks: &[u128], tier: Tier) -> TaskStart {
    TaskStart {
        task: TaskId { epoch: 1, seq },
        request: RequestId(seq),
        block_hashes: blocks.iter().map(|b| h(*b)).collect(),
        page_ids: (0..blocks.len() as u32).map(PageId).collect(),
        tiers: vec![tier; blocks.len()],
    }
}

fn outcome(seq: u64, result: OutcomeResult) -> TaskOutcome {
    TaskOutcome {
        task: TaskId { epoch: 1, seq },
        kind: TaskKind::Store,
        request: RequestId(seq),
        result,
    }
}

fn frame(step: u64) -> Frame {
    Frame::empty(Epoch(1), Step(step))
}

fn started() -> CacheEventDeriver {
    let mut d = CacheEventDeriver::new();
    assert_eq!(d.begin_epoch(Epoch(1), []), vec![CacheEvent::AllCleared]);
    d
}

#[test]
fn a_store_is_announced_only_by_the_frame_that_reveals_its_ok_outcome() {
    let mut d = started();
    let mut f0 = frame(0);
    f0.stores.push(store(0, &[1, 2], Tier::Host));
    assert!(
        d.apply_frame(&f0).is_empty(),
        "a started store is not held yet"
    );
    assert!(d.held().is_empty());
    let mut f1 = frame(1);
    f1.finished.push(outcome(0, OutcomeResult::Ok));
    assert_eq!(
        d.apply_frame(&f1),
        vec![CacheEvent::Stored {
            hashes: vec![h(1), h(2)],
            tier: Tier::Host
        }]
    );
    assert_eq!(d.held(), vec![(h(1), Tier::Host), (h(2), Tier::Host)]);
}

#[test]
fn failed_and_aborted_stores_announce_nothing() {
    let mut d = started();
    let mut f0 = frame(0);
    f0.stores.push(store(0, &[1], Tier::Host));
    f0.stores.push(store(1, &[2], Tier::Host));
    d.apply_frame(&f0);
    let mut f1 = frame(1);
    // The failed store's block is evicted by the leader (abort), then its outcome revealed.
    f1.tier_ops.push(TierOp::Evict(h(1)));
    f1.finished
        .push(outcome(0, OutcomeResult::failed("rank 1: disk".into())));
    f1.finished.push(outcome(1, OutcomeResult::Aborted));
    assert!(d.apply_frame(&f1).is_empty());
    assert!(d.held().is_empty());
}

#[test]
fn a_block_evicted_before_its_outcome_was_revealed_is_never_announced() {
    let mut d = started();
    let mut f0 = frame(0);
    f0.stores.push(store(0, &[1, 2], Tier::Host));
    d.apply_frame(&f0);
    let mut f1 = frame(1);
    f1.tier_ops.push(TierOp::Evict(h(1)));
    assert!(d.apply_frame(&f1).is_empty());
    let mut f2 = frame(2);
    f2.finished.push(outcome(0, OutcomeResult::Ok));
    assert_eq!(
        d.apply_frame(&f2),
        vec![CacheEvent::Stored {
            hashes: vec![h(2)],
            tier: Tier::Host
        }]
    );
}

#[test]
fn evictions_remove_and_moves_name_both_tiers() {
    let mut d = started();
    let mut f0 = frame(0);
    f0.stores.push(store(0, &[1, 2, 3], Tier::Host));
    d.apply_frame(&f0);
    let mut f1 = frame(1);
    f1.finished.push(outcome(0, OutcomeResult::Ok));
    d.apply_frame(&f1);
    let mut f2 = frame(2);
    f2.tier_ops = vec![
        TierOp::Demote(h(1)),
        TierOp::Evict(h(2)),
        TierOp::Evict(h(3)),
        TierOp::Promote(h(1)),
        TierOp::Evict(h(99)),
    ];
    assert_eq!(
        d.apply_frame(&f2),
        vec![
            CacheEvent::Removed {
                hashes: vec![h(1)],
                tier: Tier::Host
            },
            CacheEvent::Stored {
                hashes: vec![h(1)],
                tier: Tier::Disk
            },
            CacheEvent::Removed {
                hashes: vec![h(2), h(3)],
                tier: Tier::Host
            },
            CacheEvent::Removed {
                hashes: vec![h(1)],
                tier: Tier::Disk
            },
            CacheEvent::Stored {
                hashes: vec![h(1)],
                tier: Tier::Host
            },
        ]
    );
    assert_eq!(d.held(), vec![(h(1), Tier::Host)]);
}

#[test]
fn a_move_before_the_reveal_announces_the_block_in_its_new_tier() {
    let mut d = started();
    let mut f0 = frame(0);
    f0.stores.push(store(0, &[1], Tier::Host));
    f0.tier_ops.push(TierOp::Demote(h(1)));
    d.apply_frame(&f0);
    let mut f1 = frame(1);
    f1.finished.push(outcome(0, OutcomeResult::Ok));
    assert_eq!(
        d.apply_frame(&f1),
        vec![CacheEvent::Stored {
            hashes: vec![h(1)],
            tier: Tier::Disk
        }]
    );
}

#[test]
fn a_new_epoch_clears_then_restates_the_rebuilt_index_and_ignores_old_outcomes() {
    let mut d = started();
    let mut f0 = frame(0);
    f0.stores.push(store(0, &[1], Tier::Host));
    d.apply_frame(&f0);
    let events = d.begin_epoch(
        Epoch(2),
        [(h(5), Tier::Host), (h(6), Tier::Disk), (h(7), Tier::Host)],
    );
    assert_eq!(
        events,
        vec![
            CacheEvent::AllCleared,
            CacheEvent::Stored {
                hashes: vec![h(5), h(7)],
                tier: Tier::Host
            },
            CacheEvent::Stored {
                hashes: vec![h(6)],
                tier: Tier::Disk
            },
        ]
    );
    // Frame 0 of epoch 2 redelivers the old store's outcome: it was not in the rebuild.
    let mut g0 = Frame::empty(Epoch(2), Step(0));
    g0.reconciliation = Some(Reconciliation {
        redelivered: vec![outcome(0, OutcomeResult::Ok)],
        aborted: vec![],
    });
    assert!(d.apply_frame(&g0).is_empty());
    // A late frame of epoch 1 changes nothing.
    let mut late = frame(1);
    late.finished.push(outcome(0, OutcomeResult::Ok));
    assert!(d.apply_frame(&late).is_empty());
    assert_eq!(d.epoch(), Some(Epoch(2)));
    assert_eq!(d.held().len(), 3);
}

#[test]
fn frames_before_any_epoch_and_loads_produce_nothing() {
    let mut d = CacheEventDeriver::new();
    let mut f0 = frame(0);
    f0.stores.push(store(0, &[1], Tier::Host));
    assert!(d.apply_frame(&f0).is_empty());
    let mut d = started();
    let mut f1 = frame(1);
    f1.finished.push(TaskOutcome {
        kind: TaskKind::Load,
        ..outcome(0, OutcomeResult::Ok)
    });
    assert!(d.apply_frame(&f1).is_empty());
}

#[test]
fn a_large_rebuilt_index_is_restated_in_bounded_events() {
    let mut d = CacheEventDeriver::new();
    let n = MAX_HASHES_PER_EVENT as u128 * 2 + 1;
    let events = d.begin_epoch(Epoch(3), (0..n).map(|i| (h(i), Tier::Disk)));
    assert_eq!(events.len(), 4);
    assert_eq!(events[0], CacheEvent::AllCleared);
    let sizes: Vec<usize> = events[1..]
        .iter()
        .map(|e| match e {
            CacheEvent::Stored { hashes, tier } => {
                assert_eq!(*tier, Tier::Disk);
                hashes.len()
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sizes, vec![MAX_HASHES_PER_EVENT, MAX_HASHES_PER_EVENT, 1]);
    assert_eq!(d.held().len(), n as usize);
}

#[test]
fn a_block_evicted_and_started_again_in_one_frame_is_announced_when_its_new_store_finishes() {
    // The leader evicts block 1 for a place, then starts a store of block 1 again in the same
    // step (the index no longer holds it). The frame carries both; the eviction is announced
    // now, the new store when its outcome is revealed: a router ends holding block 1, as the
    // index does (this was a removal with no store after it: test_events.py saw the view
    // lose blocks the index held).
    let mut d = started();
    let mut f0 = frame(0);
    f0.stores.push(store(0, &[1, 2], Tier::Host));
    f0.finished.push(outcome(0, OutcomeResult::Ok));
    d.apply_frame(&f0);
    let mut f1 = frame(1);
    f1.tier_ops.push(TierOp::Evict(h(1)));
    f1.stores.push(store(1, &[1], Tier::Host));
    assert_eq!(
        d.apply_frame(&f1),
        vec![CacheEvent::Removed {
            hashes: vec![h(1)],
            tier: Tier::Host
        }]
    );
    assert_eq!(d.held(), vec![(h(2), Tier::Host)]);
    let mut f2 = frame(2);
    f2.finished.push(outcome(1, OutcomeResult::Ok));
    assert_eq!(
        d.apply_frame(&f2),
        vec![CacheEvent::Stored {
            hashes: vec![h(1)],
            tier: Tier::Host
        }]
    );
    assert_eq!(d.held(), vec![(h(1), Tier::Host), (h(2), Tier::Host)]);
}

#[test]
fn a_block_evicted_started_and_finished_in_one_frame_ends_held() {
    // A group of one rank finishes a single-block store in the frame that starts it.
    let mut d = started();
    let mut f0 = frame(0);
    f0.stores.push(store(0, &[1], Tier::Host));
    f0.finished.push(outcome(0, OutcomeResult::Ok));
    d.apply_frame(&f0);
    let mut f1 = frame(1);
    f1.tier_ops.push(TierOp::Evict(h(1)));
    f1.stores.push(store(1, &[1], Tier::Disk));
    f1.finished.push(outcome(1, OutcomeResult::Ok));
    assert_eq!(
        d.apply_frame(&f1),
        vec![
            CacheEvent::Removed {
                hashes: vec![h(1)],
                tier: Tier::Host
            },
            CacheEvent::Stored {
                hashes: vec![h(1)],
                tier: Tier::Disk
            }
        ]
    );
    assert_eq!(d.held(), vec![(h(1), Tier::Disk)]);
}
