//! The replication wait and Sentinel failover with real processes: a primary, its replica
//! (`--replicaof`) and, for the failover, three sentinels, all on loopback.
//!
//! What it shows: with `wait.replicas = 1` an append returns only once the replica holds it,
//! and fails with [`DurableError::NotReplicated`] (nothing to reveal, the entry taken back)
//! while the replica cannot take it, and the epoch does not move; so every append that
//! succeeded survives the loss of the primary. With
//! `wait.replicas = 0` (the default) the appends the replica had not received when the
//! primary died are gone after the failover: the replica is stopped here (SIGSTOP, its
//! replication connection closed by the primary) to hold that window open as long as the
//! test wants. And a [`RedisLog`] on Sentinel follows the
//! sentinels to the promoted replica.

use std::time::{Duration, Instant};

use tandem_durable::{
    CompletionStream, DurableConfig, DurableError, EpochStore, RedisEndpoint, RedisLog,
    ReplicationWait, StreamEntryId,
};
use tandem_proto::{Epoch, OutcomeResult, Rank, RequestId, Step, TaskId, TaskKind, TaskOutcome};
use tandem_tests::procs::signal;
use tandem_tests::redis::{RedisOptions, RedisServer, Resp};
use tandem_tests::sentinel::{SentinelSetup, MASTER};

fn ok(epoch: u64, seq: u64) -> TaskOutcome {
    TaskOutcome {
        task: TaskId { epoch, seq },
        kind: TaskKind::Store,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    }
}

/// The replication wait of these tests, ms.
const WAIT_MS: u64 = 1_000;

fn config(endpoint: RedisEndpoint, replicas: u32) -> DurableConfig {
    let mut c = DurableConfig::with_endpoint(endpoint, "replicated", 1);
    // Long enough for a replica on a loaded machine to acknowledge (300 ms was not, once),
    // short enough for the five refused appends below to stay quick.
    c.wait = ReplicationWait {
        replicas,
        timeout_ms: WAIT_MS,
    };
    c
}

/// A primary and a replica that finished its first sync.
fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start();
    let replica = RedisServer::start_with_options(RedisOptions {
        extra_args: vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            primary.port().to_string(),
        ],
        ..RedisOptions::default()
    });
    let start = Instant::now();
    while !replica
        .command(&["INFO", "replication"])
        .ok()
        .and_then(|r| r.text())
        .is_some_and(|t| t.contains("master_link_status:up"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "replica never synced"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (primary, replica)
}

/// Every entry id in the group's stream on `server`.
fn stream_ids(server: &RedisServer) -> Vec<StreamEntryId> {
    match server.command(&["XRANGE", "tandem:{replicated}:completions", "-", "+"]) {
        Ok(Resp::Array(Some(entries))) => entries
            .iter()
            .filter_map(|e| match e {
                Resp::Array(Some(parts)) => parts.first()?.text(),
                _ => None,
            })
            .map(|id| StreamEntryId::parse(&id).unwrap())
            .collect(),
        other => panic!("XRANGE: {other:?}"),
    }
}

/// Kills `primary`, wakes `replica` and makes it the primary (what a failover does).
fn fail_over(primary: &mut RedisServer, replica: &RedisServer) {
    primary.kill();
    signal(replica.pid(), libc::SIGCONT);
    assert_eq!(
        replica.command(&["REPLICAOF", "NO", "ONE"]).unwrap(),
        Resp::Simple("OK".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_replica_waited_for_no_acknowledged_append_is_lost_in_a_failover() {
    let (mut primary, replica) = primary_and_replica();
    let log = RedisLog::connect(&config(RedisEndpoint::standalone(primary.url()), 1))
        .await
        .unwrap();
    let e = log.next_epoch().await.unwrap();
    let mut acknowledged = Vec::new();
    for s in 0..20 {
        acknowledged.push(
            log.append_step(e, Step(s), &[], &[ok(e.0, s)])
                .await
                .unwrap(),
        );
    }
    // The replica stops taking the stream: appends reach the primary only, and are refused.
    signal(replica.pid(), libc::SIGSTOP);
    for s in 20..25 {
        let t = Instant::now();
        let err = log
            .append_step(e, Step(s), &[], &[ok(e.0, s)])
            .await
            .unwrap_err();
        assert_eq!(
            err,
            DurableError::NotReplicated {
                op: "append_step",
                acked: 0,
                wanted: 1,
                ms: WAIT_MS
            }
        );
        assert!(t.elapsed() < Duration::from_secs(5), "bounded by the wait");
    }
    // The refused appends were taken back, and the epoch did not move.
    assert_eq!(stream_ids(&primary), {
        let mut all = vec![StreamEntryId { ms: e.0, seq: 0 }];
        all.extend(&acknowledged);
        all
    });
    assert!(matches!(
        log.next_epoch().await,
        Err(DurableError::NotReplicated {
            op: "next_epoch",
            ..
        })
    ));
    assert_eq!(log.current_epoch().await.unwrap(), e);
    fail_over(&mut primary, &replica);
    let kept = stream_ids(&replica);
    for id in &acknowledged {
        assert!(kept.contains(id), "acknowledged append {id} survived");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_wait_a_failover_loses_what_the_replica_had_not_received() {
    let (mut primary, replica) = primary_and_replica();
    let log = RedisLog::connect(&config(RedisEndpoint::standalone(primary.url()), 0))
        .await
        .unwrap();
    let e = log.next_epoch().await.unwrap();
    for s in 0..20 {
        log.append_step(e, Step(s), &[], &[ok(e.0, s)])
            .await
            .unwrap();
    }
    // Nothing waited for the replica so far: let it catch up first (replication is
    // asynchronous, and on a loaded machine it can still be behind), so that what is lost
    // below is exactly what was appended after the link went down.
    let start = Instant::now();
    while stream_ids(&replica).len() < 21 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the replica never received the first 21 entries: {}",
            stream_ids(&replica).len()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The replication link goes down (the replica stopped, its connection closed by the
    // primary): what is appended now is on the primary alone, and acknowledged.
    signal(replica.pid(), libc::SIGSTOP);
    assert!(matches!(
        primary.command(&["CLIENT", "KILL", "TYPE", "replica"]),
        Ok(Resp::Int(1))
    ));
    let mut unreplicated = Vec::new();
    for s in 20..25 {
        unreplicated.push(
            log.append_step(e, Step(s), &[], &[ok(e.0, s)])
                .await
                .unwrap(),
        );
    }
    fail_over(&mut primary, &replica);
    let kept = stream_ids(&replica);
    let lost: Vec<_> = unreplicated
        .iter()
        .filter(|id| !kept.contains(id))
        .collect();
    assert_eq!(
        lost.len(),
        5,
        "every append acknowledged while the replica lagged is lost: {lost:?}"
    );
    assert_eq!(kept.len(), 21, "the barrier and the 20 replicated steps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_client_follows_the_failover_to_the_promoted_replica() {
    let mut setup = tokio::task::spawn_blocking(SentinelSetup::start)
        .await
        .unwrap();
    let old = setup.primary_port().unwrap();
    let endpoint = RedisEndpoint::sentinel(setup.sentinel_urls(), MASTER);
    let log = RedisLog::connect(&config(endpoint, 1)).await.unwrap();
    assert!(
        log.masked_url().starts_with("sentinel master"),
        "{}",
        log.masked_url()
    );
    let e = log.next_epoch().await.unwrap();
    let mut acknowledged = Vec::new();
    for s in 0..10 {
        acknowledged.push(
            log.append_step(e, Step(s), &[], &[ok(e.0, s)])
                .await
                .unwrap(),
        );
    }
    setup.node_mut(old).kill();
    let new = {
        let s = &setup;
        tokio::task::block_in_place(|| s.wait_failover_from(old, Duration::from_secs(30)))
    };
    // The promoted replica has no replica of its own yet: appends reach it (the client found
    // it through the sentinels) but are refused as not replicated, until the old primary
    // comes back as its replica.
    let t = Instant::now();
    let refused = loop {
        match log.append_step(e, Step(10), &[], &[ok(e.0, 10)]).await {
            Err(DurableError::NotReplicated { .. }) => break true,
            Err(DurableError::Unavailable { .. } | DurableError::Timeout { .. }) => {}
            other => panic!("append on the promoted replica without its own replica: {other:?}"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the client never reached the new primary"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(refused);
    setup.restart_as_replica(old, new);
    tokio::task::block_in_place(|| setup.wait_synced(old, Duration::from_secs(30)));
    let id = loop {
        match log.append_step(e, Step(11), &[], &[ok(e.0, 11)]).await {
            Ok(id) => break id,
            Err(
                DurableError::NotReplicated { .. }
                | DurableError::Unavailable { .. }
                | DurableError::Timeout { .. },
            ) => {}
            Err(other) => panic!("append once the old primary replicates: {other}"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "appends never resumed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(setup.primary_port(), Some(new));
    // Everything acknowledged before the kill is on the new primary, the new append after it.
    let mut read = Vec::new();
    loop {
        let batch = log.read_new(Rank(0), 64).await.unwrap();
        if batch.is_empty() {
            break;
        }
        read.extend(batch.iter().map(|s| s.id));
    }
    for a in &acknowledged {
        assert!(
            read.contains(a),
            "append {a} acknowledged before the failover is there"
        );
    }
    assert_eq!(
        read.last(),
        Some(&id),
        "the refused appends on the promoted replica were taken back"
    );
    assert_eq!(read.len(), acknowledged.len() + 1);
    assert_eq!(log.current_epoch().await.unwrap(), Epoch(e.0));
}
