//! N real agent processes on loopback with simulated engines: stores, then loads, of
//! random blocks, verified byte for byte on every rank.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tandem_client::{AgentError, ClientError, EngineClient, PagePool};
use tandem_proto::frame::{Frame, OutcomeResult};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::{connect_engine, fill, holds};

const DEADLINE: Duration = Duration::from_secs(5);

/// What every engine saw, for the checks at the end.
#[derive(Default)]
struct Seen {
    /// (rank, task) of every load verified byte for byte.
    verified: Vec<(u32, TaskId)>,
    /// Mismatches: (rank, block, page).
    bad: Vec<(u32, u128, u32)>,
}

/// `rank`'s engine with a pool of 64 pages.
fn connect(g: &Group, rank: u32) -> (EngineClient, PagePool) {
    connect_engine(&g.socket(rank), &g.pool_path(rank), rank, 64)
}

/// A follower engine: reads every frame in order, verifies the pages of finished loads, acks.
fn follower(
    rank: u32,
    mut c: EngineClient,
    pool: PagePool,
    last: Arc<AtomicU64>,
    seen: Arc<Mutex<Seen>>,
) {
    let mut loads = std::collections::BTreeMap::new();
    let mut step = 0u64;
    while step <= last.load(Ordering::SeqCst) {
        let frame = match c.frame(Step(step), DEADLINE) {
            Ok(f) => f,
            Err(ClientError::Agent(AgentError::LeaderBehind { .. })) => continue,
            Err(e) => panic!("rank {rank} frame {step}: {e}"),
        };
        verify_loads(rank, &frame, &mut loads, &pool, &seen);
        c.ack(Step(step)).expect("ack");
        step += 1;
    }
}

fn verify_loads(
    rank: u32,
    frame: &Frame,
    loads: &mut std::collections::BTreeMap<TaskId, (Vec<BlockHash>, Vec<PageId>)>,
    pool: &PagePool,
    seen: &Mutex<Seen>,
) {
    for l in &frame.loads {
        loads.insert(l.task, (l.block_hashes.clone(), l.page_ids.clone()));
    }
    for o in &frame.finished {
        if let Some((hashes, pages)) = loads.remove(&o.task) {
            assert_eq!(
                o.result,
                OutcomeResult::Ok,
                "rank {rank}: load {} failed",
                o.task
            );
            let mut s = seen.lock().unwrap();
            for (h, p) in hashes.iter().zip(&pages) {
                let got = pool.page(*p).unwrap();
                if !holds(got, h.0, rank) {
                    s.bad.push((rank, h.0, p.0));
                }
            }
            s.verified.push((rank, o.task));
        }
    }
}

fn store_then_load(pp: u32, tp: u32) {
    let spec = GroupSpec::new(pp, tp);
    let g = Group::start(&spec);
    g.wait_ready(Duration::from_secs(30));
    let world = spec.world_size();
    let blocks: Vec<u64> = (0..12u64).map(|i| 0x5eed_0000 + i * 7919).collect();
    let last = Arc::new(AtomicU64::new(u64::MAX));
    let seen = Arc::new(Mutex::new(Seen::default()));

    // Every rank's engine computes the blocks' KV into pages 0..12 before step 0.
    let mut engines: Vec<(EngineClient, PagePool)> = (0..world).map(|r| connect(&g, r)).collect();
    for (rank, (_, pool)) in engines.iter_mut().enumerate() {
        for (i, h) in blocks.iter().enumerate() {
            fill(
                pool.page_mut(PageId(i as u32)).unwrap(),
                u128::from(*h),
                rank as u32,
            );
        }
    }
    let (mut leader, leader_pool) = engines.remove(0);
    let followers: Vec<_> = engines
        .into_iter()
        .enumerate()
        .map(|(i, (c, pool))| {
            let (last, seen) = (last.clone(), seen.clone());
            std::thread::spawn(move || follower(i as u32 + 1, c, pool, last, seen))
        })
        .collect();

    let hashes: Vec<BlockHash> = blocks.iter().map(|h| BlockHash::from(*h)).collect();
    let mut step = 0u64;
    let mut loads = std::collections::BTreeMap::new();
    let mut run_step = |leader: &mut EngineClient, step: &mut u64| -> Frame {
        let f = leader.end_step(Step(*step), DEADLINE).expect("end_step");
        leader.ack(Step(*step)).expect("leader ack");
        verify_loads(0, &f, &mut loads, &leader_pool, &seen);
        *step += 1;
        f
    };
    let store = leader
        .store(
            Step(0),
            RequestId(1),
            hashes.clone(),
            (0..12).map(PageId).collect(),
        )
        .expect("store");
    let mut stored = false;
    for _ in 0..200 {
        let f = run_step(&mut leader, &mut step);
        if let Some(o) = f.finished.iter().find(|o| o.task == store) {
            assert_eq!(o.result, OutcomeResult::Ok, "store failed");
            stored = true;
            break;
        }
    }
    assert!(stored, "store did not finish within 200 steps");

    let lookup = leader
        .lookup(Step(step), RequestId(2), hashes.clone())
        .expect("lookup");
    assert_eq!(
        lookup.matched_blocks, 12,
        "every stored block is cached on every rank"
    );
    let load = leader
        .load(
            Step(step),
            RequestId(2),
            hashes.clone(),
            (20..32).map(PageId).collect(),
        )
        .expect("load");
    let mut loaded = false;
    for _ in 0..200 {
        let f = run_step(&mut leader, &mut step);
        if f.finished.iter().any(|o| o.task == load) {
            loaded = true;
            break;
        }
    }
    assert!(loaded, "load did not finish within 200 steps");
    // Let the followers read up to the last sealed step, then stop.
    last.store(step - 1, Ordering::SeqCst);
    for f in followers {
        f.join().expect("follower engine");
    }
    let s = seen.lock().unwrap();
    assert!(
        s.bad.is_empty(),
        "pages differ from the stored shards: {:?}",
        s.bad
    );
    let mut ranks: Vec<u32> = s
        .verified
        .iter()
        .filter(|(_, t)| *t == load)
        .map(|(r, _)| *r)
        .collect();
    ranks.sort();
    assert_eq!(
        ranks,
        (0..world).collect::<Vec<_>>(),
        "every rank verified the load"
    );
}

#[test]
fn two_ranks_store_then_load_byte_for_byte() {
    store_then_load(1, 2);
}

#[test]
fn four_ranks_store_then_load_byte_for_byte() {
    store_then_load(2, 2);
}
