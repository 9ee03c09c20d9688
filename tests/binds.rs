//! Per-rank page binding, idempotent lookups and the engine protocol version, with real agent
//! processes: every rank's engine binds its own pages (a follower's pool smaller than the
//! leader's) and the loaded bytes verify on every rank; a follower that never binds makes the
//! task fail the same way on every rank by the deadline while its agent stays ready; bad binds
//! and an engine of another version are refused by name; a request's repeated lookups hold one
//! pin set, so a tier filled afterwards takes every new block.

use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tandem_client::api::{BindError, ENGINE_PROTOCOL_VERSION};
use tandem_client::wire::{read_message, write_message};
use tandem_client::{AgentError, ClientError, EngineClient, EngineReply, EngineRequest, PagePool};
use tandem_proto::frame::{OutcomeResult, TaskOutcome};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::{connect_engine, fill, holds};
use tandem_tests::ChildGuard;

const DEADLINE: Duration = Duration::from_secs(5);
const BLOCKS: u64 = 8;

/// A group of `world` ranks (one pipeline stage) with `bind_timeout_ms`, started.
fn start(world: u32, host: u64, disk: u64, bind_timeout_ms: u64) -> Group {
    let mut spec = GroupSpec::new(1, world);
    (spec.host_capacity_blocks, spec.disk_capacity_blocks) = (host, disk);
    let mut g = Group::configure(&spec);
    g.use_small_shards();
    // 12 KV heads split evenly over 1, 2, 3 or 4 ranks.
    g.edit_config("num_kv_heads = 8", "num_kv_heads = 12");
    g.edit_config(
        "frame_deadline_ms = 5000",
        &format!("frame_deadline_ms = 5000\nbind_timeout_ms = {bind_timeout_ms}"),
    );
    for rank in 0..world {
        let child = g.agent_command(rank).spawn().expect("spawn agent");
        g.agents.push(Some(ChildGuard(child)));
    }
    g.wait_ready(Duration::from_secs(30));
    g
}

fn hashes() -> Vec<BlockHash> {
    (0..BLOCKS)
        .map(|i| BlockHash::from(0xb1d0_0000 + i * 7919))
        .collect()
}

/// Where each rank's engine keeps the blocks (its own choice): (source pages, load pages).
fn layout(rank: u32) -> (Vec<PageId>, Vec<PageId>) {
    let n = BLOCKS as u32;
    match rank {
        0 => (
            (0..n).map(PageId).collect(),
            (20..20 + n).map(PageId).collect(),
        ),
        // A pool of 16 pages: the blocks in reverse in the top half, loads into the bottom.
        1 => (
            (n..2 * n).rev().map(PageId).collect(),
            (0..n).map(PageId).collect(),
        ),
        _ => (
            (40..40 + n).map(PageId).collect(),
            (50..50 + n).map(PageId).collect(),
        ),
    }
}

fn pool_pages(rank: u32) -> u64 {
    if rank == 1 {
        16
    } else {
        64
    }
}

/// What the follower engines saw.
#[derive(Default)]
struct Seen {
    /// Every outcome each rank read, by task.
    outcomes: BTreeMap<TaskId, Vec<(u32, TaskOutcome)>>,
    /// Loads verified byte for byte: (rank, task).
    verified: Vec<(u32, TaskId)>,
    /// Pages holding other bytes: (rank, page).
    bad: Vec<(u32, u32)>,
    /// Binds refused.
    refused: Vec<(u32, String)>,
}

/// A follower engine: reads every frame, binds its own pages for every task started without
/// page ids (unless `bind` is false), verifies its loads, acknowledges.
fn follower(
    rank: u32,
    mut c: EngineClient,
    pool: PagePool,
    bind: bool,
    stop: Arc<AtomicU64>,
    seen: Arc<Mutex<Seen>>,
) {
    let (src, dst) = layout(rank);
    let mut loads: BTreeMap<TaskId, Vec<BlockHash>> = BTreeMap::new();
    let mut step = 0u64;
    while step <= stop.load(Ordering::SeqCst) {
        let frame = match c.frame(Step(step), DEADLINE) {
            Ok(f) => f,
            Err(ClientError::Agent(AgentError::LeaderBehind { .. })) => continue,
            Err(e) => panic!("rank {rank} frame {step}: {e}"),
        };
        let all = hashes();
        let page_of = |h: &BlockHash, pages: &[PageId]| {
            pages[all.iter().position(|x| x == h).expect("a known block")]
        };
        for (t, pages) in frame
            .stores
            .iter()
            .map(|t| (t, &src))
            .chain(frame.loads.iter().map(|t| (t, &dst)))
        {
            if frame.loads.iter().any(|l| l.task == t.task) {
                loads.insert(t.task, t.block_hashes.clone());
            }
            if bind && t.page_ids.is_empty() {
                let mine: Vec<PageId> = t.block_hashes.iter().map(|h| page_of(h, pages)).collect();
                if let Err(e) = c.bind(t.task, mine) {
                    seen.lock().unwrap().refused.push((rank, e.to_string()));
                }
            }
        }
        for o in frame.outcomes() {
            let mut s = seen.lock().unwrap();
            s.outcomes
                .entry(o.task)
                .or_default()
                .push((rank, o.clone()));
            if let Some(blocks) = loads.remove(&o.task) {
                if o.result == OutcomeResult::Ok {
                    for h in &blocks {
                        let p = page_of(h, &dst);
                        if !holds(pool.page(p).unwrap(), h.0, rank) {
                            s.bad.push((rank, p.0));
                        }
                    }
                    s.verified.push((rank, o.task));
                }
            }
        }
        c.ack(Step(step)).expect("ack");
        step += 1;
    }
}

/// The leader's engine: steps (pausing `pause` between steps) until a frame reveals `task`'s
/// outcome; that outcome and the next step.
fn until_outcome(
    c: &mut EngineClient,
    step: &mut u64,
    task: TaskId,
    pause: Duration,
) -> TaskOutcome {
    for _ in 0..2_000 {
        let f = c.end_step(Step(*step), DEADLINE).expect("end_step");
        c.ack(Step(*step)).expect("leader ack");
        *step += 1;
        if let Some(o) = f.outcomes().find(|o| o.task == task) {
            return o.clone();
        }
        std::thread::sleep(pause);
    }
    panic!("no outcome for {task}");
}

struct Run {
    g: Group,
    leader: EngineClient,
    pool: PagePool,
    step: u64,
    stop: Arc<AtomicU64>,
    seen: Arc<Mutex<Seen>>,
    followers: Vec<std::thread::JoinHandle<()>>,
}

/// Three ranks; every engine computes the blocks into its own pages; follower 2 binds only
/// when `rank2_binds`.
fn run(bind_timeout_ms: u64, rank2_binds: bool) -> Run {
    let g = start(3, 64, 64, bind_timeout_ms);
    let stop = Arc::new(AtomicU64::new(u64::MAX));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut engines: Vec<(EngineClient, PagePool)> = (0..3)
        .map(|r| connect_engine(&g.socket(r), &g.pool_path(r), r, pool_pages(r)))
        .collect();
    for (rank, (_, pool)) in engines.iter_mut().enumerate() {
        let (src, _) = layout(rank as u32);
        for (h, p) in hashes().iter().zip(&src) {
            fill(pool.page_mut(*p).unwrap(), h.0, rank as u32);
        }
    }
    let (leader, pool) = engines.remove(0);
    let followers = engines
        .into_iter()
        .enumerate()
        .map(|(i, (c, pool))| {
            let rank = i as u32 + 1;
            let bind = rank != 2 || rank2_binds;
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::spawn(move || follower(rank, c, pool, bind, stop, seen))
        })
        .collect();
    Run {
        g,
        leader,
        pool,
        step: 0,
        stop,
        seen,
        followers,
    }
}

impl Run {
    fn finish(mut self) -> (Group, Arc<Mutex<Seen>>) {
        // One more step so every outcome so far is in a frame the followers read.
        self.leader
            .end_step(Step(self.step), DEADLINE)
            .expect("end_step");
        self.stop.store(self.step, Ordering::SeqCst);
        for f in self.followers {
            f.join().expect("follower engine");
        }
        (self.g, self.seen)
    }
}

#[test]
fn every_rank_binds_its_own_pages_and_the_bytes_verify_on_every_rank() {
    let mut r = run(5_000, true);
    let (src, dst) = layout(0);
    let store = r
        .leader
        .store(Step(0), RequestId(1), hashes(), Vec::new())
        .expect("store");
    r.leader
        .bind(store, src)
        .expect("the leader binds its pages");
    let o = until_outcome(&mut r.leader, &mut r.step, store, Duration::ZERO);
    assert_eq!(o.result, OutcomeResult::Ok, "store: {o:?}");
    let l = r
        .leader
        .lookup(Step(r.step), RequestId(2), hashes())
        .expect("lookup");
    assert_eq!(l.matched_blocks, BLOCKS as u32);
    let load = r
        .leader
        .load(Step(r.step), RequestId(2), hashes(), Vec::new())
        .expect("load");
    r.leader.bind(load, dst.clone()).expect("the leader binds");
    let o = until_outcome(&mut r.leader, &mut r.step, load, Duration::ZERO);
    assert_eq!(o.result, OutcomeResult::Ok, "load: {o:?}");
    for (h, p) in hashes().iter().zip(&dst) {
        assert!(holds(r.pool.page(*p).unwrap(), h.0, 0), "rank 0 page {p}");
    }
    let (g, seen) = r.finish();
    let s = seen.lock().unwrap();
    assert!(s.refused.is_empty(), "binds refused: {:?}", s.refused);
    assert!(s.bad.is_empty(), "pages with other bytes: {:?}", s.bad);
    let mut ranks: Vec<u32> = s
        .verified
        .iter()
        .filter(|(_, t)| *t == load)
        .map(|(r, _)| *r)
        .collect();
    ranks.sort();
    assert_eq!(ranks, vec![1, 2], "both followers verified the load");
    drop(g);
}

#[test]
fn a_follower_that_never_binds_fails_the_task_on_every_rank_and_stays_ready() {
    let mut r = run(1_000, false);
    let (src, _) = layout(0);
    let store = r
        .leader
        .store(Step(0), RequestId(1), hashes(), Vec::new())
        .expect("store");
    r.leader.bind(store, src.clone()).expect("leader binds");
    let o = until_outcome(&mut r.leader, &mut r.step, store, Duration::from_millis(10));
    match &o.result {
        OutcomeResult::Failed { reason } => {
            assert!(reason.contains("rank 2"), "{reason}");
            assert!(reason.contains("bind_timeout_ms = 1000"), "{reason}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    // The group goes on in the same epoch: a store with page ids (the same on every rank)
    // succeeds; the failed one's blocks left the group, so they store again.
    let again = r
        .leader
        .store(Step(r.step), RequestId(3), hashes(), src)
        .expect("store with page ids");
    let o2 = until_outcome(&mut r.leader, &mut r.step, again, Duration::ZERO);
    assert_eq!(o2.result, OutcomeResult::Ok, "{o2:?}");
    let (g, seen) = r.finish();
    for rank in 0..3 {
        let (code, body) = g.http_get(rank, "/readyz").expect("readyz");
        assert_eq!(code, 200, "rank {rank} stays ready: {body}");
    }
    let s = seen.lock().unwrap();
    let read = s
        .outcomes
        .get(&store)
        .expect("the followers read the outcome");
    assert_eq!(read.len(), 2, "{read:?}");
    for (rank, seen_outcome) in read {
        assert_eq!(seen_outcome, &o, "rank {rank} sees the leader's outcome");
    }
}

/// One raw request on `rank`'s engine socket (without the client's hello).
fn raw(g: &Group, rank: u32, req: &EngineRequest) -> EngineReply {
    let mut s = UnixStream::connect(g.socket(rank)).expect("socket");
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    write_message(&mut s, req).expect("send");
    read_message(&mut s).expect("reply")
}

fn release(c: &mut EngineClient, request: u64) -> u32 {
    c.release(RequestId(request)).expect("release")
}

#[test]
fn bad_binds_old_engines_and_repeated_lookups_with_real_agents() {
    // Two ranks, a host tier of 8 blocks and no disk: a leaked pin set would refuse new stores.
    let g = start(2, BLOCKS, 0, 5_000);
    // An engine of engine protocol 1 (no version in its hello) and one of an unknown version.
    match raw(&g, 1, &EngineRequest::Hello { rank: 1 }) {
        EngineReply::Error(AgentError::BadRequest { reason }) => assert!(
            reason.contains(&format!(
                "the agent speaks {ENGINE_PROTOCOL_VERSION}, the engine speaks 1"
            )),
            "{reason}"
        ),
        other => panic!("expected BadRequest naming both versions, got {other:?}"),
    }
    let req = EngineRequest::HelloVersioned {
        rank: 0,
        protocol_version: ENGINE_PROTOCOL_VERSION + 1,
    };
    assert_eq!(
        raw(&g, 0, &req),
        EngineReply::Error(AgentError::ProtocolVersion {
            agent: ENGINE_PROTOCOL_VERSION,
            engine: ENGINE_PROTOCOL_VERSION + 1
        })
    );

    let (mut leader, mut pool) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 32);
    let (mut follower, _fpool) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 8);
    for (h, i) in hashes().iter().zip(0u32..) {
        fill(pool.page_mut(PageId(i)).unwrap(), h.0, 0);
    }
    let store = leader
        .store(Step(0), RequestId(1), hashes(), Vec::new())
        .expect("store");
    let bind_err = |r: Result<(), ClientError>| match r {
        Err(ClientError::Agent(AgentError::Bind(e))) => e,
        other => panic!("expected a bind refusal, got {other:?}"),
    };
    let unknown = TaskId {
        epoch: store.epoch,
        seq: store.seq + 100,
    };
    assert_eq!(
        bind_err(leader.bind(unknown, vec![PageId(0)])),
        BindError::UnknownTask { task: unknown }
    );
    assert_eq!(
        bind_err(leader.bind(store, vec![PageId(0)])),
        BindError::WrongCount {
            task: store,
            blocks: BLOCKS as u32,
            pages: 1
        }
    );
    let mut far: Vec<PageId> = (0..BLOCKS as u32).map(PageId).collect();
    far[3] = PageId(32);
    assert_eq!(
        bind_err(leader.bind(store, far)),
        BindError::PageOutOfRange {
            task: store,
            page: 32,
            pool_pages: 32
        }
    );
    leader
        .bind(store, (0..BLOCKS as u32).map(PageId).collect())
        .expect("a good bind after the refusals");
    // The follower's pool has 8 pages: page 8 is out of its range, 0..8 is not.
    let f = leader.end_step(Step(0), DEADLINE).expect("end_step");
    leader.ack(Step(0)).expect("ack");
    assert_eq!(follower.frame(Step(0), DEADLINE).expect("frame"), f);
    assert!(matches!(
        bind_err(follower.bind(store, (1..=BLOCKS as u32).map(PageId).collect())),
        BindError::PageOutOfRange {
            page: 8,
            pool_pages: 8,
            ..
        }
    ));
    follower
        .bind(store, (0..BLOCKS as u32).rev().map(PageId).collect())
        .expect("the follower binds its own pages");
    follower.ack(Step(0)).expect("ack");
    let mut step = 1u64;
    let step_both = |leader: &mut EngineClient, follower: &mut EngineClient, step: &mut u64| {
        let f = leader.end_step(Step(*step), DEADLINE).expect("end_step");
        leader.ack(Step(*step)).expect("ack");
        follower.frame(Step(*step), DEADLINE).expect("frame");
        follower.ack(Step(*step)).expect("ack");
        *step += 1;
        f
    };
    let outcome = |leader: &mut EngineClient, follower: &mut EngineClient, step: &mut u64, t| {
        for _ in 0..200 {
            let f = step_both(leader, follower, step);
            let result = f.outcomes().find(|o| o.task == t).map(|o| o.result.clone());
            if let Some(r) = result {
                return r;
            }
        }
        panic!("no outcome for {t}")
    };
    assert_eq!(
        outcome(&mut leader, &mut follower, &mut step, store),
        OutcomeResult::Ok
    );
    // A task that started with page ids needs no bind.
    let named = leader
        .store(
            Step(step),
            RequestId(5),
            hashes()[..1].to_vec(),
            vec![PageId(0)],
        )
        .expect("store");
    assert_eq!(
        bind_err(leader.bind(named, vec![PageId(0)])),
        BindError::AlreadyBound { task: named }
    );
    // The same request looks its blocks up 300 times over 30 steps: one answer, one pin set.
    let first = leader
        .lookup(Step(step), RequestId(9), hashes())
        .expect("lookup");
    assert_eq!(first.matched_blocks, BLOCKS as u32);
    for i in 0..300 {
        let again = leader
            .lookup(Step(step), RequestId(9), hashes())
            .expect("lookup again");
        assert_eq!(again, first);
        if i % 10 == 9 {
            step_both(&mut leader, &mut follower, &mut step);
        }
    }
    assert_eq!(release(&mut leader, 9), BLOCKS as u32);
    assert_eq!(release(&mut leader, 9), 0);
    // No pin leaked: the tier (8 blocks) takes 8 new ones.
    let fresh: Vec<BlockHash> = (0..BLOCKS)
        .map(|i| BlockHash::from(0xf1_0000 + i))
        .collect();
    let fill_task = leader
        .store(
            Step(step),
            RequestId(10),
            fresh,
            (0..BLOCKS as u32).map(PageId).collect(),
        )
        .expect("store");
    assert_eq!(
        outcome(&mut leader, &mut follower, &mut step, fill_task),
        OutcomeResult::Ok,
        "a tier full of leaked pins would refuse this store"
    );
}
