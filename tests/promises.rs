//! Issue 19: promises the group made and broke, each kept now and shown with real processes
//! (`tandem agent` per rank, `tandem supervisor`, a `redis-server` the test starts, simulated
//! engines through `tandem_client`).
//!
//! - `a_stalled_agent_never_puts_the_client_out_of_step`: an agent SIGSTOPped for 2 s during a
//!   `frame` call; the call times out with `ClientError::Timeout`, and 1,000 more calls on the
//!   same client each get their own reply (the late one is discarded).
//! - `a_second_agent_for_a_running_rank_is_refused_and_changes_nothing`: an agent SIGSTOPped
//!   right after its copies of a 512-block store started; a second agent for the same rank
//!   exits naming the lock file and the pid, touching neither the engine socket nor the
//!   manifest; after SIGCONT every block loads back byte for byte, with no checksum failure.
//! - `a_copied_stream_entry_never_delivers_a_task_twice`: a byte-identical copy of the oldest
//!   entry with starts appended to the completion stream; trimming goes on, a restart after the
//!   original went delivers no task twice, and the copy is counted and reported.
//! - `ranks_with_other_tier_capacities_are_refused_at_join`: a follower with half the leader's
//!   host capacity (or no disk tier) is refused, naming the field and both values.
//! - `a_frame_the_leader_cannot_send_is_never_sealed`: the largest lookup whose frame fits
//!   `protocol.max_frame_bytes` is admitted and reaches the follower; one more hash is refused
//!   with `AgentError::FrameTooLarge` naming the bytes and the limit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_client::{AgentError, ClientError, EngineClient};
use tandem_durable::StepRecord;
use tandem_proto::frame::{Frame, LookupResult, OutcomeResult};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step};
use tandem_proto::wire::codec::{encode, HEADER_LEN};
use tandem_proto::wire::Message;
use tandem_replay::{pool_pages_needed, run_replay, ReplayParams, ReplayProgress};
use tandem_store::manifest::Manifest;
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::{connect_engine, fill, holds};
use tandem_tests::redis::{RedisServer, Resp};
use tandem_tests::{tandem, ChildGuard};
use tandem_trace::SynthWorkload;

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child process this test started and still owns.
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

fn start_ranks(g: &mut Group, env: &[(&str, &str)]) {
    for rank in 0..g.world_size {
        let mut cmd = g.agent_command(rank);
        for (k, v) in env {
            cmd.env(k, v);
        }
        g.agents
            .push(Some(ChildGuard(cmd.spawn().expect("spawn agent"))));
    }
}

#[test]
fn a_stalled_agent_never_puts_the_client_out_of_step() {
    let mut g = Group::configure(&GroupSpec::new(1, 2));
    start_ranks(
        &mut g,
        &[("TANDEM__SUPERVISOR__HEARTBEAT_TIMEOUT_MS", "60000")],
    );
    g.wait_ready(Duration::from_secs(30));
    let (mut leader, _lp) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 4);
    let (mut follower, _fp) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 4);
    let pid = g.agents[1].as_ref().unwrap().0.id();

    // Step 0 goes through; then the follower's agent stops while its engine waits for step 1.
    let f0 = leader.end_step(Step(0), Duration::from_secs(5)).unwrap();
    leader.ack(Step(0)).unwrap();
    assert_eq!(follower.frame(Step(0), Duration::from_secs(5)).unwrap(), f0);
    follower.ack(Step(0)).unwrap();
    follower.set_reply_slack(Duration::from_millis(500));
    signal(pid, libc::SIGSTOP);
    let t = Instant::now();
    let stalled = follower.frame(Step(1), Duration::from_millis(200));
    println!("stalled call after {:?}: {stalled:?}", t.elapsed());
    assert!(
        matches!(
            stalled,
            Err(ClientError::Timeout {
                request: "frame",
                ..
            })
        ),
        "{stalled:?}"
    );
    std::thread::sleep(Duration::from_secs(2).saturating_sub(t.elapsed()));
    signal(pid, libc::SIGCONT);

    // 1,000 more calls on the same client, every reply matched to its request.
    let mut calls = 0;
    let mut s = 1u64;
    while calls < 1_000 {
        let request = RequestId(1_000_000 + s);
        let r = leader
            .lookup(
                Step(s),
                request,
                vec![BlockHash::from(s), BlockHash::from(s + 1)],
            )
            .unwrap_or_else(|e| panic!("lookup in step {s}: {e}"));
        assert_eq!(r.request, request);
        let f = leader.end_step(Step(s), Duration::from_secs(5)).unwrap();
        assert_eq!(f.step, Step(s));
        leader.ack(Step(s)).unwrap();
        let got = follower
            .frame(Step(s), Duration::from_secs(5))
            .unwrap_or_else(|e| {
                panic!(
                    "call {calls}: frame {s}: {e}\n{}\n---\n{}",
                    g.log(1),
                    g.log(0)
                )
            });
        calls += 1;
        assert_eq!(got.step, Step(s), "call {calls}: the frame of another step");
        assert_eq!(got, f, "call {calls}: another frame");
        follower
            .ack(Step(s))
            .unwrap_or_else(|e| panic!("call {calls}: ack {s}: {e}"));
        calls += 1;
        s += 1;
    }
    assert_eq!(
        follower.late_replies(),
        1,
        "the stalled call's late reply was discarded"
    );
}

/// Run `rank` with `env` until it exits (at most 60 s): its status and log.
fn run_to_exit(g: &Group, rank: u32, env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let mut cmd = g.agent_command(rank);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = ChildGuard(cmd.spawn().expect("spawn agent"));
    let started = Instant::now();
    loop {
        if let Some(status) = child.0.try_wait().expect("poll agent") {
            return (status, g.log(rank));
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "rank {rank} still runs after 60 s:\n{}\n--- leader:\n{}",
            g.log(rank),
            g.log(0)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ranks_with_other_tier_capacities_are_refused_at_join() {
    let mut spec = GroupSpec::new(1, 2);
    spec.host_capacity_blocks = 64;
    spec.disk_capacity_blocks = 128;
    let mut g = Group::configure(&spec);
    let leader = g.agent_command(0).spawn().expect("spawn leader");
    g.agents.push(Some(ChildGuard(leader)));
    for (key, field, ours, theirs) in [
        (
            "TANDEM__STORE__HOST_CAPACITY_BLOCKS",
            "host_capacity_blocks",
            "64",
            "32",
        ),
        (
            "TANDEM__STORE__DISK_CAPACITY_BLOCKS",
            "disk_capacity_blocks",
            "128",
            "0",
        ),
    ] {
        let (status, log) = run_to_exit(&g, 1, &[(key, theirs)]);
        println!("follower with {key}={theirs}: {status}");
        assert!(
            !status.success(),
            "a follower with {field} {theirs} joined:\n{log}"
        );
        let want = format!(
            "configuration fingerprint differs in field {field}: leader has {ours}, rank has {theirs}"
        );
        assert!(
            log.contains(&want),
            "the refusal names {field} and both values:\n{log}"
        );
    }
    // The leader is unharmed: a follower configured like it joins.
    let follower = g.agent_command(1).spawn().expect("spawn follower");
    g.agents.push(Some(ChildGuard(follower)));
    g.wait_ready(Duration::from_secs(30));
}

/// `n` distinct block hashes (each 16 bytes on the wire).
fn wide_hashes(n: usize) -> Vec<BlockHash> {
    (0..n as u128).map(|i| BlockHash(u128::MAX - i)).collect()
}

#[test]
fn a_frame_the_leader_cannot_send_is_never_sealed() {
    const LIMIT: u64 = 65_536;
    let mut g = Group::configure(&GroupSpec::new(1, 2));
    start_ranks(&mut g, &[("TANDEM__PROTOCOL__MAX_FRAME_BYTES", "65536")]);
    g.wait_ready(Duration::from_secs(30));
    let (mut leader, _lp) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 4);
    let (mut follower, _fp) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 4);
    let request = RequestId(7);
    // The bound the leader admits against: the frame holding the lookup, encoded exactly, with
    // the step number at its widest (10 bytes), since what is admitted now may be revealed in
    // a frame of any later step.
    let epoch = leader.epoch();
    let widest = |n: usize| {
        let mut f = Frame::empty(epoch, Step(u64::MAX));
        f.lookups.push(LookupResult {
            request,
            block_hashes: wide_hashes(n),
            matched_blocks: 0,
            pinned: false,
        });
        (encode(&Message::Frame(f)).len() - HEADER_LEN) as u64
    };
    let n = (1..20_000)
        .take_while(|&n| widest(n) <= LIMIT)
        .last()
        .unwrap();
    println!(
        "largest lookup that fits: {n} hashes, bound {} bytes; one more: {} bytes; limit {LIMIT}",
        widest(n),
        widest(n + 1)
    );

    // The largest lookup that fits is admitted, sealed and read by the follower.
    let r = leader
        .lookup(Step(0), request, wide_hashes(n))
        .expect("the largest lookup that fits");
    assert_eq!(r.block_hashes.len(), n);
    let f0 = leader.end_step(Step(0), Duration::from_secs(5)).unwrap();
    leader.ack(Step(0)).unwrap();
    let sent = (encode(&Message::Frame(f0.clone())).len() - HEADER_LEN) as u64;
    assert!(sent <= LIMIT, "frame 0 is {sent} bytes");
    let got = follower
        .frame(Step(0), Duration::from_secs(5))
        .expect("the follower reads frame 0");
    assert_eq!(got, f0);
    assert_eq!(got.lookups[0].block_hashes.len(), n);
    follower.ack(Step(0)).unwrap();

    // A lookup twice that size (what the old leader sealed as a 131,034-byte frame it could
    // not send, while the follower waited for it) is refused.
    assert!(
        matches!(
            leader.lookup(Step(1), request, wide_hashes(2 * n)),
            Err(ClientError::Agent(AgentError::FrameTooLarge {
                limit: LIMIT,
                ..
            }))
        ),
        "a lookup of {} hashes was not refused",
        2 * n
    );
    // One more hash is refused with the typed error naming the bytes and the limit.
    match leader.lookup(Step(1), request, wide_hashes(n + 1)) {
        Err(ClientError::Agent(AgentError::FrameTooLarge { bytes, limit })) => {
            assert_eq!((bytes, limit), (widest(n + 1), LIMIT));
        }
        Ok(r) => panic!(
            "a lookup of {} hashes was admitted ({} matched)",
            n + 1,
            r.matched_blocks
        ),
        Err(e) => panic!("a lookup of {} hashes: {e}", n + 1),
    }
    // So is a store that could not fit, and nothing of either reaches a frame.
    match leader.store(
        Step(1),
        RequestId(8),
        wide_hashes(5_000),
        (0..5_000).map(PageId).collect(),
    ) {
        Err(ClientError::Agent(AgentError::FrameTooLarge { bytes, limit })) => {
            assert!(bytes > limit && limit == LIMIT, "{bytes} {limit}");
        }
        other => panic!(
            "a store of 5,000 blocks: {:?}",
            other.map_err(|e| e.to_string())
        ),
    }
    let f1 = leader.end_step(Step(1), Duration::from_secs(5)).unwrap();
    leader.ack(Step(1)).unwrap();
    assert!(
        f1.lookups.is_empty() && f1.stores.is_empty() && f1.finished.is_empty(),
        "{f1:?}"
    );
    assert_eq!(
        follower
            .frame(Step(1), Duration::from_secs(5))
            .expect("frame 1"),
        f1
    );
    follower.ack(Step(1)).unwrap();
    // The agent publishes its counters every 250 ms.
    let started = Instant::now();
    let refusals = loop {
        let metrics = g
            .http_get(0, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        let line = metrics
            .lines()
            .find(|l| l.starts_with("tandem_frame_limit_refusals_total"))
            .unwrap_or_default()
            .to_string();
        if line.ends_with(" 3") || started.elapsed() > Duration::from_secs(5) {
            break line;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    println!("{refusals}");
    assert!(refusals.ends_with(" 3"), "{refusals}");
}

/// `rank`'s `/status` JSON.
fn status(g: &Group, rank: u32) -> serde_json::Value {
    g.http_get(rank, "/status")
        .and_then(|(_, b)| serde_json::from_str(&b).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Seal `s` on the leader, read it on the follower, acknowledge on both; the frame.
fn step_both(leader: &mut EngineClient, follower: &mut EngineClient, s: u64) -> Frame {
    let f = leader
        .end_step(Step(s), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("end_step {s}: {e}"));
    leader.ack(Step(s)).unwrap();
    let g = follower
        .frame(Step(s), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("frame {s}: {e}"));
    assert_eq!(g, f);
    follower.ack(Step(s)).unwrap();
    f
}

#[test]
fn a_second_agent_for_a_running_rank_is_refused_and_changes_nothing() {
    const BLOCKS: u32 = 512;
    let mut spec = GroupSpec::new(1, 2);
    spec.host_capacity_blocks = 1024;
    spec.disk_capacity_blocks = 0;
    let mut g = Group::configure(&spec);
    let env = [("TANDEM__SUPERVISOR__HEARTBEAT_TIMEOUT_MS", "60000")];
    start_ranks(&mut g, &env);
    g.wait_ready(Duration::from_secs(30));
    let pages = u64::from(2 * BLOCKS);
    let (mut leader, mut lpool) = connect_engine(&g.socket(0), &g.pool_path(0), 0, pages);
    let (mut follower, mut fpool) = connect_engine(&g.socket(1), &g.pool_path(1), 1, pages);
    let hashes: Vec<BlockHash> = (0..u64::from(BLOCKS))
        .map(|i| BlockHash::from(0x5107_0000 + i))
        .collect();
    for (i, h) in hashes.iter().enumerate() {
        fill(lpool.page_mut(PageId(i as u32)).unwrap(), h.0, 0);
        fill(fpool.page_mut(PageId(i as u32)).unwrap(), h.0, 1);
    }
    let pid = g.agents[1].as_ref().unwrap().0.id();
    let disk = g.path().join("rank1").join("disk");
    let manifest = disk.join("manifest.bin");

    // Step 0 starts a store of 512 blocks (16 MiB per rank); the follower's agent copies its
    // shards once its engine acknowledged the frame, and is stopped right then, mid-copy.
    let task = leader
        .store(
            Step(0),
            RequestId(1),
            hashes.clone(),
            (0..BLOCKS).map(PageId).collect(),
        )
        .unwrap();
    let f0 = step_both(&mut leader, &mut follower, 0);
    assert_eq!(f0.stores[0].task, task);
    signal(pid, libc::SIGSTOP);
    let socket = g.socket(1);
    let inode = |p: &std::path::Path| {
        std::fs::metadata(p)
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .ok()
    };
    let socket_inode = inode(&socket);
    // Both copies of the manifest (each save overwrites the older one).
    let copies = tandem_store::manifest::ManifestFile::new(&manifest).copies();
    let read_copies = || {
        copies
            .iter()
            .map(|c| std::fs::read(c).ok())
            .collect::<Vec<_>>()
    };
    let manifest_before = read_copies();
    let listed = Manifest::load(&manifest)
        .ok()
        .flatten()
        .map_or(0, |m| m.entries.len());
    println!("rank 1 stopped with {listed} of {BLOCKS} blocks in its manifest");

    // A second agent for rank 1 (as a process supervisor could start while the first is
    // stuck) exits at once, naming the lock file and the pid holding it.
    let started = Instant::now();
    let (status2, log2) = run_to_exit(&g, 1, &env);
    println!(
        "second agent for rank 1: {status2} after {:?}",
        started.elapsed()
    );
    let lock_file = disk.join("tandem.lock");
    let want = format!(
        "another process holds this rank's tiers: lock file {} is held by pid {pid}",
        lock_file.display()
    );
    // It touched nothing: the running agent's socket is the same file, still accepting, and
    // the manifest is as the running agent left it.
    assert_eq!(
        inode(&socket),
        socket_inode,
        "the engine socket was replaced"
    );
    assert!(
        std::os::unix::net::UnixStream::connect(&socket).is_ok(),
        "the engine socket refuses connections"
    );
    assert_eq!(read_copies(), manifest_before, "the manifest changed");
    assert!(
        !status2.success(),
        "the second agent was not refused:\n{log2}"
    );
    assert!(
        log2.contains(&want),
        "the refusal names the lock file and the pid:\n{log2}"
    );
    std::thread::sleep(Duration::from_millis(500));
    signal(pid, libc::SIGCONT);

    // The group goes on: the store finishes, then every block loads back, byte for byte, on
    // both ranks, with no checksum failure anywhere.
    let mut s = 1;
    let mut outcome = None;
    let started = Instant::now();
    while outcome.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the store did not finish"
        );
        std::thread::sleep(Duration::from_millis(5));
        let f = step_both(&mut leader, &mut follower, s);
        outcome = f
            .finished
            .iter()
            .find(|o| o.task == task)
            .map(|o| o.result.clone());
        s += 1;
    }
    assert_eq!(outcome, Some(OutcomeResult::Ok));
    let request = RequestId(2);
    let r = leader.lookup(Step(s), request, hashes.clone()).unwrap();
    assert_eq!(r.matched_blocks, BLOCKS);
    let dst: Vec<PageId> = (BLOCKS..2 * BLOCKS).map(PageId).collect();
    let load = leader
        .load(Step(s), request, hashes.clone(), dst.clone())
        .unwrap();
    let mut loaded = None;
    let started = Instant::now();
    while loaded.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the load did not finish"
        );
        std::thread::sleep(Duration::from_millis(5));
        let f = step_both(&mut leader, &mut follower, s);
        loaded = f
            .finished
            .iter()
            .find(|o| o.task == load)
            .map(|o| o.result.clone());
        s += 1;
    }
    assert_eq!(loaded, Some(OutcomeResult::Ok));
    for (rank, pool) in [(0u32, &lpool), (1, &fpool)] {
        for (h, p) in hashes.iter().zip(&dst) {
            assert!(
                holds(pool.page(*p).unwrap(), h.0, rank),
                "rank {rank}: page {p:?} does not hold block {h:?}"
            );
        }
    }
    for rank in 0..2 {
        let st = status(&g, rank);
        assert_eq!(st["store"]["checksum_failures"], 0, "rank {rank}: {st}");
        assert_eq!(st["store"]["copy_failures"], 0, "rank {rank}: {st}");
        assert_eq!(st["store"]["blocks"], BLOCKS, "rank {rank}: {st}");
    }
    // The manifest on disk is the running agent's, with every block (it is written 200 ms
    // after a change).
    let started = Instant::now();
    loop {
        let m = Manifest::load(&manifest)
            .expect("the manifest reads")
            .expect("a manifest");
        assert_eq!(m.rank.0, 1);
        if hashes.iter().all(|h| m.entries.contains_key(h)) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "manifest of {} entries",
            m.entries.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------------
// A copied completion-stream entry (a real redis-server, a supervisor, a replay).

/// The completion stream of the test group (`Group::configure`'s group id).
const STREAM: &str = "tandem:{itest}:completions";

/// `XRANGE` of the completion stream: each entry's id and its step record (barriers left out).
fn stream_records(redis: &RedisServer, from: &str, to: &str) -> Vec<(String, StepRecord)> {
    let Ok(Resp::Array(Some(entries))) = redis.command(&["XRANGE", STREAM, from, to]) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries {
        let Resp::Array(Some(parts)) = e else {
            continue;
        };
        let (Some(id), Some(Resp::Array(Some(fields)))) =
            (parts.first().and_then(Resp::text), parts.get(1))
        else {
            continue;
        };
        for kv in fields.chunks(2) {
            if kv[0].text().as_deref() == Some("rec") {
                if let Resp::Bulk(Some(bytes)) = &kv[1] {
                    if let Ok(rec) = postcard::from_bytes::<StepRecord>(bytes) {
                        out.push((id.clone(), rec));
                    }
                }
            }
        }
    }
    out
}

fn xlen(redis: &RedisServer) -> u64 {
    redis
        .command(&["XLEN", STREAM])
        .ok()
        .and_then(|r| r.text())
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

/// A metric's value summed over its series on `rank` (0 when absent).
fn metric(g: &Group, rank: u32, name: &str) -> f64 {
    let body = g
        .http_get(rank, "/metrics")
        .map(|(_, b)| b)
        .unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_copied_stream_entry_never_delivers_a_task_twice() {
    const MAX_LEN: u64 = 200;
    const REQUESTS: usize = 3_000;
    let redis = RedisServer::start();
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = redis.url();
    spec.host_capacity_blocks = 8192;
    spec.disk_capacity_blocks = 0;
    let mut g = Group::configure(&spec);
    // 2 KiB shards: the replay exercises the protocol, not copy bandwidth.
    let text = std::fs::read_to_string(&g.config).unwrap();
    let text = text.replacen("head_dim = 16", "head_dim = 1", 1).replacen(
        "[redis]\n",
        &format!("[redis]\nstream_max_len = {MAX_LEN}\n"),
        1,
    );
    std::fs::write(&g.config, &text).unwrap();
    start_ranks(&mut g, &[]);
    let sup_log = std::fs::File::create(g.path().join("supervisor.log")).unwrap();
    let supervisor = ChildGuard(
        tandem()
            .arg("supervisor")
            .arg("--config")
            .arg(&g.config)
            .stdout(std::process::Stdio::null())
            .stderr(sup_log)
            .spawn()
            .expect("spawn supervisor"),
    );
    g.wait_ready(Duration::from_secs(60));

    // A replay paced at 20 ms per step (about 50 entries a second, so the leader's trim every
    // 2.5 s cuts the oldest of them and keeps the newest), long enough to outlive what follows.
    let records: Vec<_> = SynthWorkload::new(REQUESTS, 19).collect();
    let mut params = ReplayParams::new((0..2).map(|r| g.socket(r)).collect());
    params.pool_pages = pool_pages_needed(&records).max(256);
    params.pool_dir = g.path().join("pools");
    params.min_step_interval = Duration::from_millis(20);
    params.deadlines.stall = Duration::from_secs(60);
    let done = Arc::new(AtomicU64::new(0));
    let seen = done.clone();
    let replay = std::thread::spawn(move || {
        let progress = move |p: &ReplayProgress| seen.store(p.requests_done, Ordering::SeqCst);
        run_replay(&params, records, Some(&progress))
    });
    let started = Instant::now();
    // Wait for the stream's steady state: at its limit, trimmed at least once.
    while xlen(&redis) < MAX_LEN || metric(&g, 0, "tandem_stream_trimmed_entries_total") < 1.0 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the stream never reached its limit (replay at {} requests)",
            done.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The oldest entry that started tasks whose outcomes are in later entries.
    let records = stream_records(&redis, "-", "+");
    let (original, task) = records
        .iter()
        .find_map(|(id, rec)| {
            let t = rec.started.first()?.start.task;
            records
                .iter()
                .any(|(_, later)| later.finished.iter().any(|o| o.task == t))
                .then(|| (id.clone(), t))
        })
        .expect("an entry with a start whose outcome is logged later");
    let epoch = redis.get("tandem:{itest}:epoch").expect("the epoch");
    let script = "local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) \
                  return redis.call('XADD', KEYS[1], ARGV[2], unpack(e[1][2]))";
    let copy = redis
        .command(&[
            "EVAL",
            script,
            "1",
            STREAM,
            &original,
            &format!("{epoch}-*"),
        ])
        .ok()
        .and_then(|r| r.text())
        .expect("the copy is appended");
    println!(
        "entry {original} (starts task {task}) copied as {copy} while {} entries are retained",
        records.len()
    );

    // Trimming goes on past the copy: the original goes, then the copy, and the stream
    // comes back to its limit.
    let started = Instant::now();
    let mut lengths = Vec::new();
    while !stream_records(&redis, &original, &original).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the original {original} was never trimmed (stream of {} entries)",
            xlen(&redis)
        );
        lengths.push(xlen(&redis));
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("original trimmed after {:?}", started.elapsed());
    // A restart while the copy is in the stream and the original and its outcome are gone:
    // recovery must not bring the copy's tasks back.
    assert!(
        !stream_records(&redis, &copy, &copy).is_empty(),
        "the copy is still in the stream"
    );
    let old = redis.get("tandem:{itest}:epoch").unwrap_or_default();
    drop(g.agents[1].take());
    let child = g.agent_command(1).spawn().expect("respawn rank 1");
    g.agents[1] = Some(ChildGuard(child));
    let started = Instant::now();
    while redis.get("tandem:{itest}:epoch").unwrap_or_default() == old {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no new epoch after the restart"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Three more trims: the copy holds nothing back.
    for _ in 0..75 {
        lengths.push(xlen(&redis));
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "stream lengths every 100 ms (limit {MAX_LEN}): {:?}",
        &lengths[lengths.len().saturating_sub(75)..]
    );

    let summary = replay
        .join()
        .expect("the replay thread")
        .unwrap_or_else(|e| panic!("the replay failed: {e}\n{}", g.log(0)));
    println!("{}", summary.to_json());
    assert_eq!(
        summary.duplicate_completions,
        0,
        "a task was delivered twice: {}",
        summary.to_json()
    );
    assert_eq!(summary.lost_completions, 0, "{}", summary.to_json());
    assert_eq!(summary.verify_failures, 0, "{}", summary.to_json());
    assert_eq!(summary.requests, REQUESTS as u64);
    assert!(summary.epochs >= 2, "{}", summary.to_json());

    // The copy was trimmed too, the stream is back within its limit (plus what a trim interval
    // appends), and the copy was counted and reported.
    let started = Instant::now();
    while !stream_records(&redis, &copy, &copy).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the copy {copy} was never trimmed: stream of {} entries",
            xlen(&redis)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let len = xlen(&redis);
    println!("stream length after the run: {len} (limit {MAX_LEN})");
    assert!(len <= 2 * MAX_LEN, "stream of {len} entries");
    // Every rank counted it: the leader when it read it and at recovery, the restarted rank 1
    // at recovery.
    let rejected: Vec<f64> = (0..2)
        .map(|r| metric(&g, r, "tandem_stream_entries_rejected_total"))
        .collect();
    println!("tandem_stream_entries_rejected_total by rank: {rejected:?}");
    assert!(rejected[0] >= 2.0 && rejected[1] >= 1.0, "{rejected:?}");
    assert!(
        g.log(1)
            .contains("recovery ignored completion stream entries"),
        "rank 1 reports the copy at recovery"
    );
    assert!(
        g.log(0).contains("completion stream entry ignored"),
        "the leader reports the copy"
    );
    drop(supervisor);
}
