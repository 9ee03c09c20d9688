//! Faults with real processes (docs/RELIABILITY.md) and a real `redis-server` on a free port. Each test
//! checks what the group did, prints its figures as `FIGURE fault=... key=value` lines (read by
//! `scripts/fault-suite.sh` for docs/RELIABILITY.md), and checks the invariants afterwards: no
//! outcome lost, duplicated or corrupted, no mismatch, no wait past its deadline.
//!
//! - SIGSTOP an agent past the heartbeat timeout, then SIGCONT: the group moves to a new epoch,
//!   the woken agent and its engine are fenced (stale-epoch requests refused and counted, never
//!   applied), and the group is ready again (`sigstop_past_the_heartbeat_timeout_fences_the_woken_rank`,
//!   and during a replay in `sigstop_agents_during_a_replay`).
//! - SIGKILL at random moments of a `tandem replay`, one process kind at a time: agents (its
//!   `--chaos`), the supervisor, redis-server, and an engine's connection to its agent (the
//!   replay process holds every engine, so killing it would end the run: an engine crash is
//!   played by cutting its socket mid-stream through a proxy instead, and by a leader engine
//!   that sends a store and disappears).
//! - A network partition of one rank (network namespaces and a veth pair), then healed.
//! - A full disk tier (a tmpfs just large enough for the preallocated slab, then filled).
//! - Redis unreachable for 10 s (redis-server stopped with SIGSTOP) during a replay.
//!
//! Sizes: `TANDEM_FAULT_ROUNDS` (faults per test, default 1), `TANDEM_FAULT_REQUESTS` (requests
//! per replay, default 600), `TANDEM_FAULT_SEED` (random moments; printed). The tests run one
//! at a time: every one of them runs a whole group on a shared machine.

use std::time::{Duration, Instant};

use tandem_proto::ids::{BlockHash, PageId, RequestId, Step};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::{connect_engine, fill, frame_mentions, stale_reply, step_both};
use tandem_tests::figures::{fault_requests, fault_rounds, figure, seeded, summarize};
use tandem_tests::netns::Netns;
use tandem_tests::procs::signal;
use tandem_tests::proxy::Proxy;
use tandem_tests::redis::RedisServer;
use tandem_tests::replay::{assert_exactly_once, summary_short, InProcessReplay};
use tandem_tests::replay_process::ReplayCli;
use tandem_tests::serial;
use tandem_tests::supervisor::SupervisedGroup;
use tandem_tests::tmpfs::Tmpfs;

const STALE_BASE: u64 = 0xdead_0000;

#[test]
fn sigstop_past_the_heartbeat_timeout_fences_the_woken_rank() {
    let _serial = serial();
    let mut rng = seeded("sigstop-fence");
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = redis.url();
    let c = SupervisedGroup::start(&spec, "info,tandem_core=debug");
    let timeout_ms = 1000; // supervisor.heartbeat_timeout_ms of Group::configure

    for round in 0..fault_rounds() {
        let rank = if round % 2 == 0 { 1 } else { 0 };
        let old = c.supervisor_epoch().expect("supervisor epoch");
        let tag = format!("r{round}");
        let (mut leader, pool0) = connect_engine(
            &c.group.socket(0),
            &c.group.path().join(format!("pool0-{tag}")),
            0,
            8,
        );
        let (mut follower, pool1) = connect_engine(
            &c.group.socket(1),
            &c.group.path().join(format!("pool1-{tag}")),
            1,
            8,
        );
        assert_eq!((leader.epoch().0, follower.epoch().0), (old, old));
        // Work in the old epoch: one store, stepped until its outcome is in a frame.
        let shard = leader.welcome().shard_bytes as usize;
        let mut page = vec![0u8; shard];
        fill(&mut page, u128::from(42 + round), 0);
        let task = leader
            .store(
                leader.welcome().next_step,
                RequestId(7 + round),
                vec![BlockHash::from(42 + round)],
                vec![PageId(0)],
            )
            .expect("store in the old epoch");
        let mut s = leader.welcome().next_step;
        let mut finished = false;
        for _ in 0..50 {
            let f = step_both(&mut leader, &mut follower, s);
            s = Step(s.0 + 1);
            if f.outcomes().any(|o| o.task == task) {
                finished = true;
                break;
            }
        }
        assert!(finished, "the store {task} never finished in epoch {old}");

        // Stop the rank past the heartbeat timeout.
        let pid = c.agent_pid(rank);
        let stopped = Instant::now();
        signal(pid, libc::SIGSTOP);
        let new = c.wait_epoch_after(old, Duration::from_secs(30));
        let detect_ms = stopped.elapsed().as_millis();
        std::thread::sleep(Duration::from_millis(rng.range(200, 1500)));
        let stopped_ms = stopped.elapsed().as_millis();
        signal(pid, libc::SIGCONT);
        let woke = Instant::now();

        // Both engines still speak the old epoch: everything they ask must be refused (stale)
        // or not ready, and nothing may be applied. Keep asking until each is told "stale".
        let mut seen = Vec::new();
        let (mut leader_fenced, mut follower_fenced) = (false, false);
        let mut i = 0;
        while !(leader_fenced && follower_fenced) {
            assert!(
                woke.elapsed() < Duration::from_secs(30),
                "engines were not fenced within 30 s: {}\n{}",
                summarize(&seen),
                c.diagnostics()
            );
            i += 1;
            let r = leader
                .store(
                    s,
                    RequestId(STALE_BASE + i),
                    vec![BlockHash::from(9_000 + i)],
                    vec![PageId(1)],
                )
                .map(|_| ());
            leader_fenced |= stale_reply(&r, old, new, &mut seen, "leader store");
            let r = leader.end_step(s, Duration::from_millis(200)).map(|_| ());
            leader_fenced |= stale_reply(&r, old, new, &mut seen, "leader end_step");
            let r = follower.frame(s, Duration::from_millis(200)).map(|_| ());
            follower_fenced |= stale_reply(&r, old, new, &mut seen, "follower frame");
            let r = follower.ack(Step(s.0.saturating_sub(1)));
            follower_fenced |= stale_reply(&r, old, new, &mut seen, "follower ack");
            std::thread::sleep(Duration::from_millis(20));
        }
        c.wait_ready(Duration::from_secs(60));
        let ready_ms = woke.elapsed().as_millis();

        // The refusals are counted on both ranks, and in the leader's metric.
        let counted: Vec<u64> = (0..2).map(|r| c.stale_rejected(r)).collect();
        assert!(
            counted.iter().all(|&n| n > 0),
            "stale-epoch rejections not counted: {counted:?}"
        );
        // The metrics are copied from the state machines every 250 ms.
        let t = Instant::now();
        let mut metric = 0.0;
        while metric <= 0.0 && t.elapsed() < Duration::from_secs(5) {
            metric = c.metric(0, "tandem_stale_epoch_rejected_total");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(metric > 0.0, "tandem_stale_epoch_rejected_total on the leader stayed {metric} for 5 s while /status counts {counted:?}");

        // In the new epoch nothing of the stale requests exists; the old store's outcome is
        // not delivered again to an engine that already saw it.
        leader.hello().expect("leader hello");
        leader.register_buffer(&pool0).expect("leader pool");
        follower.hello().expect("follower hello");
        follower.register_buffer(&pool1).expect("follower pool");
        assert_eq!((leader.epoch().0, follower.epoch().0), (new, new));
        for k in 0..4 {
            let f = step_both(&mut leader, &mut follower, Step(k));
            for j in 1..=i {
                assert!(
                    !frame_mentions(&f, RequestId(STALE_BASE + j)),
                    "a stale request of epoch {old} appears in frame {k} of epoch {new}: {f:?}"
                );
            }
            assert!(
                !f.outcomes().any(|o| o.task == task),
                "the outcome of {task}, already delivered, came again in frame {k}: {f:?}"
            );
        }
        drop((pool0, pool1));
        figure(
            "sigstop_agent",
            &[
                ("rank", rank.to_string()),
                ("stopped_ms", stopped_ms.to_string()),
                ("heartbeat_timeout_ms", timeout_ms.to_string()),
                ("detect_ms", detect_ms.to_string()),
                ("ready_after_sigcont_ms", ready_ms.to_string()),
                ("epoch_from", old.to_string()),
                ("epoch_to", c.supervisor_epoch().unwrap_or(0).to_string()),
                ("stale_requests_sent", (i * 4).to_string()),
                ("stale_rejected_rank0", counted[0].to_string()),
                ("stale_rejected_rank1", counted[1].to_string()),
                ("replies", summarize(&seen)),
            ],
        );
    }
    let log = c.group.log(0) + &c.group.log(1);
    let peer_stale = log.matches("stale-epoch message rejected").count();
    println!("stale-epoch peer messages rejected (debug log lines): {peer_stale}");
}

#[test]
fn sigstop_agents_during_a_replay() {
    let _serial = serial();
    let mut rng = seeded("sigstop-replay");
    let redis = RedisServer::start_bound("127.0.0.1");
    let n = fault_rounds();
    let mut run = ReplayCli::spawn(&redis.url(), fault_requests() + 400 * n as usize, &[]);
    let view = run.cluster(2, Duration::from_secs(60));
    let mut stops = Vec::new();
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(rng.range(300, 1500)));
        if run.exited() {
            break;
        }
        let rank = rng.range(0, 1) as u32;
        let Some(pid) = view.agent_pid(rank) else {
            continue;
        };
        let hold = rng.range(1200, 3000); // heartbeat timeout of the replay's cluster: 500 ms
        signal(pid, libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(hold));
        signal(pid, libc::SIGCONT);
        let woke = Instant::now();
        let ready = view
            .wait_ready(Duration::from_secs(60))
            .map(|_| woke.elapsed().as_millis());
        let stale = view.stale_rejected_metric(rank);
        stops.push(format!(
            "rank{rank}:{hold}ms:ready_after_{}ms:stale_{}",
            ready.map_or("?".into(), |m| m.to_string()),
            stale
        ));
    }
    let result = run.finish(Duration::from_secs(300));
    let s = result.assert_clean("SIGSTOP during a replay");
    assert!(!stops.is_empty(), "the replay ended before any stop");
    figure(
        "sigstop_agent_replay",
        &[
            ("stops", stops.len().to_string()),
            ("detail", stops.join(";")),
            ("summary", result.short()),
        ],
    );
    assert!(
        s["epochs"].as_u64().unwrap_or(0) > 1,
        "the stops moved the group to new epochs: {s}"
    );
}

// ---------------------------------------------------------------------------------------------
// SIGKILL during a replay.

#[test]
fn sigkill_agents_during_a_replay() {
    let _serial = serial();
    let mut rng = seeded("sigkill-agent");
    let redis = RedisServer::start_bound("127.0.0.1");
    // An interval the group can recover within (a restart takes up to the 5 s backoff cap once
    // restarts pile up); kills land at any moment, recoveries included.
    let every = format!("kill-agent:{:.1}", 2.0 + rng.range(0, 30) as f64 / 10.0);
    let run = ReplayCli::spawn(
        &redis.url(),
        fault_requests() * fault_rounds().min(2) as usize,
        &["--chaos", &every],
    );
    let result = run.finish(Duration::from_secs(1500));
    let s = result.assert_clean("SIGKILL of agents (--chaos)");
    figure(
        "sigkill_agent",
        &[
            ("chaos", every),
            ("agents_killed", s["agents_killed"].to_string()),
            ("summary", result.short()),
        ],
    );
}

#[test]
fn sigkill_the_supervisor_during_a_replay() {
    let _serial = serial();
    let mut rng = seeded("sigkill-supervisor");
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut run = ReplayCli::spawn(&redis.url(), fault_requests() + 600, &[]);
    let mut view = run.cluster(2, Duration::from_secs(60));
    let mut orphans = view.agent_pids();
    let mut respawned = Vec::new();
    let mut detail = Vec::new();
    for round in 0..fault_rounds() {
        std::thread::sleep(Duration::from_millis(rng.range(200, 1500)));
        if run.exited() {
            break;
        }
        // Kill the supervisor; its agents keep serving the group without it.
        let sup = view.supervisor_pid().expect("a supervisor runs");
        signal(sup, libc::SIGKILL);
        let killed = Instant::now();
        std::thread::sleep(Duration::from_millis(rng.range(100, 2000)));
        let gap = killed.elapsed().as_millis();
        // The outer restart policy (systemd, docker) starts a new one; it continues from the
        // state stored in Redis without restarting the healthy group.
        let epoch_before = view.agent_epoch(0);
        let new_sup = view.start_supervisor(&format!("supervisor-{round}.log"));
        view.wait_supervisor_ready(Duration::from_secs(60));
        let epoch_after = view.agent_epoch(0);
        // The new supervisor handles a failure: an agent killed and started again by the test.
        let rank = rng.range(0, 1) as u32;
        if let Some(pid) = view.agent_pid(rank) {
            signal(pid, libc::SIGKILL);
            orphans.retain(|p| *p != Some(pid));
            respawned.push(view.start_agent(rank, &format!("agent-{rank}-{round}.log")));
        }
        let restarted = Instant::now();
        let ready = view
            .wait_ready(Duration::from_secs(60))
            .map(|_| restarted.elapsed().as_millis());
        detail.push(format!("down_{gap}ms:epoch_{epoch_before:?}->{epoch_after:?}:agent{rank}_killed_ready_after_{}ms", ready.map_or("?".into(), |m| m.to_string())));
        view.adopt_supervisor(new_sup);
    }
    let result = run.finish(Duration::from_secs(300));
    for pid in orphans.into_iter().flatten() {
        signal(pid, libc::SIGKILL);
    }
    drop(respawned);
    let s = result.assert_clean("SIGKILL of the supervisor");
    assert!(
        !detail.is_empty(),
        "the replay ended before the supervisor was killed"
    );
    figure(
        "sigkill_supervisor",
        &[
            ("kills", detail.len().to_string()),
            ("detail", detail.join(";")),
            ("epochs", s["epochs"].to_string()),
            ("summary", result.short()),
        ],
    );
}

#[test]
fn sigkill_redis_during_a_replay() {
    let _serial = serial();
    let mut rng = seeded("sigkill-redis");
    let mut redis = RedisServer::start_bound("127.0.0.1");
    let mut run = ReplayCli::spawn(&redis.url(), fault_requests() + 600, &[]);
    let view = run.cluster(2, Duration::from_secs(60));
    let mut detail = Vec::new();
    for _ in 0..fault_rounds() {
        std::thread::sleep(Duration::from_millis(rng.range(300, 1500)));
        if run.exited() {
            break;
        }
        redis.kill();
        let killed = Instant::now();
        std::thread::sleep(Duration::from_millis(rng.range(200, 3000)));
        redis.restart();
        let down = killed.elapsed().as_millis();
        let back = Instant::now();
        let ready = view
            .wait_ready(Duration::from_secs(60))
            .map(|_| back.elapsed().as_millis());
        detail.push(format!(
            "down_{down}ms:ready_after_{}ms",
            ready.map_or("?".into(), |m| m.to_string())
        ));
    }
    let result = run.finish(Duration::from_secs(300));
    result.assert_clean("SIGKILL of redis-server");
    assert!(
        !detail.is_empty(),
        "the replay ended before Redis was killed"
    );
    figure(
        "sigkill_redis",
        &[
            ("kills", detail.len().to_string()),
            ("detail", detail.join(";")),
            ("summary", result.short()),
        ],
    );
}

/// An engine's connection cut in both directions at once, mid-stream, while the replay runs:
/// what an agent sees when its engine process dies. Round `k` cuts rank `1 - k % 2`'s
/// connection (the follower's first).
#[test]
fn engine_connections_cut_during_a_replay() {
    let _serial = serial();
    let mut rng = seeded("engine-cut");
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = redis.url();
    spec.host_capacity_blocks = 8192;
    let c = SupervisedGroup::start_small(&spec, "info");
    let proxy = Proxy::start(&c.group);
    let n = fault_rounds();
    let replay = InProcessReplay::start_with(
        &c.group,
        proxy.sockets(),
        fault_requests() + 300 * n as usize,
        rng.next_u64(),
        Duration::from_secs(20),
    );
    let mut cuts = Vec::new();
    for round in 0..n {
        let at = replay.progress() + rng.range(20, 200);
        while replay.progress() < at && !replay.done() {
            std::thread::sleep(Duration::from_millis(5));
        }
        if replay.done() {
            break;
        }
        let rank = 1 - (round % 2) as u32;
        if proxy.cut(rank) {
            cuts.push((rank, replay.progress()));
        }
    }
    let s = replay.finish();
    let text = match &s {
        Ok(s) => serde_json::to_string(&summary_short(s)).unwrap_or_default(),
        Err(e) => format!("error: {}", e.lines().next().unwrap_or("")),
    };
    figure(
        "engine_connection_cut",
        &[
            ("cuts_rank_at_request", format!("{cuts:?}").replace(' ', "")),
            ("result", text),
        ],
    );
    assert!(!cuts.is_empty(), "the replay ended before any cut");
    let s = s.unwrap_or_else(|e| {
        panic!(
            "the replay failed after engine connections were cut ({cuts:?}): {e}\n{}",
            c.diagnostics()
        )
    });
    assert_exactly_once(&s, "engine connections cut");
}

/// The leader's engine sends a store and dies before reading the answer (its process was
/// killed): a rank failure (docs/DESIGN.md invariant 4: when any rank fails, the whole group
/// moves to a new epoch), so the group must restart, and the store must be reported exactly once (finished or
/// aborted) to the engine that takes over, or never, if it never started.
#[test]
fn an_engine_that_dies_mid_store_moves_the_group_to_a_new_epoch() {
    use tandem_client::wire::write_message;
    use tandem_client::EngineRequest;
    let _serial = serial();
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = redis.url();
    let c = SupervisedGroup::start_small(&spec, "info");
    let old = c.supervisor_epoch().expect("epoch");
    let (mut leader, _pool) =
        connect_engine(&c.group.socket(0), &c.group.path().join("pool-dying"), 0, 4);
    let (mut follower, _fpool) = connect_engine(
        &c.group.socket(1),
        &c.group.path().join("pool-follower"),
        1,
        4,
    );
    step_both(&mut leader, &mut follower, Step(0));
    // The same engine's connection: a store request, then the process is gone.
    let mut raw = std::os::unix::net::UnixStream::connect(c.group.socket(0)).expect("connect");
    write_message(&mut raw, &EngineRequest::hello(0)).expect("hello");
    let _: tandem_client::EngineReply =
        tandem_client::wire::read_message(&mut raw).expect("welcome");
    write_message(
        &mut raw,
        &EngineRequest::Store {
            epoch: leader.epoch(),
            step: Step(1),
            request: RequestId(77),
            block_hashes: vec![BlockHash(77)],
            page_ids: vec![PageId(0)],
        },
    )
    .expect("store");
    // The store is started (the agent answered with its task id) when the engine dies.
    let started: tandem_client::EngineReply =
        tandem_client::wire::read_message(&mut raw).expect("store reply");
    assert!(
        matches!(started, tandem_client::EngineReply::Started { .. }),
        "{started:?}"
    );
    drop(raw);
    drop(leader);
    let died = Instant::now();
    let started = Instant::now();
    let mut new = None;
    while started.elapsed() < Duration::from_secs(15) {
        if let Some(e) = c.supervisor_epoch().filter(|e| *e > old) {
            new = Some(e);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = c.group.log(0);
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("engine disconnected"))
        .unwrap_or("")
        .to_string();
    figure(
        "engine_dies_mid_store",
        &[
            ("epoch_from", old.to_string()),
            (
                "epoch_after_15s",
                new.map_or("unchanged".into(), |e| e.to_string()),
            ),
            ("waited_ms", died.elapsed().as_millis().to_string()),
        ],
    );
    assert!(new.is_some(), "the leader's engine died with a store in flight and the group stayed in epoch {old} for 15 s; the agent only logged:\n{line}");
}

// ---------------------------------------------------------------------------------------------
// Network partition.

#[test]
fn partition_one_rank_then_heal() {
    let _serial = serial();
    let Some(net) = Netns::create() else {
        println!("SKIPPED partition_one_rank_then_heal: network namespaces are not available here (needs root and iproute2: `ip netns add`)");
        return;
    };
    let mut rng = seeded("partition");
    let redis = RedisServer::start_bound(&format!("127.0.0.1 {}", net.host_ip));
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = format!("redis://{}:{}", net.host_ip, redis.port());
    spec.host_capacity_blocks = 8192;
    let c = SupervisedGroup::start_partitionable(&spec, &net);
    let replay = InProcessReplay::start(
        &c.group,
        (0..2).map(|r| c.group.socket(r)).collect(),
        fault_requests() + 600,
        rng.next_u64(),
    );
    let mut detail = Vec::new();
    for _ in 0..fault_rounds() {
        std::thread::sleep(Duration::from_millis(rng.range(300, 1500)));
        if replay.done() {
            break;
        }
        let old = c.supervisor_epoch().unwrap_or(0);
        let hold = rng.range(2000, 4000);
        net.cut();
        let cut = Instant::now();
        std::thread::sleep(Duration::from_millis(hold));
        let epoch_during = c.supervisor_epoch().unwrap_or(0);
        net.heal();
        let healed = Instant::now();
        c.wait_ready(Duration::from_secs(60));
        let ready_ms = healed.elapsed().as_millis();
        let new = c.supervisor_epoch().unwrap_or(0);
        assert!(
            new > old,
            "the partition of {} ms did not move the group to a new epoch ({old} -> {new})",
            cut.elapsed().as_millis()
        );
        detail.push(format!(
            "cut_{hold}ms:epoch_{old}->{epoch_during}->{new}:ready_after_heal_{ready_ms}ms"
        ));
    }
    let s = replay.finish().unwrap_or_else(|e| {
        panic!(
            "the replay failed across the partition: {e}\n{}",
            c.diagnostics()
        )
    });
    assert_exactly_once(&s, "partition");
    figure(
        "partition_rank1",
        &[
            ("partitions", detail.len().to_string()),
            ("detail", detail.join(";")),
            (
                "summary",
                serde_json::to_string(&summary_short(&s)).unwrap_or_default(),
            ),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Full disk tier.

#[test]
fn a_disk_tier_on_a_full_file_system() {
    let _serial = serial();
    // 1. Too small for the slab: the agent refuses to start, naming the file and the cause.
    let spec = GroupSpec::new(1, 2);
    let g = Group::configure(&spec);
    let disk = g.path().join("rank1").join("disk");
    let Some(mount) = Tmpfs::mount(&disk, 64 * 1024) else {
        println!("SKIPPED a_disk_tier_on_a_full_file_system: cannot mount a tmpfs (needs root)");
        return;
    };
    let out = g
        .agent_command(1)
        .arg("--epoch")
        .arg("1")
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run agent");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "the agent started on a 64 KiB disk tier for a 2 MiB slab"
    );
    let log = g.log(1) + &err;
    assert!(
        log.contains("No space left on device") && log.contains(&disk.display().to_string()),
        "the refusal names the cause and the path:\n{log}"
    );
    println!(
        "agent on a 64 KiB tmpfs for a 2 MiB slab: exit {:?}; {}",
        out.status.code(),
        log.lines()
            .rev()
            .find(|l| l.contains("No space"))
            .unwrap_or("")
    );
    drop(mount);
    drop(g);

    // 2. Room for the slab and nothing else, then full: stores to the disk tier still land
    // (the slab is preallocated), the manifest cannot be written.
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = redis.url();
    spec.host_capacity_blocks = 32;
    spec.disk_capacity_blocks = 256;
    let g = SupervisedGroup::configure_small(&spec);
    let mut mounts = Vec::new();
    for rank in 0..2 {
        let dir = g.path().join(format!("rank{rank}")).join("disk");
        // Slab: 256 slots of 2 KiB shards rounded up to 4 KiB = 1 MiB; 16 KiB spare.
        let m = Tmpfs::mount(&dir, 1024 * 1024 + 16 * 1024).expect("mount tmpfs");
        mounts.push(m);
    }
    let mut c = SupervisedGroup::start_configured(g, "info");
    for m in &mounts {
        m.fill();
    }
    let mut rng = seeded("disk-full");
    let replay = InProcessReplay::start(
        &c.group,
        (0..2).map(|r| c.group.socket(r)).collect(),
        fault_requests(),
        rng.next_u64(),
    );
    let s = replay.finish().unwrap_or_else(|e| {
        panic!(
            "the replay failed on a full disk tier: {e}\n{}",
            c.diagnostics()
        )
    });
    assert_exactly_once(&s, "full disk tier");
    let disk_blocks: Vec<f64> = (0..2)
        .map(|r| c.metric_labeled(r, "tandem_tier_occupancy_blocks", "tier=\"disk\""))
        .collect();
    let manifest_errors: usize = (0..2)
        .map(|r| {
            c.group
                .log(r)
                .matches("cannot write the shard manifest")
                .count()
        })
        .sum();
    // A restart reads the manifests: what they could not record is dropped, nothing else.
    let old = c.supervisor_epoch().unwrap_or(0);
    c.kill_and_respawn(1);
    c.wait_epoch_after(old, Duration::from_secs(30));
    c.wait_ready(Duration::from_secs(60));
    let rebuilt = c
        .group
        .log(0)
        .lines()
        .rev()
        .find(|l| l.contains("group index rebuilt"))
        .unwrap_or("")
        .to_string();
    let again = InProcessReplay::start(
        &c.group,
        (0..2).map(|r| c.group.socket(r)).collect(),
        fault_requests(),
        rng.next_u64(),
    );
    let s2 = again.finish().unwrap_or_else(|e| {
        panic!(
            "the replay after the restart failed: {e}\n{}",
            c.diagnostics()
        )
    });
    assert_exactly_once(&s2, "full disk tier, after a restart");
    figure(
        "disk_tier_full",
        &[
            (
                "disk_blocks_per_rank",
                format!("{disk_blocks:?}").replace(' ', ""),
            ),
            ("manifest_write_errors_logged", manifest_errors.to_string()),
            (
                "rebuild",
                rebuilt
                    .split("rebuilt")
                    .nth(1)
                    .unwrap_or("")
                    .trim()
                    .replace(' ', "_"),
            ),
            (
                "first",
                serde_json::to_string(&summary_short(&s)).unwrap_or_default(),
            ),
            (
                "after_restart",
                serde_json::to_string(&summary_short(&s2)).unwrap_or_default(),
            ),
        ],
    );
    drop(c);
    drop(mounts);
}

// ---------------------------------------------------------------------------------------------
// Redis unreachable.

#[test]
fn redis_unreachable_for_ten_seconds_during_a_replay() {
    let _serial = serial();
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut run = ReplayCli::spawn(&redis.url(), fault_requests() + 600, &[]);
    let view = run.cluster(2, Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(800));
    let stop_for = Duration::from_secs(10);
    signal(redis.pid(), libc::SIGSTOP);
    let stopped = Instant::now();
    let mut not_ready_after: Option<u128> = None;
    let mut reasons = std::collections::BTreeSet::new();
    while stopped.elapsed() < stop_for {
        for (who, answer) in view.readiness() {
            if let Some((code, body)) = answer {
                if code != 200 {
                    not_ready_after.get_or_insert(stopped.elapsed().as_millis());
                    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                    if let Some(r) = v["reason"].as_str() {
                        reasons
                            .insert(format!("{who}: {}", r.chars().take(90).collect::<String>()));
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    signal(redis.pid(), libc::SIGCONT);
    let back = Instant::now();
    let ready = view
        .wait_ready(Duration::from_secs(60))
        .map(|_| back.elapsed().as_millis());
    std::thread::sleep(Duration::from_millis(1500));
    let failures = view.log_lines("rank failure");
    let result = run.finish(Duration::from_secs(300));
    let s = result.assert_clean("Redis unreachable for 10 s");
    println!("rank failures the supervisor logged: {failures:#?}");
    println!("readiness reasons while Redis was stopped: {reasons:#?}");
    assert!(
        not_ready_after.is_some(),
        "no process reported not ready while Redis was unreachable for 10 s"
    );
    assert!(
        reasons.iter().any(|r| r.to_lowercase().contains("redis")),
        "no readiness reason names Redis: {reasons:?}"
    );
    // Every process says why, the follower included (it said nothing before its own
    // heartbeats set its readiness).
    for who in ["supervisor", "rank 0", "rank 1"] {
        assert!(
            reasons.iter().any(|r| r.starts_with(&format!("{who}:"))
                && (r.to_lowercase().contains("redis") || r.contains("completion log"))),
            "{who} never said it is not ready because of Redis: {reasons:?}"
        );
    }
    assert!(
        ready.is_some(),
        "the group did not become ready again after Redis came back"
    );
    figure(
        "redis_unreachable_10s",
        &[
            (
                "not_ready_after_ms",
                not_ready_after.map_or("never".into(), |m| m.to_string()),
            ),
            (
                "ready_after_sigcont_ms",
                ready.map_or("never".into(), |m| m.to_string()),
            ),
            ("epochs", s["epochs"].to_string()),
            ("rank_failures_logged", failures.len().to_string()),
            (
                "first_failure",
                failures.first().map_or("none".into(), |l| {
                    l.split("failure=").nth(1).unwrap_or(l).to_string()
                }),
            ),
            ("summary", result.short()),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// What the tests above share. It starts only processes of its own (redis-server, the `tandem`
// binary) and signals only those, by process id.
