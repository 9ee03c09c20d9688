//! [`tandem_durable::EpochStore`]: epochs only move forward, each with its barrier;
//! supervisor state replaced whole; membership a set.

use tandem_durable::{DurableError, GroupState, StreamEntryId, SupervisorState};
use tandem_proto::{Epoch, Rank, Step};

use crate::{ok, open, Kind};

pub(crate) async fn epoch_increment_is_atomic_across_concurrent_callers(kind: Kind) {
    let b = open(kind, 1).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let handle = b.reopen().await;
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..25 {
                got.push(handle.epochs.next_epoch().await.unwrap().0);
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
        b.reopen().await.epochs.current_epoch().await.unwrap(),
        Epoch(100)
    );
    assert_eq!(
        b.stream.stream_len().await.unwrap(),
        100,
        "one barrier each"
    );
}

pub(crate) async fn supervisor_state_and_membership(kind: Kind) {
    let b = open(kind, 4).await;
    let log = &b.epochs;
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

pub(crate) async fn a_new_epoch_is_above_every_epoch_in_the_stream(kind: Kind) {
    let b = open(kind, 1).await;
    let e1 = b.epochs.next_epoch().await.unwrap();
    // An append for an epoch never issued is not detected (the contract says so): it puts
    // epoch 5 into the stream while the counter is at 1.
    let ahead = b
        .stream
        .append_step(Epoch(5), Step(0), &[], &[ok(5, 0)])
        .await
        .unwrap();
    assert_eq!(ahead, StreamEntryId { ms: 5, seq: 0 });
    assert_eq!(b.epochs.current_epoch().await.unwrap(), e1);
    let next = b.epochs.next_epoch().await.unwrap();
    assert_eq!(next, Epoch(6), "the barrier must be above every id");
    assert_eq!(b.epochs.current_epoch().await.unwrap(), Epoch(6));
    assert!(matches!(
        b.stream.append_step(Epoch(5), Step(1), &[], &[]).await,
        Err(DurableError::StaleEpoch { .. })
    ));
}

pub(crate) async fn a_new_epoch_drops_the_previous_epochs_keys_and_late_joins_are_refused(
    kind: Kind,
) {
    let b = open(kind, 2).await;
    let hour = 3_600_000;
    let mut previous = None;
    for _ in 0..40 {
        let e = b.epochs.next_epoch().await.unwrap();
        if let Some(old) = previous {
            // The previous epoch's membership and manifests are gone with the move ...
            assert!(b.epochs.members(old).await.unwrap().is_empty(), "{old}");
            assert_eq!(b.liveness.manifests(old).await.unwrap(), vec![None, None]);
            // ... and a late join cannot bring its membership back.
            assert_eq!(
                b.epochs.join(old, Rank(1)).await,
                Err(DurableError::EpochOver {
                    epoch: old,
                    current: e
                })
            );
            assert!(b.epochs.members(old).await.unwrap().is_empty());
        }
        for r in 0..2 {
            assert!(b.epochs.join(e, Rank(r)).await.unwrap());
            b.liveness
                .put_manifest(e, Rank(r), &[r as u8], hour)
                .await
                .unwrap();
        }
        assert_eq!(b.epochs.members(e).await.unwrap(), vec![Rank(0), Rank(1)]);
        // A join of the current epoch, or one the counter has not reached, still works.
        assert!(!b.epochs.join(e, Rank(0)).await.unwrap());
        previous = Some(e);
    }
    let last = previous.unwrap();
    assert_eq!(
        b.liveness.manifests(last).await.unwrap(),
        vec![Some(vec![0]), Some(vec![1])]
    );
    assert!(b.epochs.members(Epoch(1)).await.unwrap().is_empty());
}
