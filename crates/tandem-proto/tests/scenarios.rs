//! Leader and follower driven together on a virtual clock: duplicate reports, stale epochs,
//! the acknowledgement window, bounded waits, idempotent reads, durable-only reveals and
//! reveal order, and the reconciliation that opens a new epoch.

use tandem_proto::*;

const W: u64 = 4;

fn config(epoch: u64, world_size: u32) -> LeaderConfig {
    LeaderConfig {
        epoch: Epoch(epoch),
        world_size,
        window_steps: W,
        retention_steps: 16,
        heartbeat_timeout_ms: 1_000,
        start_ms: 0,
        max_frame_bytes: 16 << 20,
    }
}

/// A leader and its followers, with the message delivery done by hand.
struct Group {
    leader: Leader,
    followers: Vec<Follower>,
}

impl Group {
    fn new(epoch: u64, world_size: u32, rec: Option<Reconciliation>) -> Group {
        let leader = Leader::new(config(epoch, world_size), rec).expect("valid config");
        let followers = (1..world_size)
            .map(|r| Follower::new(Epoch(epoch), Rank(r), 16))
            .collect();
        Group { leader, followers }
    }

    /// Deliver every queued leader message to its follower.
    fn deliver(&mut self) {
        while let Some((rank, msg)) = self.leader.poll_transmit() {
            let f = &mut self.followers[rank.0 as usize - 1];
            f.handle_message(msg)
                .expect("follower accepts the leader's frames");
        }
    }

    /// Every follower acknowledges `step`.
    fn ack_all(&mut self, step: Step) {
        for f in &mut self.followers {
            let msg = f.ack(step).expect("frame received");
            let rank = f.rank();
            self.leader
                .handle_message(rank, &msg, 0)
                .expect("ack accepted");
        }
    }

    /// Every rank reports `task` successfully.
    fn report_all(&mut self, task: TaskId) -> ReportOutcome {
        let epoch = self.leader.epoch();
        let own = ShardReport {
            epoch,
            task,
            rank: Rank(0),
            result: Ok(()),
        };
        let mut last = self.leader.handle_report(&own).expect("own report");
        for f in &self.followers {
            let msg = f.report(task, Ok(()));
            if let Some(o) = self
                .leader
                .handle_message(f.rank(), &msg, 0)
                .expect("report")
            {
                last = o;
            }
        }
        last
    }

    /// Make everything finished durable.
    fn persist(&mut self) {
        while let Some(batch) = self.leader.poll_persist() {
            self.leader
                .handle_persisted(batch.id)
                .expect("batch in flight");
        }
    }

    fn seal(&mut self) -> Frame {
        let step = self.leader.open_step();
        let frame = self.leader.seal(step, 0).expect("seal");
        self.deliver();
        frame
    }
}

/// Start a store and make its start durable, as the driver does before sealing.
fn store(g: &mut Group, request: u64) -> TaskId {
    let task = g.leader.start_store(
        RequestId(request),
        vec![BlockHash::from(request)],
        vec![PageId(request as u32)],
        vec![Tier::Host],
    );
    g.persist();
    task
}

#[test]
fn one_frame_per_step_in_order_even_when_empty() {
    let mut g = Group::new(1, 3, None);
    let f0 = g.seal();
    assert!(f0.is_empty());
    assert_eq!((f0.epoch, f0.step), (Epoch(1), Step(0)));
    assert_eq!(
        g.leader.seal(Step(5), 0),
        Err(LeaderError::WrongStep {
            expected: Step(1),
            got: Step(5)
        })
    );
    assert_eq!(
        g.leader.seal(Step(0), 0),
        Err(LeaderError::WrongStep {
            expected: Step(1),
            got: Step(0)
        })
    );
    assert_eq!(g.seal().step, Step(1));
    assert_eq!(g.leader.stats().steps_sealed, 2);
    for f in &g.followers {
        assert_eq!(f.received_step(), Some(Step(1)));
    }
}

#[test]
fn duplicate_reports_change_nothing() {
    let mut g = Group::new(1, 3, None);
    let t = store(&mut g, 7);
    g.seal();
    let r1 = g.followers[0].report(t, Ok(()));
    assert_eq!(
        g.leader.handle_message(Rank(1), &r1, 0),
        Ok(Some(ReportOutcome::Recorded { remaining: 2 }))
    );
    let before = g.leader.clone();
    assert_eq!(
        g.leader.handle_message(Rank(1), &r1, 0),
        Ok(Some(ReportOutcome::Duplicate))
    );
    assert_eq!(g.leader.stats().duplicate_reports, 1);
    assert_eq!(g.leader.in_flight(), before.in_flight());
    assert!(matches!(g.report_all(t), ReportOutcome::Finished(_)));
    // After the task finished, a late repeat is still only a duplicate.
    assert_eq!(
        g.leader.handle_message(Rank(1), &r1, 0),
        Ok(Some(ReportOutcome::Duplicate))
    );
    assert_eq!(g.leader.stats().tasks_ok, 1);
}

#[test]
fn stale_and_future_epochs_are_rejected_and_counted() {
    let mut g = Group::new(3, 2, None);
    let t = store(&mut g, 1);
    g.seal();
    let old = ShardReport {
        epoch: Epoch(2),
        task: t,
        rank: Rank(1),
        result: Ok(()),
    };
    assert_eq!(
        g.leader.handle_report(&old),
        Err(LeaderError::StaleEpoch {
            ours: Epoch(3),
            theirs: Epoch(2)
        })
    );
    let old_task = ShardReport {
        epoch: Epoch(3),
        task: TaskId { epoch: 2, seq: 0 },
        rank: Rank(1),
        result: Ok(()),
    };
    assert!(matches!(
        g.leader.handle_report(&old_task),
        Err(LeaderError::StaleEpoch { .. })
    ));
    let ack = Ack {
        epoch: Epoch(4),
        rank: Rank(1),
        step: Step(0),
    };
    assert_eq!(
        g.leader.handle_ack(&ack),
        Err(LeaderError::FutureEpoch {
            ours: Epoch(3),
            theirs: Epoch(4)
        })
    );
    let hb = Heartbeat {
        epoch: Epoch(1),
        rank: Rank(1),
        now_ms: 5,
    };
    assert!(matches!(
        g.leader.handle_heartbeat(&hb, 5),
        Err(LeaderError::StaleEpoch { .. })
    ));
    assert_eq!(g.leader.stats().stale_epoch_rejected, 3);
    assert_eq!(g.leader.stats().future_epoch_rejected, 1);
    assert_eq!(g.leader.stats().reports_accepted, 0);
    assert_eq!(g.leader.slowest_ack(), None);

    let f = &mut g.followers[0];
    let before = f.read(Step(0)).unwrap().cloned();
    let mut stale = Frame::empty(Epoch(2), Step(1));
    stale.tier_ops.push(TierOp::Evict(BlockHash(9)));
    assert_eq!(
        f.handle_frame(stale),
        Err(FollowerError::StaleEpoch {
            ours: Epoch(3),
            theirs: Epoch(2)
        })
    );
    assert_eq!(
        f.handle_frame(Frame::empty(Epoch(4), Step(1))),
        Err(FollowerError::FutureEpoch {
            ours: Epoch(3),
            theirs: Epoch(4)
        })
    );
    assert_eq!(f.read(Step(1)), Ok(None));
    assert_eq!(f.read(Step(0)).unwrap().cloned(), before);
    assert_eq!(
        (
            f.stats().stale_epoch_rejected,
            f.stats().future_epoch_rejected
        ),
        (1, 1)
    );
}

#[test]
fn window_full_until_the_slowest_follower_acks() {
    let mut g = Group::new(1, 3, None);
    for _ in 0..W {
        g.seal();
    }
    let err = g.leader.seal(Step(W), 0);
    assert_eq!(
        err,
        Err(LeaderError::WindowFull {
            step: Step(W),
            rank: Rank(1),
            slowest_ack: None,
            window: W
        })
    );
    // Records of the open step survive a refused seal.
    let t = store(&mut g, 1);
    // One follower acking is not enough: the slowest one counts.
    let msg = g.followers[0].ack(Step(2)).unwrap();
    g.leader.handle_message(Rank(1), &msg, 0).unwrap();
    // The refusal names the follower holding the window: rank 2 has acknowledged nothing.
    assert!(matches!(
        g.leader.seal(Step(W), 0),
        Err(LeaderError::WindowFull { rank: Rank(2), .. })
    ));
    assert_eq!(g.leader.slowest_rank(), Some(Rank(2)));
    g.ack_all(Step(0));
    assert_eq!(g.leader.slowest_ack(), Some(Step(0)));
    let f = g.seal();
    assert_eq!(f.step, Step(W));
    assert_eq!(f.stores[0].task, t);
    assert!(matches!(
        g.leader.seal(Step(W + 1), 0),
        Err(LeaderError::WindowFull {
            slowest_ack: Some(Step(0)),
            ..
        })
    ));
    // Steps held back by the window, each once: step W (refused twice), step W + 1.
    assert_eq!(g.leader.stats().window_full, 2);
    // Acks never move backwards, and cannot run ahead of sealing.
    let back = Ack {
        epoch: Epoch(1),
        rank: Rank(1),
        step: Step(1),
    };
    g.leader.handle_ack(&back).unwrap();
    assert_eq!(g.leader.slowest_ack(), Some(Step(0)));
    let ahead = Ack {
        epoch: Epoch(1),
        rank: Rank(2),
        step: Step(99),
    };
    assert_eq!(
        g.leader.handle_ack(&ahead),
        Err(LeaderError::AckBeyondSealed {
            rank: Rank(2),
            step: Step(99),
            sealed: Some(Step(W))
        })
    );
}

#[test]
fn a_lone_leader_has_no_window() {
    let mut g = Group::new(1, 1, None);
    for _ in 0..3 * W {
        g.seal();
    }
    assert_eq!(g.leader.sealed_step(), Some(Step(3 * W - 1)));
    assert_eq!(g.leader.poll_transmit(), None);
}

#[test]
fn leader_behind_after_the_deadline_names_both_positions() {
    let mut g = Group::new(3, 2, None);
    g.seal();
    let f = &mut g.followers[0];
    let wait = f.wait(Step(812), 5_000);
    assert_eq!(f.poll_event(), None);
    assert_eq!(f.poll_timeout(), Some(5_000));
    f.handle_timeout(4_999);
    assert_eq!(f.poll_event(), None);
    f.handle_timeout(5_000);
    let err = FollowerError::LeaderBehind {
        epoch: Epoch(3),
        wanted: Step(812),
        sealed: Some(Step(0)),
    };
    assert_eq!(
        f.poll_event(),
        Some(FollowerEvent::WaitFailed {
            wait,
            error: err.clone()
        })
    );
    assert_eq!(
        err.to_string(),
        "follower wants step 812 of epoch 3; leader has sealed step 0"
    );
    assert_eq!(f.poll_timeout(), None);
    assert_eq!(f.stats().waits_timed_out, 1);
}

#[test]
fn waits_end_when_the_frame_arrives_or_at_once_when_it_is_here() {
    let mut g = Group::new(1, 2, None);
    let w1 = g.followers[0].wait(Step(1), 100);
    let w2 = g.followers[0].wait(Step(1), 200);
    let cancelled = g.followers[0].wait(Step(1), 300);
    assert!(g.followers[0].cancel(cancelled));
    assert!(!g.followers[0].cancel(cancelled));
    g.seal();
    assert_eq!(g.followers[0].poll_event(), None);
    let f1 = g.seal();
    let f = &mut g.followers[0];
    assert_eq!(
        f.poll_event(),
        Some(FollowerEvent::FrameReady {
            wait: w1,
            frame: f1.clone()
        })
    );
    assert_eq!(
        f.poll_event(),
        Some(FollowerEvent::FrameReady {
            wait: w2,
            frame: f1.clone()
        })
    );
    assert_eq!(f.poll_event(), None);
    let w3 = f.wait(Step(0), 0);
    assert!(matches!(f.poll_event(), Some(FollowerEvent::FrameReady { wait, .. }) if wait == w3));
    assert_eq!(f.poll_timeout(), None);
}

#[test]
fn reads_are_positional_and_idempotent() {
    let mut g = Group::new(1, 2, None);
    let mut sealed = Vec::new();
    for i in 0..6 {
        g.leader.record_tier_op(TierOp::Evict(BlockHash::from(i)));
        sealed.push(g.seal());
        g.ack_all(Step(i));
    }
    let f = &g.followers[0];
    // Same frame every time, in any order, skipping steps.
    for step in [5u64, 1, 1, 3, 5, 0] {
        let got = f.read(Step(step)).unwrap().unwrap();
        assert_eq!(got, &sealed[step as usize]);
        assert_eq!(got, g.leader.frame(Step(step)).unwrap().unwrap());
    }
    assert_eq!(f.read(Step(6)), Ok(None));
    assert_eq!(g.leader.frame(Step(6)), Ok(None));
    // A repeated identical frame is ignored; a different one for the same step is refused.
    let f = &mut g.followers[0];
    assert_eq!(f.handle_frame(sealed[2].clone()), Ok(()));
    assert_eq!(f.stats().duplicate_frames, 1);
    let mut forged = sealed[2].clone();
    forged.tier_ops.push(TierOp::Evict(BlockHash(99)));
    assert_eq!(
        f.handle_frame(forged),
        Err(FollowerError::ConflictingFrame { step: Step(2) })
    );
    assert_eq!(
        f.handle_frame(Frame::empty(Epoch(1), Step(9))),
        Err(FollowerError::FrameGap {
            expected: Step(6),
            got: Step(9)
        })
    );
    let mut misplaced = Frame::empty(Epoch(1), Step(6));
    misplaced.reconciliation = Some(Reconciliation::default());
    assert_eq!(
        f.handle_frame(misplaced),
        Err(FollowerError::MisplacedReconciliation { step: Step(6) })
    );
    assert_eq!(f.read(Step(5)).unwrap().unwrap(), &sealed[5]);
}

#[test]
fn expired_frames_name_the_oldest_retained() {
    let mut leader = Leader::new(
        LeaderConfig {
            retention_steps: 2,
            ..config(1, 2)
        },
        None,
    )
    .unwrap();
    let mut f = Follower::new(Epoch(1), Rank(1), 2);
    for i in 0..4 {
        leader.seal(Step(i), 0).unwrap();
        while let Some((_, m)) = leader.poll_transmit() {
            f.handle_message(m).unwrap();
        }
        leader
            .handle_message(Rank(1), &f.ack(Step(i)).unwrap(), 0)
            .unwrap();
    }
    let expired = FollowerError::FrameExpired {
        wanted: Step(1),
        oldest_retained: Step(2),
    };
    assert_eq!(f.read(Step(1)), Err(expired.clone()));
    let w = f.wait(Step(1), 10);
    assert_eq!(
        f.poll_event(),
        Some(FollowerEvent::WaitFailed {
            wait: w,
            error: expired
        })
    );
    assert_eq!(
        leader.frame(Step(0)),
        Err(LeaderError::FrameExpired {
            wanted: Step(0),
            oldest_retained: Step(2)
        })
    );
}

#[test]
fn only_durable_outcomes_are_revealed_and_redis_outage_never_stops_sealing() {
    let mut g = Group::new(1, 3, None);
    let t = store(&mut g, 1);
    g.seal();
    assert!(matches!(g.report_all(t), ReportOutcome::Finished(_)));
    // Finished but not durable: the next frame reveals nothing.
    assert!(g.seal().finished.is_empty());
    assert_eq!(g.leader.in_flight().len(), 1);
    // Redis is down: the batch comes back, sealing goes on, nothing revealed.
    let batch = g.leader.poll_persist().expect("a batch");
    assert_eq!(batch.epoch, Epoch(1));
    assert_eq!(g.leader.poll_persist(), None, "one batch in flight");
    assert!(g.seal().finished.is_empty());
    g.leader.handle_persist_failed(batch.id).unwrap();
    assert_eq!(
        g.leader.handle_persist_failed(batch.id),
        Err(LeaderError::UnknownBatch { batch: batch.id })
    );
    g.ack_all(Step(2));
    assert!(g.seal().finished.is_empty());
    assert_eq!(g.leader.stats().persist_failures, 1);
    // Redis is back.
    let retry = g.leader.poll_persist().expect("retried");
    assert_eq!(retry.outcomes, batch.outcomes);
    assert_eq!(
        g.leader.handle_persisted(batch.id),
        Err(LeaderError::UnknownBatch { batch: batch.id })
    );
    g.leader.handle_persisted(retry.id).unwrap();
    assert_eq!(g.leader.durable_unrevealed().len(), 1);
    assert!(g.leader.in_flight().is_empty());
    let f = g.seal();
    assert_eq!(f.finished, retry.outcomes);
    assert_eq!(f.finished[0].result, OutcomeResult::Ok);
    // Revealed once only.
    assert!(g.seal().finished.is_empty());
    assert_eq!(g.leader.stats().outcomes_revealed, 1);
    assert_eq!(
        g.followers[1].read(Step(4)).unwrap().unwrap().finished,
        retry.outcomes
    );
}

#[test]
fn outcomes_are_revealed_in_finish_order_with_the_first_failure_reason() {
    let mut g = Group::new(1, 2, None);
    let a = store(&mut g, 1);
    let b = g
        .leader
        .start_load(RequestId(2), vec![BlockHash(2)], vec![PageId(2)]);
    let c = store(&mut g, 3);
    g.seal();
    g.report_all(c);
    let fail = g.followers[0].report(a, Err("tier full".into()));
    g.leader.handle_message(Rank(1), &fail, 0).unwrap();
    let own = ShardReport {
        epoch: Epoch(1),
        task: a,
        rank: Rank(0),
        result: Err("later".into()),
    };
    g.leader.handle_report(&own).unwrap();
    g.persist();
    g.report_all(b);
    g.persist();
    let f = g.seal();
    let order: Vec<TaskId> = f.finished.iter().map(|o| o.task).collect();
    assert_eq!(order, vec![c, a, b]);
    assert_eq!(
        f.finished[1].result,
        OutcomeResult::Failed {
            reason: "tier full".into()
        }
    );
    assert_eq!(f.finished[2].kind, TaskKind::Load);
    assert_eq!(
        (g.leader.stats().tasks_ok, g.leader.stats().tasks_failed),
        (2, 1)
    );
}

#[test]
fn unknown_tasks_and_spoofed_ranks_are_rejected() {
    let mut g = Group::new(1, 2, None);
    let bogus = TaskId { epoch: 1, seq: 40 };
    let msg = g.followers[0].report(bogus, Ok(()));
    assert_eq!(
        g.leader.handle_message(Rank(1), &msg, 0),
        Err(LeaderError::Quorum(QuorumError::UnknownTask {
            task: bogus
        }))
    );
    assert_eq!(
        g.leader.handle_message(Rank(2), &msg, 0),
        Err(LeaderError::RankMismatch {
            connection: Rank(2),
            claimed: Rank(1)
        })
    );
    let frame = Message::Frame(Frame::empty(Epoch(1), Step(0)));
    assert_eq!(
        g.leader.handle_message(Rank(1), &frame, 0),
        Err(LeaderError::UnexpectedMessage { kind: "frame" })
    );
    assert_eq!(
        g.followers[0].handle_message(msg),
        Err(FollowerError::UnexpectedMessage {
            kind: "shard_report"
        })
    );
    let hb = Heartbeat {
        epoch: Epoch(1),
        rank: Rank(5),
        now_ms: 0,
    };
    assert_eq!(
        g.leader.handle_heartbeat(&hb, 0),
        Err(LeaderError::Quorum(QuorumError::RankOutOfRange {
            rank: Rank(5),
            world_size: 2
        }))
    );
    assert_eq!(g.leader.stats().rejected_reports, 1);
    assert_eq!(
        g.followers[0].ack(Step(0)),
        Err(FollowerError::AckBeyondReceived {
            step: Step(0),
            received: None
        })
    );
    assert!(matches!(
        Leader::new(
            LeaderConfig {
                world_size: 0,
                ..config(1, 1)
            },
            None
        ),
        Err(LeaderError::InvalidConfig { .. })
    ));
    assert!(matches!(
        Leader::new(
            LeaderConfig {
                window_steps: 0,
                ..config(1, 1)
            },
            None
        ),
        Err(LeaderError::InvalidConfig { .. })
    ));
}

#[test]
fn silent_ranks_become_events_once() {
    let mut g = Group::new(1, 3, None);
    assert_eq!(g.leader.poll_timeout(), Some(1_000));
    let hb = g.followers[0].heartbeat(600);
    g.leader.handle_message(Rank(1), &hb, 600).unwrap();
    g.leader.handle_timeout(999);
    assert_eq!(g.leader.poll_event(), None);
    g.leader.handle_timeout(1_000);
    assert_eq!(
        g.leader.poll_event(),
        Some(LeaderEvent::RankSilent {
            rank: Rank(2),
            last_seen_ms: 0,
            now_ms: 1_000
        })
    );
    assert_eq!(g.leader.poll_event(), None);
    assert_eq!(g.leader.poll_timeout(), Some(1_600));
    g.leader.handle_timeout(1_700);
    assert!(matches!(
        g.leader.poll_event(),
        Some(LeaderEvent::RankSilent { rank: Rank(1), .. })
    ));
    assert_eq!(g.leader.stats().ranks_silent, 2);
    assert_eq!(g.leader.poll_timeout(), None);
}

#[test]
fn a_new_epoch_reconciles_exactly_once_per_engine() {
    // Epoch 1: four stores; one revealed and acknowledged, one durable but unrevealed, one
    // finished but not durable, one never finished.
    let mut g = Group::new(1, 3, None);
    let ids: Vec<TaskId> = (0..4).map(|i| store(&mut g, i)).collect();
    g.seal();
    g.report_all(ids[0]);
    g.persist();
    let revealed = g.seal();
    assert_eq!(revealed.finished.len(), 1);
    g.ack_all(Step(1));
    g.report_all(ids[1]);
    g.persist();
    g.report_all(ids[2]);
    let _unpersisted = g.leader.poll_persist().expect("batch");
    // Follower 2's engine saw the open tasks; it can vouch for them if the leader dies.
    let open: Vec<TaskId> = g.followers[1].open_tasks().iter().map(|t| t.task).collect();
    assert_eq!(open, vec![ids[1], ids[2], ids[3]]);

    // The group restarts. The driver gathers what Redis and the old leader know.
    let durable_unacked = g.leader.durable_unrevealed().to_vec();
    let in_flight = g.leader.in_flight();
    let rec = reconcile(&durable_unacked, &in_flight);
    assert_eq!(
        rec.redelivered.iter().map(|o| o.task).collect::<Vec<_>>(),
        vec![ids[1]]
    );
    assert_eq!(
        rec.aborted.iter().map(|o| o.task).collect::<Vec<_>>(),
        vec![ids[2], ids[3]]
    );

    let mut g2 = Group::new(2, 3, Some(rec.clone()));
    let t_new = store(&mut g2, 10);
    assert_eq!(t_new, TaskId { epoch: 2, seq: 0 });
    let f0 = g2.seal();
    assert_eq!(f0.reconciliation, Some(rec));
    assert_eq!(g2.seal().reconciliation, None);
    // Every engine sees each old outcome once overall: one that had already acknowledged
    // the redelivered task (its consumer group says so) filters it out.
    let acked_by_engine_1: std::collections::BTreeSet<TaskId> = [ids[1]].into();
    let seen: Vec<TaskId> = undelivered_outcomes(&f0, &acked_by_engine_1)
        .iter()
        .map(|o| o.task)
        .collect();
    assert_eq!(seen, vec![ids[2], ids[3]]);
    let seen: Vec<TaskId> = undelivered_outcomes(&f0, &Default::default())
        .iter()
        .map(|o| o.task)
        .collect();
    assert_eq!(seen, vec![ids[1], ids[2], ids[3]]);
    // Nothing of epoch 1 is applied in epoch 2.
    let late = ShardReport {
        epoch: Epoch(1),
        task: ids[3],
        rank: Rank(1),
        result: Ok(()),
    };
    assert!(matches!(
        g2.leader.handle_report(&late),
        Err(LeaderError::StaleEpoch { .. })
    ));
    let f = &mut g2.followers[0];
    assert!(matches!(
        f.handle_frame(revealed),
        Err(FollowerError::StaleEpoch { .. })
    ));
    assert!(f.open_tasks().iter().all(|t| t.task.epoch == 2));
}

fn membership(epoch: u64) -> Membership {
    Membership {
        protocol_version: PROTOCOL_VERSION,
        group_id: GroupId("llama-70b-a".into()),
        fingerprint: ConfigFingerprint {
            world_size: 3,
            pp_size: 3,
            tp_size: 1,
            tokens_per_block: 512,
            num_layers: 80,
            num_kv_heads: 8,
            head_dim: 128,
            dtype_bytes: 2,
            shard_bytes: 1 << 20,
            host_capacity_blocks: 400,
            disk_capacity_blocks: 4096,
            max_frame_bytes: 16 << 20,
            window_steps: 8,
            frame_retention_steps: 1024,
            heartbeat_interval_ms: 100,
            heartbeat_timeout_ms: 500,
        },
        secret: GroupSecret::new(b"group-secret".to_vec()),
        epoch: Epoch(epoch),
        world_size: 3,
    }
}

#[test]
fn handshake_admits_each_rank_once_and_names_refusals() {
    let mut leader = Leader::new(config(3, 3), None).unwrap();
    let ours = membership(3);
    let nonce = [1u8; 32];
    // The hello travels through the codec like on a real connection.
    let wire = encode(&Message::Hello(ours.hello(&nonce, Rank(1))));
    let Some((Message::Hello(hello), _)) = decode(&wire, 1 << 16).unwrap() else {
        panic!("a hello decodes as a hello");
    };
    assert_eq!(
        leader.admit(&ours, &nonce, &hello, 0),
        Ok(Message::Welcome {
            epoch: Epoch(3),
            sealed_step: None
        })
    );
    assert_eq!(
        leader.admit(&ours, &nonce, &hello, 0),
        Err(HandshakeError::DuplicateRank {
            rank: Rank(1),
            epoch: Epoch(3)
        })
    );
    assert!(!leader.all_joined());

    let mut old_version = membership(3);
    old_version.protocol_version = PROTOCOL_VERSION + 1;
    let refused = leader.admit(&ours, &nonce, &old_version.hello(&nonce, Rank(2)), 0);
    assert_eq!(
        refused.unwrap_err().to_string(),
        format!(
            "protocol version differs: leader speaks {PROTOCOL_VERSION}, rank speaks {}",
            PROTOCOL_VERSION + 1
        )
    );
    let mut wrong_secret = membership(3);
    wrong_secret.secret = GroupSecret::new(b"guess".to_vec());
    assert_eq!(
        leader.admit(&ours, &nonce, &wrong_secret.hello(&nonce, Rank(2)), 0),
        Err(HandshakeError::BadSecret)
    );
    let stale = membership(2);
    assert_eq!(
        leader.admit(&ours, &nonce, &stale.hello(&nonce, Rank(2)), 0),
        Err(HandshakeError::StaleEpoch {
            ours: Epoch(3),
            theirs: Epoch(2)
        })
    );
    // The leader's own epoch counts, whatever the membership passed in says.
    assert!(leader
        .admit(&stale, &nonce, &ours.hello(&nonce, Rank(2)), 0)
        .is_ok());
    assert!(leader.all_joined());
    assert_eq!(
        leader.joined().iter().copied().collect::<Vec<_>>(),
        vec![Rank(1), Rank(2)]
    );
    assert_eq!(
        (
            leader.stats().handshakes_admitted,
            leader.stats().handshakes_refused
        ),
        (2, 4)
    );
    // A lost connection is a rank failure, reported once, and the rank cannot rejoin.
    leader.handle_disconnect(Rank(2), 50);
    leader.handle_disconnect(Rank(2), 60);
    leader.handle_disconnect(Rank(7), 60);
    assert_eq!(
        leader.poll_event(),
        Some(LeaderEvent::RankLost {
            rank: Rank(2),
            now_ms: 50
        })
    );
    assert_eq!(leader.poll_event(), None);
    assert!(matches!(
        leader.admit(&ours, &[2u8; 32], &ours.hello(&[2u8; 32], Rank(2)), 0),
        Err(HandshakeError::DuplicateRank { .. })
    ));
    assert_eq!(leader.stats().ranks_lost, 1);
}

#[test]
fn starts_are_revealed_only_once_durable() {
    let mut g = Group::new(1, 2, None);
    let t = g.leader.start_store(
        RequestId(1),
        vec![BlockHash(1)],
        vec![PageId(1)],
        vec![Tier::Disk],
    );
    let f0 = g.seal();
    assert!(
        f0.stores.is_empty(),
        "a start that is not durable is not revealed"
    );
    let b = g
        .leader
        .poll_persist()
        .expect("the start waits to be logged");
    assert_eq!(b.started.len(), 1);
    g.leader.handle_persist_failed(b.id).unwrap();
    assert!(
        g.seal().stores.is_empty(),
        "still not durable after a failed append"
    );
    g.persist();
    let f2 = g.seal();
    assert_eq!(f2.stores.len(), 1);
    assert_eq!(
        (f2.stores[0].task, f2.stores[0].tiers.clone()),
        (t, vec![Tier::Disk])
    );
    assert!(g.seal().stores.is_empty(), "revealed once");
}

#[test]
fn a_rejected_task_fails_once_without_starting() {
    let mut g = Group::new(1, 2, None);
    let t = g
        .leader
        .reject_task(TaskKind::Store, RequestId(4), "host tier full".into());
    // Until its failure is durable a new epoch would report it aborted, like any outcome.
    assert_eq!(
        g.leader
            .in_flight()
            .iter()
            .map(|t| t.task)
            .collect::<Vec<_>>(),
        vec![t]
    );
    g.persist();
    assert!(g.leader.in_flight().is_empty());
    let f = g.seal();
    assert!(f.stores.is_empty());
    assert_eq!(
        f.finished,
        vec![TaskOutcome {
            task: t,
            kind: TaskKind::Store,
            request: RequestId(4),
            result: OutcomeResult::Failed {
                reason: "host tier full".into()
            },
        }]
    );
    assert!(g.seal().finished.is_empty());
    assert_eq!(g.leader.stats().tasks_failed, 1);
}
