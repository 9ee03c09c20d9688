//! A restart on the same host and disk tiers: with the identical model layout the persisted
//! shards are reused (lookups match, loads verify byte for byte); with another layout of the
//! same shard size (fp8 with twice the KV heads) no old shard is ever looked up or loaded.
//! The group runs with Redis and a supervisor: without a completion log an agent wipes its
//! tiers at every epoch, so only a durable group reuses shards across a restart.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tandem_client::EngineClient;
use tandem_proto::frame::{Frame, OutcomeResult};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId};
use tandem_store::manifest::{Manifest, MANIFEST_FILE};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::{connect_engine, fill, holds, step_both};
use tandem_tests::redis::RedisServer;
use tandem_tests::serial;
use tandem_tests::supervisor::SupervisedGroup;

const BLOCKS: u64 = 12;

fn hashes() -> Vec<BlockHash> {
    (0..BLOCKS)
        .map(|i| BlockHash::from(0x1a70_0000 + i * 7919))
        .collect()
}

fn manifest_path(g: &Group, rank: u32) -> PathBuf {
    g.path()
        .join(format!("rank{rank}"))
        .join("disk")
        .join(MANIFEST_FILE)
}

/// SIGKILL every agent, then start them all again (with the configuration as it is now);
/// wait until the group is ready in a later epoch.
fn restart_group(c: &mut SupervisedGroup) {
    let old = c.supervisor_epoch().unwrap_or(0);
    for rank in 0..c.group.world_size {
        if let Some(mut a) = c.group.agents[rank as usize].take() {
            let _ = a.0.kill();
            let _ = a.0.wait();
        }
    }
    for rank in 0..c.group.world_size {
        c.kill_and_respawn(rank);
    }
    c.wait_epoch_after(old, Duration::from_secs(60));
    c.wait_ready(Duration::from_secs(60));
}

/// Steps both ranks until `task` is reported; its result.
fn run_until(
    leader: &mut EngineClient,
    follower: &mut EngineClient,
    step: &mut u64,
    task: TaskId,
) -> OutcomeResult {
    for _ in 0..200 {
        let f: Frame = step_both(leader, follower, Step(*step));
        *step += 1;
        if let Some(o) = f.finished.iter().find(|o| o.task == task) {
            return o.result.clone();
        }
    }
    panic!("task {task} was not reported within 200 steps");
}

#[test]
fn a_changed_model_layout_never_loads_old_shards_and_the_same_layout_reuses_them() {
    let _serial = serial();
    let redis = RedisServer::start();
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = redis.url();
    let mut c = SupervisedGroup::start(&spec, "info");
    let hashes = hashes();
    let g = &c.group;

    // 1. Store twelve blocks on both ranks; wait until both manifests list them.
    {
        let (mut leader, mut lp) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 64);
        let (mut follower, mut fp) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 64);
        for (i, h) in hashes.iter().enumerate() {
            fill(lp.page_mut(PageId(i as u32)).unwrap(), h.0, 0);
            fill(fp.page_mut(PageId(i as u32)).unwrap(), h.0, 1);
        }
        let pages = (0..BLOCKS as u32).map(PageId).collect();
        let task = leader
            .store(Step(0), RequestId(1), hashes.clone(), pages)
            .expect("store");
        let mut step = 0;
        let r = run_until(&mut leader, &mut follower, &mut step, task);
        assert_eq!(r, OutcomeResult::Ok, "the store failed");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    for rank in 0..2 {
        loop {
            let listed = Manifest::load(&manifest_path(g, rank))
                .ok()
                .flatten()
                .map_or(0, |m| m.entries.len());
            if listed == BLOCKS as usize {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "rank {rank}'s manifest lists {listed} of {BLOCKS} blocks"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // 2. Stop the group; restart it with the identical layout: the blocks are found and load.
    restart_group(&mut c);
    let g = &c.group;
    {
        let (mut leader, mut lp) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 64);
        let (mut follower, mut fp) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 64);
        for p in 20..32 {
            lp.page_mut(PageId(p)).unwrap().fill(0);
            fp.page_mut(PageId(p)).unwrap().fill(0);
        }
        let found = leader
            .lookup(Step(0), RequestId(2), hashes.clone())
            .expect("lookup");
        assert_eq!(
            found.matched_blocks,
            BLOCKS as u32,
            "an identical layout reuses the persisted blocks\n{}\n{}",
            g.log(0),
            g.log(1)
        );
        let task = leader
            .load(
                Step(0),
                RequestId(2),
                hashes.clone(),
                (20..32).map(PageId).collect(),
            )
            .expect("load");
        let mut step = 0;
        let r = run_until(&mut leader, &mut follower, &mut step, task);
        assert_eq!(r, OutcomeResult::Ok, "the load failed");
        for (i, h) in hashes.iter().enumerate() {
            let p = PageId(20 + i as u32);
            assert!(holds(lp.page(p).unwrap(), h.0, 0), "rank 0 page {p:?}");
            assert!(holds(fp.page(p).unwrap(), h.0, 1), "rank 1 page {p:?}");
        }
    }

    // 3. Stop it; restart with fp8 KV and twice the heads: the same shard size and tiers, a
    // layout under which the old bytes mean nothing.
    c.group.edit_config("num_kv_heads = 8", "num_kv_heads = 16");
    c.group.edit_config("dtype_bytes = 2", "dtype_bytes = 1");
    restart_group(&mut c);
    let g = &c.group;
    for rank in 0..2 {
        let log = g.log(rank);
        assert!(
            log.contains("the model layout changed")
                && log.contains("dtype_bytes=2")
                && log.contains("dtype_bytes=1")
                && log.contains("dropped=12"),
            "rank {rank} logs the drop with both layouts:\n{log}"
        );
    }
    let (mut leader, mut lp) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 64);
    let (mut follower, _fp) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 64);
    for p in 20..32 {
        lp.page_mut(PageId(p)).unwrap().fill(0);
    }
    let found = leader
        .lookup(Step(0), RequestId(3), hashes.clone())
        .expect("lookup");
    assert_eq!(found.matched_blocks, 0, "no old block is offered");
    // A load asked for anyway is refused or fails; no page receives old bytes.
    let mut step = 0;
    match leader.load(
        Step(0),
        RequestId(3),
        hashes.clone(),
        (20..32).map(PageId).collect(),
    ) {
        Ok(task) => {
            let r = run_until(&mut leader, &mut follower, &mut step, task);
            assert_ne!(r, OutcomeResult::Ok, "a load of dropped blocks succeeded");
        }
        Err(e) => println!("a load of dropped blocks is refused: {e}"),
    }
    for (i, h) in hashes.iter().enumerate() {
        let p = PageId(20 + i as u32);
        assert!(!holds(lp.page(p).unwrap(), h.0, 0), "old bytes in {p:?}");
    }
    for rank in 0..2 {
        let m = Manifest::load(&manifest_path(g, rank)).unwrap().unwrap();
        assert!(m.entries.is_empty(), "rank {rank} still lists old shards");
        assert_eq!((m.layout.dtype_bytes, m.layout.num_kv_heads), (1, 16));
    }
}
