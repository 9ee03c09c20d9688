//! Disk faults inside one rank, with real processes, a real `redis-server` and real tier files
//! (docs/RELIABILITY.md, "Faults inside a rank").
//!
//! The groups run disk-only ranks (`store.host_capacity_blocks = 0`), so every store task
//! writes its shards to the disk tier (one test gives the host tier room for 4 blocks). The faults come from the agent's test-only disk hook
//! (`TANDEM_FAULT_DISK`, see `tandem_agent::fault`), set only on the faulty rank's agent
//! process, which runs the binary built with the `fault-hooks` feature
//! (`cargo build -p tandem-cli --bin tandem --features fault-hooks`, copied to
//! `target/debug/tandem-fault-hooks`; scripts/test.sh does both). Without it the hook tests
//! print SKIPPED.
//!
//! - A group with a small host tier: a store past the host's room lands on disk, the load reads
//!   those shards straight from their disk slots, verified on every rank, and moves nothing; a
//!   disk shard whose bytes changed fails its load, and the block leaves the group.
//! - A rank's disk write fails halfway through a 10-page store: every rank reads the same
//!   sealed outcome, failed (never finished), and later lookups match only blocks every rank
//!   holds.
//! - The whole group SIGKILLed right after a frame reveals a store finished on the disk tier:
//!   after the restart the block is found, loads and verifies on every rank.
//! - A rank's disk tier frozen (`freeze-ms`, for `TANDEM_FAULT_FREEZE_MS`: default 5 s as in
//!   CI, 30 s in `scripts/fault-suite.sh`; the disk deadline is 1 s): its
//!   store fails with the typed deadline outcome while the disk is still frozen, the group
//!   keeps sealing frames, `/readyz` and `tandem_tier_degraded` name the disk tier, and after
//!   the thaw the rank is ready and stores and loads work again. The same freeze during a
//!   replay: the replay finishes with every outcome exactly once, the stores caught in the
//!   freeze failed, and the group is ready again after the thaw.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tandem_client::pages::PagePool;
use tandem_client::EngineClient;
use tandem_proto::frame::{Frame, OutcomeResult};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId};
use tandem_store::manifest::{Manifest, MANIFEST_FILE};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::{connect_engine, fill, holds};
use tandem_tests::figures::{env_u64, fault_requests, figure, seeded};
use tandem_tests::redis::RedisServer;
use tandem_tests::replay::{assert_exactly_once, summary_short, InProcessReplay};
use tandem_tests::supervisor::SupervisedGroup;
use tandem_tests::{serial, tandem_fault_bin, ChildGuard};

/// A durable group of two disk-only ranks (TP 2), 2 KiB shards, a disk deadline of
/// `deadline_ms`.
fn disk_only_group(redis: &RedisServer, deadline_ms: u64) -> SupervisedGroup {
    disk_only_group_of(redis, deadline_ms, 64)
}

/// As [`disk_only_group`], with `disk_blocks` slots per rank.
fn disk_only_group_of(redis: &RedisServer, deadline_ms: u64, disk_blocks: u64) -> SupervisedGroup {
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = redis.url();
    spec.host_capacity_blocks = 0;
    spec.disk_capacity_blocks = disk_blocks;
    let g = SupervisedGroup::configure_small(&spec);
    g.edit_config(
        "[store]\n",
        &format!("[store]\ndisk_op_deadline_ms = {deadline_ms}\n"),
    );
    SupervisedGroup::start_configured(g, "info")
}

/// Replace `rank`'s agent by the fault-hooks binary with `TANDEM_FAULT_DISK=fault`; wait for
/// the group to be ready in the epoch that follows. `None` (and SKIPPED printed) without the
/// binary.
fn arm(c: &mut SupervisedGroup, rank: u32, fault: &str, test: &str) -> Option<u64> {
    let Some(bin) = tandem_fault_bin() else {
        println!(
            "SKIPPED {test}: no target/debug/tandem-fault-hooks \
             (cargo build -p tandem-cli --bin tandem --features fault-hooks, then copy it there)"
        );
        return None;
    };
    let old = c.supervisor_epoch().unwrap_or(0);
    if let Some(mut a) = c.group.agents[rank as usize].take() {
        let _ = a.0.kill();
        let _ = a.0.wait();
    }
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(c.group.log_path(rank))
        .expect("log");
    let armed = std::process::Command::new(&bin)
        .args(["agent", "--rank", &rank.to_string(), "--config"])
        .arg(&c.group.config)
        .env("TANDEM_FAULT_DISK", fault)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn the agent with the disk fault hook");
    c.group.agents[rank as usize] = Some(ChildGuard(armed));
    let epoch = c.wait_epoch_after(old, Duration::from_secs(60));
    c.wait_ready(Duration::from_secs(60));
    let text = c.group.log(rank);
    assert!(
        text.contains("fault hook armed: disk transfers fail or wait"),
        "{} has no disk fault hook compiled in:\n{text}",
        bin.display()
    );
    Some(epoch)
}

/// Both engines, each with a pool of 64 pages.
struct Engines {
    leader: EngineClient,
    follower: EngineClient,
    pools: [PagePool; 2],
    step: u64,
}

impl Engines {
    fn connect(g: &Group) -> Self {
        let (leader, p0) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 64);
        let (follower, p1) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 64);
        let step = leader.welcome().next_step.0;
        Self {
            leader,
            follower,
            pools: [p0, p1],
            step,
        }
    }

    /// Fill `pages` with each rank's shard of `hashes`.
    fn fill(&mut self, hashes: &[BlockHash], pages: &[PageId]) {
        for (h, p) in hashes.iter().zip(pages) {
            for (rank, pool) in self.pools.iter_mut().enumerate() {
                fill(pool.page_mut(*p).expect("page"), h.0, rank as u32);
            }
        }
    }

    /// Steps both engines (one step every 2 ms) until `task` is reported; its outcome (every
    /// rank read the same frame: `step_both` checks) and the steps it took.
    ///
    /// # Panics
    /// When the task is not reported within 120 s: the group hangs.
    fn run_until(&mut self, task: TaskId) -> (OutcomeResult, u64) {
        let start = Instant::now();
        let mut n = 0;
        while start.elapsed() < Duration::from_secs(120) {
            let f = self.step_both();
            self.step += 1;
            n += 1;
            if let Some(o) = f.finished.iter().find(|o| o.task == task) {
                return (o.result.clone(), n);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("task {task} was not reported within 120 s ({n} steps): the group hangs");
    }

    /// Seals the next step on the leader and reads it on the follower, both acknowledging;
    /// the frame. Both read the same frame but for the reconciliation of a new epoch's first
    /// frame, which is each engine's own (what it had not acknowledged).
    fn step_both(&mut self) -> Frame {
        let s = Step(self.step);
        let f = self
            .leader
            .end_step(s, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("end_step {s:?}: {e}"));
        self.leader.ack(s).expect("leader ack");
        let g = self
            .follower
            .frame(s, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("frame {s:?}: {e}"));
        self.follower.ack(s).expect("follower ack");
        let (mut a, mut b) = (f.clone(), g);
        a.reconciliation = None;
        b.reconciliation = None;
        assert_eq!(a, b, "the follower reads the leader's frame");
        f
    }

    fn store(&mut self, request: u64, hashes: &[BlockHash], pages: &[PageId]) -> TaskId {
        self.leader
            .store(
                Step(self.step),
                RequestId(request),
                hashes.to_vec(),
                pages.to_vec(),
            )
            .expect("store request")
    }

    fn load(&mut self, request: u64, hashes: &[BlockHash], pages: &[PageId]) -> TaskId {
        self.leader
            .load(
                Step(self.step),
                RequestId(request),
                hashes.to_vec(),
                pages.to_vec(),
            )
            .expect("load request")
    }

    fn matched(&mut self, request: u64, hashes: &[BlockHash]) -> u32 {
        self.leader
            .lookup(Step(self.step), RequestId(request), hashes.to_vec())
            .expect("lookup")
            .matched_blocks
    }

    /// Zero `pages` on both ranks.
    fn clear(&mut self, pages: &[PageId]) {
        for pool in &mut self.pools {
            for p in pages {
                pool.page_mut(*p).expect("page").fill(0);
            }
        }
    }

    /// Whether every page holds its block's shard on both ranks.
    fn verified(&self, hashes: &[BlockHash], pages: &[PageId]) -> bool {
        hashes.iter().zip(pages).all(|(h, p)| {
            (0..2).all(|r| holds(self.pools[r].page(*p).expect("page"), h.0, r as u32))
        })
    }
}

fn blocks(base: u64, n: u64) -> Vec<BlockHash> {
    (0..n).map(|i| BlockHash::from(base + i * 7919)).collect()
}

fn pages(first: u32, n: u32) -> Vec<PageId> {
    (first..first + n).map(PageId).collect()
}

fn manifest_path(g: &Group, rank: u32) -> PathBuf {
    g.path()
        .join(format!("rank{rank}"))
        .join("disk")
        .join(MANIFEST_FILE)
}

/// The blocks of `hashes` that `rank`'s manifest lists now.
fn listed(g: &Group, rank: u32, hashes: &[BlockHash]) -> usize {
    Manifest::load(&manifest_path(g, rank))
        .ok()
        .flatten()
        .map_or(0, |m| {
            hashes.iter().filter(|h| m.entries.contains_key(*h)).count()
        })
}

fn readyz(c: &SupervisedGroup, rank: u32) -> (u16, serde_json::Value) {
    let (code, body) = c.group.http_get(rank, "/readyz").expect("/readyz answers");
    (code, serde_json::from_str(&body).unwrap_or_default())
}

#[test]
fn a_disk_write_failing_halfway_through_a_store_fails_it_on_every_rank() {
    let _serial = serial();
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut c = disk_only_group(&redis, 5_000);
    // Rank 1's sixth page write, and every one after it, fails with EIO.
    let test = "a_disk_write_failing_halfway_through_a_store_fails_it_on_every_rank";
    let Some(epoch) = arm(&mut c, 1, "write-error:5", test) else {
        return;
    };
    let mut e = Engines::connect(&c.group);
    let ten = blocks(0xd15c_0000, 10);
    let ten_pages = pages(0, 10);
    e.fill(&ten, &ten_pages);
    let task = e.store(1, &ten, &ten_pages);
    let (outcome, steps) = e.run_until(task);
    let reason = match &outcome {
        OutcomeResult::Failed { reason } => reason.clone(),
        other => panic!(
            "a store whose sixth page write failed on rank 1 sealed {other:?}\n{}",
            c.diagnostics()
        ),
    };
    assert!(
        reason.contains("disk tier: write") && reason.contains("Input/output error"),
        "the outcome names the tier, the operation and the error: {reason}"
    );
    assert!(
        c.group.log(1).contains("fault hook: a disk transfer fails"),
        "the hook fired on rank 1"
    );

    // Nothing of the failed store is offered, and it is dropped on every rank (rank 0 wrote
    // all ten shards, rank 1 those of the transfers before the one carrying the sixth page: a
    // task's shards go to the disk tier as one batch, several per transfer).
    let matched = e.matched(2, &ten);
    assert_eq!(matched, 0, "a lookup matched blocks of the failed store");
    let start = Instant::now();
    while (0..2).any(|r| listed(&c.group, r, &ten) > 0) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the failed store's shards stay listed: rank 0 {}, rank 1 {}",
            listed(&c.group, 0, &ten),
            listed(&c.group, 1, &ten)
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Every later write on rank 1 fails too: later stores fail whole, and lookups still
    // match only what every rank holds (nothing).
    let three = blocks(0xd15c_1000, 3);
    e.fill(&three, &pages(20, 3));
    let again = e.store(3, &three, &pages(20, 3));
    let (later, _) = e.run_until(again);
    assert!(
        matches!(later, OutcomeResult::Failed { .. }),
        "a store after the fault: {later:?}"
    );
    assert_eq!(e.matched(4, &three), 0);
    assert_eq!(
        c.supervisor_epoch(),
        Some(epoch),
        "a failed disk write fails the task, not the epoch"
    );
    c.wait_ready(Duration::from_secs(10));
    figure(
        "disk_write_error_halfway",
        &[
            ("fault", "write-error:5_on_rank_1".into()),
            ("steps_to_outcome", steps.to_string()),
            ("outcome", "failed".into()),
            ("reason", reason.chars().take(160).collect()),
            ("lookup_matched_after", matched.to_string()),
        ],
    );
}

/// Each rank's manifest tier of each of `hashes` (`None`: not listed).
fn tiers(g: &Group, rank: u32, hashes: &[BlockHash]) -> Vec<Option<tandem_proto::Tier>> {
    let m = Manifest::load(&manifest_path(g, rank)).ok().flatten();
    hashes
        .iter()
        .map(|h| m.as_ref().and_then(|m| m.entries.get(h)).map(|l| l.tier))
        .collect()
}

#[test]
fn a_disk_resident_block_loads_from_its_slot_verified_and_stays_there() {
    let _serial = serial();
    let redis = RedisServer::start_bound("127.0.0.1");
    // Host room for 4 blocks, disk for 64: a 10-block store puts 4 on host, 6 on disk.
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = redis.url();
    spec.host_capacity_blocks = 4;
    spec.disk_capacity_blocks = 64;
    let c = SupervisedGroup::start_configured(SupervisedGroup::configure_small(&spec), "info");
    let mut e = Engines::connect(&c.group);
    let ten = blocks(0xd1c5_0000, 10);
    e.fill(&ten, &pages(0, 10));
    let task = e.store(1, &ten, &pages(0, 10));
    assert_eq!(e.run_until(task).0, OutcomeResult::Ok, "the store");
    use tandem_proto::Tier::{Disk, Host};
    let placed: Vec<_> = (0..10)
        .map(|i| Some(if i < 4 { Host } else { Disk }))
        .collect();
    for rank in 0..2 {
        // The disk shards were in a saved manifest before the store finished.
        assert_eq!(
            tiers(&c.group, rank, &ten),
            placed,
            "rank {rank}: host while it had room, then disk"
        );
    }

    // The load reads the disk shards from their slots, verified, into every rank's pages.
    assert_eq!(e.matched(2, &ten), 10);
    let into = pages(20, 10);
    e.clear(&into);
    let task = e.load(2, &ten, &into);
    assert_eq!(e.run_until(task).0, OutcomeResult::Ok, "the load");
    assert!(e.verified(&ten, &into), "every rank's pages hold the bytes");
    // Nothing moved: a later manifest (the writer saves within 200 ms of a change) still lists
    // every block in the tier it was written to.
    std::thread::sleep(Duration::from_millis(600));
    for rank in 0..2 {
        assert_eq!(
            tiers(&c.group, rank, &ten),
            placed,
            "rank {rank} after the load"
        );
    }

    // A disk shard whose bytes changed under the agent fails its load on that rank (the
    // direct read is verified), so the load fails on every rank and the block leaves the
    // group.
    let victim = ten[9];
    let m = Manifest::load(&manifest_path(&c.group, 1))
        .unwrap()
        .unwrap();
    let at = tandem_store::disk::DiskTier::slot_offset(
        m.geometry.shard_bytes as usize,
        m.entries[&victim].slot,
    );
    let slab = c.group.path().join("rank1").join("disk").join("disk.slab");
    let file = std::fs::OpenOptions::new().write(true).open(&slab).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[0xa5; 64], at + 100).unwrap();
    drop(file);
    assert_eq!(e.matched(3, &[victim]), 1);
    let task = e.load(3, &[victim], &pages(40, 1));
    let reason = match e.run_until(task).0 {
        OutcomeResult::Failed { reason } => reason,
        other => panic!("a load of a corrupt disk shard sealed {other:?}"),
    };
    assert!(
        reason.contains("checksum mismatch in disk slot"),
        "{reason}"
    );
    assert_eq!(
        e.matched(4, &[victim]),
        0,
        "the corrupt block left the group"
    );
    assert_eq!(e.matched(5, &ten[..9]), 9, "the others stay");
    figure(
        "disk_resident_load",
        &[
            ("blocks", "10 (4 host, 6 disk)".into()),
            ("load", "ok_verified_on_2_ranks_nothing_moved".into()),
            ("corrupt_disk_shard", reason.chars().take(120).collect()),
        ],
    );
}

#[test]
fn a_group_sigkilled_right_after_a_disk_store_finished_loads_it_after_the_restart() {
    let _serial = serial();
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut c = disk_only_group(&redis, 5_000);
    let ten = blocks(0xb10c_0000, 10);
    let ten_pages = pages(0, 10);
    let steps;
    {
        let mut e = Engines::connect(&c.group);
        e.fill(&ten, &ten_pages);
        let task = e.store(1, &ten, &ten_pages);
        let (outcome, n) = e.run_until(task);
        assert_eq!(outcome, OutcomeResult::Ok, "the store failed");
        steps = n;
        // The frame revealed it: SIGKILL every agent at once, before anything else runs.
        for rank in 0..2 {
            if let Some(a) = c.group.agents[rank].as_mut() {
                let _ = a.0.kill();
            }
        }
    }
    let listed_at_kill: Vec<usize> = (0..2).map(|r| listed(&c.group, r, &ten)).collect();
    assert_eq!(
        listed_at_kill,
        vec![10, 10],
        "a store reported finished on the disk tier is in every rank's manifest"
    );
    let old = c.supervisor_epoch().unwrap_or(0);
    for rank in 0..2 {
        c.kill_and_respawn(rank);
    }
    c.wait_epoch_after(old, Duration::from_secs(60));
    c.wait_ready(Duration::from_secs(60));

    let mut e = Engines::connect(&c.group);
    let matched = e.matched(2, &ten);
    assert_eq!(
        matched,
        10,
        "the finished store is found after the restart\n{}",
        c.diagnostics()
    );
    let into = pages(30, 10);
    e.clear(&into);
    let task = e.load(2, &ten, &into);
    let (outcome, _) = e.run_until(task);
    assert_eq!(outcome, OutcomeResult::Ok, "the load after the restart");
    assert!(
        e.verified(&ten, &into),
        "every rank's pages hold the stored bytes"
    );
    figure(
        "group_sigkill_after_disk_store",
        &[
            ("blocks", "10".into()),
            ("steps_to_finish", steps.to_string()),
            (
                "manifest_listed_at_kill",
                format!("{listed_at_kill:?}").replace(' ', ""),
            ),
            ("matched_after_restart", matched.to_string()),
            ("load", "ok_verified_on_2_ranks".into()),
        ],
    );
}

#[test]
fn a_frozen_disk_tier_fails_its_tasks_by_the_deadline_and_work_resumes_after_the_thaw() {
    let _serial = serial();
    let freeze_ms = env_u64("TANDEM_FAULT_FREEZE_MS", 5_000).max(3_000);
    let deadline_ms = 1_000;
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut c = disk_only_group(&redis, deadline_ms);
    let test = "a_frozen_disk_tier_fails_its_tasks_by_the_deadline_and_work_resumes_after_the_thaw";
    // Rank 1's first disk transfer freezes its disk tier for `freeze_ms`.
    let Some(epoch) = arm(&mut c, 1, &format!("freeze-ms:{freeze_ms}"), test) else {
        return;
    };
    let mut e = Engines::connect(&c.group);
    let four = blocks(0xf2ee_0000, 4);
    e.fill(&four, &pages(0, 4));
    let started = Instant::now();
    let task = e.store(1, &four, &pages(0, 4));
    let (outcome, steps) = e.run_until(task);
    let failed_after_ms = started.elapsed().as_millis();
    let reason = match &outcome {
        OutcomeResult::Failed { reason } => reason.clone(),
        other => panic!(
            "a store on a frozen disk sealed {other:?}\n{}",
            c.diagnostics()
        ),
    };
    assert!(
        reason.contains("block ")
            && reason.contains("disk tier: write of slot ")
            && reason.contains(&format!("missed its deadline of {deadline_ms} ms")),
        "the outcome names the block, the tier, the operation and the deadline: {reason}"
    );

    // The disk is still frozen: rank 1 is not ready and names the tier; the leader is.
    let (code, body) = readyz(&c, 1);
    assert_eq!(code, 503, "rank 1 /readyz while frozen: {body}");
    let why = body["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        why.contains("disk tier degraded") && body["degraded_tier"] == "disk",
        "the reason names the degraded tier: {body}"
    );
    assert_eq!(
        c.metric_labeled(1, "tandem_tier_degraded", "tier=\"disk\""),
        1.0
    );
    assert!(c.metric_labeled(1, "tandem_tier_deadline_misses_total", "tier=\"disk\"") >= 1.0);
    assert_eq!(readyz(&c, 0).0, 200, "rank 0's disk is fine");
    assert!(
        c.group.log(1).contains("fault hook: the disk tier freezes")
            && !c.group.log(1).contains("fault hook: the disk tier thaws"),
        "the outcome came while the disk was frozen"
    );

    // The group does not hang: frames are sealed, another disk store fails at once.
    let more = blocks(0xf2ee_1000, 2);
    e.fill(&more, &pages(10, 2));
    let task = e.store(2, &more, &pages(10, 2));
    let (second, _) = e.run_until(task);
    let stalled = match &second {
        OutcomeResult::Failed { reason } => reason.clone(),
        other => panic!("a second store on the frozen disk sealed {other:?}"),
    };
    assert!(
        stalled.contains("not started: an earlier write of slot")
            && stalled.contains("is still in flight"),
        "the second store names the overdue write: {stalled}"
    );
    assert!(
        !c.group.log(1).contains("fault hook: the disk tier thaws"),
        "the second outcome came while the disk was frozen"
    );

    // The thaw: rank 1 is ready again by itself, in the same epoch.
    let thaw_wait = Instant::now();
    loop {
        if readyz(&c, 1).0 == 200 {
            break;
        }
        assert!(
            thaw_wait.elapsed() < Duration::from_millis(freeze_ms + 60_000),
            "rank 1 not ready after the thaw: {:?}\n{}",
            readyz(&c, 1),
            c.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let degraded_ms = started.elapsed().as_millis();
    assert!(c.group.log(1).contains("fault hook: the disk tier thaws"));
    assert_eq!(
        c.metric_labeled(1, "tandem_tier_degraded", "tier=\"disk\""),
        0.0
    );
    assert_eq!(c.supervisor_epoch(), Some(epoch), "the epoch held");

    // Work resumes: the failed blocks are not offered, a new store and its load work on both
    // ranks, byte for byte.
    assert_eq!(e.matched(3, &four), 0);
    assert_eq!(e.matched(3, &more), 0);
    let after = blocks(0xf2ee_2000, 4);
    e.fill(&after, &pages(20, 4));
    let task = e.store(4, &after, &pages(20, 4));
    assert_eq!(
        e.run_until(task).0,
        OutcomeResult::Ok,
        "a store after the thaw"
    );
    let into = pages(40, 4);
    e.clear(&into);
    assert_eq!(e.matched(5, &after), 4, "the new store is offered");
    let task = e.load(5, &after, &into);
    assert_eq!(
        e.run_until(task).0,
        OutcomeResult::Ok,
        "a load after the thaw"
    );
    assert!(e.verified(&after, &into));
    figure(
        "disk_tier_frozen",
        &[
            ("freeze_ms", freeze_ms.to_string()),
            ("deadline_ms", deadline_ms.to_string()),
            ("store_failed_after_ms", failed_after_ms.to_string()),
            ("steps_to_outcome", steps.to_string()),
            ("ready_again_after_ms", degraded_ms.to_string()),
            ("readyz_reason", why),
            ("second_store", "failed_at_once_stalled".into()),
            ("after_thaw", "store_ok_load_ok_verified".into()),
        ],
    );
}

#[test]
fn a_disk_tier_frozen_during_a_replay_loses_no_outcome() {
    let _serial = serial();
    let freeze_ms = env_u64("TANDEM_FAULT_FREEZE_MS", 5_000).max(3_000);
    let deadline_ms = 1_000;
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut c = disk_only_group_of(&redis, deadline_ms, 256);
    let test = "a_disk_tier_frozen_during_a_replay_loses_no_outcome";
    // Rank 1's disk freezes at its 40th transfer: mid-replay.
    let Some(epoch) = arm(&mut c, 1, &format!("freeze-ms:{freeze_ms}:after:40"), test) else {
        return;
    };
    let mut rng = seeded("disk-freeze-replay");
    let started = Instant::now();
    let replay = InProcessReplay::start(
        &c.group,
        (0..2).map(|r| c.group.socket(r)).collect(),
        fault_requests(),
        rng.next_u64(),
    );
    let s = replay
        .finish()
        .unwrap_or_else(|e| panic!("the replay failed: {e}\n{}", c.diagnostics()));
    let wall_ms = started.elapsed().as_millis();
    assert_exactly_once(&s, "a disk tier frozen during a replay");
    let log = c.group.log(1);
    assert!(
        log.contains("fault hook: the disk tier freezes"),
        "the freeze happened during the replay:\n{}",
        c.diagnostics()
    );
    let missed = log.matches("missed its deadline").count();
    assert!(missed > 0, "no disk transfer missed its deadline");
    assert!(
        s.stores_failed + s.loads_failed > 0,
        "no task failed: {}",
        s.to_json()
    );
    let thawed_during_replay = log.contains("fault hook: the disk tier thaws");
    c.wait_ready(Duration::from_millis(freeze_ms + 60_000));
    assert_eq!(c.supervisor_epoch(), Some(epoch), "the epoch held");
    figure(
        "disk_tier_frozen_during_replay",
        &[
            ("freeze_ms", freeze_ms.to_string()),
            ("deadline_ms", deadline_ms.to_string()),
            ("replay_wall_ms", wall_ms.to_string()),
            (
                "thawed_before_the_replay_ended",
                thawed_during_replay.to_string(),
            ),
            ("deadline_lines_in_rank1_log", missed.to_string()),
            (
                "replay",
                serde_json::to_string(&summary_short(&s)).unwrap_or_default(),
            ),
        ],
    );
}
