//! The completion log while Redis is down and after it restarts (AOF on), and credentials
//! kept out of errors.

use std::time::Duration;
use tandem_durable::{
    CompletionStream, ConnTimeouts, DurableConfig, DurableError, EpochStore, RedisLog,
    StreamEntryId,
};
use tandem_proto::{OutcomeResult, Rank, RequestId, Step, TaskId, TaskKind, TaskOutcome};
use tandem_tests::free_port;
use tandem_tests::redis::RedisServer;

const OP_TIMEOUT_MS: u64 = 300;

fn config(url: String, world_size: u32) -> DurableConfig {
    let mut c = DurableConfig::new(url, "outage", world_size);
    c.timeouts = ConnTimeouts {
        op_timeout_ms: OP_TIMEOUT_MS,
        connect_timeout_ms: 200,
        max_reconnect_delay_ms: 200,
    };
    c
}

fn ok(seq: u64) -> TaskOutcome {
    TaskOutcome {
        task: TaskId { epoch: 1, seq },
        kind: TaskKind::Load,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    }
}

/// Runs `call` and checks it ended (well within a few deadlines) in Unavailable or Timeout.
async fn fails_fast<T: std::fmt::Debug>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, DurableError>>,
) {
    let bound = Duration::from_millis(OP_TIMEOUT_MS * 10);
    let result = tokio::time::timeout(bound, call)
        .await
        .unwrap_or_else(|_| panic!("{what} still waiting after {bound:?}"));
    match result {
        Err(DurableError::Unavailable { .. }) | Err(DurableError::Timeout { .. }) => {}
        other => panic!("{what} during the outage returned {other:?}"),
    }
}

#[tokio::test]
async fn outage_fails_fast_then_resumes_and_aof_keeps_acknowledged_entries() {
    let mut server = RedisServer::start_with_aof();
    let log = RedisLog::connect(&config(server.url(), 2)).await.unwrap();
    let e = log.next_epoch().await.unwrap();
    let mut appended = Vec::new();
    for s in 0..5 {
        appended.push(log.append_step(e, Step(s), &[], &[ok(s)]).await.unwrap());
    }
    // The epoch's barrier counts toward `count`: 4 entries read are 3 steps.
    let read = log.read_new(Rank(0), 4).await.unwrap();
    let acked: Vec<StreamEntryId> = read.iter().map(|r| r.id).collect();
    assert_eq!(acked, appended[..3].to_vec());
    assert_eq!(log.ack(Rank(0), &acked).await.unwrap(), 3);
    assert_eq!(log.read_new(Rank(1), 3).await.unwrap().len(), 2);

    server.kill();
    fails_fast("append_step", log.append_step(e, Step(5), &[], &[ok(5)])).await;
    fails_fast("read_new", log.read_new(Rank(0), 1)).await;
    fails_fast("recover", log.recover()).await;
    fails_fast("next_epoch", log.next_epoch()).await;

    server.restart();
    // The same handle reconnects by itself; each try is bounded by its deadline.
    let mut resumed = None;
    for _ in 0..100 {
        match log.append_step(e, Step(5), &[], &[ok(5)]).await {
            Ok(id) => {
                resumed = Some(id);
                break;
            }
            Err(DurableError::Unavailable { .. }) | Err(DurableError::Timeout { .. }) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(other) => panic!("unexpected error after restart: {other}"),
        }
    }
    let resumed = resumed.expect("append succeeds again once redis-server is back");

    // Everything appended before the kill is there, and so are the delivery positions.
    assert_eq!(log.current_epoch().await.unwrap(), e);
    assert_eq!(
        log.stream_len().await.unwrap(),
        7,
        "barrier, 5 steps, the resumed one"
    );
    assert!(log.pending(Rank(0)).await.unwrap().is_empty());
    assert_eq!(log.pending(Rank(1)).await.unwrap(), appended[..2].to_vec());
    let rest: Vec<StreamEntryId> = log
        .read_new(Rank(0), 10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    let mut want = appended[3..].to_vec();
    want.push(resumed);
    assert_eq!(rest, want);
    let rec = log.recover().await.unwrap();
    assert_eq!(rec.redelivered.len(), 6, "rank 1 acknowledged nothing");
    assert_eq!(rec.unacked_for(Rank(0)).len(), 3);
}

#[tokio::test]
async fn connecting_to_nothing_ends_within_the_deadline() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let bound = Duration::from_millis(OP_TIMEOUT_MS * 10);
    let result = tokio::time::timeout(bound, RedisLog::connect(&config(url, 1)))
        .await
        .expect("connect returns within a few deadlines");
    match result {
        Err(DurableError::Unavailable { op, .. }) | Err(DurableError::Timeout { op, .. }) => {
            assert_eq!(op, "connect");
        }
        other => panic!("connect to a closed port returned {other:?}"),
    }
}

#[tokio::test]
async fn credentials_never_appear_in_errors() {
    let secret = "hunter2-very-secret";
    let closed = format!("redis://admin:{secret}@127.0.0.1:{}/0", free_port());
    let err = RedisLog::connect(&config(closed, 1)).await.unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(!text.contains(secret), "{text}");
    assert!(text.contains("redis://***@127.0.0.1:"), "{text}");

    // A live server that has no password: the AUTH is refused.
    let server = RedisServer::start();
    let live = format!("redis://admin:{secret}@127.0.0.1:{}/0", server.port());
    let err = RedisLog::connect(&config(live.clone(), 1))
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(!text.contains(secret), "{text}");
    assert!(
        matches!(err, DurableError::Rejected { op: "connect", .. }),
        "a wrong password is a rejection, not an outage: {err:?}"
    );

    let cfg = config(live, 1);
    assert!(!format!("{cfg:?}").contains(secret));

    let masked = tandem_durable::mask_url(&format!("redis://admin:{secret}@h:1"));
    assert_eq!(masked, "redis://***@h:1");
}
