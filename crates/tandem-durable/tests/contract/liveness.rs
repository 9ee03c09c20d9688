//! [`tandem_durable::LivenessStore`]: expiry on the backend's clock, reports in order once
//! and bounded, one slot per rank and epoch.

use tandem_durable::liveness::MAX_FAILURE_REPORTS;
use tandem_durable::{FailureReport, Heartbeat};
use tandem_proto::{Epoch, Rank};

use crate::{open, Kind};

/// Long enough that no test run gets near it.
const LONG_TTL_MS: u64 = 600_000;
/// Short enough to pass in a test; the test lets well over it pass.
const SHORT_TTL_MS: u64 = 100;
const PAST_SHORT_TTL_MS: u64 = 300;

pub(crate) async fn heartbeats_expire_after_their_ttl(kind: Kind) {
    let b = open(kind, 3).await;
    let log = &b.liveness;
    assert_eq!(log.heartbeats().await.unwrap(), vec![None; 3]);
    let beat = |epoch, unix_ms| Heartbeat {
        epoch: Epoch(epoch),
        unix_ms,
        incarnation: 7,
    };
    log.heartbeat(Rank(0), beat(1, 10), LONG_TTL_MS)
        .await
        .unwrap();
    log.heartbeat(Rank(2), beat(1, 20), SHORT_TTL_MS)
        .await
        .unwrap();
    assert_eq!(
        log.heartbeats().await.unwrap(),
        vec![Some(beat(1, 10)), None, Some(beat(1, 20))]
    );
    b.advance(PAST_SHORT_TTL_MS).await;
    assert_eq!(
        log.heartbeats().await.unwrap(),
        vec![Some(beat(1, 10)), None, None],
        "rank 2's heartbeat expired, rank 0's did not"
    );
    // A newer beat replaces the value and its expiry.
    log.heartbeat(Rank(0), beat(2, 30), SHORT_TTL_MS)
        .await
        .unwrap();
    assert_eq!(log.heartbeats().await.unwrap()[0], Some(beat(2, 30)));
    b.advance(PAST_SHORT_TTL_MS).await;
    assert_eq!(log.heartbeats().await.unwrap(), vec![None; 3]);
}

pub(crate) async fn manifests_are_kept_per_epoch_and_expire(kind: Kind) {
    let b = open(kind, 2).await;
    let log = &b.liveness;
    assert_eq!(log.manifests(Epoch(1)).await.unwrap(), vec![None, None]);
    log.put_manifest(Epoch(1), Rank(1), b"rank1-e1", LONG_TTL_MS)
        .await
        .unwrap();
    log.put_manifest(Epoch(2), Rank(0), b"rank0-e2", SHORT_TTL_MS)
        .await
        .unwrap();
    assert_eq!(
        log.manifests(Epoch(1)).await.unwrap(),
        vec![None, Some(b"rank1-e1".to_vec())]
    );
    assert_eq!(
        log.manifests(Epoch(2)).await.unwrap(),
        vec![Some(b"rank0-e2".to_vec()), None]
    );
    b.advance(PAST_SHORT_TTL_MS).await;
    assert_eq!(log.manifests(Epoch(2)).await.unwrap(), vec![None, None]);
    assert_eq!(
        log.manifests(Epoch(1)).await.unwrap(),
        vec![None, Some(b"rank1-e1".to_vec())]
    );
    log.put_manifest(Epoch(1), Rank(1), b"again", LONG_TTL_MS)
        .await
        .unwrap();
    assert_eq!(
        log.manifests(Epoch(1)).await.unwrap()[1].as_deref(),
        Some(&b"again"[..])
    );
}

pub(crate) async fn failure_reports_come_out_in_order_once_and_bounded(kind: Kind) {
    let b = open(kind, 2).await;
    let log = &b.liveness;
    let report = |n: u64| FailureReport {
        epoch: Epoch(1),
        rank: Rank((n % 2) as u32),
        reason: format!("failure {n}"),
    };
    assert_eq!(log.take_failures(10).await.unwrap(), (vec![], vec![]));
    for n in 0..3 {
        log.report_failure(&report(n)).await.unwrap();
    }
    let (first, bad) = log.take_failures(2).await.unwrap();
    assert!(bad.is_empty());
    assert_eq!(first, vec![report(0), report(1)]);
    let (rest, _) = log.take_failures(0).await.unwrap();
    assert_eq!(rest, vec![report(2)], "max 0 still takes one");
    assert!(
        log.take_failures(10).await.unwrap().0.is_empty(),
        "each once"
    );

    let cap = MAX_FAILURE_REPORTS as u64;
    for n in 0..cap + 5 {
        log.report_failure(&report(n)).await.unwrap();
    }
    let (kept, _) = log.take_failures(2 * cap as usize).await.unwrap();
    assert_eq!(kept.len() as u64, cap, "bounded");
    assert_eq!(kept[0], report(5), "the oldest were dropped");
    assert_eq!(kept.last(), Some(&report(cap + 4)));
}

pub(crate) async fn event_sequence_numbers_never_repeat_across_a_restart(kind: Kind) {
    let b = open(kind, 2).await;
    assert_eq!(b.liveness.reserve_event_seqs(1).await.unwrap(), 0);
    assert_eq!(b.liveness.reserve_event_seqs(3).await.unwrap(), 1);
    assert_eq!(b.liveness.reserve_event_seqs(1).await.unwrap(), 4);
    // A restarted leader's agent: a new handle on the same group continues after the last.
    let again = b.reopen().await;
    assert_eq!(again.liveness.reserve_event_seqs(1).await.unwrap(), 5);
    assert_eq!(b.liveness.reserve_event_seqs(1).await.unwrap(), 6);
}
