//! The completion log against a real redis-server: append, per-rank delivery, recovery,
//! duplicate suppression, trimming, the epoch counter, supervisor state and membership.

use std::collections::BTreeSet;
use tandem_durable::{
    CompletionLog, DurableConfig, DurableError, GroupState, StartedTask, StepRecord, StreamEntryId,
    SupervisorState,
};
use tandem_proto::{
    BlockHash, Epoch, OutcomeResult, PageId, Rank, RequestId, Step, TaskId, TaskKind, TaskOutcome,
    TaskStart,
};
use tandem_tests::redis::RedisServer;

async fn log(server: &RedisServer, world_size: u32) -> CompletionLog {
    CompletionLog::connect(&DurableConfig::new(server.url(), "g1", world_size))
        .await
        .expect("connect")
}

fn started(epoch: u64, seq: u64) -> StartedTask {
    StartedTask {
        kind: TaskKind::Store,
        start: TaskStart {
            task: TaskId { epoch, seq },
            request: RequestId(seq),
            block_hashes: vec![BlockHash::from(seq), BlockHash::from(seq + 1)],
            page_ids: vec![PageId(1), PageId(2)],
            tiers: vec![],
        },
    }
}

fn ok(epoch: u64, seq: u64) -> TaskOutcome {
    TaskOutcome {
        task: TaskId { epoch, seq },
        kind: TaskKind::Store,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    }
}

fn ids(entries: &[tandem_durable::LoggedStep]) -> Vec<StreamEntryId> {
    entries.iter().map(|e| e.id).collect()
}

#[tokio::test]
async fn append_then_read_per_rank_then_ack() {
    let server = RedisServer::start();
    let log = log(&server, 2).await;
    let e = log.next_epoch().await.unwrap();
    let a = log
        .append_step(e, Step(0), &[started(1, 0), started(1, 1)], &[])
        .await
        .unwrap();
    let b = log
        .append_step(e, Step(1), &[], &[ok(1, 0), ok(1, 1)])
        .await
        .unwrap();
    assert!(a < b);

    let read = log.read_new(Rank(0), 10).await.unwrap();
    assert_eq!(ids(&read), vec![a, b]);
    assert_eq!(
        read[1].record,
        StepRecord {
            epoch: e,
            step: Step(1),
            started: vec![],
            finished: vec![ok(1, 0), ok(1, 1)]
        }
    );
    assert_eq!(read[0].record.started, vec![started(1, 0), started(1, 1)]);
    assert_eq!(log.pending(Rank(0)).await.unwrap(), vec![a, b]);
    assert_eq!(log.ack(Rank(0), &[a, b]).await.unwrap(), 2);
    assert!(log.pending(Rank(0)).await.unwrap().is_empty());
    assert!(log.read_new(Rank(0), 10).await.unwrap().is_empty());
    assert_eq!(
        log.ack(Rank(0), &[a]).await.unwrap(),
        0,
        "acking twice changes nothing"
    );

    // Rank 1 has its own position: it still gets both, one at a time (the epoch's barrier
    // comes first and is acknowledged by the read itself).
    assert!(log.read_new(Rank(1), 1).await.unwrap().is_empty());
    assert!(log.pending(Rank(1)).await.unwrap().is_empty());
    assert_eq!(ids(&log.read_new(Rank(1), 1).await.unwrap()), vec![a]);
    assert_eq!(ids(&log.read_new(Rank(1), 1).await.unwrap()), vec![b]);

    let err = log.read_new(Rank(2), 1).await.unwrap_err();
    assert_eq!(err.to_string(), "rank 2 is outside the group of 2 ranks");
}

#[tokio::test]
async fn appends_are_fenced_by_the_epoch_barrier() {
    let server = RedisServer::start();
    let log = log(&server, 1).await;
    let err = log
        .append_step(Epoch(0), Step(0), &[], &[])
        .await
        .unwrap_err();
    assert_eq!(
        err,
        DurableError::StaleEpoch {
            epoch: Epoch(0),
            current: Epoch(0)
        }
    );
    let e1 = log.next_epoch().await.unwrap();
    assert_eq!(e1, Epoch(1));
    let a = log
        .append_step(e1, Step(0), &[], &[ok(1, 0)])
        .await
        .unwrap();
    assert_eq!(a, StreamEntryId { ms: 1, seq: 1 }, "after the barrier 1-0");
    let e2 = log.next_epoch().await.unwrap();
    let err = log
        .append_step(e1, Step(1), &[], &[ok(1, 1)])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "append for epoch 1 refused: the group is at epoch 2"
    );
    log.append_step(e2, Step(0), &[], &[]).await.unwrap();
    assert_eq!(
        log.stream_len().await.unwrap(),
        4,
        "two barriers, two steps, nothing from the stale append"
    );
}

#[tokio::test]
async fn next_epoch_never_repeats_when_the_counter_was_lost() {
    let server = RedisServer::start();
    let log = log(&server, 1).await;
    for _ in 0..3 {
        log.next_epoch().await.unwrap();
    }
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&log.keys().epoch)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(log.current_epoch().await.unwrap(), Epoch(0));
    assert_eq!(log.next_epoch().await.unwrap(), Epoch(4));
    assert_eq!(log.current_epoch().await.unwrap(), Epoch(4));
}

#[tokio::test]
async fn unacked_entries_after_a_crash_are_redelivered_once() {
    let server = RedisServer::start();
    let first = log(&server, 2).await;
    let e1 = first.next_epoch().await.unwrap();
    let s0 = first
        .append_step(e1, Step(0), &[started(1, 0), started(1, 1)], &[])
        .await
        .unwrap();
    first
        .append_step(e1, Step(1), &[], &[ok(1, 0)])
        .await
        .unwrap();
    first
        .append_step(e1, Step(2), &[], &[ok(1, 1)])
        .await
        .unwrap();
    // Rank 0's engine acknowledged everything; rank 1 read all but acknowledged only step 0,
    // then its agent crashed.
    let all = ids(&first.read_new(Rank(0), 10).await.unwrap());
    first.ack(Rank(0), &all).await.unwrap();
    first.read_new(Rank(1), 10).await.unwrap();
    first.ack(Rank(1), &[s0]).await.unwrap();
    drop(first);

    let second = log(&server, 2).await;
    let e2 = second.next_epoch().await.unwrap();
    let rec = second.recover().await.unwrap();
    assert_eq!(rec.redelivered, vec![ok(1, 0), ok(1, 1)]);
    assert!(rec.unacked_for(Rank(0)).is_empty());
    assert_eq!(rec.unacked_for(Rank(1)), &[ok(1, 0), ok(1, 1)]);
    let acked0: BTreeSet<TaskId> = [ok(1, 0).task, ok(1, 1).task].into();
    assert_eq!(rec.acknowledged_by_rank[0], acked0);
    assert!(rec.in_flight.is_empty());
    assert_eq!(
        rec.last_entry_id,
        Some(StreamEntryId { ms: e2.0, seq: 0 }),
        "the new epoch's barrier"
    );

    // Step 0 of the new epoch settles it; rank 1's engine acknowledges it.
    let step0 = second
        .append_step(e2, Step(0), &[], &rec.aborted())
        .await
        .unwrap();
    let through = rec.last_entry_id.unwrap();
    assert_eq!(second.ack_through(Rank(1), through).await.unwrap(), 2);
    assert!(second.pending(Rank(1)).await.unwrap().is_empty());
    assert_eq!(
        ids(&second.read_new(Rank(1), 10).await.unwrap()),
        vec![step0]
    );
    second.ack(Rank(1), &[step0]).await.unwrap();
    let r0 = second.read_new(Rank(0), 10).await.unwrap();
    second.ack(Rank(0), &ids(&r0)).await.unwrap();

    let again = second.recover().await.unwrap();
    assert!(again.redelivered.is_empty(), "delivered once: {again:?}");
    assert!(again.in_flight.is_empty());
}

#[tokio::test]
async fn in_flight_tasks_are_aborted_once_and_never_also_delivered() {
    let server = RedisServer::start();
    let log = log(&server, 1).await;
    let e1 = log.next_epoch().await.unwrap();
    log.append_step(
        e1,
        Step(0),
        &[started(1, 1), started(1, 2), started(1, 3)],
        &[],
    )
    .await
    .unwrap();
    log.append_step(e1, Step(1), &[], &[ok(1, 1)])
        .await
        .unwrap();

    let e2 = log.next_epoch().await.unwrap();
    let rec = log.recover().await.unwrap();
    let flying: Vec<u64> = rec.in_flight.iter().map(|t| t.task.seq).collect();
    assert_eq!(flying, vec![2, 3]);
    let aborted = rec.aborted();
    assert!(aborted.iter().all(|o| o.result == OutcomeResult::Aborted));
    log.append_step(e2, Step(0), &[], &aborted).await.unwrap();

    // The old leader cannot append an Ok for task 2 any more.
    let late = log.append_step(e1, Step(2), &[], &[ok(1, 2)]).await;
    assert!(matches!(late, Err(DurableError::StaleEpoch { .. })));

    // Crash again before any engine acknowledged: the aborts are now durable outcomes.
    let _e3 = log.next_epoch().await.unwrap();
    let rec = log.recover().await.unwrap();
    assert!(rec.in_flight.is_empty());
    let results: Vec<(u64, OutcomeResult)> = rec
        .redelivered
        .iter()
        .map(|o| (o.task.seq, o.result.clone()))
        .collect();
    assert_eq!(
        results,
        vec![
            (1, OutcomeResult::Ok),
            (2, OutcomeResult::Aborted),
            (3, OutcomeResult::Aborted)
        ]
    );
}

#[tokio::test]
async fn duplicate_appends_are_suppressed_by_task_id() {
    let server = RedisServer::start();
    let log = log(&server, 2).await;
    let e = log.next_epoch().await.unwrap();
    // An append that timed out is retried in the next step: the outcome is there twice.
    log.append_step(e, Step(0), &[], &[ok(1, 7), ok(1, 8)])
        .await
        .unwrap();
    log.append_step(e, Step(1), &[], &[ok(1, 7)]).await.unwrap();
    let rec = log.recover().await.unwrap();
    assert_eq!(rec.redelivered, vec![ok(1, 7), ok(1, 8)]);
    assert_eq!(rec.unacked_for(Rank(1)), &[ok(1, 7), ok(1, 8)]);
    assert_eq!(rec.duplicates_suppressed, 1);
}

#[tokio::test]
async fn trim_keeps_unacked_entries_and_removes_fully_acked_ones() {
    let server = RedisServer::start();
    let log = log(&server, 2).await;
    let e = log.next_epoch().await.unwrap();
    let mut all = Vec::new();
    for s in 0..10 {
        all.push(log.append_step(e, Step(s), &[], &[ok(1, s)]).await.unwrap());
    }
    // Rank 0 acknowledges everything. Rank 1 lags: 4 acknowledged, 2 pending, 4 undelivered
    // (the barrier before them counts toward `count` and is acknowledged by the read).
    let r0 = log.read_new(Rank(0), 100).await.unwrap();
    log.ack(Rank(0), &ids(&r0)).await.unwrap();
    let r1 = log.read_new(Rank(1), 7).await.unwrap();
    assert_eq!(ids(&r1), all[..6].to_vec());
    log.ack(Rank(1), &ids(&r1)[..4]).await.unwrap();

    assert_eq!(log.trim(0).await.unwrap(), 5, "the barrier and 4 steps");
    assert_eq!(log.stream_len().await.unwrap(), 6);
    assert_eq!(log.pending(Rank(1)).await.unwrap(), all[4..6].to_vec());
    assert_eq!(log.trim(0).await.unwrap(), 0, "lagging rank holds the rest");

    // Nothing rank 1 still needs was lost.
    let rest = log.read_new(Rank(1), 100).await.unwrap();
    assert_eq!(ids(&rest), all[6..].to_vec());
    log.ack(Rank(1), &all[4..]).await.unwrap();

    // Fully acknowledged now: max_len keeps the newest 3.
    assert_eq!(log.trim(3).await.unwrap(), 3);
    assert_eq!(log.stream_len().await.unwrap(), 3);
    assert_eq!(log.trim(3).await.unwrap(), 0);
}

#[tokio::test]
async fn trim_keeps_starts_of_unfinished_tasks() {
    let server = RedisServer::start();
    let log = log(&server, 1).await;
    let e = log.next_epoch().await.unwrap();
    log.append_step(e, Step(0), &[started(1, 0)], &[])
        .await
        .unwrap();
    let keep = log
        .append_step(e, Step(1), &[started(1, 1)], &[])
        .await
        .unwrap();
    log.append_step(e, Step(2), &[], &[ok(1, 0)]).await.unwrap();
    let r = log.read_new(Rank(0), 10).await.unwrap();
    log.ack(Rank(0), &ids(&r)).await.unwrap();

    assert_eq!(
        log.trim(0).await.unwrap(),
        2,
        "only the barrier and the entry before task 1's start go"
    );
    let _e2 = log.next_epoch().await.unwrap();
    let rec = log.recover().await.unwrap();
    assert_eq!(rec.in_flight.len(), 1);
    assert_eq!(rec.in_flight[0].task, TaskId { epoch: 1, seq: 1 });
    assert!(rec.last_entry_id > Some(keep));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epoch_increment_is_atomic_across_concurrent_callers() {
    let server = RedisServer::start();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let log = log(&server, 1).await;
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..25 {
                got.push(log.next_epoch().await.unwrap().0);
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(all, (1..=100).collect::<Vec<u64>>());
    assert_eq!(
        log(&server, 1).await.current_epoch().await.unwrap(),
        Epoch(100)
    );
}

#[tokio::test]
async fn supervisor_state_and_membership() {
    let server = RedisServer::start();
    let log = log(&server, 4).await;
    assert_eq!(log.current_epoch().await.unwrap(), Epoch(0));
    assert_eq!(log.load_supervisor_state().await.unwrap(), None);
    let state = SupervisorState {
        epoch: Epoch(3),
        restarts_ms: vec![1_700_000_000_000, 1_700_000_030_000],
        state: GroupState::Failed {
            reason: "4 restarts within 60 s".into(),
        },
    };
    log.save_supervisor_state(&state).await.unwrap();
    assert_eq!(
        log.load_supervisor_state().await.unwrap(),
        Some(state.clone())
    );
    let healthy = SupervisorState {
        state: GroupState::Healthy,
        restarts_ms: vec![],
        ..state
    };
    log.save_supervisor_state(&healthy).await.unwrap();
    assert_eq!(log.load_supervisor_state().await.unwrap(), Some(healthy));

    assert!(log.join(Epoch(3), Rank(2)).await.unwrap());
    assert!(log.join(Epoch(3), Rank(0)).await.unwrap());
    assert!(
        !log.join(Epoch(3), Rank(2)).await.unwrap(),
        "joining twice changes nothing"
    );
    assert_eq!(log.members(Epoch(3)).await.unwrap(), vec![Rank(0), Rank(2)]);
    assert!(log.members(Epoch(4)).await.unwrap().is_empty());
    assert!(matches!(
        log.join(Epoch(3), Rank(4)).await,
        Err(DurableError::RankOutOfRange { .. })
    ));
    log.forget_members(Epoch(3)).await.unwrap();
    assert!(log.members(Epoch(3)).await.unwrap().is_empty());
}

#[tokio::test]
async fn foreign_entries_are_reported_corrupt() {
    let server = RedisServer::start();
    let log = log(&server, 1).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let id: String = redis::cmd("XADD")
        .arg(&log.keys().completions)
        .arg("*")
        .arg("v")
        .arg("9")
        .arg("rec")
        .arg("x")
        .query_async(&mut c)
        .await
        .unwrap();
    let err = log.read_new(Rank(0), 1).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("stored value {id} is corrupt: unknown record version 9 (this build reads 2)")
    );
    assert!(matches!(
        log.recover().await,
        Err(DurableError::Corrupt { .. })
    ));
}
