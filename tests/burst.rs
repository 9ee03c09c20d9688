//! A burst of 5,000 store tasks in one step on a 1×2 group of real agents: nothing is dropped
//! from a mailbox, every task gets exactly one outcome on both engines, and the agents stay
//! ready. Prints the steps and time from the burst to the last outcome.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tandem_client::{AgentError, ClientError, EngineClient};
use tandem_proto::frame::{Frame, OutcomeResult};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::{agent_error_kind, connect_engine, fill};
use tandem_tests::ChildGuard;

/// Tasks in the burst, one block each.
const TASKS: u64 = 5_000;
/// How long one step may wait for its frame.
const DEADLINE: Duration = Duration::from_secs(10);
/// Steps the leader seals at most before the test calls the burst lost.
const MAX_STEPS: u64 = 20_000;

/// Every outcome an engine read, by task: (result, how many times it was revealed).
type Outcomes = BTreeMap<TaskId, (OutcomeResult, u32)>;

/// Record every outcome `frame` reveals into `seen`.
fn record(frame: &Frame, seen: &mut Outcomes) {
    for o in frame.outcomes() {
        let e = seen.entry(o.task).or_insert((o.result.clone(), 0));
        e.1 += 1;
    }
}

/// The follower engine: reads every frame in order up to `last`, records outcomes, acks.
fn follower(mut c: EngineClient, last: Arc<AtomicU64>, seen: Arc<Mutex<Outcomes>>) {
    let mut step = 0u64;
    while step <= last.load(Ordering::SeqCst) {
        let frame = match c.frame(Step(step), DEADLINE) {
            Ok(f) => f,
            Err(ClientError::Agent(AgentError::LeaderBehind { .. })) => continue,
            Err(e) => panic!("follower frame {step}: {e}"),
        };
        record(&frame, &mut seen.lock().unwrap());
        c.ack(Step(step)).expect("follower ack");
        step += 1;
    }
}

/// Every task in `tasks` has exactly one outcome in `seen`, and it is `Ok`.
fn check(who: &str, tasks: &BTreeSet<TaskId>, seen: &Outcomes) {
    let missing: Vec<_> = tasks.iter().filter(|t| !seen.contains_key(t)).collect();
    assert!(
        missing.is_empty(),
        "{who}: {} of {TASKS} tasks have no outcome (first: {:?})",
        missing.len(),
        missing.first()
    );
    let twice: Vec<_> = seen.iter().filter(|(_, (_, n))| *n != 1).collect();
    assert!(
        twice.is_empty(),
        "{who}: outcomes revealed twice: {twice:?}"
    );
    let failed: Vec<_> = seen
        .iter()
        .filter(|(_, (r, _))| *r != OutcomeResult::Ok)
        .collect();
    assert!(failed.is_empty(), "{who}: failed tasks: {failed:?}");
    let unknown: Vec<_> = seen.keys().filter(|t| !tasks.contains(t)).collect();
    assert!(
        unknown.is_empty(),
        "{who}: outcomes of unknown tasks: {unknown:?}"
    );
}

#[test]
fn five_thousand_stores_in_one_step_all_get_one_outcome() {
    let mut spec = GroupSpec::new(1, 2);
    // The host tier holds the whole burst, so no store waits on an eviction.
    spec.host_capacity_blocks = TASKS + 64;
    spec.disk_capacity_blocks = TASKS + 64;
    let mut g = Group::configure(&spec);
    g.use_small_shards();
    for rank in 0..g.world_size {
        let child = g.agent_command(rank).spawn().expect("spawn tandem agent");
        g.agents.push(Some(ChildGuard(child)));
    }
    g.wait_ready(Duration::from_secs(30));

    // Every engine's pool holds one page per task; page i holds block i's shard.
    let hashes: Vec<BlockHash> = (0..TASKS)
        .map(|i| BlockHash::from(0xb0b5_0000_0000u64 + i * 7919))
        .collect();
    let mut engines: Vec<_> = (0..2u32)
        .map(|r| {
            let (c, mut pool) = connect_engine(&g.socket(r), &g.pool_path(r), r, TASKS);
            for (i, h) in hashes.iter().enumerate() {
                fill(pool.page_mut(PageId(i as u32)).unwrap(), h.0, r);
            }
            (c, pool)
        })
        .collect();
    let (follower_engine, _follower_pool) = engines.remove(1);
    let (mut leader, _leader_pool) = engines.remove(0);
    let last = Arc::new(AtomicU64::new(u64::MAX));
    let follower_seen = Arc::new(Mutex::new(Outcomes::new()));
    let f = {
        let (last, seen) = (last.clone(), follower_seen.clone());
        std::thread::spawn(move || follower(follower_engine, last, seen))
    };

    // The burst: 5,000 one-block stores, all in step 0.
    let start = Instant::now();
    let mut tasks = BTreeSet::new();
    let mut refused: BTreeMap<&'static str, u64> = BTreeMap::new();
    for (i, h) in hashes.iter().enumerate() {
        match leader.store(
            Step(0),
            RequestId(i as u64 + 1),
            vec![*h],
            vec![PageId(i as u32)],
        ) {
            Ok(t) => {
                assert!(tasks.insert(t), "task id {t} handed out twice");
            }
            Err(ClientError::Agent(e)) => *refused.entry(agent_error_kind(&e)).or_default() += 1,
            Err(e) => panic!("store {i}: {e}"),
        }
    }
    let issued = start.elapsed();
    assert!(
        refused.is_empty(),
        "the burst was refused in part: {refused:?} of {TASKS}"
    );

    // Seal steps until every task's outcome is revealed.
    let mut leader_seen = Outcomes::new();
    let mut step = 0u64;
    let mut first_outcome_step = None;
    let mut started: BTreeMap<TaskId, u64> = BTreeMap::new();
    while leader_seen.len() < tasks.len() && step < MAX_STEPS {
        let frame = leader
            .end_step(Step(step), DEADLINE)
            .unwrap_or_else(|e| panic!("end_step {step}: {e}\n{}", g.log(0)));
        leader.ack(Step(step)).expect("leader ack");
        record(&frame, &mut leader_seen);
        started.extend(frame.stores.iter().map(|t| (t.task, step)));
        if first_outcome_step.is_none() && !frame.finished.is_empty() {
            first_outcome_step = Some(step);
        }
        step += 1;
    }
    let done = start.elapsed();
    last.store(step - 1, Ordering::SeqCst);
    f.join().expect("follower engine");
    println!(
        "burst: {TASKS} stores issued in {:.1} ms; last outcome after {:.1} ms, {step} steps \
         sealed (first outcome in step {first_outcome_step:?}); {} outcomes on the leader, {} \
         on the follower",
        issued.as_secs_f64() * 1e3,
        done.as_secs_f64() * 1e3,
        leader_seen.len(),
        follower_seen.lock().unwrap().len(),
    );
    check("leader", &tasks, &leader_seen);
    check("follower", &tasks, &follower_seen.lock().unwrap());
    assert_eq!(tasks.len() as u64, TASKS);
    let late: Vec<_> = started.iter().filter(|(_, s)| **s != 0).collect();
    assert!(late.is_empty(), "stores started after step 0: {late:?}");
    assert_eq!(
        started.keys().copied().collect::<BTreeSet<_>>(),
        tasks,
        "every task of the burst starts once, in frame 0"
    );
    for r in 0..2 {
        let (code, body) = g
            .http_get(r, "/readyz")
            .unwrap_or_else(|| panic!("rank {r} /readyz does not answer"));
        assert_eq!(code, 200, "rank {r} not ready after the burst: {body}");
    }
    g.agents.clear();
}
