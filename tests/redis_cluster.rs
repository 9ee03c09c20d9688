//! Many groups on one Redis Cluster, with real processes: a cluster of three masters and
//! three replicas started by the test (`redis-server --cluster-enabled yes`, joined with
//! `redis-cli --cluster create`), three groups (two agent processes and a supervisor
//! process each) whose keys hash to three different masters, and a replay through each at
//! once. While they run, one group's hash slot migrates to another master key by key
//! (clients follow `ASK` and `MOVED`), and one agent of another group is killed. Every
//! replay ends with zero lost, duplicated or mismatched outcomes; the killed agent's group
//! moves to a new epoch, the other two stay in theirs.
//!
//! One group waits for a replica on every append (`redis.wait_replicas = 1`), so the
//! replication wait runs on a cluster shard as well.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tandem_tests::cluster::GroupSpec;
use tandem_tests::redis_cluster::RedisCluster;
use tandem_tests::replay::{assert_exactly_once, summary_short, InProcessReplay};
use tandem_tests::serial;
use tandem_tests::supervisor::SupervisedGroup;

/// Requests each group replays: enough that every replay is still running when the slot
/// has moved and the restarted group is back (checked, not assumed).
const REQUESTS: usize = 800;

/// Group names whose keys hash to `n` different masters of `cluster`.
fn groups_on_distinct_masters(cluster: &RedisCluster, n: usize) -> Vec<(String, u16)> {
    let mut taken = BTreeSet::new();
    let mut out = Vec::new();
    for i in 0..1000 {
        let name = format!("scale-{i}");
        let slot = cluster.slot_of(&format!("tandem:{{{name}}}:completions"));
        if taken.insert(cluster.master_of_slot(slot)) {
            out.push((name, slot));
            if out.len() == n {
                return out;
            }
        }
    }
    panic!("no {n} group names on distinct masters");
}

fn start_group(cluster: &RedisCluster, name: &str, wait_replicas: u32) -> SupervisedGroup {
    let mut spec = GroupSpec::new(1, 2);
    spec.group_id = name.to_string();
    spec.host_capacity_blocks = 4096;
    spec.disk_capacity_blocks = 0;
    let nodes: Vec<String> = cluster
        .urls()
        .iter()
        .take(2)
        .map(|u| format!("{u:?}"))
        .collect();
    spec.redis_toml = format!(
        "cluster_nodes = [{}]\nwait_replicas = {wait_replicas}\nwait_timeout_ms = 1000",
        nodes.join(", ")
    );
    SupervisedGroup::start_small(&spec, "info")
}

#[test]
fn groups_on_a_cluster_replay_apart_through_a_slot_migration_and_a_restart() {
    let _serial = serial();
    let cluster = RedisCluster::start(3, 1);
    let names = groups_on_distinct_masters(&cluster, 3);
    let mut groups: Vec<SupervisedGroup> = names
        .iter()
        .enumerate()
        .map(|(i, (name, _))| start_group(&cluster, name, u32::from(i == 0)))
        .collect();
    let epochs: Vec<u64> = groups
        .iter()
        .map(|g| g.supervisor_epoch().expect("supervisor epoch"))
        .collect();

    let replays: Vec<InProcessReplay> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let sockets = (0..g.group.world_size).map(|r| g.group.socket(r)).collect();
            InProcessReplay::start(&g.group, sockets, REQUESTS, 11 + i as u64)
        })
        .collect();
    let start = Instant::now();
    while replays.iter().any(|r| r.progress() < 20 && !r.done()) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "replays did not get going"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Group 0's slot moves to group 1's master while all three replay.
    let (moving, slot) = &names[0];
    let from = cluster.master_of_slot(*slot);
    let to = cluster.master_of_slot(names[1].1);
    let moved = cluster.migrate_slot(*slot, to, Duration::from_millis(50));
    assert_eq!(cluster.master_of_slot(*slot), to);

    let during_migration: Vec<u64> = replays.iter().map(InProcessReplay::progress).collect();

    // Group 1 loses an agent: its supervisor restarts it, and only it.
    groups[1].kill_and_respawn(1);
    let restarted = groups[1].wait_epoch_after(epochs[1], Duration::from_secs(60));
    let after_restart: Vec<u64> = replays.iter().map(InProcessReplay::progress).collect();
    eprintln!("requests done after the migration: {during_migration:?}, after the restart: {after_restart:?} (of {REQUESTS} each)");
    assert!(
        replays.iter().all(|r| !r.done()),
        "every replay was still running through the migration and the restart (requests done after the migration: {during_migration:?})"
    );

    let summaries: Vec<_> = replays
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.finish().unwrap_or_else(|e| {
                panic!(
                    "group {}: replay failed: {e}\n{}",
                    names[i].0,
                    groups[i].diagnostics()
                )
            })
        })
        .collect();
    for (i, s) in summaries.iter().enumerate() {
        assert_exactly_once(s, &names[i].0);
        eprintln!("group {}: {}", names[i].0, summary_short(s));
    }
    assert!(
        summaries[1].epochs >= 2,
        "group 1's engines saw the restart"
    );
    assert_eq!(summaries[0].epochs, 1);
    assert_eq!(summaries[2].epochs, 1);
    eprintln!(
        "slot {slot} of group {moving} moved from port {from} to {to} ({moved} keys); group {} restarted into epoch {restarted}",
        names[1].0
    );
    for i in [0, 2] {
        assert_eq!(
            groups[i].supervisor_epoch(),
            Some(epochs[i]),
            "group {} stayed in its epoch while group {} restarted",
            names[i].0,
            names[1].0
        );
    }
    groups.clear();
}
