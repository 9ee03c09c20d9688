//! A real Redis Cluster for the tests: `redis-server --cluster-enabled yes` children on free
//! loopback ports (client and cluster-bus ports both picked free), joined with
//! `redis-cli --cluster create`, and a slot migration done the way an operator's resharding
//! does it (`CLUSTER SETSLOT ... IMPORTING/MIGRATING`, `MIGRATE` key by key, `SETSLOT ...
//! NODE`), slowly enough that clients meet `ASK` and `MOVED` while it runs.
//!
//! It never touches a server it did not start; every node is killed when the cluster is
//! dropped (each is a [`RedisServer`]). Every wait has a deadline.

use std::time::{Duration, Instant};

use crate::free_port;
use crate::redis::{RedisOptions, RedisServer, Resp};

/// How long the cluster may take to agree on its slots after `--cluster create` or a migration.
const SETTLE: Duration = Duration::from_secs(30);

/// A running cluster: its masters first, then their replicas.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    masters: usize,
}

impl RedisCluster {
    /// `masters` masters (at least 3, as `redis-cli --cluster create` requires), each with
    /// `replicas` replicas, all on loopback.
    ///
    /// # Panics
    /// When `redis-server` or `redis-cli` is missing, or the cluster does not reach
    /// `cluster_state:ok` within 30 s (with the nodes' logs).
    pub fn start(masters: usize, replicas: usize) -> Self {
        let total = masters * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                RedisServer::start_with_options(RedisOptions {
                    extra_args: vec![
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-port".into(),
                        free_port().to_string(),
                        "--cluster-node-timeout".into(),
                        "3000".into(),
                    ],
                    ..RedisOptions::default()
                })
            })
            .collect();
        let mut cmd = std::process::Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for n in &nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port()));
        }
        cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
        let out = cmd.output().unwrap_or_else(|e| {
            panic!("cannot run redis-cli ({e}): install redis-tools (scripts/test.sh does)")
        });
        let cluster = RedisCluster { nodes, masters };
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_settled();
        cluster
    }

    /// Every node's `redis://127.0.0.1:PORT` (masters first): the seed list a client gets.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes, masters first as created (a failover or migration does not reorder them).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Masters at creation.
    pub fn masters(&self) -> usize {
        self.masters
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    ///
    /// # Panics
    /// When the first node does not answer.
    pub fn slot_of(&self, key: &str) -> u16 {
        match self.nodes[0].command(&["CLUSTER", "KEYSLOT", key]) {
            Ok(Resp::Int(s)) => s as u16,
            other => panic!("CLUSTER KEYSLOT {key}: {other:?}"),
        }
    }

    /// The port of the master serving `slot` now (from the first node's `CLUSTER SLOTS`).
    ///
    /// # Panics
    /// When no master is found for the slot.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        let Ok(Resp::Array(Some(ranges))) = self.nodes[0].command(&["CLUSTER", "SLOTS"]) else {
            panic!("CLUSTER SLOTS did not answer");
        };
        for range in ranges {
            let Resp::Array(Some(r)) = range else {
                continue;
            };
            let (Some(Resp::Int(lo)), Some(Resp::Int(hi)), Some(Resp::Array(Some(master)))) =
                (r.first(), r.get(1), r.get(2))
            else {
                continue;
            };
            if (*lo..=*hi).contains(&i64::from(slot)) {
                if let Some(Resp::Int(port)) = master.get(1) {
                    return *port as u16;
                }
            }
        }
        panic!("no master serves slot {slot}");
    }

    /// The node listening on `port`.
    ///
    /// # Panics
    /// When no node of this cluster has that port.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// The ports of the nodes that are masters now.
    pub fn master_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| {
                n.command(&["ROLE"]).ok().is_some_and(|r| match r {
                    Resp::Array(Some(items)) => {
                        items.first().and_then(Resp::text).as_deref() == Some("master")
                    }
                    _ => false,
                })
            })
            .map(RedisServer::port)
            .collect()
    }

    /// Moves `slot` from the master serving it to the master on port `to`, key by key with
    /// `pause` after each key (so that clients run into `ASK` redirects and `TRYAGAIN`
    /// while the slot is split), then hands the slot over on every master. Returns the
    /// number of keys moved.
    ///
    /// # Panics
    /// When a step is refused (with the reply), or the cluster does not settle afterwards.
    pub fn migrate_slot(&self, slot: u16, to: u16, pause: Duration) -> usize {
        let from = self.master_of_slot(slot);
        assert_ne!(from, to, "slot {slot} already on port {to}");
        let (src, dst) = (self.node(from), self.node(to));
        let (src_id, dst_id) = (node_id(src), node_id(dst));
        let s = slot.to_string();
        ok(dst.command(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &src_id]));
        ok(src.command(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &dst_id]));
        let mut moved = 0;
        loop {
            let keys = match src.command(&["CLUSTER", "GETKEYSINSLOT", &s, "1"]) {
                Ok(Resp::Array(Some(k))) => k.iter().filter_map(Resp::text).collect::<Vec<_>>(),
                other => panic!("CLUSTER GETKEYSINSLOT {slot}: {other:?}"),
            };
            let Some(key) = keys.first() else { break };
            let port = to.to_string();
            let reply = src.command(&["MIGRATE", "127.0.0.1", &port, key, "0", "5000"]);
            assert!(
                matches!(&reply, Ok(Resp::Simple(s)) if s == "OK" || s == "NOKEY"),
                "MIGRATE {key}: {reply:?}"
            );
            moved += 1;
            std::thread::sleep(pause);
        }
        // The new owner first, then the old, then every other master (as redis-cli does).
        ok(dst.command(&["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]));
        ok(src.command(&["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]));
        for port in self.master_ports() {
            if port != from && port != to {
                ok(self
                    .node(port)
                    .command(&["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]));
            }
        }
        self.wait_settled();
        moved
    }

    /// Waits until every node reports `cluster_state:ok` and knows every other node, and every
    /// replica's link to its master is up (its initial sync done).
    fn wait_settled(&self) {
        let start = Instant::now();
        loop {
            let states: Vec<String> = self
                .nodes
                .iter()
                .map(|n| match n.command(&["CLUSTER", "INFO"]) {
                    Ok(r) => r.text().unwrap_or_default(),
                    Err(e) => e,
                })
                .collect();
            let known = format!("cluster_known_nodes:{}", self.nodes.len());
            let synced = self.nodes.iter().all(|n| {
                let info = n
                    .command(&["INFO", "replication"])
                    .ok()
                    .and_then(|r| r.text())
                    .unwrap_or_default();
                info.contains("role:master") || info.contains("master_link_status:up")
            });
            if synced
                && states
                    .iter()
                    .all(|s| s.contains("cluster_state:ok") && s.contains(&known))
            {
                return;
            }
            assert!(
                start.elapsed() < SETTLE,
                "the cluster did not settle within {SETTLE:?}: {states:?}\nfirst node's log:\n{}",
                crate::tail(&self.nodes[0].log(), 30)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `CLUSTER MYID` of `node`.
fn node_id(node: &RedisServer) -> String {
    node.command(&["CLUSTER", "MYID"])
        .ok()
        .and_then(|r| r.text())
        .unwrap_or_else(|| panic!("CLUSTER MYID on port {}", node.port()))
}

/// Panics unless `reply` is `+OK`.
fn ok(reply: Result<Resp, String>) {
    assert!(
        matches!(&reply, Ok(Resp::Simple(s)) if s == "OK"),
        "cluster command refused: {reply:?}"
    );
}
