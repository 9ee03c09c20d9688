//! Redis misbehaving while the agents and the supervisor block on it (docs/RELIABILITY.md),
//! with real processes: a `tandem replay` of a 1×2 group and a real `redis-server` on a free
//! port (an append-only file). Each test checks what the group did, prints its figures as
//! `FIGURE fault=... key=value` lines (read by `scripts/fault-suite.sh`), and checks the
//! replay's invariants afterwards: exit 0, no verify failure, no lost or duplicated outcome,
//! no mismatch (the replay's own checks also fail a run whose calls wait past their deadline).
//!
//! - `CLIENT KILL` of every client connection (by type, then one id at a time) during a replay.
//! - The completion stream deleted (`DEL`) during a replay: the next append or read finds it
//!   gone (`the completion stream ... is gone`), the epoch fails with that reason, and the group
//!   moves to a new epoch whose barrier creates the stream and its consumer groups again.
//! - Redis slowed by `DEBUG SLEEP 0.8` (ignored: a reproducer of a known restart).
//! - Redis stopped for 5 s (SIGSTOP), then shut down for 5 s and restarted on its append-only
//!   file: every process, followers included, is not ready with a reason naming the log while
//!   it is away, and ready again after.
//!
//! Sizes: `TANDEM_FAULT_ROUNDS` (faults per test, default 1), `TANDEM_FAULT_REQUESTS` (requests
//! per replay, default 600), `TANDEM_FAULT_SEED` (random moments; printed). The tests run one
//! at a time: every one of them runs a whole group on a shared machine.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tandem_tests::figures::{fault_requests, fault_rounds, figure, seeded};
use tandem_tests::procs::signal;
use tandem_tests::redis::{RedisServer, Resp};
use tandem_tests::replay_process::{ClusterView, ReplayCli};
use tandem_tests::serial;

/// Every non-200 `/readyz` seen for a while, sampled every 100 ms: `who: reason`, and when
/// each process was first and last seen not ready (ms after `since`).
struct NotReady {
    reasons: BTreeSet<String>,
    first_ms: std::collections::BTreeMap<String, u128>,
    last_ms: std::collections::BTreeMap<String, u128>,
}

impl NotReady {
    /// `who=first-last` for each process seen not ready, in ms.
    fn windows(&self) -> String {
        let w: Vec<String> = self
            .first_ms
            .iter()
            .map(|(who, first)| {
                let last = self.last_ms.get(who).copied().unwrap_or(*first);
                format!("{}={first}-{last}", who.replace(' ', ""))
            })
            .collect();
        if w.is_empty() {
            "none".into()
        } else {
            w.join("/")
        }
    }
}

fn watch_readiness(view: &ClusterView, since: Instant, for_: Duration) -> NotReady {
    let mut seen = NotReady {
        reasons: BTreeSet::new(),
        first_ms: Default::default(),
        last_ms: Default::default(),
    };
    while since.elapsed() < for_ {
        for (who, answer) in view.readiness() {
            if let Some((code, body)) = answer {
                if code != 200 {
                    let at = since.elapsed().as_millis();
                    seen.first_ms.entry(who.clone()).or_insert(at);
                    seen.last_ms.insert(who.clone(), at);
                    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                    let r = v["reason"]
                        .as_str()
                        .or(v["redis"].as_str())
                        .unwrap_or("(no reason)");
                    seen.reasons.insert(format!(
                        "{who}: {}",
                        r.chars().take(110).collect::<String>()
                    ));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    seen
}

/// Client ids of every normal connection but ours.
fn client_ids(redis: &RedisServer) -> Vec<String> {
    let Ok(list) = redis.command(&["CLIENT", "LIST", "TYPE", "normal"]) else {
        return Vec::new();
    };
    list.text()
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.contains("cmd=client"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix("id="))
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn client_kill_of_every_client_during_a_replay() {
    let _serial = serial();
    let mut rng = seeded("client-kill");
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut run = ReplayCli::spawn(&redis.url(), fault_requests() + 600, &[]);
    let view = run.cluster(2, Duration::from_secs(60));
    let mut detail = Vec::new();
    let mut reasons = BTreeSet::new();
    for round in 0..fault_rounds() * 2 {
        std::thread::sleep(Duration::from_millis(rng.range(300, 1200)));
        if run.exited() {
            break;
        }
        // Even rounds: one command for every normal client; odd rounds: each id on its own,
        // as an operator's script would.
        let killed = if round % 2 == 0 {
            match redis.command(&["CLIENT", "KILL", "TYPE", "normal"]) {
                Ok(Resp::Int(n)) => n as usize,
                other => panic!("CLIENT KILL TYPE normal: {other:?}"),
            }
        } else {
            client_ids(&redis)
                .iter()
                .filter(|id| {
                    matches!(
                        redis.command(&["CLIENT", "KILL", "ID", id]),
                        Ok(Resp::Int(1))
                    )
                })
                .count()
        };
        let at = Instant::now();
        let seen = watch_readiness(&view, at, Duration::from_millis(1000));
        let ready = view
            .wait_ready(Duration::from_secs(60))
            .map(|_| at.elapsed().as_millis());
        detail.push(format!(
            "{}_{killed}_clients:not_ready_ms_{}:all_ready_by_{}ms",
            if round % 2 == 0 { "type" } else { "ids" },
            seen.windows(),
            ready.map_or("?".into(), |m| m.to_string())
        ));
        reasons.extend(seen.reasons);
        assert!(killed >= 3, "round {round}: only {killed} clients killed");
        assert!(
            ready.is_some(),
            "round {round}: not ready again after CLIENT KILL"
        );
    }
    let restarts = view.log_lines("rank failure");
    let result = run.finish(Duration::from_secs(300));
    let s = result.assert_clean("CLIENT KILL of every client");
    println!("readiness reasons after the kills: {reasons:#?}");
    println!("rank failures the supervisor logged: {restarts:#?}");
    assert!(!detail.is_empty(), "the replay ended before the first kill");
    figure(
        "client_kill",
        &[
            ("rounds", detail.len().to_string()),
            ("detail", detail.join(";")),
            ("epochs", s["epochs"].to_string()),
            ("rank_failures_logged", restarts.len().to_string()),
            (
                "longest_step_ms",
                (s["step_latency_us"]["max"].as_f64().unwrap_or(0.0) / 1000.0).to_string(),
            ),
            ("summary", result.short()),
        ],
    );
}

/// The completion stream's key (one group in this Redis).
fn stream_key(redis: &RedisServer) -> String {
    match redis.command(&["KEYS", "tandem:*:completions"]) {
        Ok(Resp::Array(Some(keys))) if keys.len() == 1 => keys[0].text().expect("a key name"),
        other => panic!("one completion stream expected: {other:?}"),
    }
}

#[test]
fn completion_stream_deleted_during_a_replay() {
    let _serial = serial();
    let mut rng = seeded("stream-deleted");
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut run = ReplayCli::spawn(&redis.url(), fault_requests() + 600, &[]);
    let view = run.cluster(2, Duration::from_secs(60));
    let key = stream_key(&redis);
    let mut detail = Vec::new();
    let mut reasons = BTreeSet::new();
    for round in 0..fault_rounds() {
        std::thread::sleep(Duration::from_millis(rng.range(300, 1500)));
        if run.exited() {
            break;
        }
        let epoch_before = view.agent_epoch(0);
        let len = redis
            .command(&["XLEN", &key])
            .ok()
            .and_then(|r| r.text())
            .unwrap_or_default();
        let deleted = redis.command(&["DEL", &key]);
        assert_eq!(deleted, Ok(Resp::Int(1)), "round {round}: DEL {key}");
        let at = Instant::now();
        let seen = watch_readiness(&view, at, Duration::from_millis(3000));
        let ready = view
            .wait_ready(Duration::from_secs(60))
            .map(|_| at.elapsed().as_millis());
        let epoch_after = view.agent_epoch(0);
        let groups = redis
            .command(&["XINFO", "GROUPS", &key])
            .map(|r| match r {
                Resp::Array(Some(g)) => g.len(),
                _ => 0,
            })
            .unwrap_or(0);
        detail.push(format!(
            "deleted_{len}_entries:epoch_{}_to_{}:not_ready_ms_{}:all_ready_by_{}ms:groups_{groups}",
            epoch_before.map_or("?".into(), |e| e.to_string()),
            epoch_after.map_or("?".into(), |e| e.to_string()),
            seen.windows(),
            ready.map_or("?".into(), |m| m.to_string())
        ));
        reasons.extend(seen.reasons);
        assert!(
            ready.is_some(),
            "round {round}: not ready again after the DEL"
        );
        assert!(
            epoch_after > epoch_before,
            "round {round}: the group stayed in epoch {epoch_before:?} after its stream was deleted"
        );
        assert_eq!(
            groups, 2,
            "round {round}: the new epoch did not create both consumer groups"
        );
    }
    let failures = view.log_lines("rank failure");
    let gone = view.log_lines("is gone");
    let result = run.finish(Duration::from_secs(300));
    println!("readiness reasons after the DEL: {reasons:#?}");
    println!("rank failures the supervisor logged: {failures:#?}");
    let s = result.assert_clean("completion stream deleted");
    assert!(
        !detail.is_empty(),
        "the replay ended before the stream was deleted"
    );
    assert!(
        failures
            .iter()
            .any(|l| l.contains("completion stream is lost")),
        "no rank failure names the lost stream: {failures:#?}"
    );
    figure(
        "stream_deleted",
        &[
            ("rounds", detail.len().to_string()),
            ("detail", detail.join(";")),
            ("epochs", s["epochs"].to_string()),
            ("lines_naming_the_stream_gone", gone.len().to_string()),
            (
                "first_failure",
                failures.first().map_or("none".into(), |l| {
                    l.split("failure=")
                        .nth(1)
                        .unwrap_or(l)
                        .chars()
                        .take(160)
                        .collect()
                }),
            ),
            (
                "longest_step_ms",
                (s["step_latency_us"]["max"].as_f64().unwrap_or(0.0) / 1000.0).to_string(),
            ),
            ("summary", result.short()),
        ],
    );
}

/// Every process of `view` was seen not ready with a reason naming Redis or the log.
fn assert_every_process_said_why(what: &str, seen: &NotReady) {
    for who in ["supervisor", "rank 0", "rank 1"] {
        assert!(
            seen.reasons
                .iter()
                .any(|r| r.starts_with(&format!("{who}:"))
                    && (r.to_lowercase().contains("redis") || r.contains("completion log"))),
            "{what}: {who} never said it is not ready because of Redis: {:#?}",
            seen.reasons
        );
    }
}

#[test]
fn redis_stopped_five_seconds_then_shut_down_five_seconds_during_a_replay() {
    let _serial = serial();
    let mut redis = RedisServer::start_bound("127.0.0.1");
    let mut run = ReplayCli::spawn(&redis.url(), fault_requests() + 1200, &[]);
    let view = run.cluster(2, Duration::from_secs(60));
    let away = Duration::from_secs(5);
    let mut rows = Vec::new();
    let mut all = BTreeSet::new();
    for (how, stop, resume) in [
        (
            "sigstop",
            Box::new(|r: &mut RedisServer| signal(r.pid(), libc::SIGSTOP))
                as Box<dyn Fn(&mut RedisServer)>,
            Box::new(|r: &mut RedisServer| signal(r.pid(), libc::SIGCONT))
                as Box<dyn Fn(&mut RedisServer)>,
        ),
        (
            "shutdown_and_restart_on_aof",
            Box::new(|r: &mut RedisServer| {
                let _ = r.command(&["SHUTDOWN", "NOSAVE"]);
                r.kill();
            }),
            Box::new(|r: &mut RedisServer| r.restart()),
        ),
    ] {
        std::thread::sleep(Duration::from_millis(800));
        if run.exited() {
            break;
        }
        stop(&mut redis);
        let at = Instant::now();
        let seen = watch_readiness(&view, at, away);
        resume(&mut redis);
        let back = Instant::now();
        let ready = view
            .wait_ready(Duration::from_secs(60))
            .map(|_| back.elapsed().as_millis());
        println!("{how}: readiness while Redis was away: {:#?}", seen.reasons);
        assert_every_process_said_why(how, &seen);
        assert!(
            ready.is_some(),
            "{how}: not ready again after Redis came back"
        );
        rows.push(format!(
            "{how}:not_ready_ms_{}:all_ready_{}ms_after_back",
            seen.windows(),
            ready.map_or("?".into(), |m| m.to_string())
        ));
        all.extend(seen.reasons);
    }
    let failures = view.log_lines("rank failure");
    let result = run.finish(Duration::from_secs(300));
    println!("rank failures the supervisor logged: {failures:#?}");
    let s = result.assert_clean("Redis away 5 s, twice");
    assert_eq!(rows.len(), 2, "the replay ended before both outages");
    figure(
        "redis_away_5s",
        &[
            ("detail", rows.join(";")),
            (
                "reasons",
                all.iter()
                    .map(|r| r.replace(' ', "_"))
                    .collect::<Vec<_>>()
                    .join("|"),
            ),
            ("epochs", s["epochs"].to_string()),
            ("rank_failures_logged", failures.len().to_string()),
            (
                "longest_step_ms",
                (s["step_latency_us"]["max"].as_f64().unwrap_or(0.0) / 1000.0).to_string(),
            ),
            ("summary", result.short()),
        ],
    );
}

/// Redis slowed, not away: `DEBUG SLEEP 0.8` on a side connection, several times during a
/// replay. Redis answers nothing for 0.8 s, less than every call's 1,000 ms deadline but more
/// than the 500 ms heartbeat timeout. No restart should follow; today one does (ignored, a
/// reproducer): the supervisor sees every rank's last heartbeat older than the timeout once
/// Redis answers again, whatever path the heartbeats take, because a stalled Redis holds the
/// heartbeats and the supervisor's own read alike (docs/RELIABILITY.md, "Redis misbehaving
/// while the group blocks on it"). Run it with `--ignored`.
#[test]
#[ignore = "known: a Redis stalled longer than the heartbeat timeout restarts the group (docs/RELIABILITY.md)"]
fn redis_slowed_by_debug_sleep_during_a_replay_restarts_nothing() {
    let _serial = serial();
    let mut rng = seeded("debug-sleep");
    let redis = RedisServer::start_with_options(tandem_tests::redis::RedisOptions {
        aof: true,
        bind: Some("127.0.0.1".into()),
        extra_args: vec!["--enable-debug-command".into(), "yes".into()],
    });
    let mut run = ReplayCli::spawn(&redis.url(), fault_requests() + 600, &[]);
    let view = run.cluster(2, Duration::from_secs(60));
    let mut sleeps = 0;
    for _ in 0..fault_rounds() * 5 {
        std::thread::sleep(Duration::from_millis(rng.range(300, 900)));
        if run.exited() {
            break;
        }
        match redis.command(&["DEBUG", "SLEEP", "0.8"]) {
            Ok(Resp::Simple(s)) if s == "OK" => sleeps += 1,
            other => panic!("DEBUG SLEEP 0.8: {other:?}"),
        }
    }
    let failures = view.log_lines("rank failure");
    let result = run.finish(Duration::from_secs(300));
    let s = result.assert_clean("Redis slowed by DEBUG SLEEP");
    println!("rank failures the supervisor logged: {failures:#?}");
    assert!(sleeps > 0, "the replay ended before the first DEBUG SLEEP");
    figure(
        "debug_sleep",
        &[
            ("sleeps", sleeps.to_string()),
            ("epochs", s["epochs"].to_string()),
            ("rank_failures_logged", failures.len().to_string()),
            ("summary", result.short()),
        ],
    );
    assert!(
        failures.is_empty() && s["epochs"] == 1,
        "{sleeps} sleeps of 0.8 s restarted the group: {failures:#?}"
    );
}
