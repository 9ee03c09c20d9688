//! The agent's epoch loop, as a state machine: decisions checked step by step, and whole
//! lifetimes run against the in-memory twin of the log (`tandem_durable::MemoryLog`) with a
//! `ManualClock`, no redis-server and no sleeps.

use std::sync::Arc;

use tandem_core::{
    cadence, Effect, EpochLoop, EpochStart, Event, LogHealth, LoopConfig, Note, Outcome,
};
use tandem_durable::{
    CompletionStream, DurableError, EpochStore, Heartbeat, LivenessStore, ManualClock, MemoryLog,
    Recovery, StartedTask, StreamEntryId, WallClock,
};
use tandem_proto::{
    BlockHash, Epoch, OutcomeResult, PageId, Rank, RankBlocks, RequestId, Step, TaskId, TaskKind,
    TaskOutcome, TaskStart, Tier,
};

fn config(rank: u32, durable: bool) -> LoopConfig {
    LoopConfig {
        rank: Rank(rank),
        epoch: Epoch(1),
        follow: true,
        durable,
        heartbeat_interval_ms: 100,
        heartbeat_timeout_ms: 1_000,
        stream_max_len: 10,
        ack_interval_ms: 10,
    }
}

/// A driver on `MemoryLog`: makes every call the loop asks for, returns the effects that take
/// no answer.
struct Driver {
    log: MemoryLog,
    clock: ManualClock,
    rank: Rank,
    blocks: RankBlocks,
    now_ms: u64,
    /// The log refuses heartbeats, reads and acknowledgements (Redis stopped).
    down: bool,
    /// Reads find the completion stream gone.
    lost: bool,
    /// Reads of the completion stream the loop asked for.
    reads: usize,
    /// The ids of every acknowledgement the loop asked for, in order.
    acks: Vec<Vec<StreamEntryId>>,
}

impl Driver {
    fn new(world: u32, rank: u32) -> Driver {
        let clock = ManualClock::new(1_000_000);
        Driver {
            log: MemoryLog::with_clock(world, Arc::new(clock.clone())),
            clock,
            rank: Rank(rank),
            blocks: RankBlocks {
                rank: Rank(rank),
                blocks: vec![(BlockHash(7), Tier::Host)],
            },
            now_ms: 0,
            down: false,
            lost: false,
            reads: 0,
            acks: Vec::new(),
        }
    }

    /// Carry out everything the loop asks for now.
    async fn run(&mut self, l: &mut EpochLoop) -> Vec<Effect> {
        let mut done = Vec::new();
        while let Some(effect) = l.poll_effect() {
            match &effect {
                Effect::ReadNew { .. } => self.reads += 1,
                Effect::Ack { ids } => self.acks.push(ids.clone()),
                _ => {}
            }
            let s = |r: tandem_durable::Result<()>| r.map_err(|e| e.to_string());
            let rank = self.rank;
            let down = || "redis ack timed out after 1000 ms".to_string();
            let outcome = match effect {
                Effect::Heartbeat { .. } if self.down => Outcome::HeartbeatWritten(Err(down())),
                Effect::Ack { .. } if self.down => Outcome::Acked(Err(down())),
                Effect::AckThrough { .. } if self.down => Outcome::AckedThrough(Err(down())),
                Effect::ReadNew { .. } if self.down => Outcome::Read(Err(DurableError::Timeout {
                    op: "read_new",
                    ms: 1000,
                })),
                Effect::ReadNew { .. } if self.lost => {
                    Outcome::Read(Err(DurableError::StreamLost {
                        op: "read_new",
                        key: "tandem:{g}:completions".into(),
                        reason: "NOGROUP No such key".into(),
                    }))
                }
                Effect::ReadEpoch => {
                    Outcome::EpochRead(self.log.current_epoch().await.map_err(|e| e.to_string()))
                }
                Effect::ReadMembers { epoch } => {
                    Outcome::Members(self.log.members(epoch).await.map_err(|e| e.to_string()))
                }
                Effect::ReportFailure(r) => Outcome::Reported(s(self.log.report_failure(&r).await)),
                Effect::Heartbeat { epoch, ttl_ms } => {
                    let beat = Heartbeat {
                        epoch,
                        unix_ms: self.clock.now_ms(),
                        incarnation: 0,
                    };
                    Outcome::HeartbeatWritten(s(self.log.heartbeat(rank, beat, ttl_ms).await))
                }
                Effect::Join { epoch } => {
                    Outcome::Joined(s(self.log.join(epoch, rank).await.map(drop)))
                }
                Effect::Recover => Outcome::Recovered(
                    self.log
                        .recover()
                        .await
                        .map(Box::new)
                        .map_err(|e| e.to_string()),
                ),
                Effect::ListBlocks => Outcome::Blocks(Some(self.blocks.clone())),
                Effect::PutManifest {
                    epoch,
                    bytes,
                    ttl_ms,
                } => Outcome::ManifestPut(s(self
                    .log
                    .put_manifest(epoch, rank, &bytes, ttl_ms)
                    .await)),
                Effect::ReadNew { count } => Outcome::Read(self.log.read_new(rank, count).await),
                Effect::Ack { ids } => {
                    Outcome::Acked(self.log.ack(rank, &ids).await.map_err(|e| e.to_string()))
                }
                Effect::AckThrough { through } => Outcome::AckedThrough(
                    self.log
                        .ack_through(rank, through)
                        .await
                        .map_err(|e| e.to_string()),
                ),
                Effect::Trim { max_len } => Outcome::Trimmed(
                    self.log
                        .trim(max_len as usize)
                        .await
                        .map_err(|e| e.to_string()),
                ),
                Effect::StreamLen => {
                    Outcome::StreamLen(self.log.stream_len().await.map_err(|e| e.to_string()))
                }
                other => {
                    done.push(other);
                    continue;
                }
            };
            l.handle_outcome(outcome, self.now_ms);
        }
        done
    }

    /// Move both clocks by `ms`, firing the loop's timer when due, and carry everything out.
    async fn advance(&mut self, l: &mut EpochLoop, ms: u64) -> Vec<Effect> {
        let until = self.now_ms + ms;
        let mut done = self.run(l).await;
        while let Some(t) = l.poll_timeout().filter(|t| *t <= until) {
            self.clock.advance(t.saturating_sub(self.now_ms));
            self.now_ms = self.now_ms.max(t);
            l.handle_timeout(self.now_ms);
            done.extend(self.run(l).await);
        }
        self.clock.advance(until - self.now_ms);
        self.now_ms = until;
        done
    }
}

fn started(done: &[Effect]) -> Vec<(Epoch, EpochStart)> {
    done.iter()
        .filter_map(|e| match e {
            Effect::StartEpoch { epoch, start } => Some((*epoch, start.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn without_a_log_the_one_epoch_starts_at_once_and_nothing_else_happens() {
    let mut l = EpochLoop::new(config(1, false), 0);
    assert_eq!(
        l.poll_effect(),
        Some(Effect::StartEpoch {
            epoch: Epoch(1),
            start: EpochStart::default()
        })
    );
    assert_eq!(l.poll_effect(), None);
    assert_eq!(l.poll_timeout(), None);
    assert_eq!(l.running(), Some(Epoch(1)));
    l.handle_event(
        &Event::EngineAcked {
            epoch: Epoch(1),
            step: Step(0),
        },
        5,
    );
    assert_eq!(l.poll_effect(), None, "no log: nothing to acknowledge");
}

#[tokio::test(flavor = "current_thread")]
async fn waits_for_the_first_epoch_then_recovers_publishes_its_manifest_and_starts() {
    let mut d = Driver::new(2, 1);
    let mut l = EpochLoop::new(config(1, true), 0);
    let done = d.advance(&mut l, 1_000).await;
    assert!(started(&done).is_empty(), "no epoch yet");
    assert_eq!(l.poll_timeout(), Some(1_200), "reads every 200 ms");
    let epoch = d.log.next_epoch().await.unwrap();
    let done = d.advance(&mut l, 200).await;
    assert_eq!(started(&done), vec![(epoch, EpochStart::default())]);
    assert_eq!(l.running(), Some(epoch));
    // Its manifest is published for the leader's rebuild, its heartbeat written.
    let manifests = d.log.manifests(epoch).await.unwrap();
    assert_eq!(
        manifests[1].as_deref().and_then(RankBlocks::decode),
        Some(d.blocks.clone())
    );
    let beats = d.log.heartbeats().await.unwrap();
    assert_eq!(beats[1].map(|b| b.epoch), Some(epoch));
    assert!(done.contains(&Effect::Note(Note::RedisUp(true))));
}

#[tokio::test(flavor = "current_thread")]
async fn a_rank_restarted_inside_its_running_epoch_reports_it_and_waits_for_the_next() {
    let mut d = Driver::new(2, 1);
    let e1 = d.log.next_epoch().await.unwrap();
    d.log.join(e1, Rank(1)).await.unwrap();
    let mut l = EpochLoop::new(config(1, true), 0);
    let done = d.advance(&mut l, 350).await;
    assert!(
        started(&done).is_empty(),
        "it does not serve epoch {e1} again"
    );
    let (reports, _) = d.log.take_failures(100).await.unwrap();
    assert!(reports.len() >= 3, "one report per interval: {reports:?}");
    assert_eq!(
        reports[0].reason,
        format!("agent of rank 1 restarted inside epoch {e1}")
    );
    let e2 = d.log.next_epoch().await.unwrap();
    let done = d.advance(&mut l, 100).await;
    assert_eq!(started(&done).first().map(|s| s.0), Some(e2));
}

#[tokio::test(flavor = "current_thread")]
async fn a_running_epoch_joins_when_ready_reports_failures_and_follows_the_counter() {
    let mut d = Driver::new(2, 1);
    let e1 = d.log.next_epoch().await.unwrap();
    let mut l = EpochLoop::new(config(1, true), 0);
    d.advance(&mut l, 0).await;
    assert_eq!(l.running(), Some(e1));
    assert!(d.log.members(e1).await.unwrap().is_empty(), "not ready yet");
    l.handle_event(&Event::Ready { epoch: e1 }, d.now_ms);
    l.handle_event(
        &Event::Failed {
            epoch: e1,
            reason: "rank 0 lost".into(),
        },
        d.now_ms,
    );
    // An older epoch's event changes nothing.
    l.handle_event(&Event::Ready { epoch: Epoch(0) }, d.now_ms);
    d.advance(&mut l, 100).await;
    assert_eq!(d.log.members(e1).await.unwrap(), vec![Rank(1)]);
    let (reports, _) = d.log.take_failures(10).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].reason, "rank 0 lost");
    // The supervisor moves the group: the next tick stops this epoch and starts the next.
    let e2 = d.log.next_epoch().await.unwrap();
    let done = d.advance(&mut l, 100).await;
    assert!(done.contains(&Effect::StopEpoch {
        epoch: e1,
        next: e2
    }));
    assert!(done.contains(&Effect::Note(Note::Restarted)));
    assert_eq!(started(&done).first().map(|s| s.0), Some(e2));
}

/// Found by the simulator (`tandem-sim`): the supervisor took a failure report and crashed
/// before moving the epoch; the report was gone, the ranks heartbeated on, and the group stayed
/// in its failed epoch for good. A failed epoch is reported again every interval until the
/// group moves on.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_epoch_is_reported_again_every_interval_until_the_group_moves() {
    let mut d = Driver::new(2, 1);
    let e1 = d.log.next_epoch().await.unwrap();
    let mut l = EpochLoop::new(config(1, true), 0);
    d.advance(&mut l, 0).await;
    assert_eq!(l.running(), Some(e1));
    let failed = Event::Failed {
        epoch: e1,
        reason: "rank 0 lost".into(),
    };
    l.handle_event(&failed, d.now_ms);
    d.advance(&mut l, 100).await;
    let (first, _) = d.log.take_failures(10).await.unwrap();
    assert_eq!(first.len(), 1, "reported once in the first interval");
    // The supervisor that took it is gone; the next interval reports it again.
    d.advance(&mut l, 100).await;
    let (again, _) = d.log.take_failures(10).await.unwrap();
    assert_eq!(again, first);
    // Once the group moved, the old epoch's failure is not reported any more.
    d.log.next_epoch().await.unwrap();
    d.advance(&mut l, 300).await;
    let _ = d.log.take_failures(10).await.unwrap();
    d.advance(&mut l, 300).await;
    let (after, _) = d.log.take_failures(10).await.unwrap();
    assert!(after.iter().all(|r| r.epoch != e1), "{after:?}");
}

fn store_start(seq: u64) -> StartedTask {
    StartedTask {
        kind: TaskKind::Store,
        start: TaskStart {
            task: TaskId { epoch: 1, seq },
            request: RequestId(seq),
            block_hashes: vec![BlockHash(u128::from(seq))],
            page_ids: vec![PageId(0)],
            tiers: vec![Tier::Host],
        },
    }
}

fn ok(seq: u64) -> TaskOutcome {
    TaskOutcome {
        task: TaskId { epoch: 1, seq },
        kind: TaskKind::Store,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_new_epoch_starts_with_what_the_log_says_it_must_settle() {
    // Epoch 1's leader started tasks 0 and 1 and finished task 0; nobody acknowledged it.
    let mut d = Driver::new(2, 0);
    let e1 = d.log.next_epoch().await.unwrap();
    d.log
        .append_step(e1, Step(0), &[store_start(0), store_start(1)], &[])
        .await
        .unwrap();
    d.log.append_step(e1, Step(1), &[], &[ok(0)]).await.unwrap();
    let e2 = d.log.next_epoch().await.unwrap();
    let mut leader = EpochLoop::new(config(0, true), 0);
    let done = d.advance(&mut leader, 0).await;
    let (epoch, start) = started(&done).remove(0);
    assert_eq!(epoch, e2);
    let rec = start.reconciliation.expect("frame 0 reconciles");
    assert_eq!(rec.redelivered, vec![ok(0)]);
    assert_eq!(rec.aborted.len(), 1);
    assert_eq!(rec.aborted[0].task, TaskId { epoch: 1, seq: 1 });
    assert_eq!(
        start.aborted, rec.aborted,
        "aborts appended with the first record"
    );
    // A follower gets no reconciliation, only what its engine acknowledged (nothing here).
    let mut f = Driver::new(2, 1);
    f.log = d.log.clone();
    let mut follower = EpochLoop::new(config(1, true), 0);
    let done = f.advance(&mut follower, 0).await;
    assert_eq!(started(&done), vec![(e2, EpochStart::default())]);
}

#[tokio::test(flavor = "current_thread")]
async fn an_engine_ack_acknowledges_the_entries_it_covers_and_the_reconciled_ones() {
    let mut d = Driver::new(1, 0);
    let e1 = d.log.next_epoch().await.unwrap();
    d.log
        .append_step(e1, Step(0), &[store_start(0)], &[ok(0)])
        .await
        .unwrap();
    let e2 = d.log.next_epoch().await.unwrap();
    let mut l = EpochLoop::new(config(0, true), 0);
    d.advance(&mut l, 0).await;
    assert_eq!(l.running(), Some(e2));
    d.log
        .append_step(
            e2,
            Step(0),
            &[],
            &[TaskOutcome {
                task: TaskId { epoch: 2, seq: 0 },
                ..ok(0)
            }],
        )
        .await
        .unwrap();
    // The engine applied frame 0 of epoch 2: the new entry and everything the
    // reconciliation settled are acknowledged.
    l.handle_event(
        &Event::EngineAcked {
            epoch: e2,
            step: Step(0),
        },
        d.now_ms,
    );
    d.run(&mut l).await;
    assert!(d.log.pending(Rank(0)).await.unwrap().is_empty());
    let rec: Recovery = d.log.recover().await.unwrap();
    assert!(rec.redelivered.is_empty(), "nothing left to redeliver");
}

#[test]
fn a_recovery_that_keeps_failing_gives_up_after_its_attempts() {
    let mut c = config(0, true);
    c.follow = false;
    let mut l = EpochLoop::new(c, 0);
    let mut now = 0;
    for attempt in 0..=cadence::RECOVERY_ATTEMPTS {
        assert_eq!(l.poll_effect(), Some(Effect::Recover), "attempt {attempt}");
        l.handle_outcome(Outcome::Recovered(Err("redis down".into())), now);
        if attempt < cadence::RECOVERY_ATTEMPTS {
            assert_eq!(l.poll_effect(), None, "waits before the next attempt");
            now += cadence::RECOVERY_RETRY_MS;
            l.handle_timeout(now);
        }
    }
    match l.poll_effect() {
        Some(Effect::Fatal(reason)) => {
            assert!(
                reason.contains("after 121 attempts: redis down"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(l.poll_effect(), None);
    assert!(l.stopped());
}

#[test]
fn a_manifest_that_cannot_be_published_is_given_up_and_the_epoch_starts_anyway() {
    let mut c = config(1, true);
    c.follow = false;
    let mut l = EpochLoop::new(c, 0);
    assert_eq!(l.poll_effect(), Some(Effect::Recover));
    l.handle_outcome(Outcome::Recovered(Ok(Box::default())), 0);
    let mut now = 0;
    for _ in 0..cadence::MANIFEST_PUBLISH_ATTEMPTS {
        assert_eq!(l.poll_effect(), Some(Effect::ListBlocks));
        l.handle_outcome(Outcome::Blocks(Some(RankBlocks::default())), now);
        assert!(matches!(l.poll_effect(), Some(Effect::PutManifest { .. })));
        l.handle_outcome(Outcome::ManifestPut(Err("redis down".into())), now);
        now += cadence::MANIFEST_PUBLISH_RETRY_MS;
        l.handle_timeout(now);
    }
    assert!(matches!(
        l.poll_effect(),
        Some(Effect::StartEpoch {
            epoch: Epoch(1),
            ..
        })
    ));
}

#[test]
fn only_the_leader_trims_the_stream_every_fifty_ticks() {
    for rank in [0, 1] {
        let mut c = config(rank, true);
        c.follow = false;
        let mut l = EpochLoop::new(c, 0);
        l.poll_effect();
        l.handle_outcome(Outcome::Recovered(Ok(Box::default())), 0);
        l.poll_effect();
        l.handle_outcome(Outcome::Blocks(None), 0);
        let mut trims = Vec::new();
        let mut now = 0;
        for tick in 1..=100u64 {
            while let Some(e) = l.poll_effect() {
                let outcome = match e {
                    Effect::Trim { max_len } => {
                        assert_eq!(max_len, 10);
                        trims.push(tick);
                        Outcome::Trimmed(Ok(0))
                    }
                    Effect::Heartbeat { .. } => Outcome::HeartbeatWritten(Ok(())),
                    Effect::ReadNew { .. } => Outcome::Read(Ok(Vec::new())),
                    Effect::StreamLen => Outcome::StreamLen(Ok(3)),
                    _ => continue,
                };
                l.handle_outcome(outcome, now);
            }
            now += 100;
            l.handle_timeout(now);
        }
        let want: Vec<u64> = if rank == 0 { vec![50, 100] } else { vec![] };
        assert_eq!(trims, want, "rank {rank}");
    }
}

/// Found in docs/RELIABILITY.md's Redis rows: an acknowledgement the log refused (Redis down)
/// was dropped, so the entries stayed pending for this rank and the next recovery redelivered
/// what its engine had already applied. It is made again every interval until it is taken.
#[tokio::test(flavor = "current_thread")]
async fn an_acknowledgement_the_log_refused_is_made_again_until_it_is_taken() {
    let mut d = Driver::new(2, 1);
    let e1 = d.log.next_epoch().await.unwrap();
    let mut l = EpochLoop::new(config(1, true), 0);
    d.advance(&mut l, 0).await;
    assert_eq!(l.running(), Some(e1));
    d.log
        .append_step(e1, Step(0), &[store_start(0)], &[ok(0)])
        .await
        .unwrap();
    d.advance(&mut l, 100).await;
    assert_eq!(
        d.log.pending(Rank(1)).await.unwrap().len(),
        1,
        "read, not acknowledged"
    );
    d.down = true;
    l.handle_event(
        &Event::EngineAcked {
            epoch: e1,
            step: Step(0),
        },
        d.now_ms,
    );
    d.advance(&mut l, 300).await;
    assert_eq!(
        d.log.pending(Rank(1)).await.unwrap().len(),
        1,
        "the log refused it"
    );
    d.down = false;
    d.advance(&mut l, 100).await;
    assert!(
        d.log.pending(Rank(1)).await.unwrap().is_empty(),
        "the refused acknowledgement was made again once the log answered"
    );
    let cursors = d.log.cursors().await.unwrap();
    assert!(cursors[1].pending.is_empty());
}

/// Redis stopped, then back: the running core is told once that the log does not answer
/// (its rank is not ready, whatever its role), and once that it answers again.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_heartbeat_makes_the_running_core_not_ready_until_one_is_written() {
    let mut d = Driver::new(2, 1);
    let e1 = d.log.next_epoch().await.unwrap();
    let mut l = EpochLoop::new(config(1, true), 0);
    let done = d.advance(&mut l, 0).await;
    let health = |done: &[Effect]| -> Vec<LogHealth> {
        done.iter()
            .filter_map(|e| match e {
                Effect::LogHealth { epoch, health } if *epoch == e1 => Some(health.clone()),
                _ => None,
            })
            .collect()
    };
    assert!(
        health(&done).is_empty(),
        "up from the start: nothing to say"
    );
    d.down = true;
    let done = d.advance(&mut l, 500).await;
    assert_eq!(
        health(&done),
        vec![LogHealth::Unavailable(
            "redis ack timed out after 1000 ms".into()
        )],
        "said once, not every interval"
    );
    d.down = false;
    let done = d.advance(&mut l, 100).await;
    assert_eq!(health(&done), vec![LogHealth::Up]);
}

/// The completion stream deleted under a running epoch: the rank's next read finds it gone
/// and the core is told (it fails the epoch, so that the group moves to a new one); once.
#[tokio::test(flavor = "current_thread")]
async fn a_read_that_finds_the_stream_gone_tells_the_core_once() {
    let mut d = Driver::new(2, 1);
    let e1 = d.log.next_epoch().await.unwrap();
    let mut l = EpochLoop::new(config(1, true), 0);
    d.advance(&mut l, 0).await;
    d.lost = true;
    let done = d.advance(&mut l, 500).await;
    let lost: Vec<&Effect> = done
        .iter()
        .filter(|e| {
            matches!(e, Effect::LogHealth { epoch, health: LogHealth::StreamLost(r) }
                if *epoch == e1 && r.contains("is gone"))
        })
        .collect();
    assert_eq!(lost.len(), 1, "{done:?}");
}

/// The stream lost under epoch 1: the leader's core handed on its tasks in flight and its
/// unrevealed outcomes; the new epoch's recovery reads an empty stream, and frame 0 still
/// aborts those tasks and redelivers those outcomes (else engines would wait for them for
/// good: the replay counted them lost).
#[tokio::test(flavor = "current_thread")]
async fn a_lost_history_the_leader_handed_on_joins_the_next_reconciliation() {
    let mut d = Driver::new(2, 0);
    let e1 = d.log.next_epoch().await.unwrap();
    let mut l = EpochLoop::new(config(0, true), 0);
    d.advance(&mut l, 0).await;
    assert_eq!(l.running(), Some(e1));
    let in_flight = tandem_proto::InFlightTask {
        task: TaskId { epoch: 1, seq: 5 },
        kind: TaskKind::Store,
        request: RequestId(5),
    };
    l.handle_event(
        &Event::HistoryLost {
            epoch: e1,
            in_flight: vec![in_flight],
            unrevealed: vec![ok(4)],
        },
        d.now_ms,
    );
    l.handle_event(
        &Event::Failed {
            epoch: e1,
            reason: "the completion stream is lost".into(),
        },
        d.now_ms,
    );
    let e2 = d.log.next_epoch().await.unwrap();
    let done = d.advance(&mut l, 100).await;
    let (epoch, start) = started(&done).pop().expect("epoch 2 started");
    assert_eq!(epoch, e2);
    assert_eq!(start.aborted, vec![in_flight.aborted()]);
    let rec = start.reconciliation.expect("a reconciliation");
    assert_eq!(rec.redelivered, vec![ok(4)]);
    assert_eq!(rec.aborted, vec![in_flight.aborted()]);
    // Only once: a later epoch starts with what the log says alone.
    let e3 = d.log.next_epoch().await.unwrap();
    let done = d.advance(&mut l, 100).await;
    let (epoch, start) = started(&done).pop().expect("epoch 3 started");
    assert_eq!(epoch, e3);
    assert!(start.aborted.is_empty());
}

/// Found with Redis stopped 5 s during a replay (tests/redis_faults.rs): the follower's engine
/// acknowledged a frame per step, each acknowledgement queued one more read of the log, each
/// read waited its 1 s deadline, and the rank's heartbeat waited behind them all: the rank
/// never said it was not ready, and its heartbeat went stale. One waiting read now covers
/// every acknowledgement (they are cumulative), and the tick's heartbeat goes first.
#[test]
fn acknowledgements_while_the_log_hangs_queue_one_read_and_the_heartbeat_goes_first() {
    let mut c = config(1, true);
    c.follow = false;
    let mut l = EpochLoop::new(c, 0);
    l.poll_effect();
    l.handle_outcome(Outcome::Recovered(Ok(Box::default())), 0);
    l.poll_effect();
    l.handle_outcome(Outcome::Blocks(None), 0);
    let epoch = l.running().expect("running");
    let timeout = || Err::<(), String>("redis timed out after 1000 ms".into());
    let answer = |e: &Effect| -> Option<Outcome> {
        Some(match e {
            Effect::Heartbeat { .. } => Outcome::HeartbeatWritten(timeout()),
            Effect::ReadNew { .. } => Outcome::Read(Err(DurableError::Timeout {
                op: "read_new",
                ms: 1000,
            })),
            Effect::Ack { .. } => Outcome::Acked(timeout().map(|_| 0)),
            Effect::AckThrough { .. } => Outcome::AckedThrough(timeout().map(|_| 0)),
            _ => return None,
        })
    };
    // The first tick, carried out.
    while let Some(e) = l.poll_effect() {
        if let Some(o) = answer(&e) {
            l.handle_outcome(o, 0);
        }
    }
    // The engine acknowledges step 0; its read hangs (Redis stopped) while 50 more
    // acknowledgements come.
    let ack = |l: &mut EpochLoop, step| {
        l.handle_event(
            &Event::EngineAcked {
                epoch,
                step: Step(step),
            },
            10,
        )
    };
    ack(&mut l, 0);
    let hanging = l.poll_effect().expect("a read");
    assert!(matches!(hanging, Effect::ReadNew { .. }), "{hanging:?}");
    for step in 1..=50 {
        ack(&mut l, step);
    }
    l.handle_timeout(100);
    l.handle_outcome(answer(&hanging).expect("an answer"), 1_000);
    let mut calls = Vec::new();
    while let Some(e) = l.poll_effect() {
        let Some(o) = answer(&e) else { continue };
        calls.push(
            format!("{e:?}")
                .split([' ', '{', '('])
                .next()
                .unwrap_or("")
                .to_string(),
        );
        l.handle_outcome(o, 1_000);
    }
    // The heartbeat first, then one read for the 50 acknowledgements and the tick's read.
    assert_eq!(calls, vec!["Heartbeat", "ReadNew", "ReadNew"]);
}

/// Found in docs/RELIABILITY.md's Redis rows ("rank 1 silent for 923 ms"): the loop carried
/// one call at a time, so a heartbeat waited behind a read the log had not answered, for up to
/// that read's 1,000 ms deadline, longer than the 500 ms heartbeat timeout. The heartbeat has
/// its own path: it goes beside the call in flight, every interval, and the other calls go on
/// while a heartbeat is unanswered; either answer may come first.
#[test]
fn a_heartbeat_goes_beside_a_call_the_log_has_not_answered() {
    let mut c = config(1, true);
    c.follow = false;
    let mut l = EpochLoop::new(c, 0);
    l.poll_effect();
    l.handle_outcome(Outcome::Recovered(Ok(Box::default())), 0);
    l.poll_effect();
    l.handle_outcome(Outcome::Blocks(None), 0);
    assert!(matches!(l.poll_effect(), Some(Effect::StartEpoch { .. })));
    // The first tick: its heartbeat and its read go out together.
    let first = l.poll_effect();
    assert!(matches!(first, Some(Effect::Heartbeat { .. })), "{first:?}");
    let read = l.poll_effect();
    assert!(matches!(read, Some(Effect::ReadNew { .. })), "{read:?}");
    assert_eq!(l.poll_effect(), None, "one call of each path in flight");
    l.handle_outcome(Outcome::HeartbeatWritten(Ok(())), 5);
    assert!(matches!(
        l.poll_effect(),
        Some(Effect::Note(Note::RedisUp(true)))
    ));
    // The read hangs (Redis answers it late) for five intervals: a heartbeat every interval.
    let mut beats = 0;
    for now in [100, 200, 300, 400, 500] {
        l.handle_timeout(now);
        while let Some(e) = l.poll_effect() {
            match e {
                Effect::Heartbeat { .. } => {
                    beats += 1;
                    l.handle_outcome(Outcome::HeartbeatWritten(Ok(())), now + 1);
                }
                Effect::Note(Note::RedisUp(true)) => {}
                other => panic!("only heartbeats while the read hangs, got {other:?}"),
            }
        }
    }
    assert_eq!(
        beats, 5,
        "one heartbeat per interval while the read is unanswered"
    );
    // A heartbeat that hangs in its turn does not hold up the read's successors.
    l.handle_timeout(600);
    assert!(matches!(l.poll_effect(), Some(Effect::Heartbeat { .. })));
    l.handle_outcome(Outcome::Read(Ok(Vec::new())), 650);
    assert_eq!(l.poll_effect(), None);
    // The next interval's read goes; no second heartbeat while one is unanswered, but one is
    // planned for when it ends.
    l.handle_timeout(700);
    let next = l.poll_effect();
    assert!(matches!(next, Some(Effect::ReadNew { .. })), "{next:?}");
    assert_eq!(l.poll_effect(), None);
    l.handle_outcome(
        Outcome::HeartbeatWritten(Err("redis heartbeat timed out after 1000 ms".into())),
        750,
    );
    let after: Vec<Effect> = std::iter::from_fn(|| l.poll_effect()).collect();
    assert!(
        matches!(after.last(), Some(Effect::Heartbeat { .. })),
        "the planned heartbeat goes as soon as the last one ended: {after:?}"
    );
    assert!(after.iter().any(|e| matches!(
        e,
        Effect::LogHealth {
            health: LogHealth::Unavailable(_),
            ..
        }
    )));
}

/// Issue 15: every engine acknowledgement made the loop read the stream (and acknowledge what
/// it covered): a Redis round trip or two per rank per step. Acknowledgements are cumulative,
/// so they now reach the log at most once per `ack_interval_ms`, and still every one of them.
#[tokio::test(flavor = "current_thread")]
async fn engine_acknowledgements_reach_the_log_at_most_once_per_interval() {
    let mut d = Driver::new(2, 1);
    let e1 = d.log.next_epoch().await.unwrap();
    let mut l = EpochLoop::new(config(1, true), 0);
    d.advance(&mut l, 0).await;
    assert_eq!(l.running(), Some(e1));
    let (reads, acks) = (d.reads, d.acks.len());
    // 200 steps, one per ms, each with an entry in the stream, each acknowledged by the engine.
    for s in 0..200 {
        d.log
            .append_step(e1, Step(s), &[store_start(s)], &[ok(s)])
            .await
            .unwrap();
        l.handle_event(
            &Event::EngineAcked {
                epoch: e1,
                step: Step(s),
            },
            d.now_ms,
        );
        d.advance(&mut l, 1).await;
    }
    let (reads, acks) = (d.reads - reads, d.acks.len() - acks);
    // 200 ms at 10 ms: at most one acknowledgement (and its read) at 0, 10, ..., 200 ms, plus
    // the two ticks' reads; one per step would be 200 of each.
    assert!((10..=21).contains(&acks), "{acks} acknowledgements");
    assert!(reads <= 21 + 2, "{reads} reads");
    // The last steps' acknowledgement goes when its interval ends: nothing stays pending.
    d.advance(&mut l, 10).await;
    assert!(d.log.pending(Rank(1)).await.unwrap().is_empty());
    let rec = d.log.recover().await.unwrap();
    assert_eq!(
        rec.acknowledged_by_rank[1].len(),
        200,
        "every outcome the engine acknowledged is acknowledged for its rank"
    );
}

/// The cadence, on the loop alone: an engine acknowledgement after a quiet interval goes to
/// the log at once; the ones within the next interval are recorded and go together when it
/// ends, as one read for the newest step.
#[test]
fn an_engine_ack_after_a_quiet_interval_goes_at_once_and_later_ones_wait_for_its_end() {
    let mut c = config(1, true);
    c.follow = false;
    let mut l = EpochLoop::new(c, 0);
    l.poll_effect();
    l.handle_outcome(Outcome::Recovered(Ok(Box::default())), 0);
    l.poll_effect();
    l.handle_outcome(Outcome::Blocks(None), 0);
    let epoch = l.running().expect("running");
    // The first tick, answered.
    while let Some(e) = l.poll_effect() {
        match e {
            Effect::Heartbeat { .. } => l.handle_outcome(Outcome::HeartbeatWritten(Ok(())), 0),
            Effect::ReadNew { .. } => l.handle_outcome(Outcome::Read(Ok(Vec::new())), 0),
            _ => {}
        }
    }
    let ack = |l: &mut EpochLoop, step, now| {
        l.handle_event(
            &Event::EngineAcked {
                epoch,
                step: Step(step),
            },
            now,
        )
    };
    let reads = |l: &mut EpochLoop, now| {
        let mut n = 0;
        while let Some(e) = l.poll_effect() {
            if let Effect::ReadNew { .. } = e {
                n += 1;
                l.handle_outcome(Outcome::Read(Ok(Vec::new())), now);
            }
        }
        n
    };
    ack(&mut l, 0, 20);
    assert_eq!(reads(&mut l, 20), 1, "after a quiet interval: at once");
    for (step, now) in [(1, 21), (2, 23), (3, 29)] {
        ack(&mut l, step, now);
        assert_eq!(
            reads(&mut l, now),
            0,
            "step {step} at {now} ms: recorded only"
        );
    }
    assert_eq!(
        l.poll_timeout(),
        Some(30),
        "due one interval after the last"
    );
    l.handle_timeout(29);
    assert_eq!(reads(&mut l, 29), 0);
    l.handle_timeout(30);
    assert_eq!(reads(&mut l, 30), 1, "steps 1 to 3 in one read");
    assert_eq!(l.poll_timeout(), Some(100), "nothing waits: the next tick");
    l.handle_timeout(45);
    assert_eq!(reads(&mut l, 45), 0);
    ack(&mut l, 4, 45);
    assert_eq!(
        reads(&mut l, 45),
        1,
        "the interval since the last one passed: at once"
    );
}

/// The stream holds entries of steps the engine has not acknowledged yet (the leader runs
/// ahead, the tick reads them): however the engine's acknowledgements are spaced, no entry is
/// acknowledged before the engine acknowledged the frame of its step, since recovery trusts
/// these acknowledgements (a redelivery the rank's core leaves out of frame 0 must have
/// reached the engine).
#[tokio::test(flavor = "current_thread")]
async fn acknowledged_entries_never_run_ahead_of_the_engine() {
    let mut d = Driver::new(2, 1);
    let e1 = d.log.next_epoch().await.unwrap();
    let mut l = EpochLoop::new(config(1, true), 0);
    d.advance(&mut l, 0).await;
    let mut step_of = std::collections::BTreeMap::new();
    for s in 0..60 {
        let id = d
            .log
            .append_step(e1, Step(s), &[store_start(s)], &[ok(s)])
            .await
            .unwrap();
        step_of.insert(id, s);
    }
    // The tick reads all 60 entries before the engine acknowledged any.
    d.advance(&mut l, 100).await;
    assert_eq!(d.log.pending(Rank(1)).await.unwrap().len(), 60);
    for s in 0..60u64 {
        l.handle_event(
            &Event::EngineAcked {
                epoch: e1,
                step: Step(s),
            },
            d.now_ms,
        );
        // Irregular gaps, some shorter and some longer than the interval.
        d.advance(&mut l, [1, 3, 0, 12, 7, 25, 2][s as usize % 7])
            .await;
        for id in d.acks.iter().flatten() {
            assert!(
                step_of[id] <= s,
                "entry of step {} acknowledged when the engine had acknowledged step {s}",
                step_of[id]
            );
        }
    }
    d.advance(&mut l, 10).await;
    assert!(
        d.log.pending(Rank(1)).await.unwrap().is_empty(),
        "and every entry is acknowledged once the engine acknowledged its step"
    );
    assert!(d.acks.len() < 60, "{} acknowledgements", d.acks.len());
}
