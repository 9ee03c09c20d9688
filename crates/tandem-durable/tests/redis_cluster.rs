//! [`RedisLog`] on a real Redis Cluster started by the test (three masters on free loopback
//! ports, joined with `redis-cli --cluster create`): every key of a group in one hash slot,
//! groups spread over the masters, groups that never touch each other's keys, appends and
//! epoch changes that keep working while their slot migrates to another master (MOVED and
//! ASK followed by the redis crate's cluster client), and the replication wait on a cluster
//! shard. The contract suite (`tests/contract/`) runs on a cluster as well.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tandem_durable::{
    CompletionStream, DurableConfig, DurableError, EpochStore, Heartbeat, LivenessStore,
    RedisEndpoint, RedisLog, ReplicationWait, StreamEntryId,
};
use tandem_proto::{Epoch, OutcomeResult, Rank, RequestId, Step, TaskId, TaskKind, TaskOutcome};
use tandem_tests::redis_cluster::RedisCluster;

async fn log(cluster: &RedisCluster, group: &str, world_size: u32) -> RedisLog {
    let endpoint = RedisEndpoint::cluster(cluster.urls());
    RedisLog::connect(&DurableConfig::with_endpoint(endpoint, group, world_size))
        .await
        .expect("connect to the cluster")
}

fn ok(epoch: u64, seq: u64) -> TaskOutcome {
    TaskOutcome {
        task: TaskId { epoch, seq },
        kind: TaskKind::Store,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    }
}

/// Every key name a group uses (the layout in the crate docs).
fn group_keys(group: &str) -> Vec<String> {
    [
        "completions",
        "epoch",
        "supervisor",
        "members:7",
        "heartbeat:3",
        "failures",
        "manifest:7:3",
    ]
    .iter()
    .map(|k| format!("tandem:{{{group}}}:{k}"))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_keys_share_one_slot_and_groups_spread_over_the_masters() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .unwrap();
    let mut masters = BTreeSet::new();
    for g in 0..12 {
        let group = format!("model-{g}");
        let slots: BTreeSet<u16> = group_keys(&group)
            .iter()
            .map(|k| cluster.slot_of(k))
            .collect();
        assert_eq!(slots.len(), 1, "group {group}: keys in slots {slots:?}");
        masters.insert(cluster.master_of_slot(*slots.first().unwrap()));
    }
    assert_eq!(
        masters.len(),
        cluster.masters(),
        "12 groups land on every master"
    );

    // Every key a group writes really is there (nothing stray in another slot): the script,
    // the stream, the heartbeat and the manifest of one group, then its slot's key count.
    let log = log(&cluster, "model-0", 2).await;
    let e = log.next_epoch().await.unwrap();
    log.append_step(e, Step(0), &[], &[ok(e.0, 1)])
        .await
        .unwrap();
    log.join(e, Rank(1)).await.unwrap();
    log.heartbeat(
        Rank(0),
        Heartbeat {
            epoch: e,
            unix_ms: 1,
            incarnation: 1,
        },
        60_000,
    )
    .await
    .unwrap();
    log.put_manifest(e, Rank(1), b"m", 60_000).await.unwrap();
    let slot = cluster.slot_of(&log.keys().completions);
    let owner = cluster.node(cluster.master_of_slot(slot));
    let count = owner
        .command(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])
        .unwrap();
    assert_eq!(
        count.text().as_deref(),
        Some("5"),
        "stream, epoch, members, heartbeat, manifest"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_groups_trim_and_new_epoch_never_touch_another_group() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .unwrap();
    let a = log(&cluster, "group-a", 1).await;
    let b = log(&cluster, "group-b", 1).await;
    let (ea, eb) = (a.next_epoch().await.unwrap(), b.next_epoch().await.unwrap());
    for s in 0..20 {
        a.append_step(ea, Step(s), &[], &[ok(ea.0, s)])
            .await
            .unwrap();
        b.append_step(eb, Step(s), &[], &[ok(eb.0, s)])
            .await
            .unwrap();
    }
    for log in [&a, &b] {
        let read = log.read_new(Rank(0), 100).await.unwrap();
        let ids: Vec<StreamEntryId> = read.iter().map(|r| r.id).collect();
        assert_eq!(log.ack(Rank(0), &ids).await.unwrap(), 20);
    }
    assert_eq!(
        a.trim(0).await.unwrap(),
        21,
        "group a: barrier and 20 steps"
    );
    assert_eq!(a.stream_len().await.unwrap(), 0);
    assert_eq!(b.stream_len().await.unwrap(), 21, "group b untouched");

    // A restart of group a (a new epoch) fences group a only.
    let ea2 = a.next_epoch().await.unwrap();
    assert!(matches!(
        a.append_step(ea, Step(99), &[], &[]).await,
        Err(DurableError::StaleEpoch { .. })
    ));
    assert_eq!(b.current_epoch().await.unwrap(), eb);
    b.append_step(eb, Step(20), &[], &[ok(eb.0, 20)])
        .await
        .unwrap();
    assert_eq!(a.current_epoch().await.unwrap(), ea2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_and_epochs_follow_their_slot_to_another_master() {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
            .await
            .unwrap(),
    );
    let group = "moving";
    let log = log(&cluster, group, 2).await;
    let e = log.next_epoch().await.unwrap();
    // Heartbeats, manifests and membership give the slot several keys to move one by one.
    for r in 0..2 {
        log.join(e, Rank(r)).await.unwrap();
        log.heartbeat(
            Rank(r),
            Heartbeat {
                epoch: e,
                unix_ms: 1,
                incarnation: 1,
            },
            600_000,
        )
        .await
        .unwrap();
        log.put_manifest(e, Rank(r), b"m", 600_000).await.unwrap();
    }
    let slot = cluster.slot_of(&log.keys().completions);
    let from = cluster.master_of_slot(slot);
    let to = *cluster.master_ports().iter().find(|p| **p != from).unwrap();

    // The leader appends without a pause while the slot moves, key by key.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (log, stop) = (log.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut appended, mut transient) = (Vec::new(), 0u32);
            let mut step = 0;
            while !stop.load(Ordering::SeqCst) || step < 50 {
                match log.append_step(e, Step(step), &[], &[ok(e.0, step)]).await {
                    Ok(id) => appended.push(id),
                    Err(DurableError::Unavailable { .. } | DurableError::Timeout { .. }) => {
                        transient += 1
                    }
                    Err(other) => panic!("append during the migration: {other}"),
                }
                // Heartbeats read several keys of the slot at once (MGET): TRYAGAIN while
                // the slot is split, then answered again.
                let _ = log.heartbeats().await;
                step += 1;
            }
            (appended, transient)
        })
    };
    let moved = {
        let c = cluster.clone();
        tokio::task::spawn_blocking(move || c.migrate_slot(slot, to, Duration::from_millis(100)))
            .await
            .unwrap()
    };
    stop.store(true, Ordering::SeqCst);
    let (appended, transient) = writer.await.unwrap();
    eprintln!(
        "slot {slot} moved from port {from} to {to} ({moved} keys): {} appends ok, {transient} transient failures meanwhile",
        appended.len()
    );
    assert!(
        moved >= 5,
        "stream, epoch, members, heartbeats, manifests moved: {moved}"
    );
    assert_eq!(cluster.master_of_slot(slot), to);
    assert!(
        appended.len() >= 50,
        "appends went on: {} ok, {transient} transient failures",
        appended.len()
    );

    // Every append that succeeded is in the stream, once, in order; recovery reads them all
    // on the new master; a new epoch's script runs there and fences the old epoch.
    let mut read = Vec::new();
    loop {
        let batch = log.read_new(Rank(0), 256).await.unwrap();
        if batch.is_empty() {
            break;
        }
        read.extend(batch.iter().map(|s| s.id));
    }
    assert_eq!(read, appended);
    let rec = log.recover().await.unwrap();
    assert_eq!(rec.redelivered.len(), appended.len());
    let e2 = log.next_epoch().await.unwrap();
    assert_eq!(e2, Epoch(e.0 + 1));
    assert!(matches!(
        log.append_step(e, Step(9999), &[], &[]).await,
        Err(DurableError::StaleEpoch { .. })
    ));
    assert_eq!(log.heartbeats().await.unwrap().len(), 2);
    // The move to e2 deleted epoch e's membership on the new master, and a late join of e
    // cannot bring it back; e2's membership works there.
    assert!(log.members(e).await.unwrap().is_empty());
    assert!(matches!(
        log.join(e, Rank(0)).await,
        Err(DurableError::EpochOver { .. })
    ));
    assert!(log.join(e2, Rank(1)).await.unwrap());
    assert_eq!(log.members(e2).await.unwrap(), vec![Rank(1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replication_wait_works_on_a_cluster_shard() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .unwrap();
    let mut config =
        DurableConfig::with_endpoint(RedisEndpoint::cluster(cluster.urls()), "waited", 1);
    config.wait = ReplicationWait {
        replicas: 1,
        timeout_ms: 2000,
    };
    let log = RedisLog::connect(&config).await.unwrap();
    let e = log.next_epoch().await.unwrap();
    for s in 0..10 {
        log.append_step(e, Step(s), &[], &[ok(e.0, s)])
            .await
            .unwrap();
    }
    // Two replicas asked of a shard that has one: every append is refused as not replicated.
    config.wait.replicas = 2;
    config.wait.timeout_ms = 100;
    let strict = RedisLog::connect(&config).await.unwrap();
    let err = strict
        .append_step(e, Step(10), &[], &[ok(e.0, 10)])
        .await
        .unwrap_err();
    assert_eq!(
        err,
        DurableError::NotReplicated {
            op: "append_step",
            acked: 1,
            wanted: 2,
            ms: 100
        }
    );
    // A stale epoch is still reported as the fence, not as a replication failure.
    log.next_epoch().await.unwrap();
    assert!(matches!(
        log.append_step(e, Step(11), &[], &[]).await,
        Err(DurableError::StaleEpoch { .. })
    ));
}
