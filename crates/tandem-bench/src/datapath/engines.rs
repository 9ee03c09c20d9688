//! The engine side of one data-path case: one page pool per rank (files the agents map), the
//! leader's calls in this thread, one frame reader per follower thread, and the check of every
//! loaded byte.
//!
//! Per case: every rank's pool holds the working set (one page per block), filled with bytes
//! that depend on the rank and the block. The leader stores the working set, one task at a
//! time (the next call once the previous task's finish frame returned), sealing steps back to
//! back (with `step_gap` between them when set); then it measures the control floor and the
//! lookups; then every pool is zeroed and the leader loads the working set back the same way
//! (each load after the lookup that pins its blocks, the lookup outside the timed window);
//! then every page of every rank is compared with what was stored. Followers read every frame
//! and acknowledge it at once, as an engine that keeps up does.
//!
//! Owns timing and checking only; every wait is bounded by the sessions' deadlines.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use tandem_client::{AgentError, EngineSession, PagePool, SessionConfig, SessionError};
use tandem_proto::frame::OutcomeResult;
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId};

use super::figures::{CaseFigures, Latency, PhaseFigures};
use super::trace::FollowerTrace;
use super::DatapathError;

/// One case's shape and pacing.
#[derive(Clone, Debug)]
pub struct DriveOptions {
    /// Engine sockets, index = rank (rank 0 leads).
    pub sockets: Vec<PathBuf>,
    /// Where the page pools are created (a tmpfs such as /dev/shm, as engines do).
    pub pool_dir: PathBuf,
    /// Bytes of one block shard (the page size).
    pub shard_bytes: usize,
    /// Blocks per task.
    pub blocks_per_task: usize,
    /// Blocks of the working set (a multiple of `blocks_per_task`).
    pub working_set_blocks: usize,
    /// Pause of the leader between two `end_step` calls (zero: back to back).
    pub step_gap: Duration,
    /// Deadline of each `end_step` and `frame` call.
    pub deadline: Duration,
    /// Samples of the control floor and of each lookup size.
    pub samples: usize,
    /// A number mixed into the block hashes, so that two cases never name the same block.
    pub seed: u64,
    /// Asked for the agents' own view (every rank's `/status`) when the leader's side fails,
    /// before the followers stop; its text goes into the error.
    pub probe: Option<StatusProbe>,
}

/// What the agents say about themselves, read by the caller (which knows where they listen)
/// for the report of a case that failed: one text, every rank's `/status` for example.
#[derive(Clone)]
pub struct StatusProbe(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for StatusProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatusProbe")
    }
}

/// The byte pattern of `block` on `rank`: 8-byte words from a xorshift seeded by both.
fn fill(page: &mut [u8], rank: u32, block: u64) {
    let mut x =
        0x9e37_79b9_7f4a_7c15u64 ^ (u64::from(rank) << 48) ^ block.wrapping_mul(0x2545_f491);
    for w in page.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
}

fn hash(seed: u64, block: u64) -> BlockHash {
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&seed.to_be_bytes());
    d[8..].copy_from_slice(&block.to_be_bytes());
    BlockHash::from_digest(&d)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Run one case against the group whose engine sockets are `opts.sockets`.
///
/// # Errors
/// [`DatapathError::Pool`] when a pool cannot be created; [`DatapathError::Session`] when an
/// engine call fails; [`DatapathError::Check`] when a task does not finish `Ok`, a lookup does
/// not match the stored blocks, or a loaded page differs from what was stored.
pub fn drive_case(opts: &DriveOptions) -> Result<CaseFigures, DatapathError> {
    let n = opts.sockets.len() as u32;
    let w = opts.working_set_blocks;
    let shard = opts.shard_bytes as u64;
    let mut pools = Vec::new();
    for r in 0..n {
        let mut p = PagePool::create(opts.pool_dir.join(format!("rank{r}.pool")), w as u64, shard)?;
        for i in 0..w {
            fill(p.page_mut(PageId(i as u32))?, r, i as u64);
        }
        pools.push(p);
    }
    let config = SessionConfig::default();
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(n as usize));
    let follower_error: Arc<Mutex<Option<DatapathError>>> = Arc::new(Mutex::new(None));
    let traces: Vec<Arc<FollowerTrace>> = (1..n).map(|_| Arc::default()).collect();
    let mut threads = Vec::new();
    for r in 1..n {
        let (socket, path) = (
            opts.sockets[r as usize].clone(),
            pools[r as usize].path().map(PathBuf::from),
        );
        let (stop, ready, err) = (stop.clone(), ready.clone(), follower_error.clone());
        let trace = traces[r as usize - 1].clone();
        threads.push(std::thread::spawn(move || {
            let result = follow(r, &socket, path, config, &stop, &ready, shard, &trace);
            if let Err(e) = result {
                stop.store(true, Ordering::SeqCst);
                if let Ok(mut slot) = err.lock() {
                    slot.get_or_insert(e);
                }
            }
        }));
    }
    let result = lead(opts, &mut pools, config, &stop, &ready, &follower_error);
    // A failed case: where every follower and agent stood, taken before the followers stop.
    let result = result.map_err(|e| {
        let mut state: Vec<String> = (1..n).map(|r| traces[r as usize - 1].describe(r)).collect();
        if let Some(probe) = &opts.probe {
            state.push((probe.0)());
        }
        DatapathError::Failed {
            source: Box::new(e),
            state: state.join("\n"),
        }
    });
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
    if let Some(e) = follower_error.lock().ok().and_then(|mut e| e.take()) {
        return Err(e);
    }
    let mut figures = result?;
    // Every page of every rank holds what was stored from it.
    let mut expected = vec![0u8; opts.shard_bytes];
    for (r, pool) in pools.iter().enumerate() {
        for i in 0..w {
            fill(&mut expected, r as u32, i as u64);
            if pool.page(PageId(i as u32))? != expected.as_slice() {
                return Err(DatapathError::Check(format!(
                    "rank {r}: page {i} does not hold block {i} after its load finished Ok"
                )));
            }
        }
    }
    figures.verified_blocks = (w as u64) * u64::from(n);
    Ok(figures)
}

/// A follower engine: register the pool, then read and acknowledge every frame until `stop`;
/// every call and its reply go into `trace`.
#[allow(clippy::too_many_arguments)]
fn follow(
    rank: u32,
    socket: &std::path::Path,
    pool_path: Option<PathBuf>,
    config: SessionConfig,
    stop: &AtomicBool,
    ready: &Barrier,
    shard: u64,
    trace: &FollowerTrace,
) -> Result<(), DatapathError> {
    let fail = |source| DatapathError::Session { rank, source };
    let joined = (|| {
        trace.begin("connect", None);
        let mut s = EngineSession::connect(socket, rank, config).map_err(fail)?;
        let path = pool_path.ok_or_else(|| DatapathError::Check("a pool without a path".into()))?;
        let pool = PagePool::attach(&path, shard)?;
        trace.begin("register_pool", None);
        s.register_pool(&pool).map_err(fail)?;
        s.seek(s.welcome().next_step);
        trace.end(format!("joined at step {}", s.step()), false);
        Ok::<_, DatapathError>(s)
    })();
    ready.wait();
    let mut s = joined?;
    // One frame read and, when one came, its acknowledgement: `Ok(true)` when a frame came.
    let read_one = |s: &mut EngineSession| -> Result<bool, DatapathError> {
        trace.begin("frame", Some(s.step().0));
        match s.next_frame(Duration::from_millis(50)) {
            Ok(a) => {
                trace.end(format!("frame {}", a.frame.step), false);
                trace.applied(a.frame.step.0);
                trace.begin("ack", Some(a.frame.step.0));
                let acked = s.ack();
                trace.end(format!("{acked:?}"), false);
                if let Some(step) = acked.map_err(fail)? {
                    trace.acked(step.0);
                }
                Ok(true)
            }
            Err(SessionError::Agent(e @ AgentError::LeaderBehind { .. })) => {
                trace.end(e.to_string(), true);
                Ok(false)
            }
            Err(e) => {
                trace.end(e.to_string(), false);
                Err(fail(e))
            }
        }
    };
    while !stop.load(Ordering::SeqCst) {
        read_one(&mut s)?;
    }
    // The leader has stopped sealing: read and acknowledge what it sealed last before the
    // session closes, or this rank's agent sees its engine leave with a task whose finish
    // frame it never read (a failed epoch for the next case on the same cluster). Done once
    // no frame came for 250 ms, or after 5 s.
    let (mut progress, until) = (Instant::now(), Instant::now() + Duration::from_secs(5));
    while Instant::now() < until && progress.elapsed() < Duration::from_millis(250) {
        if read_one(&mut s)? {
            progress = Instant::now();
        }
    }
    Ok(())
}

/// The leader's side: store phase, control floor, lookups, load phase.
fn lead(
    opts: &DriveOptions,
    pools: &mut [PagePool],
    config: SessionConfig,
    stop: &AtomicBool,
    ready: &Barrier,
    follower_error: &Mutex<Option<DatapathError>>,
) -> Result<CaseFigures, DatapathError> {
    let fail = |source| DatapathError::Session { rank: 0, source };
    let joined = (|| {
        let mut s = EngineSession::connect(&opts.sockets[0], 0, config).map_err(fail)?;
        s.register_pool(&pools[0]).map_err(fail)?;
        Ok::<_, DatapathError>(s)
    })();
    ready.wait();
    let mut s = joined?;
    let n = opts.sockets.len() as u32;
    let b = opts.blocks_per_task.max(1);
    let w = opts.working_set_blocks;
    let hashes: Vec<BlockHash> = (0..w as u64).map(|i| hash(opts.seed, i)).collect();
    let pages: Vec<PageId> = (0..w as u32).map(PageId).collect();
    let mut request = 1u64;
    let mut phase = |s: &mut EngineSession, load: bool| -> Result<PhaseFigures, DatapathError> {
        let mut task_us = Vec::new();
        let mut task_steps = Vec::new();
        let mut sealed = 0u64;
        let started = Instant::now();
        for (h, p) in hashes.chunks(b).zip(pages.chunks(b)) {
            let req = RequestId(request);
            request += 1;
            if load {
                let found = s.lookup(req, h).map_err(fail)?;
                if found.matched_blocks as usize != h.len() {
                    return Err(DatapathError::Check(format!(
                        "lookup of {} stored blocks matched {}",
                        h.len(),
                        found.matched_blocks
                    )));
                }
            }
            let t0 = Instant::now();
            let at = s.step();
            let task = if load {
                s.load(req, h, p)
            } else {
                s.store(req, h, p)
            }
            .map_err(fail)?;
            let (done, step) = finish(s, task, opts, stop, follower_error, &mut sealed)?;
            task_us.push(micros(done.duration_since(t0)));
            task_steps.push(step.0.saturating_sub(at.0) as f64);
        }
        let secs = started.elapsed().as_secs_f64();
        Ok(PhaseFigures::new(
            n,
            (w as u64) * opts.shard_bytes as u64,
            secs,
            &task_us,
            &task_steps,
            sealed,
        ))
    };
    let store = phase(&mut s, false)?;
    let mut figures = CaseFigures {
        store,
        ..CaseFigures::default()
    };
    // The control floor: one engine round trip that does nothing but answer.
    let last = s
        .last_applied()
        .ok_or_else(|| DatapathError::Check("no step was sealed".into()))?;
    let mut control = Vec::new();
    for _ in 0..opts.samples {
        let t = Instant::now();
        s.reread(last, opts.deadline).map_err(fail)?;
        control.push(micros(t.elapsed()));
    }
    figures.control_us = Latency::of(&control);
    let lookup = |s: &mut EngineSession, size: usize| -> Result<Latency, DatapathError> {
        let asked: Vec<BlockHash> = (0..size as u64)
            .map(|i| {
                if (i as usize) < hashes.len() {
                    hashes[i as usize]
                } else {
                    hash(opts.seed ^ u64::MAX, i)
                }
            })
            .collect();
        let mut v = Vec::new();
        for k in 0..opts.samples {
            let req = RequestId((1 << 40) | ((size as u64) << 20) | k as u64);
            let t = Instant::now();
            s.lookup(req, &asked).map_err(fail)?;
            v.push(micros(t.elapsed()));
            s.release(req).map_err(fail)?;
        }
        Ok(Latency::of(&v))
    };
    figures.lookup_1_us = lookup(&mut s, 1)?;
    figures.lookup_128_us = lookup(&mut s, 128)?;
    for pool in pools.iter_mut() {
        for i in 0..w {
            pool.page_mut(PageId(i as u32))?.fill(0);
        }
    }
    figures.load = phase(&mut s, true)?;
    Ok(figures)
}

/// Seal steps until a frame lists `task` finished: when its frame returned, and its step.
fn finish(
    s: &mut EngineSession,
    task: TaskId,
    opts: &DriveOptions,
    stop: &AtomicBool,
    follower_error: &Mutex<Option<DatapathError>>,
    sealed: &mut u64,
) -> Result<(Instant, Step), DatapathError> {
    let fail = |source| DatapathError::Session { rank: 0, source };
    let started = Instant::now();
    loop {
        if stop.load(Ordering::SeqCst) {
            let why = follower_error
                .lock()
                .ok()
                .and_then(|e| e.as_ref().map(|e| e.to_string()))
                .unwrap_or_else(|| "stopped".into());
            return Err(DatapathError::Check(format!("a follower failed: {why}")));
        }
        if started.elapsed() > opts.deadline * 4 {
            return Err(DatapathError::Check(format!(
                "task {task} did not finish within {:?}",
                opts.deadline * 4
            )));
        }
        let applied = match s.end_step(opts.deadline) {
            Ok(a) => a,
            Err(SessionError::Agent(AgentError::WindowFull { .. })) => continue,
            Err(e) => return Err(fail(e)),
        };
        let now = Instant::now();
        *sealed += 1;
        s.ack().map_err(fail)?;
        if let Some(d) = applied
            .observed
            .outcomes
            .iter()
            .find(|d| d.outcome.task == task)
        {
            return match &d.outcome.result {
                OutcomeResult::Ok => Ok((now, applied.frame.step)),
                other => Err(DatapathError::Check(format!(
                    "task {task} finished {other:?}"
                ))),
            };
        }
        if !opts.step_gap.is_zero() {
            std::thread::sleep(opts.step_gap);
        }
    }
}
