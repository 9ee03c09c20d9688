//! Churn: a group moved through many epochs, with real processes and a real `redis-server`
//! (docs/RELIABILITY.md).
//!
//! - `per_epoch_redis_keys_stay_bounded_over_many_epochs`: 20 agent kills, each a new epoch;
//!   the group's Redis keys are counted after 5 and after 20 epochs, and only the current
//!   epoch's membership and manifests remain (the previous epoch's go with each move).
//! - `kills_every_one_and_a_half_seconds_leave_the_group_ready_between_kills`: a SIGKILL of a
//!   random agent every 1.5 s for about 20 s while a slow `tandem replay` runs, its supervisor
//!   relaunching the agents with no restart limit; the group must be seen ready again between
//!   most kills once the restarts have piled up (the backoff resets after a restart that
//!   reached a healthy group) and after the last.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tandem_tests::cluster::GroupSpec;
use tandem_tests::figures::{figure, seeded};
use tandem_tests::procs::signal;
use tandem_tests::redis::{RedisServer, Resp};
use tandem_tests::replay_process::ReplayCli;
use tandem_tests::serial;
use tandem_tests::supervisor::SupervisedGroup;
use tandem_tests::traces::mooncake_trace;

/// Every key of group `itest`, sorted.
fn group_keys(redis: &RedisServer) -> Vec<String> {
    let Ok(Resp::Array(Some(items))) = redis.command(&["KEYS", "tandem:{itest}:*"]) else {
        panic!("KEYS failed");
    };
    let mut keys: Vec<String> = items.iter().filter_map(Resp::text).collect();
    keys.sort();
    keys
}

/// The keys that name an epoch (`members:{e}`, `manifest:{e}:{r}`), by epoch.
fn epochs_named(keys: &[String]) -> BTreeSet<u64> {
    keys.iter()
        .filter_map(|k| {
            let rest = k
                .strip_prefix("tandem:{itest}:members:")
                .or_else(|| k.strip_prefix("tandem:{itest}:manifest:"))?;
            rest.split(':').next()?.parse().ok()
        })
        .collect()
}

#[test]
fn per_epoch_redis_keys_stay_bounded_over_many_epochs() {
    let _serial = serial();
    let redis = RedisServer::start();
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = redis.url();
    let mut c = SupervisedGroup::start_small(&spec, "info");
    let mut counts = Vec::new();
    let mut after_five = Vec::new();
    for round in 0..20u32 {
        let before = c.supervisor_epoch().expect("supervisor epoch");
        c.kill_and_respawn(round % 2);
        c.wait_epoch_after(before, Duration::from_secs(60));
        c.wait_ready(Duration::from_secs(60));
        let keys = group_keys(&redis);
        counts.push(keys.len());
        if round == 4 {
            after_five = keys;
        }
    }
    let keys = group_keys(&redis);
    let epoch = c.supervisor_epoch().expect("epoch");
    println!("after 5 epochs: {after_five:#?}\nafter 20 epochs (epoch {epoch}): {keys:#?}");
    println!("keys after each epoch: {counts:?}");
    figure(
        "redis_keys_per_epoch",
        &[
            ("epochs", epoch.to_string()),
            ("keys_after_5", after_five.len().to_string()),
            ("keys_after_20", keys.len().to_string()),
        ],
    );
    assert!(epoch >= 21, "20 restarts: epoch {epoch}");
    // Only the current epoch's membership and manifests are left.
    assert_eq!(epochs_named(&keys), BTreeSet::from([epoch]), "{keys:#?}");
    // completions, epoch, supervisor, failures, 2 heartbeats, members, 2 manifests.
    assert!(keys.len() <= 9, "{keys:#?}");
    assert!(
        keys.len() <= after_five.len(),
        "the key count grew from {} to {}: {keys:#?}",
        after_five.len(),
        keys.len()
    );
}

#[test]
fn kills_every_one_and_a_half_seconds_leave_the_group_ready_between_kills() {
    let _serial = serial();
    let mut rng = seeded("churn");
    let redis = RedisServer::start_bound("127.0.0.1");
    // A slow replay keeps engines stepping; it is stopped at the end (its outcomes are the
    // goodput benchmark's business, scripts/bench-churn.sh).
    let trace = mooncake_trace("conversation");
    let trace = trace.to_str().expect("utf-8 path");
    let mut run = ReplayCli::spawn(&redis.url(), 12_000, &["--trace", trace, "--speed", "1"]);
    let view = run.cluster(2, Duration::from_secs(60));
    let every = Duration::from_millis(1_500);
    let kills = 13;
    // Per interval between kills: whether every process was seen ready, and when.
    let mut ready_after_ms: Vec<Option<u128>> = Vec::new();
    for _ in 0..kills {
        assert!(!run.exited(), "the replay ended early");
        let rank = rng.range(0, 1) as u32;
        if let Some(pid) = view.agent_pid(rank) {
            signal(pid, libc::SIGKILL);
        }
        let killed = Instant::now();
        let mut seen = None;
        // The kill is only noticed after a moment: readiness counts once it has been lost.
        let mut lost = false;
        while killed.elapsed() < every {
            let all = view
                .readiness()
                .iter()
                .all(|(_, a)| matches!(a, Some((200, _))));
            if !all {
                lost = true;
            } else if lost && seen.is_none() {
                seen = Some(killed.elapsed().as_millis());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        ready_after_ms.push(seen);
    }
    let last = Instant::now();
    let ready_at_end = view
        .wait_ready(Duration::from_secs(60))
        .map(|()| last.elapsed().as_millis());
    let epoch = view.agent_epoch(0);
    println!("ready after each kill (ms, None: not within 1.5 s): {ready_after_ms:?}");
    println!("ready {ready_at_end:?} ms after the last kill; epoch {epoch:?}");
    figure(
        "churn_1500ms",
        &[
            ("kills", kills.to_string()),
            (
                "ready_between",
                ready_after_ms.iter().flatten().count().to_string(),
            ),
            (
                "ready_after_ms",
                format!("{ready_after_ms:?}").replace(' ', ""),
            ),
            (
                "ready_after_last_ms",
                ready_at_end.map_or("none".into(), |m| m.to_string()),
            ),
        ],
    );
    assert!(
        ready_at_end.is_some(),
        "not ready within 60 s of the last kill: {:?}",
        view.readiness()
    );
    // From the sixth kill on, a backoff that kept growing would exceed the interval (50 ms
    // doubling: 1.6 s at the sixth restart, capped at 5 s); reset after each recovery, it
    // stays at its first value and the group recovers between kills.
    let late = &ready_after_ms[5..];
    let ready_late = late.iter().flatten().count();
    assert!(
        ready_late * 2 >= late.len(),
        "ready between only {ready_late} of the last {} kills: {ready_after_ms:?}",
        late.len()
    );
}
