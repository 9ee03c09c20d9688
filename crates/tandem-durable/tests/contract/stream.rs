//! [`tandem_durable::CompletionStream`]: fencing by epoch, per-rank delivery and acks,
//! recovery, safe trimming.

use std::collections::BTreeSet;

use tandem_durable::{DurableError, StepRecord, StreamEntryId};
use tandem_proto::{Epoch, OutcomeResult, Rank, Step, TaskId};

use crate::{ids, ok, open, started, Kind};

pub(crate) async fn append_then_read_per_rank_then_ack(kind: Kind) {
    let b = open(kind, 2).await;
    let log = &b.stream;
    let e = b.epochs.next_epoch().await.unwrap();
    let a = log
        .append_step(e, Step(0), &[started(1, 0), started(1, 1)], &[])
        .await
        .unwrap();
    let c = log
        .append_step(e, Step(1), &[], &[ok(1, 0), ok(1, 1)])
        .await
        .unwrap();
    assert!(a < c);

    let read = log.read_new(Rank(0), 10).await.unwrap();
    assert_eq!(ids(&read), vec![a, c]);
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
    assert_eq!(log.pending(Rank(0)).await.unwrap(), vec![a, c]);
    assert_eq!(log.ack(Rank(0), &[a, c]).await.unwrap(), 2);
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
    assert_eq!(ids(&log.read_new(Rank(1), 1).await.unwrap()), vec![c]);
    assert_eq!(log.world_size(), 2);
}

pub(crate) async fn appends_are_fenced_by_the_epoch_barrier(kind: Kind) {
    let b = open(kind, 1).await;
    let log = &b.stream;
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
    let e1 = b.epochs.next_epoch().await.unwrap();
    assert_eq!(e1, Epoch(1));
    let a = log
        .append_step(e1, Step(0), &[], &[ok(1, 0)])
        .await
        .unwrap();
    assert_eq!(a, StreamEntryId { ms: 1, seq: 1 }, "after the barrier 1-0");
    let e2 = b.epochs.next_epoch().await.unwrap();
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

pub(crate) async fn the_fence_holds_on_a_stream_trimmed_empty(kind: Kind) {
    let b = open(kind, 1).await;
    let log = &b.stream;
    let e1 = b.epochs.next_epoch().await.unwrap();
    let a = log
        .append_step(e1, Step(0), &[], &[ok(1, 0)])
        .await
        .unwrap();
    let read = log.read_new(Rank(0), 10).await.unwrap();
    log.ack(Rank(0), &ids(&read)).await.unwrap();
    assert_eq!(log.trim(0).await.unwrap(), 2, "the barrier and the step");
    assert_eq!(log.stream_len().await.unwrap(), 0);

    let e2 = b.epochs.next_epoch().await.unwrap();
    assert_eq!(e2, Epoch(2));
    assert!(matches!(
        log.append_step(e1, Step(1), &[], &[]).await,
        Err(DurableError::StaleEpoch { .. })
    ));
    let c = log.append_step(e2, Step(0), &[], &[]).await.unwrap();
    assert_eq!(c, StreamEntryId { ms: 2, seq: 1 });
    assert!(c > a, "ids are never reused after a trim");
    let rec = log.recover().await.unwrap();
    assert!(rec.redelivered.is_empty() && rec.in_flight.is_empty());
}

pub(crate) async fn unacked_entries_after_a_crash_are_redelivered_once(kind: Kind) {
    let b = open(kind, 2).await;
    let first = &b.stream;
    let e1 = b.epochs.next_epoch().await.unwrap();
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

    let reopened = b.reopen().await;
    drop(b);
    let second = &reopened.stream;
    let e2 = reopened.epochs.next_epoch().await.unwrap();
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

pub(crate) async fn in_flight_tasks_are_aborted_once_and_never_also_delivered(kind: Kind) {
    let b = open(kind, 1).await;
    let log = &b.stream;
    let e1 = b.epochs.next_epoch().await.unwrap();
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

    let e2 = b.epochs.next_epoch().await.unwrap();
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
    let _e3 = b.epochs.next_epoch().await.unwrap();
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

pub(crate) async fn duplicate_appends_are_suppressed_by_task_id(kind: Kind) {
    let b = open(kind, 2).await;
    let log = &b.stream;
    let e = b.epochs.next_epoch().await.unwrap();
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

pub(crate) async fn ack_through_settles_undelivered_entries_and_never_moves_back(kind: Kind) {
    let b = open(kind, 2).await;
    let log = &b.stream;
    let e = b.epochs.next_epoch().await.unwrap();
    let mut all = Vec::new();
    for s in 0..4 {
        all.push(log.append_step(e, Step(s), &[], &[ok(1, s)]).await.unwrap());
    }
    // Rank 0 read the barrier and two steps; rank 1 read nothing.
    assert_eq!(ids(&log.read_new(Rank(0), 3).await.unwrap()), all[..2]);
    assert_eq!(log.ack_through(Rank(0), all[2]).await.unwrap(), 2);
    assert!(log.pending(Rank(0)).await.unwrap().is_empty());
    assert_eq!(
        log.ack_through(Rank(1), all[1]).await.unwrap(),
        0,
        "nothing was pending"
    );
    assert_eq!(
        ids(&log.read_new(Rank(1), 10).await.unwrap()),
        all[2..],
        "entries up to the settled one are never handed out"
    );
    // Settling an older point does not move a position back.
    assert_eq!(log.ack_through(Rank(0), all[0]).await.unwrap(), 0);
    assert_eq!(ids(&log.read_new(Rank(0), 10).await.unwrap()), all[3..]);
}

pub(crate) async fn cursors_show_each_ranks_position(kind: Kind) {
    let b = open(kind, 3).await;
    let log = &b.stream;
    assert_eq!(
        log.cursors().await.unwrap(),
        vec![Default::default(); 3],
        "nothing delivered yet"
    );
    let e = b.epochs.next_epoch().await.unwrap();
    let a = log.append_step(e, Step(0), &[], &[ok(1, 0)]).await.unwrap();
    let c = log.append_step(e, Step(1), &[], &[ok(1, 1)]).await.unwrap();
    log.read_new(Rank(0), 10).await.unwrap();
    log.ack(Rank(0), &[a]).await.unwrap();
    log.read_new(Rank(1), 2).await.unwrap();
    let cursors = log.cursors().await.unwrap();
    assert_eq!(cursors.len(), 3);
    assert_eq!(cursors[0].last_delivered, c);
    assert_eq!(cursors[0].pending, [c].into());
    assert!(cursors[0].acked(a) && !cursors[0].acked(c));
    assert_eq!(cursors[1].last_delivered, a);
    assert_eq!(cursors[1].pending, [a].into());
    assert_eq!(cursors[2].last_delivered, StreamEntryId::ZERO);
    assert!(cursors[2].pending.is_empty());
}

pub(crate) async fn trim_keeps_unacked_entries_and_removes_fully_acked_ones(kind: Kind) {
    let b = open(kind, 2).await;
    let log = &b.stream;
    let e = b.epochs.next_epoch().await.unwrap();
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

pub(crate) async fn trim_keeps_starts_of_unfinished_tasks(kind: Kind) {
    let b = open(kind, 1).await;
    let log = &b.stream;
    let e = b.epochs.next_epoch().await.unwrap();
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
    let _e2 = b.epochs.next_epoch().await.unwrap();
    let rec = log.recover().await.unwrap();
    assert_eq!(rec.in_flight.len(), 1);
    assert_eq!(rec.in_flight[0].task, TaskId { epoch: 1, seq: 1 });
    assert!(rec.last_entry_id > Some(keep));
}

pub(crate) async fn ranks_outside_the_group_are_refused(kind: Kind) {
    let b = open(kind, 2).await;
    let e = b.epochs.next_epoch().await.unwrap();
    let out = Rank(2);
    let msg = "rank 2 is outside the group of 2 ranks";
    let err = b.stream.read_new(out, 1).await.unwrap_err();
    assert_eq!(err.to_string(), msg);
    for err in [
        b.stream.ack(out, &[StreamEntryId::ZERO]).await.unwrap_err(),
        b.stream.pending(out).await.unwrap_err(),
        b.stream
            .ack_through(out, StreamEntryId::ZERO)
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.to_string(), msg);
    }
    assert!(matches!(
        b.epochs.join(e, out).await,
        Err(DurableError::RankOutOfRange { .. })
    ));
    let beat = tandem_durable::Heartbeat {
        epoch: e,
        unix_ms: 1,
        incarnation: 1,
    };
    assert!(matches!(
        b.liveness.heartbeat(out, beat, 1_000).await,
        Err(DurableError::RankOutOfRange { .. })
    ));
    assert!(matches!(
        b.liveness.put_manifest(e, out, b"x", 1_000).await,
        Err(DurableError::RankOutOfRange { .. })
    ));
}
