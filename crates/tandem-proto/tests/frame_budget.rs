//! Issue 19: a frame the leader cannot send is never sealed. Random schedules of lookups,
//! stores and loads (admitted through `Leader::check_request` against a small
//! `max_frame_bytes`), refusals, shard reports with long failure reasons, the tier operations a
//! task's end records, persistence that fails and comes back, and seals. Checked after every
//! action: every sealed frame encodes within the limit (so `encode_checked` sends it), the
//! bound is never below the frame the leader would seal now, and a request the bound refuses
//! records nothing. Plus the boundary, exactly: a lookup of `n` hashes is admitted if and only
//! if the frame holding it, with the step at its widest encoding, fits.

use proptest::prelude::*;
use tandem_proto::leader::budget::encoded_len;
use tandem_proto::*;

const LIMIT: u64 = 4096;

fn config(max_frame_bytes: u64) -> LeaderConfig {
    LeaderConfig {
        epoch: Epoch(3),
        world_size: 1,
        window_steps: 8,
        retention_steps: 64,
        heartbeat_timeout_ms: 1_000,
        start_ms: 0,
        max_frame_bytes,
    }
}

#[derive(Clone, Debug)]
enum Action {
    Lookup {
        hashes: usize,
        matched: usize,
    },
    Start {
        load: bool,
        blocks: usize,
        refuse: bool,
    },
    Finish {
        task: usize,
        reason: Option<usize>,
        ops: prop::sample::Index,
    },
    Persist {
        ok: bool,
    },
    Seal,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => (0usize..400, 0usize..4).prop_map(|(hashes, matched)| Action::Lookup { hashes, matched }),
        2 => (any::<bool>(), 0usize..120, prop::bool::weighted(0.1))
            .prop_map(|(load, blocks, refuse)| Action::Start { load, blocks, refuse }),
        3 => (0usize..64, prop::option::weighted(0.3, 0usize..2000), any::<prop::sample::Index>())
            .prop_map(|(task, reason, ops)| Action::Finish { task, reason, ops }),
        2 => prop::bool::weighted(0.7).prop_map(|ok| Action::Persist { ok }),
        2 => Just(Action::Seal),
    ]
}

fn hashes(n: usize, salt: u64) -> Vec<BlockHash> {
    (0..n as u64)
        .map(|i| BlockHash(u128::MAX - u128::from(salt.wrapping_mul(1_000_003)) - u128::from(i)))
        .collect()
}

/// The frame sealing the open step now would be at most the bound: seal a clone and measure.
fn check_bound(leader: &Leader) -> Result<(), TestCaseError> {
    let mut probe = leader.clone();
    let step = probe.open_step();
    let frame = probe
        .seal(step, 0)
        .map_err(|e| TestCaseError::fail(format!("seal of a probe: {e}")))?;
    let bytes = encoded_len(&Message::Frame(frame));
    prop_assert!(
        bytes <= leader.frame_bound(),
        "frame of {} bytes over the bound {}",
        bytes,
        leader.frame_bound()
    );
    prop_assert!(bytes <= LIMIT);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_sealed_frame_exceeds_the_limit(actions in prop::collection::vec(action(), 1..120)) {
        let mut leader = Leader::new(config(LIMIT), None).unwrap();
        let mut running: Vec<(TaskId, usize)> = Vec::new();
        let mut batch: Option<PersistBatch> = None;
        let mut salt = 0;
        for a in &actions {
            salt += 1;
            let before = leader.clone();
            match a {
                Action::Lookup { hashes: n, matched } => {
                    let matched = (*matched).min(*n);
                    let lookup = LookupResult {
                        request: RequestId(salt),
                        block_hashes: hashes(*n, salt),
                        matched_blocks: matched as u32,
                        pinned: matched > 0,
                    };
                    let tier_ops = 3 * matched as u64;
                    match leader.check_request(StepRequest::Lookup { lookup: &lookup, tier_ops }) {
                        Ok(()) => {
                            for h in lookup.block_hashes.iter().take(matched) {
                                leader.record_tier_op(TierOp::Promote(*h));
                            }
                            leader.record_lookup(lookup);
                        }
                        Err(LeaderError::FrameTooLarge { bytes, limit }) => {
                            prop_assert!(bytes > limit && limit == LIMIT);
                            let mut same = leader.clone();
                            same.check_request(StepRequest::Lookup { lookup: &lookup, tier_ops }).ok();
                            prop_assert_eq!(leader.frame_bound(), before.frame_bound());
                        }
                        Err(e) => prop_assert!(false, "{}", e),
                    }
                }
                Action::Start { load, blocks, refuse } => {
                    let (kind, tier_ops) = if *load { (TaskKind::Load, 0) } else { (TaskKind::Store, 3 * *blocks as u64) };
                    let hs = hashes(*blocks, salt);
                    let pages: Vec<PageId> = (0..*blocks as u32).map(|p| PageId(p * 977)).collect();
                    let request = StepRequest::Start { kind, request: RequestId(salt), block_hashes: &hs, page_ids: &pages, tier_ops };
                    match leader.check_request(request) {
                        Ok(()) if *refuse => {
                            for h in hs.iter().take(2) {
                                leader.record_tier_op(TierOp::Evict(*h));
                            }
                            leader.reject_task(kind, RequestId(salt), "r".repeat(5_000));
                        }
                        Ok(()) => {
                            for h in &hs {
                                if !*load && h.0 % 3 == 0 {
                                    leader.record_tier_op(TierOp::Demote(*h));
                                    leader.record_tier_op(TierOp::Evict(*h));
                                }
                            }
                            let t = if *load {
                                leader.start_load(RequestId(salt), hs, pages)
                            } else {
                                let tiers = vec![Tier::Disk; hs.len()];
                                leader.start_store(RequestId(salt), hs, pages, tiers)
                            };
                            running.push((t, *blocks));
                        }
                        Err(LeaderError::FrameTooLarge { bytes, limit }) => {
                            prop_assert!(bytes > limit);
                            prop_assert_eq!(leader.frame_bound(), before.frame_bound());
                        }
                        Err(e) => prop_assert!(false, "{}", e),
                    }
                }
                Action::Finish { task, reason, ops } => {
                    if running.is_empty() {
                        continue;
                    }
                    let (t, blocks) = running.remove(task % running.len());
                    let result = match reason {
                        Some(n) => Err("é".repeat(*n)),
                        None => Ok(()),
                    };
                    let report = ShardReport { epoch: Epoch(3), task: t, rank: Rank(0), result };
                    prop_assert!(matches!(leader.handle_report(&report), Ok(ReportOutcome::Finished(_))));
                    // The end of a task records at most one tier operation per block.
                    for i in 0..ops.index(blocks + 1) {
                        leader.record_tier_op(TierOp::Evict(BlockHash(u128::MAX - i as u128)));
                    }
                }
                Action::Persist { ok } => {
                    if let Some(b) = batch.take() {
                        if *ok {
                            leader.handle_persisted(b.id).unwrap();
                        } else {
                            leader.handle_persist_failed(b.id).unwrap();
                        }
                    } else {
                        batch = leader.poll_persist();
                    }
                }
                Action::Seal => {
                    let step = leader.open_step();
                    let frame = leader.seal(step, 0).map_err(|e| TestCaseError::fail(format!("seal {step}: {e}")))?;
                    let msg = Message::Frame(frame);
                    prop_assert!(encode_checked(&msg, LIMIT as usize).is_ok(), "{} bytes", encoded_len(&msg));
                    while leader.poll_transmit().is_some() {}
                }
            }
            prop_assert!(leader.frame_bound() <= LIMIT, "bound {} after {:?}", leader.frame_bound(), a);
            check_bound(&leader)?;
        }
    }
}

/// The boundary, exactly: the largest lookup whose frame (at the widest step) fits is admitted
/// and sealed within the limit; one more hash is refused naming the frame's size and the limit.
#[test]
fn the_largest_lookup_that_fits_is_admitted_and_one_more_hash_is_refused() {
    let widest = |n: usize| {
        let mut f = Frame::empty(Epoch(3), Step(u64::MAX));
        f.lookups.push(LookupResult {
            request: RequestId(7),
            block_hashes: hashes(n, 1),
            matched_blocks: 0,
            pinned: false,
        });
        encoded_len(&Message::Frame(f))
    };
    let n = (0..10_000)
        .take_while(|&n| widest(n) <= LIMIT)
        .last()
        .unwrap();
    let mut leader = Leader::new(config(LIMIT), None).unwrap();
    let lookup = |n: usize| LookupResult {
        request: RequestId(7),
        block_hashes: hashes(n, 1),
        matched_blocks: 0,
        pinned: false,
    };
    let over = lookup(n + 1);
    assert_eq!(
        leader.check_request(StepRequest::Lookup {
            lookup: &over,
            tier_ops: 0
        }),
        Err(LeaderError::FrameTooLarge {
            bytes: widest(n + 1),
            limit: LIMIT
        })
    );
    assert_eq!(leader.stats().frame_limit_refusals, 1);
    let fits = lookup(n);
    leader
        .check_request(StepRequest::Lookup {
            lookup: &fits,
            tier_ops: 0,
        })
        .unwrap();
    leader.record_lookup(fits);
    assert_eq!(leader.frame_bound(), widest(n));
    let frame = leader.seal(Step(0), 0).unwrap();
    assert_eq!(frame.lookups[0].block_hashes.len(), n);
    assert!(encode_checked(&Message::Frame(frame), LIMIT as usize).is_ok());
}

/// A reconciliation that alone cannot fit is refused when the leader is created, and one that
/// fits leaves the rest of the limit to requests.
#[test]
fn a_reconciliation_counts_against_the_limit() {
    let outcome = |seq| TaskOutcome {
        task: TaskId::new(Epoch(2), seq),
        kind: TaskKind::Store,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    };
    let big = Reconciliation {
        redelivered: (0..2_000).map(outcome).collect(),
        ..Reconciliation::default()
    };
    assert!(matches!(
        Leader::new(config(LIMIT), Some(big)),
        Err(LeaderError::FrameTooLarge { limit: LIMIT, .. })
    ));
    let small = Reconciliation {
        redelivered: (0..10).map(outcome).collect(),
        ..Reconciliation::default()
    };
    let leader = Leader::new(config(LIMIT), Some(small.clone())).unwrap();
    let mut f = Frame::empty(Epoch(3), Step(u64::MAX));
    f.reconciliation = Some(small);
    assert_eq!(leader.frame_bound(), encoded_len(&Message::Frame(f)));
}
