//! Group restarts with real processes (docs/DESIGN.md invariants 4 and 5). A real `redis-server` on a free port, one
//! `tandem agent` process per rank, a `tandem supervisor` process, and simulated engines
//! (`tandem_replay::run_replay`) storing and loading through the agents while the test kills
//! things: a follower agent, the leader agent, the supervisor, Redis itself, and agents again
//! and again until the restart limit is reached.
//!
//! The test plays the outer restart policy (docker `restart: always`, systemd): it starts a
//! killed agent process again. Everything else (noticing the failure, moving the epoch,
//! reconciling) is the supervisor's and the agents' job.
//!
//! The tests share the machine's cores with every rank, so they run one at a time.

use std::time::{Duration, Instant};

use tandem_replay::{pool_pages_needed, ReplayParams, ReplaySummary};
use tandem_tests::cluster::{http_get, Group, GroupSpec};
use tandem_tests::procs::wait_exit;
use tandem_tests::redis::RedisServer;
use tandem_tests::replay::{self, InProcessReplay};
use tandem_tests::supervisor::Supervisor;
use tandem_tests::{serial, tail, ChildGuard};
use tandem_trace::SynthWorkload;

/// The group id of [`Group::configure`]'s configuration.
const GROUP: &str = "itest";
/// How long a group or supervisor may take to become ready.
const READY: Duration = Duration::from_secs(60);

fn key(suffix: &str) -> String {
    format!("tandem:{{{GROUP}}}:{suffix}")
}

/// A group of agent processes with its supervisor process and its Redis.
struct Cluster {
    group: Group,
    redis: RedisServer,
    supervisor: Supervisor,
    agent_runs: Vec<u32>,
}

impl Cluster {
    /// Two ranks (pp 1 × tp 2) with 2 KiB shards and room for every block of a replay,
    /// their supervisor (with `supervisor_env` as `TANDEM__*` overrides), all ready.
    fn start(redis: RedisServer, supervisor_env: &[(&str, &str)]) -> Self {
        Self::start_with(redis, supervisor_env, |toml| toml)
    }

    /// As [`Self::start`], with the group's configuration file rewritten by `edit` before
    /// any process reads it.
    fn start_with(
        redis: RedisServer,
        supervisor_env: &[(&str, &str)],
        edit: impl Fn(String) -> String,
    ) -> Self {
        let mut spec = GroupSpec::new(1, 2);
        spec.redis_url = redis.url();
        spec.host_capacity_blocks = 8192;
        spec.disk_capacity_blocks = 0;
        let mut group = Group::configure(&spec);
        // 2 KiB shards instead of 32 KiB: the replay exercises the protocol, not copy bandwidth.
        group.use_small_shards();
        let toml = std::fs::read_to_string(&group.config).expect("read the group config");
        std::fs::write(&group.config, edit(toml)).expect("write the group config");
        for rank in 0..group.world_size {
            let child = group
                .agent_command(rank)
                .spawn()
                .expect("spawn tandem agent");
            group.agents.push(Some(ChildGuard(child)));
        }
        let mut c = Cluster {
            agent_runs: vec![1; group.world_size as usize],
            supervisor: Supervisor::new(&group, supervisor_env),
            group,
            redis,
        };
        c.supervisor.start();
        c.group.wait_ready(READY);
        c.wait_supervisor_ready(READY);
        c
    }

    /// Wait until the supervisor's `/readyz` answers 200.
    fn wait_supervisor_ready(&self, timeout: Duration) {
        let start = Instant::now();
        loop {
            let answer = self.supervisor.get("/readyz");
            if matches!(answer, Some((200, _))) {
                return;
            }
            if start.elapsed() > timeout {
                panic!(
                    "supervisor not ready within {timeout:?} (last answer {answer:?})\n{}",
                    self.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL `rank`'s agent and reap it; its log is kept as `rank<r>.run<n>.log`.
    fn kill_agent(&mut self, rank: u32) {
        let guard = self.group.agents[rank as usize]
            .take()
            .expect("the agent runs");
        drop(guard);
        let run = self.agent_runs[rank as usize];
        let _ = std::fs::rename(
            self.group.log_path(rank),
            self.group.path().join(format!("rank{rank}.run{run}.log")),
        );
    }

    /// Start `rank`'s agent again, as a restart policy would.
    fn restart_agent(&mut self, rank: u32) {
        self.agent_runs[rank as usize] += 1;
        let child = self
            .group
            .agent_command(rank)
            .spawn()
            .expect("respawn tandem agent");
        self.group.agents[rank as usize] = Some(ChildGuard(child));
    }

    /// Wait until the supervisor's epoch passes `epoch`.
    fn wait_epoch_after(&self, epoch: u64, timeout: Duration) -> u64 {
        let start = Instant::now();
        loop {
            if let Some(e) = self.supervisor.epoch().filter(|e| *e > epoch) {
                return e;
            }
            if start.elapsed() > timeout {
                panic!(
                    "the supervisor did not move past epoch {epoch} within {timeout:?}\n{}",
                    self.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Logs of every process, their last lines, for failure messages.
    fn diagnostics(&self) -> String {
        let mut out = format!(
            "--- supervisor /status: {:?}\n",
            self.supervisor.get("/status")
        );
        out += &format!(
            "--- supervisor log (run {}):\n{}\n",
            self.supervisor.runs(),
            tail(&self.supervisor.log(), 40)
        );
        for rank in 0..self.group.world_size {
            out += &format!(
                "--- rank {rank} log:\n{}\n",
                tail(&self.group.log(rank), 25)
            );
        }
        out += &format!("--- redis log:\n{}\n", tail(&self.redis.log(), 10));
        out
    }
}

/// A replay running in its own thread, with the cluster's logs in its failure messages.
struct Replay(InProcessReplay);

impl Replay {
    /// Replay `requests` synthetic requests (seed `seed`) through `c`'s engine sockets.
    fn start(c: &Cluster, requests: usize, seed: u64) -> Self {
        let records: Vec<_> = SynthWorkload::new(requests, seed).collect();
        let mut params =
            ReplayParams::new((0..c.group.world_size).map(|r| c.group.socket(r)).collect());
        params.pool_pages = pool_pages_needed(&records).max(256);
        params.pool_dir = c.group.path().join("pools");
        params.deadlines.stall = Duration::from_secs(60);
        Replay(InProcessReplay::run(params, records))
    }

    /// Wait until `n` requests completed (the run is in the middle of its stores and loads).
    fn wait_done(&self, n: u64, c: &Cluster) {
        let start = Instant::now();
        while self.0.progress() < n {
            assert!(
                !self.0.done(),
                "the replay ended before {n} requests completed"
            );
            if start.elapsed() > Duration::from_secs(60) {
                panic!(
                    "the replay did not reach {n} requests within 60 s\n{}",
                    c.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Wait for the end of the run and return its summary.
    fn finish(self, c: &Cluster) -> ReplaySummary {
        self.0
            .finish()
            .unwrap_or_else(|e| panic!("the replay failed: {e}\n{}", c.diagnostics()))
    }
}

/// Every store and load was delivered once or reported aborted, never both, never lost, and
/// every byte verified.
fn assert_exactly_once(s: &ReplaySummary, c: &Cluster, requests: u64) {
    assert_eq!(
        s.requests,
        requests,
        "every request completed; summary: {}\n{}",
        s.to_json(),
        c.diagnostics()
    );
    replay::assert_exactly_once(s, &c.diagnostics());
}

const REQUESTS: usize = 600;

/// SIGKILL `rank`'s agent once a quarter of the replay completed; `respawn_at_once` restarts
/// it right away (a fast restart policy), otherwise only after the supervisor moved the epoch.
fn kill_agent_mid_replay(rank: u32, respawn_at_once: bool, seed: u64) {
    let _serial = serial();
    let t0 = Instant::now();
    let mut c = Cluster::start(RedisServer::start(), &[]);
    let epoch_before = c.supervisor.epoch().expect("supervisor epoch");
    let replay = Replay::start(&c, REQUESTS, seed);
    replay.wait_done(REQUESTS as u64 / 4, &c);
    c.kill_agent(rank);
    if !respawn_at_once {
        c.wait_epoch_after(epoch_before, Duration::from_secs(20));
    }
    c.restart_agent(rank);
    let s = replay.finish(&c);
    assert_exactly_once(&s, &c, REQUESTS as u64);
    assert!(
        s.epochs >= 2,
        "the kill moved the group to a new epoch: {}\n{}",
        s.to_json(),
        c.diagnostics()
    );
    assert!(s.restarts >= 1, "restarts counted: {}", s.to_json());
    let epoch_after = c.supervisor.epoch().expect("supervisor epoch");
    assert!(
        epoch_after > epoch_before,
        "the supervisor's epoch moved from {epoch_before}: now {epoch_after}"
    );
    c.group.wait_ready(READY);
    c.wait_supervisor_ready(READY);
    eprintln!(
        "kill rank {rank}: {:.1} s; epochs {} restarts {} stores_failed {} loads_failed {} redelivered_unacked {} unseen_outcomes {} recovery_ms_mean {:?}",
        t0.elapsed().as_secs_f64(),
        s.epochs,
        s.restarts,
        s.stores_failed,
        s.loads_failed,
        s.redelivered_unacked,
        s.unseen_outcomes,
        s.recovery_ms_mean
    );
}

#[test]
fn sigkill_a_follower_agent_in_the_middle_of_stores() {
    kill_agent_mid_replay(1, true, 11);
}

#[test]
fn sigkill_the_leader_agent_in_the_middle_of_stores() {
    kill_agent_mid_replay(0, false, 12);
}

/// A follower agent SIGKILLed and started again with the same rank far faster than one
/// heartbeat interval (2 s here): its heartbeat never goes stale, yet the group moves to a new
/// epoch (the new process's heartbeat names a new incarnation; it also finds its rank in the
/// epoch's membership; the leader loses its connection), and stores and loads work after.
#[test]
fn an_agent_restarted_faster_than_a_heartbeat_moves_the_group() {
    const INTERVAL_MS: u64 = 2_000;
    let _serial = serial();
    let mut c = Cluster::start_with(RedisServer::start(), &[], |toml| {
        toml.replace(
            "heartbeat_interval_ms = 50\nheartbeat_timeout_ms = 1000",
            &format!(
                "heartbeat_interval_ms = {INTERVAL_MS}\nheartbeat_timeout_ms = {}",
                INTERVAL_MS * 3
            ),
        )
    });
    let epoch_before = c.supervisor.epoch().expect("supervisor epoch");
    let killed = Instant::now();
    c.kill_agent(1);
    c.restart_agent(1);
    let respawn_ms = killed.elapsed().as_millis();
    assert!(
        respawn_ms < u128::from(INTERVAL_MS),
        "the respawn ({respawn_ms} ms) must be faster than one heartbeat interval"
    );
    let epoch_after = c.wait_epoch_after(epoch_before, Duration::from_secs(60));
    c.group.wait_ready(READY);
    c.wait_supervisor_ready(READY);
    let s = Replay::start(&c, 100, 21).finish(&c);
    assert_exactly_once(&s, &c, 100);
    let log = c.supervisor.log();
    let why: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("restart") && l.contains("rank 1"))
        .collect();
    assert!(
        !why.is_empty(),
        "the supervisor names rank 1's restart as the failure:\n{log}"
    );
    eprintln!(
        "fast restart: respawn {respawn_ms} ms after the kill (interval {INTERVAL_MS} ms); epoch {epoch_before} -> {epoch_after}; detected by:\n{}",
        why.join("\n")
    );
}

#[test]
fn a_new_supervisor_continues_a_healthy_group_at_the_stored_epoch() {
    let _serial = serial();
    let t0 = Instant::now();
    let mut c = Cluster::start(RedisServer::start(), &[]);
    let status = c.supervisor.status().expect("supervisor /status");
    let epoch = status["epoch"].as_u64().expect("epoch");
    let stored_before = c.redis.hgetall(&key("supervisor"));
    assert_eq!(
        stored_before.get("state").map(String::as_str),
        Some("healthy"),
        "stored state: {stored_before:?}"
    );
    assert_eq!(c.redis.get(&key("epoch")), Some(epoch.to_string()));

    // A replay runs across the supervisor's death and its successor's start.
    let replay = Replay::start(&c, 300, 13);
    replay.wait_done(50, &c);
    drop(c.supervisor.child.take());
    // Longer than the heartbeat timeout (1 s): the new supervisor must not take the gap in
    // its own watch for a silent group.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        c.supervisor.get("/readyz").is_none(),
        "the old supervisor is gone"
    );
    c.supervisor.start();
    c.wait_supervisor_ready(READY);
    let s = replay.finish(&c);
    assert_exactly_once(&s, &c, 300);
    assert_eq!(s.epochs, 1, "no group restart: {}", s.to_json());
    assert_eq!(s.restarts, 0, "no group restart: {}", s.to_json());

    // Watch three heartbeat timeouts more: still no restart.
    std::thread::sleep(Duration::from_secs(3));
    let (code, body) = c
        .supervisor
        .get("/readyz")
        .expect("supervisor /readyz answers");
    assert_eq!(code, 200, "ready: {body}\n{}", c.diagnostics());
    let status = c.supervisor.status().expect("supervisor /status");
    assert_eq!(
        status["epoch"].as_u64(),
        Some(epoch),
        "same epoch: {status}"
    );
    assert_eq!(
        status["restarts_total"].as_u64(),
        Some(0),
        "no restart by the new supervisor: {status}"
    );
    assert_eq!(status["state"].as_str(), Some("healthy"), "{status}");
    assert_eq!(
        c.redis.get(&key("epoch")),
        Some(epoch.to_string()),
        "the epoch counter did not move"
    );
    let stored_after = c.redis.hgetall(&key("supervisor"));
    assert_eq!(
        stored_after.get("restarts_ms"),
        stored_before.get("restarts_ms"),
        "restart history unchanged"
    );
    assert_eq!(stored_after.get("epoch"), Some(&epoch.to_string()));
    let log = c.supervisor.log();
    assert!(
        log.contains("continuing from the stored supervisor state"),
        "the new supervisor read the stored state:\n{log}"
    );
    assert!(
        !log.contains("group restarting into a new epoch"),
        "the new supervisor restarted the group:\n{log}"
    );
    c.group.wait_ready(Duration::from_secs(5));
    eprintln!("supervisor kill: {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn a_redis_restart_loses_no_acknowledged_outcome() {
    let _serial = serial();
    let t0 = Instant::now();
    let mut c = Cluster::start(RedisServer::start_with_aof(), &[]);
    let epoch_before = c.supervisor.epoch().expect("supervisor epoch");
    let replay = Replay::start(&c, REQUESTS, 14);
    replay.wait_done(REQUESTS as u64 / 4, &c);
    let entries_before = c
        .redis
        .command(&["XLEN", &key("completions")])
        .ok()
        .and_then(|r| r.text());
    c.redis.kill();
    std::thread::sleep(Duration::from_millis(1000));
    c.redis.restart();
    let s = replay.finish(&c);
    assert_exactly_once(&s, &c, REQUESTS as u64);
    // Agents and supervisor resume by themselves.
    c.group.wait_ready(READY);
    c.wait_supervisor_ready(READY);
    let status = c.supervisor.status().expect("supervisor /status");
    assert_eq!(status["redis"].as_str(), Some("ok"), "{status}");
    let epoch = status["epoch"].as_u64().expect("epoch");
    assert_eq!(
        c.redis.get(&key("epoch")),
        Some(epoch.to_string()),
        "the epoch counter survived the restart"
    );
    assert!(epoch >= epoch_before);
    eprintln!(
        "redis restart: {:.1} s; stream entries before the kill {:?}; epochs {} (supervisor epoch {epoch_before} -> {epoch}); redelivered_unacked {} stores_failed {}",
        t0.elapsed().as_secs_f64(),
        entries_before,
        s.epochs,
        s.redelivered_unacked,
        s.stores_failed
    );
}

#[test]
fn a_restart_storm_marks_the_group_failed_with_exit_code_3() {
    let _serial = serial();
    let t0 = Instant::now();
    let mut c = Cluster::start(
        RedisServer::start(),
        &[
            ("TANDEM__SUPERVISOR__MAX_RESTARTS", "2"),
            ("TANDEM__SUPERVISOR__RESTART_WINDOW_S", "60"),
        ],
    );
    // Two restarts are allowed.
    for _ in 0..2 {
        let epoch = c.supervisor.epoch().expect("supervisor epoch");
        c.kill_agent(1);
        c.restart_agent(1);
        c.wait_epoch_after(epoch, Duration::from_secs(20));
        c.group.wait_ready(READY);
        c.wait_supervisor_ready(READY);
    }
    // The third failure within the window is past the limit.
    c.kill_agent(1);
    c.restart_agent(1);
    let mut seen_failed = false;
    let supervisor_http = c.supervisor.http().clone();
    let supervisor = c.supervisor.child.as_mut().expect("supervisor runs");
    let start = Instant::now();
    let status = loop {
        if let Ok(Some(status)) = supervisor.0.try_wait() {
            break Some(status);
        }
        if start.elapsed() > Duration::from_secs(30) {
            break None;
        }
        if let Some((_, body)) = http_get((&supervisor_http.0, supervisor_http.1), "/status") {
            seen_failed |= body.contains("\"state\":\"failed\"");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let Some(status) = status else {
        panic!(
            "the supervisor did not give up within 30 s\n{}",
            c.diagnostics()
        );
    };
    assert_eq!(
        status.code(),
        Some(3),
        "exit code 3 (group failed); {}",
        c.diagnostics()
    );
    let log = c.supervisor.log();
    let line = log
        .lines()
        .find(|l| l.contains("the group is marked failed"))
        .unwrap_or_else(|| panic!("a log line says the group is marked failed:\n{log}"));
    assert!(
        line.contains("reached the limit of 2"),
        "the line names the limit: {line}"
    );
    assert!(
        line.contains("within 60 s"),
        "the line names the window: {line}"
    );
    assert!(
        log.contains("tandem: error: group failed: "),
        "the exit error names the failure:\n{log}"
    );
    let stored = c.redis.hgetall(&key("supervisor"));
    assert_eq!(
        stored.get("state").map(String::as_str),
        Some("failed"),
        "stored state: {stored:?}"
    );
    assert!(
        stored
            .get("reason")
            .is_some_and(|r| r.contains("reached the limit of 2")),
        "stored reason names the limit: {stored:?}"
    );

    // A new supervisor does not resurrect a failed group: it exits 3 at once.
    c.supervisor.start();
    let again = wait_exit(
        &mut c.supervisor.child.as_mut().expect("supervisor").0,
        Duration::from_secs(20),
    );
    assert_eq!(
        again.and_then(|s| s.code()),
        Some(3),
        "a new supervisor also reports the failed group; {}",
        c.diagnostics()
    );
    assert!(
        c.supervisor
            .log()
            .contains("marked failed by an earlier supervisor"),
        "{}",
        c.supervisor.log()
    );
    eprintln!(
        "restart storm: {:.1} s; /status showed failed before exit: {seen_failed}",
        t0.elapsed().as_secs_f64()
    );
}
