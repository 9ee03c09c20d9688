//! What only a real Redis can show about [`RedisLog`]: a lost epoch counter, a deleted
//! completion stream, and entries written by something else. Everything both implementations promise is in the contract
//! suite (`tests/contract/`), which runs against a real redis-server as well.

use tandem_durable::{
    CompletionStream, DurableConfig, DurableError, EpochStore, RedisLog, StreamEntryId,
};
use tandem_proto::{Epoch, OutcomeResult, Rank, RequestId, Step, TaskId, TaskKind, TaskOutcome};
use tandem_tests::redis::RedisServer;

async fn log(server: &RedisServer, world_size: u32) -> RedisLog {
    RedisLog::connect(&DurableConfig::new(server.url(), "g1", world_size))
        .await
        .expect("connect")
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

fn ok(epoch: u64, seq: u64) -> TaskOutcome {
    TaskOutcome {
        task: TaskId { epoch, seq },
        kind: TaskKind::Load,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    }
}

/// `DEL` of the stream mid-epoch: the append neither succeeds nor creates a new stream (a
/// stream without the barrier would let a fenced leader write again), reads fail the same
/// typed way, and the next epoch's barrier brings the stream and every consumer group back.
#[tokio::test]
async fn a_deleted_stream_is_reported_lost_until_the_next_epoch_creates_it_again() {
    let server = RedisServer::start();
    let log = log(&server, 2).await;
    let e1 = log.next_epoch().await.unwrap();
    log.append_step(e1, Step(0), &[], &[ok(e1.0, 1)])
        .await
        .unwrap();
    assert_eq!(log.read_new(Rank(1), 10).await.unwrap().len(), 1);
    let stream = log.keys().completions.clone();
    server.command(&["DEL", &stream]).unwrap();

    let err = log
        .append_step(e1, Step(1), &[], &[ok(e1.0, 2)])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            DurableError::StreamLost {
                op: "append_step",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        server
            .command(&["EXISTS", &stream])
            .unwrap()
            .text()
            .as_deref(),
        Some("0"),
        "the failed append created the stream again"
    );
    // A process that connects now (an agent restarted) does not create it again either.
    let other = self::log(&server, 2).await;
    let err = other
        .append_step(e1, Step(1), &[], &[ok(e1.0, 2)])
        .await
        .unwrap_err();
    assert!(matches!(err, DurableError::StreamLost { .. }), "{err:?}");
    for r in [Rank(0), Rank(1)] {
        let err = log.read_new(r, 10).await.unwrap_err();
        assert!(matches!(err, DurableError::StreamLost { .. }), "{err:?}");
    }
    let err = log.recover().await.unwrap_err();
    assert!(matches!(err, DurableError::StreamLost { .. }), "{err:?}");
    let err = log
        .ack_through(Rank(0), StreamEntryId { ms: 1, seq: 1 })
        .await
        .unwrap_err();
    assert!(matches!(err, DurableError::StreamLost { .. }), "{err:?}");

    let e2 = log.next_epoch().await.unwrap();
    assert_eq!(e2, Epoch(e1.0 + 1));
    let fenced = log.append_step(e1, Step(1), &[], &[ok(e1.0, 2)]).await;
    assert!(
        matches!(fenced, Err(DurableError::StaleEpoch { .. })),
        "{fenced:?}"
    );
    let recovery = log.recover().await.unwrap();
    assert!(recovery.redelivered.is_empty() && recovery.in_flight.is_empty());
    log.append_step(e2, Step(0), &[], &[ok(e2.0, 1)])
        .await
        .unwrap();
    for r in [Rank(0), Rank(1)] {
        let got = log.read_new(r, 10).await.unwrap();
        assert_eq!(got.len(), 1, "rank {r}: {got:?}");
    }
}
