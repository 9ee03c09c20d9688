//! A primary, its replica and three sentinels on loopback, as a Sentinel deployment runs them:
//! `redis-server` children (the replica started with `--replicaof`) and three
//! `redis-server SENTINEL.CONF --sentinel` children, each with its own directory and config
//! file (a sentinel rewrites its file). The tests kill the primary and watch the sentinels
//! promote the replica.
//!
//! It never signals a process it did not start; every process is killed when the setup is
//! dropped. Every wait has a deadline.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::redis::{command, RedisOptions, RedisServer, Resp};
use crate::{free_port, tail, ChildGuard};

/// The master name the sentinels monitor.
pub const MASTER: &str = "tandem-primary";
/// A primary that does not answer for this long is down for a sentinel, in ms. Two seconds,
/// not one: on a loaded two-core machine a sentinel starved for a second fails over a
/// healthy primary.
pub const DOWN_AFTER_MS: u64 = 2000;

/// How long the sentinels may take to find each other and the replica.
const READY: Duration = Duration::from_secs(30);

/// One sentinel process.
struct Sentinel {
    port: u16,
    dir: tempfile::TempDir,
    _child: ChildGuard,
}

/// A primary (node 0 at start), a replica (node 1) and three sentinels.
pub struct SentinelSetup {
    nodes: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
}

impl SentinelSetup {
    /// Start the primary, the replica (waiting for its first sync), then three sentinels
    /// monitoring [`MASTER`] with a quorum of 2 (waiting until each knows the replica and
    /// the other two).
    ///
    /// # Panics
    /// When a process does not start or the sentinels do not agree within 30 s.
    pub fn start() -> Self {
        let primary = RedisServer::start();
        let replica = RedisServer::start_with_options(RedisOptions {
            extra_args: vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                primary.port().to_string(),
            ],
            ..RedisOptions::default()
        });
        let mut setup = SentinelSetup {
            nodes: vec![primary, replica],
            sentinels: Vec::new(),
        };
        setup.wait_synced(setup.nodes[1].port(), READY);
        let primary_port = setup.nodes[0].port();
        for _ in 0..3 {
            setup.sentinels.push(start_sentinel(primary_port));
        }
        setup.wait_sentinels_ready();
        setup
    }

    /// The sentinels' `redis://127.0.0.1:PORT` addresses.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", s.port))
            .collect()
    }

    /// The data nodes: the first primary, then its replica.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The data node on `port`, mutably (to kill or restart it).
    ///
    /// # Panics
    /// When no data node has that port.
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// The primary's port as the sentinels name it now (the first that answers).
    pub fn primary_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            match command(s.port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]) {
                Ok(Resp::Array(Some(addr))) => addr.get(1)?.text()?.parse().ok(),
                _ => None,
            }
        })
    }

    /// Waits until every sentinel names a primary other than `old`, flags no failover in
    /// progress, and that server answers `ROLE` as a master; its port.
    ///
    /// # Panics
    /// After `timeout`, with the sentinels' log tails.
    pub fn wait_failover_from(&self, old: u16, timeout: Duration) -> u16 {
        let start = Instant::now();
        loop {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(
                    |s| match command(s.port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]) {
                        Ok(Resp::Array(Some(addr))) => addr.get(1)?.text()?.parse().ok(),
                        _ => None,
                    },
                )
                .collect();
            if let Some(Some(new)) = named.first() {
                let settled = self.sentinels.iter().all(|s| {
                    sentinel_master(s.port).get("flags").map(String::as_str) == Some("master")
                });
                if *new != old
                    && named.iter().all(|n| *n == Some(*new))
                    && role(*new) == "master"
                    && settled
                {
                    return *new;
                }
            }
            assert!(
                start.elapsed() < timeout,
                "no failover from port {old} within {timeout:?}: sentinels name {named:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the data node on `old` again as a replica of the primary on `primary` (as a
    /// deployment without persistence must: a former primary restarted empty as a primary
    /// would be a candidate to promote before the sentinels demote it).
    ///
    /// # Panics
    /// As [`RedisServer::restart`].
    pub fn restart_as_replica(&mut self, old: u16, primary: u16) {
        self.node_mut(old).restart_with_args(vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            primary.to_string(),
        ]);
    }

    /// Waits until the data node on `port` is a replica whose link to its master is up.
    ///
    /// # Panics
    /// After `timeout`, with its `INFO replication`.
    pub fn wait_synced(&self, port: u16, timeout: Duration) {
        let start = Instant::now();
        loop {
            let info = info_replication(port);
            if info.get("role").map(String::as_str) == Some("slave")
                && info.get("master_link_status").map(String::as_str) == Some("up")
            {
                return;
            }
            assert!(
                start.elapsed() < timeout,
                "port {port} not a synced replica within {timeout:?}: {info:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every sentinel's log tail (for failure messages).
    pub fn logs(&self) -> String {
        self.sentinels
            .iter()
            .map(|s| {
                let log =
                    std::fs::read_to_string(s.dir.path().join("sentinel.log")).unwrap_or_default();
                format!("--- sentinel {}:\n{}", s.port, tail(&log, 15))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn wait_sentinels_ready(&self) {
        let start = Instant::now();
        loop {
            let views: Vec<BTreeMap<String, String>> = self
                .sentinels
                .iter()
                .map(|s| sentinel_master(s.port))
                .collect();
            let ready = views.iter().all(|v| {
                v.get("num-slaves").map(String::as_str) == Some("1")
                    && v.get("num-other-sentinels").map(String::as_str) == Some("2")
                    && v.get("flags").map(String::as_str) == Some("master")
            });
            if ready {
                return;
            }
            assert!(
                start.elapsed() < READY,
                "sentinels not ready within {READY:?}: {views:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A sentinel monitoring the primary on `primary_port`, in a directory of its own.
fn start_sentinel(primary_port: u16) -> Sentinel {
    let dir = tempfile::Builder::new()
        .prefix("tandem-sentinel-")
        .tempdir()
        .expect("sentinel directory");
    for _ in 0..5 {
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel.log\n\
             sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {MASTER} 10000\n\
             sentinel parallel-syncs {MASTER} 1\n",
            dir = dir.path().display()
        );
        std::fs::write(&conf, text).expect("write sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run redis-server --sentinel ({e})"));
        let mut guard = ChildGuard(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = guard.0.try_wait() {
                break;
            }
            if matches!(command(port, &["PING"]), Ok(Resp::Simple(p)) if p == "PONG") {
                return Sentinel {
                    port,
                    dir,
                    _child: guard,
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = guard.0.kill();
    }
    panic!("redis-server --sentinel did not start on a free port after 5 tries");
}

/// `SENTINEL MASTER` of [`MASTER`] on the sentinel at `port`, as a map.
fn sentinel_master(port: u16) -> BTreeMap<String, String> {
    match command(port, &["SENTINEL", "MASTER", MASTER]) {
        Ok(Resp::Array(Some(items))) => items
            .chunks(2)
            .filter_map(|kv| Some((kv.first()?.text()?, kv.get(1)?.text()?)))
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// `INFO replication` of the server on `port`, as a map.
fn info_replication(port: u16) -> BTreeMap<String, String> {
    command(port, &["INFO", "replication"])
        .ok()
        .and_then(|r| r.text())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `master`, `slave`, or what the server on `port` answers (`""` when it does not).
fn role(port: u16) -> String {
    match command(port, &["ROLE"]) {
        Ok(Resp::Array(Some(items))) => items.first().and_then(Resp::text).unwrap_or_default(),
        _ => String::new(),
    }
}
