//! "The FlexKV asymmetric drain" (docs/DESIGN.md invariants 1 and 2): the failure that breaks SGLang's FlexKV connector,
//! replayed against real agents.
//!
//! Four agent processes (pp 2 × tp 2) on loopback. The leader engine runs 10,000 steps and, at
//! random steps, stores new blocks (pages filled before the store call), looks up and loads
//! earlier blocks, and frees pages only when a frame reports their task finished. Each follower
//! engine reads frames at moments chosen by its own simulated memory pressure (a seeded random
//! source per rank): one re-reads every frame several times, one pauses often and then catches
//! up in bursts, one mixes both and re-reads old frames. Every frame is eventually applied in
//! order and acknowledged: a follower fills its pages for a store when it applies the frame
//! that starts it (before acking that step), and verifies the pages of every load byte for byte
//! when it applies the frame that reports the load finished.
//!
//! Checked at the end: every rank applied the same frame at every step (digests compared),
//! every re-read returned the identical frame, every engine saw every task's outcome exactly
//! once, no started task is left without an outcome (in the engines and in the agents), no
//! load failed, and no loaded page differs from the stored shard. A store may be refused by the
//! group index when its host tier is full of pinned blocks: that is an outcome the contract
//! allows (the blocks are simply not cached), so it is counted and printed, not failed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_client::{AgentError, ClientError, EngineClient, PagePool};
use tandem_proto::frame::{Frame, OutcomeResult};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId, TaskKind};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::{connect_engine, fill, frame_digest, holds, Rng};
use tandem_tests::tail;

/// Steps the leader runs with tasks (more follow only while tasks are still in flight).
const STEPS: u64 = 10_000;
/// No task starts in the last `TAIL` of the `STEPS` steps.
const TAIL: u64 = 200;
/// Empty steps the leader may add after `STEPS` for in-flight tasks to finish.
const DRAIN_STEPS: u64 = 20_000;
/// Pages in every engine's pool.
const POOL_PAGES: u64 = 256;
/// Longest request, in blocks (well under the host tier's 64, with several tasks in flight).
const MAX_CHAIN: usize = 12;
/// Deadline of every `end_step` call.
const WAIT: Duration = Duration::from_secs(10);
/// Deadline of followers' `frame` calls (retried; short so that the last wait ends soon after
/// the leader stops).
const FRAME_WAIT: Duration = Duration::from_millis(500);
/// Bound on the whole run (every loop checks it).
const RUN_LIMIT: Duration = Duration::from_secs(300);
/// Seed of the run; each rank derives its own source from it.
const SEED: u64 = 0xf1e8_4b0d_2025;

/// What one engine saw, compared across ranks at the end.
#[derive(Default)]
struct EngineLog {
    rank: u32,
    /// Digest of the frame applied at each step, in step order.
    digests: Vec<u64>,
    /// How many applied frames revealed each task's outcome.
    outcomes: BTreeMap<TaskId, u32>,
    /// Tasks that frames started (stores and loads), from the applied frames.
    started_in_frames: BTreeSet<TaskId>,
    /// Outcomes other than `Ok`, except stores refused for a full tier.
    failed: Vec<String>,
    /// Stores refused because the tier was full of pinned blocks.
    refused_stores: u64,
    /// Loaded pages that differ from the stored shard: (task, block, page).
    bad_pages: Vec<String>,
    /// Re-reads that returned another frame.
    reread_mismatches: Vec<String>,
    /// Blocks verified byte for byte.
    verified_blocks: u64,
    /// Extra reads of the frame being applied.
    rereads: u64,
    /// Re-reads of frames applied earlier.
    old_rereads: u64,
    /// Simulated compute pauses (steps skipped, caught up later).
    pauses: u64,
    /// Largest number of frames applied in one burst.
    largest_burst: u64,
    /// Reads that ended `LeaderBehind` and were retried.
    leader_behind: u64,
}

/// A follower engine's simulated memory pressure: when it reads frames.
#[derive(Clone, Copy, Debug)]
struct Pressure {
    /// Extra reads of each frame, up to this many.
    reread_max: u64,
    /// Chance per iteration of a compute pause (no frame read).
    pause: f64,
    /// Pause length, microseconds.
    pause_us: (u64, u64),
    /// Frames applied per drain.
    burst: (u64, u64),
    /// Chance per iteration of re-reading an old frame.
    old_reread: f64,
}

fn pressure(rank: u32) -> Pressure {
    match rank {
        // Reads every frame several times per step, drains one or two at a time.
        1 => Pressure {
            reread_max: 4,
            pause: 0.02,
            pause_us: (100, 500),
            burst: (1, 2),
            old_reread: 0.02,
        },
        // Often under pressure: pauses, then catches up in bursts of up to twice the window.
        2 => Pressure {
            reread_max: 0,
            pause: 0.35,
            pause_us: (300, 2_000),
            burst: (4, 16),
            old_reread: 0.0,
        },
        // Mixed, and re-reads frames it applied long ago.
        _ => Pressure {
            reread_max: 2,
            pause: 0.15,
            pause_us: (100, 1_500),
            burst: (1, 8),
            old_reread: 0.1,
        },
    }
}

/// What the engines share: a stop flag raised by the first that fails, and the number of
/// steps the leader sealed once it is done.
struct Shared {
    abort: AtomicBool,
    end: AtomicU64,
    started: Instant,
}

impl Shared {
    fn check(&self, who: &str, step: u64) -> Result<(), String> {
        if self.abort.load(Ordering::SeqCst) {
            return Err(format!(
                "{who} stopped at step {step}: another engine failed"
            ));
        }
        if self.started.elapsed() > RUN_LIMIT {
            return Err(format!("{who} at step {step} after {RUN_LIMIT:?}"));
        }
        Ok(())
    }
}

/// Read the frame of `step`, retrying `LeaderBehind`; `None` once the leader has finished
/// before `step`.
fn read(
    c: &mut EngineClient,
    step: u64,
    log: &mut EngineLog,
    shared: &Shared,
) -> Result<Option<Frame>, String> {
    loop {
        if step >= shared.end.load(Ordering::SeqCst) {
            return Ok(None);
        }
        shared.check(&format!("rank {}", log.rank), step)?;
        match c.frame(Step(step), FRAME_WAIT) {
            Ok(f) => return Ok(Some(f)),
            Err(ClientError::Agent(AgentError::LeaderBehind { .. })) => log.leader_behind += 1,
            Err(e) => return Err(format!("rank {} frame {step}: {e}", log.rank)),
        }
    }
}

/// Pending loads of one engine: task → (blocks, pages).
type Loads = BTreeMap<TaskId, (Vec<BlockHash>, Vec<PageId>)>;

/// Apply a frame as every engine does: outcomes (verify finished loads), then starts;
/// followers fill the pages of the stores it starts. Returns the outcomes.
fn apply(
    frame: &Frame,
    log: &mut EngineLog,
    loads: &mut Loads,
    pool: &mut PagePool,
    fill_stores: bool,
) -> Vec<(TaskId, OutcomeResult)> {
    let rank = log.rank;
    log.digests.push(frame_digest(frame));
    let mut finished = Vec::new();
    for o in frame.outcomes() {
        *log.outcomes.entry(o.task).or_default() += 1;
        match &o.result {
            OutcomeResult::Ok => {}
            OutcomeResult::Failed { reason }
                if o.kind == TaskKind::Store && reason.contains("tier full") =>
            {
                log.refused_stores += 1
            }
            other => log.failed.push(format!(
                "{} {:?} at step {}: {other:?}",
                o.task, o.kind, frame.step.0
            )),
        }
        if let Some((hashes, pages)) = loads.remove(&o.task) {
            if o.result == OutcomeResult::Ok {
                for (h, p) in hashes.iter().zip(&pages) {
                    let page = pool.page(*p).expect("page in range");
                    if holds(page, h.0, rank) {
                        log.verified_blocks += 1;
                    } else {
                        log.bad_pages.push(format!(
                            "load {} finished at step {}: block {} in page {}",
                            o.task, frame.step.0, h, p.0
                        ));
                    }
                }
            }
        }
        finished.push((o.task, o.result.clone()));
    }
    for l in &frame.loads {
        log.started_in_frames.insert(l.task);
        loads.insert(l.task, (l.block_hashes.clone(), l.page_ids.clone()));
    }
    for s in &frame.stores {
        log.started_in_frames.insert(s.task);
        if fill_stores {
            for (h, p) in s.block_hashes.iter().zip(&s.page_ids) {
                fill(pool.page_mut(*p).expect("page in range"), h.0, rank);
            }
        }
    }
    finished
}

/// A follower engine: applies every frame in order, at moments its pressure chooses.
/// Returns what the engine saw, and why it stopped early (if it did).
fn follower(
    rank: u32,
    mut c: EngineClient,
    mut pool: PagePool,
    shared: &Shared,
) -> (EngineLog, Option<String>) {
    let mut log = EngineLog {
        rank,
        ..EngineLog::default()
    };
    let p = pressure(rank);
    let mut rng = Rng::new(SEED ^ u64::from(rank).wrapping_mul(0x1234_5678_9abc_def1));
    let mut loads = Loads::new();
    let mut next = 0u64;
    let result = (|| -> Result<(), String> {
        loop {
            shared.check(&format!("rank {rank}"), next)?;
            if rng.chance(p.pause) {
                // Simulated compute under memory pressure: this engine does not poll now and
                // the leader runs ahead (up to its window).
                log.pauses += 1;
                std::thread::sleep(Duration::from_micros(rng.range(p.pause_us.0, p.pause_us.1)));
                continue;
            }
            let burst = rng.range(p.burst.0, p.burst.1);
            let mut applied = 0;
            while applied < burst {
                let Some(f) = read(&mut c, next, &mut log, shared)? else {
                    return Ok(());
                };
                for _ in 0..rng.range(0, p.reread_max) {
                    log.rereads += 1;
                    let again = read(&mut c, next, &mut log, shared)?;
                    if again.as_ref() != Some(&f) {
                        log.reread_mismatches
                            .push(format!("step {next}: re-read differs"));
                    }
                }
                if f.step != Step(next) {
                    return Err(format!(
                        "rank {rank}: asked for step {next}, got the frame of step {}",
                        f.step
                    ));
                }
                apply(&f, &mut log, &mut loads, &mut pool, true);
                c.ack(Step(next))
                    .map_err(|e| format!("rank {rank} ack {next}: {e}"))?;
                next += 1;
                applied += 1;
            }
            log.largest_burst = log.largest_burst.max(applied);
            if next > 0 && rng.chance(p.old_reread) {
                let old = rng.range(next.saturating_sub(500), next - 1);
                log.old_rereads += 1;
                let f = read(&mut c, old, &mut log, shared)?;
                if f.map(|f| frame_digest(&f)) != Some(log.digests[old as usize]) {
                    log.reread_mismatches.push(format!(
                        "step {old}: re-read at step {next} differs from the applied frame"
                    ));
                }
            }
        }
    })();
    if result.is_err() {
        shared.abort.store(true, Ordering::SeqCst);
    }
    (log, result.err())
}

/// What the leader engine keeps about a task it started.
struct Pending {
    at: u64,
    kind: TaskKind,
    hashes: Vec<BlockHash>,
    pages: Vec<PageId>,
}

/// The leader's run.
#[derive(Default)]
struct LeaderRun {
    log: EngineLog,
    /// Tasks the agent answered `Started` for.
    started: BTreeSet<TaskId>,
    steps: u64,
    stores: u64,
    loads: u64,
    lookups: u64,
    /// Most steps between a task's start and the frame revealing its outcome.
    slowest_task_steps: u64,
}

/// Block hashes chained from `prev`: each depends on every block before it.
fn chain(prev: u64, n: u64, salt: u64) -> Vec<BlockHash> {
    let mut out = Vec::new();
    let mut h = prev;
    for i in 0..n {
        h = Rng::new(h ^ salt ^ (i << 48)).next_u64();
        out.push(BlockHash::from(h));
    }
    out
}

/// The leader engine's scheduler for one step: maybe a store, maybe a lookup and load.
struct Scheduler {
    rng: Rng,
    /// LIFO free list: a freed page is the first reused.
    free: Vec<PageId>,
    pending: BTreeMap<TaskId, Pending>,
    /// Requests whose store finished `Ok`, oldest first.
    stored: Vec<Vec<BlockHash>>,
    next_request: u64,
}

impl Scheduler {
    fn request(&mut self) -> RequestId {
        self.next_request += 1;
        RequestId(self.next_request)
    }

    fn store(
        &mut self,
        c: &mut EngineClient,
        pool: &mut PagePool,
        run: &mut LeaderRun,
        step: u64,
    ) -> Result<(), String> {
        let request = self.request();
        // Either a new prefix or an extension of a stored one (its blocks already cached are
        // not copied again; evicted ones are).
        let n = self.stored.len();
        let mut hashes = if n > 0 && self.rng.chance(0.3) {
            self.stored[self.rng.range(n.saturating_sub(20) as u64, n as u64 - 1) as usize].clone()
        } else {
            Vec::new()
        };
        let more = self.rng.range(1, 4) as usize;
        if hashes.len() + more > MAX_CHAIN {
            hashes.clear();
        }
        let prev = hashes.last().map_or(request.0, |h| h.low64());
        hashes.extend(chain(prev, more as u64, request.0));
        let pages: Vec<PageId> = hashes
            .iter()
            .map(|_| self.free.pop().expect("free pages checked"))
            .collect();
        for (h, p) in hashes.iter().zip(&pages) {
            fill(pool.page_mut(*p).expect("page in range"), h.0, 0);
        }
        let task = c
            .store(Step(step), request, hashes.clone(), pages.clone())
            .map_err(|e| format!("store at step {step}: {e}"))?;
        run.started.insert(task);
        run.stores += 1;
        self.pending.insert(
            task,
            Pending {
                at: step,
                kind: TaskKind::Store,
                hashes,
                pages,
            },
        );
        Ok(())
    }

    fn lookup_and_load(
        &mut self,
        c: &mut EngineClient,
        run: &mut LeaderRun,
        step: u64,
    ) -> Result<(), String> {
        let n = self.stored.len();
        let hashes =
            self.stored[self.rng.range(n.saturating_sub(30) as u64, n as u64 - 1) as usize].clone();
        let request = self.request();
        let hit = c
            .lookup(Step(step), request, hashes.clone())
            .map_err(|e| format!("lookup at step {step}: {e}"))?;
        run.lookups += 1;
        let m = hit.matched_blocks as usize;
        if m == 0 || self.free.len() < m {
            return Ok(());
        }
        let pages: Vec<PageId> = (0..m)
            .map(|_| self.free.pop().expect("free pages checked"))
            .collect();
        let task = c
            .load(Step(step), request, hashes[..m].to_vec(), pages.clone())
            .map_err(|e| format!("load at step {step}: {e}"))?;
        run.started.insert(task);
        run.loads += 1;
        self.pending.insert(
            task,
            Pending {
                at: step,
                kind: TaskKind::Load,
                hashes: hashes[..m].to_vec(),
                pages,
            },
        );
        Ok(())
    }

    /// The frame reports `task` finished: its pages may be reused from now on.
    fn finished(&mut self, task: TaskId, result: &OutcomeResult, run: &mut LeaderRun, step: u64) {
        if let Some(p) = self.pending.remove(&task) {
            run.slowest_task_steps = run.slowest_task_steps.max(step - p.at);
            if p.kind == TaskKind::Store && *result == OutcomeResult::Ok {
                self.stored.push(p.hashes);
            }
            self.free.extend(p.pages);
        }
    }
}

/// Returns the run, and why it stopped early (if it did).
fn leader(mut c: EngineClient, mut pool: PagePool, shared: &Shared) -> (LeaderRun, Option<String>) {
    let mut run = LeaderRun::default();
    let mut sched = Scheduler {
        rng: Rng::new(SEED),
        free: (0..POOL_PAGES as u32).rev().map(PageId).collect(),
        pending: BTreeMap::new(),
        stored: Vec::new(),
        next_request: 0,
    };
    let mut loads = Loads::new();
    let result = (|| -> Result<(), String> {
        for step in 0..STEPS + DRAIN_STEPS {
            if step >= STEPS && sched.pending.is_empty() {
                shared.end.store(step, Ordering::SeqCst);
                run.steps = step;
                return Ok(());
            }
            shared.check("leader", step)?;
            if step < STEPS - TAIL {
                if sched.rng.chance(0.12) && sched.free.len() >= MAX_CHAIN {
                    sched.store(&mut c, &mut pool, &mut run, step)?;
                }
                if !sched.stored.is_empty() && sched.rng.chance(0.12) {
                    sched.lookup_and_load(&mut c, &mut run, step)?;
                }
            }
            let f = c
                .end_step(Step(step), WAIT)
                .map_err(|e| format!("end_step {step}: {e}"))?;
            if f.step != Step(step) {
                return Err(format!(
                    "end_step {step} returned the frame of step {}",
                    f.step
                ));
            }
            for (task, result) in apply(&f, &mut run.log, &mut loads, &mut pool, false) {
                sched.finished(task, &result, &mut run, step);
            }
            c.ack(Step(step))
                .map_err(|e| format!("leader ack {step}: {e}"))?;
        }
        Err(format!(
            "{} tasks still in flight after {} steps: {:?}",
            sched.pending.len(),
            STEPS + DRAIN_STEPS,
            sched.pending.keys().take(10).collect::<Vec<_>>()
        ))
    })();
    if result.is_err() {
        shared.abort.store(true, Ordering::SeqCst);
    }
    (run, result.err())
}

#[test]
fn flexkv_asymmetric_drain_ten_thousand_steps() {
    let spec = GroupSpec::new(2, 2);
    let g = Group::start(&spec);
    g.wait_ready(Duration::from_secs(30));
    let world = spec.world_size();
    let mut engines: Vec<(EngineClient, PagePool)> = (0..world)
        .map(|r| connect_engine(&g.socket(r), &g.pool_path(r), r, POOL_PAGES))
        .collect();
    let (lc, lpool) = engines.remove(0);
    let shared = Arc::new(Shared {
        abort: AtomicBool::new(false),
        end: AtomicU64::new(u64::MAX),
        started: Instant::now(),
    });
    let followers: Vec<_> = engines
        .into_iter()
        .enumerate()
        .map(|(i, (c, pool))| {
            let shared = shared.clone();
            std::thread::spawn(move || follower(i as u32 + 1, c, pool, &shared))
        })
        .collect();
    let (mut run, failure) = leader(lc, lpool, &shared);

    let mut errors: Vec<String> = failure.into_iter().collect();
    let mut logs = Vec::new();
    for f in followers {
        match f.join() {
            Ok((log, failure)) => {
                errors.extend(failure);
                logs.push(log);
            }
            Err(_) => errors.push("a follower engine panicked".into()),
        }
    }
    let elapsed = shared.started.elapsed();
    assert!(
        errors.is_empty(),
        "engines failed: {errors:#?}\n--- leader log tail:\n{}",
        tail(&g.log(0), 30)
    );
    println!(
        "flexkv drain: {} steps in {:.2} s = {:.0} steps/s; {} stores, {} lookups, {} loads; slowest task took {} steps",
        run.steps,
        elapsed.as_secs_f64(),
        run.steps as f64 / elapsed.as_secs_f64(),
        run.stores,
        run.lookups,
        run.loads,
        run.slowest_task_steps
    );
    logs.insert(0, std::mem::take(&mut run.log));
    for l in &logs {
        println!(
            "  rank {}: {} frames applied, {} re-reads, {} old re-reads, {} pauses, largest burst {}, {} leader-behind retries, {} blocks verified, {} stores refused (tier full)",
            l.rank,
            l.digests.len(),
            l.rereads,
            l.old_rereads,
            l.pauses,
            l.largest_burst,
            l.leader_behind,
            l.verified_blocks,
            l.refused_stores
        );
    }

    // Every rank applied the same frame at every step.
    let mismatched: Vec<usize> = (0..run.steps as usize)
        .filter(|&s| {
            logs.iter()
                .any(|l| l.digests.get(s) != logs[0].digests.get(s))
        })
        .collect();
    assert!(
        mismatched.is_empty(),
        "{} steps whose frame differs between ranks, first: {:?}",
        mismatched.len(),
        &mismatched[..mismatched.len().min(10)]
    );
    for l in &logs {
        assert_eq!(
            l.digests.len() as u64,
            run.steps,
            "rank {} applied every frame",
            l.rank
        );
        assert!(
            l.reread_mismatches.is_empty(),
            "rank {}: re-reads returned another frame: {:?}",
            l.rank,
            l.reread_mismatches
        );
        // Every outcome exactly once, for exactly the tasks the leader started.
        let twice: Vec<_> = l.outcomes.iter().filter(|(_, n)| **n != 1).collect();
        assert!(
            twice.is_empty(),
            "rank {}: outcomes seen more than once: {twice:?}",
            l.rank
        );
        let lost: Vec<_> = run
            .started
            .iter()
            .filter(|t| !l.outcomes.contains_key(t))
            .collect();
        assert!(
            lost.is_empty(),
            "rank {}: {} started tasks never got an outcome: {:?}",
            l.rank,
            lost.len(),
            lost
        );
        let unknown: Vec<_> = l
            .outcomes
            .keys()
            .chain(&l.started_in_frames)
            .filter(|t| !run.started.contains(t))
            .collect();
        assert!(
            unknown.is_empty(),
            "rank {}: frames name tasks the leader engine did not start: {unknown:?}",
            l.rank
        );
        assert!(
            l.failed.is_empty(),
            "rank {}: {} tasks failed: {:?}",
            l.rank,
            l.failed.len(),
            &l.failed[..l.failed.len().min(10)]
        );
        assert_eq!(
            l.refused_stores, logs[0].refused_stores,
            "rank {}: refusals are group outcomes",
            l.rank
        );
        assert!(
            l.bad_pages.is_empty(),
            "rank {}: {} loaded pages differ from the stored shards: {:?}",
            l.rank,
            l.bad_pages.len(),
            &l.bad_pages[..l.bad_pages.len().min(10)]
        );
    }
    // The agents agree that nothing is left in flight.
    for rank in 0..world {
        let (_, body) = g.http_get(rank, "/status").expect("status answers");
        let status: serde_json::Value = serde_json::from_str(&body).expect("status is JSON");
        assert_eq!(
            status["agent"]["tasks_in_flight"],
            serde_json::json!(0),
            "rank {rank} still has tasks in flight: {body}"
        );
    }
    // The run exercised what it claims to: stores, loads verified on every rank, re-reads,
    // pauses and bursts.
    assert!(
        run.loads > 50 && run.stores > 500,
        "too few tasks: {} stores, {} loads",
        run.stores,
        run.loads
    );
    assert!(
        logs.iter().all(|l| l.verified_blocks > 0),
        "some rank verified no loaded block"
    );
    assert!(
        logs[1].rereads > 0
            && logs[2].pauses > 0
            && logs[2].largest_burst > 1
            && logs[3].old_rereads > 0,
        "follower pressure profiles did not apply"
    );
}
