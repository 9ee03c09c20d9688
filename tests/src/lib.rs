//! The one test-support library of the workspace-level process tests (`tests/*.rs`): every
//! test file takes its processes, waits, HTTP reads and content from here, and keeps only its
//! tests and what is particular to them.
//!
//! It never mocks a part a user would have for real: tests start the real binary (one process
//! per rank, real TCP between them, real files for the tiers) and, where needed, a real
//! `redis-server` on a free port. Every process it starts is killed when its handle drops, and
//! it signals only processes the test started. Every wait has a deadline.
//!
//! # Layout
//! - this file: the `tandem` binary and command, free loopback ports, [`ChildGuard`],
//!   [`serial`] (one process test at a time per test file) and [`tail`].
//! - [`cluster`]: [`cluster::Group`], a group of agent processes configured in a temporary
//!   directory ([`cluster::GroupSpec`]), its configuration values and readiness.
//! - [`supervisor`]: a `tandem supervisor` process of a group ([`supervisor::Supervisor`]) and
//!   [`supervisor::SupervisedGroup`], agents plus supervisor started by the test.
//! - [`redis`]: [`redis::RedisServer`], a `redis-server` child on a free port, with a minimal
//!   RESP client.
//! - [`redis_cluster`]: [`redis_cluster::RedisCluster`], a Redis Cluster of `redis-server`
//!   children joined with `redis-cli --cluster create`, and a slot migration key by key.
//! - [`sentinel`]: [`sentinel::SentinelSetup`], a primary, its replica and three sentinels,
//!   for failovers.
//! - [`http`]: GET, JSON bodies and Prometheus samples.
//! - [`procs`]: signals, `/proc` (state, parent, command line, memory, listening ports) and
//!   exit waits.
//! - [`engines`]: content fill and check of shards, a seeded random source, frame digests,
//!   engine connections and the reading of agent errors.
//! - [`replay`]: in-process replays through a group ([`replay::InProcessReplay`]) and the
//!   exactly-once checks.
//! - [`replay_process`]: a `tandem replay` process with its own cluster
//!   ([`replay_process::ReplayCli`]), that cluster seen from outside, and how the run ended.
//! - [`proxy`]: a cuttable Unix-socket proxy between engines and agents.
//! - [`netns`] and [`tmpfs`]: a network namespace to partition a rank, a small tmpfs to fill
//!   (root only; the tests that need them skip otherwise).
//! - [`figures`]: run sizes from the environment, the seeded fault source and the `FIGURE`
//!   lines of scripts/fault-suite.sh.
//! - [`traces`]: the request traces the repository ships in `data/traces/`.

pub mod cluster;
pub mod engines;
pub mod figures;
pub mod http;
pub mod netns;
pub mod procs;
pub mod proxy;
pub mod redis;
pub mod redis_cluster;
pub mod replay;
pub mod replay_process;
pub mod sentinel;
pub mod supervisor;
pub mod tmpfs;
pub mod traces;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Mutex, MutexGuard};

/// Path of the `tandem` binary the tests start: `$TANDEM_BIN`, or `target/debug/tandem`
/// (honouring `CARGO_TARGET_DIR`). `scripts/test.sh` builds it before the tests run.
///
/// # Panics
/// When the binary is missing, with the command that builds it: a test cannot run without it.
pub fn tandem_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TANDEM_BIN") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bin = target.join("debug").join("tandem");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p tandem-cli` (scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// The `tandem` binary built with the agent's test-only `fault-hooks` feature:
/// `$TANDEM_FAULT_BIN`, or `target/debug/tandem-fault-hooks` (honouring `CARGO_TARGET_DIR`);
/// `None` when it is missing. `scripts/test.sh` builds it with
/// `cargo build -p tandem-cli --bin tandem --features fault-hooks`, copies it to that name and
/// builds the plain binary again.
pub fn tandem_fault_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TANDEM_FAULT_BIN") {
        return Some(PathBuf::from(p));
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bin = target.join("debug").join("tandem-fault-hooks");
    bin.exists().then_some(bin)
}

/// A `Command` for the `tandem` binary with the `TANDEM__*` variables of the test's own
/// environment removed, so that a developer's shell cannot change a test's outcome.
pub fn tandem() -> Command {
    let mut cmd = Command::new(tandem_bin());
    for (k, _) in std::env::vars() {
        if k.starts_with("TANDEM__") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// A loopback TCP port that was free a moment ago: a random one below the kernel's ephemeral
/// range (at or above 10000), so that an outgoing connection of another test cannot take it
/// as its local port between this probe and the real bind; the OS's pick when that fails.
pub fn free_port() -> u16 {
    probe_listener().local_addr().expect("local addr").port()
}

/// A listener on a port as [`free_port`] describes.
fn probe_listener() -> TcpListener {
    use std::hash::{BuildHasher, Hasher};
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if low > 11_000 {
        for _ in 0..64 {
            // A fresh RandomState is randomly keyed: a random number without another crate.
            let r = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish();
            let port = 10_000 + (r % u64::from(low - 10_000)) as u16;
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
                return l;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port")
}

/// `n` consecutive loopback ports that were free a moment ago (for `http_base_port + rank`).
pub fn free_port_range(n: u16) -> u16 {
    free_ports(0, n).1
}

/// `singles` free loopback ports and a range of `n` consecutive ones (its first port), picked
/// while every probe stays bound, so that no two of them are the same port.
pub fn free_ports(singles: usize, n: u16) -> (Vec<u16>, u16) {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..singles {
        let l = probe_listener();
        ports.push(l.local_addr().expect("local addr").port());
        held.push(l);
    }
    'search: for _ in 0..200 {
        let base = free_port();
        if base.checked_add(n).is_none() {
            continue;
        }
        let mut range = Vec::new();
        for p in base..base + n {
            match TcpListener::bind(("127.0.0.1", p)) {
                Ok(l) => range.push(l),
                Err(_) => continue 'search,
            }
        }
        return (ports, base);
    }
    panic!("no range of {n} free loopback ports found");
}

/// A child process killed (SIGKILL) and reaped when dropped, so a failing test leaves nothing
/// running.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time within a test file: every process test runs a whole group on a shared
/// machine. Hold the guard for the whole test; a panicked test does not block the next.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The last `n` lines of `s` (for failure messages that quote a log).
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
