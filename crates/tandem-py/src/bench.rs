//! The Rust side of `python -m tandem.bench`: one step, one frame read and one store+load
//! round written against [`EngineClient`] directly, on the connection (and page pool) of a
//! Python `Client`. The benchmark alternates these with their Python twins in `tandem/bench.py`
//! (step by step, round by round) on the same connection, so that both sides of every
//! comparison meet the same cluster, the same load on the machine, the same moment. The two
//! stay alike call for call; each Rust timing covers only the Rust calls (the GIL is released
//! around them and Python is not in the timed region).

use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tandem_client::{AgentError, ClientError, EngineClient};
use tandem_proto::frame::{Frame as RustFrame, OutcomeResult};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId};

use crate::client::Client;
use crate::frames::Frame;
use crate::pool::NativePool;
use crate::{lock, secs};

fn failed(what: &str, e: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(format!("bench: {what}: {e}"))
}

/// `end_step(s)`, retried while the window is full.
fn seal(c: &mut EngineClient, s: u64, deadline: Duration) -> Result<RustFrame, ClientError> {
    loop {
        match c.end_step(Step(s), deadline) {
            Err(ClientError::Agent(AgentError::WindowFull { .. })) => continue,
            other => return other,
        }
    }
}

/// Run `f` on `client`'s connection without the GIL.
fn on<T: Send>(
    py: Python<'_>,
    client: &Client,
    f: impl FnOnce(&mut EngineClient) -> Result<T, String> + Send,
) -> PyResult<T> {
    py.detach(|| match lock(client.cell()).as_mut() {
        Some(c) => f(c),
        None => Err("the client is closed".into()),
    })
    .map_err(|e| failed("rust", e))
}

/// Leader: seal step `step`, read its frame back, acknowledge it; returns the `end_step`, the
/// `frame` and the `ack` latency, ns.
#[pyfunction]
#[pyo3(signature = (client, step, deadline_s = 5.0))]
pub(crate) fn bench_step(
    py: Python<'_>,
    client: &Client,
    step: u64,
    deadline_s: f64,
) -> PyResult<(u64, u64, u64)> {
    let deadline = secs(deadline_s, "deadline_s")?;
    on(py, client, |c| {
        let t0 = Instant::now();
        seal(c, step, deadline).map_err(|e| e.to_string())?;
        let t1 = Instant::now();
        c.frame(Step(step), deadline).map_err(|e| e.to_string())?;
        let t2 = Instant::now();
        c.ack(Step(step)).map_err(|e| e.to_string())?;
        Ok((ns(t1 - t0), ns(t2 - t1), ns(t2.elapsed())))
    })
}

/// Follower: read the frame of `step` (waiting at most `deadline_s` for its seal) and read it
/// again; returns both latencies (ns) and the frame, or `None` while the step is not sealed.
#[pyfunction]
#[pyo3(signature = (client, step, deadline_s = 5.0))]
pub(crate) fn bench_read(
    py: Python<'_>,
    client: &Client,
    step: u64,
    deadline_s: f64,
) -> PyResult<Option<(u64, u64, Frame)>> {
    let deadline = secs(deadline_s, "deadline_s")?;
    on(py, client, |c| {
        let t0 = Instant::now();
        let frame = match c.frame(Step(step), deadline) {
            Ok(f) => f,
            Err(ClientError::Agent(AgentError::LeaderBehind { .. })) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let t1 = Instant::now();
        c.frame(Step(step), deadline).map_err(|e| e.to_string())?;
        Ok(Some((ns(t1 - t0), ns(t1.elapsed()), Frame(frame))))
    })
}

/// Leader, one throughput round from step `step`: compute `blocks` pages (fill pages
/// `0..blocks` of `pool`), store them, seal until the store is reported; look them up, load
/// them into pages `blocks..2 × blocks`, seal until the load is reported. Returns the store
/// and load times (ns) and the next step. Block hashes are `request << 32 | i`.
#[pyfunction]
#[pyo3(signature = (client, pool, request, blocks, step, deadline_s = 5.0))]
pub(crate) fn bench_round(
    py: Python<'_>,
    client: &Client,
    pool: &NativePool,
    request: u64,
    blocks: u32,
    step: u64,
    deadline_s: f64,
) -> PyResult<(u64, u64, u64)> {
    let deadline = secs(deadline_s, "deadline_s")?;
    let cell = pool.cell();
    on(py, client, |c| {
        let mut guard = lock(cell);
        let pool = guard.as_mut().ok_or("the page pool is closed")?;
        let hashes: Vec<BlockHash> = (0..blocks)
            .map(|i| BlockHash(u128::from(request) << 32 | u128::from(i)))
            .collect();
        let t0 = Instant::now();
        for i in 0..blocks {
            let page = pool.page_mut(PageId(i)).map_err(|e| e.to_string())?;
            page.fill(fill_byte(request, i, 0));
        }
        let src = (0..blocks).map(PageId).collect();
        let task = c
            .store(Step(step), RequestId(request), hashes.clone(), src)
            .map_err(|e| e.to_string())?;
        let s = until_done(c, step, task, deadline)?;
        let t1 = Instant::now();
        c.lookup(Step(s), RequestId(request), hashes.clone())
            .map_err(|e| e.to_string())?;
        let dst = (blocks..2 * blocks).map(PageId).collect();
        let task = c
            .load(Step(s), RequestId(request), hashes, dst)
            .map_err(|e| e.to_string())?;
        let s = until_done(c, s, task, deadline)?;
        Ok((ns(t1 - t0), ns(t1.elapsed()), s))
    })
}

/// The byte a bench page of block `i` of `request` holds on `rank` (any deterministic value;
/// `fill_byte` in tandem/bench.py is the same).
fn fill_byte(request: u64, i: u32, rank: u32) -> u8 {
    (request as u8) ^ (i as u8).wrapping_mul(7) ^ (rank as u8).wrapping_mul(31)
}

/// Seal steps from `s`, at most one per [`STEP_INTERVAL`], until a frame reports `task` ok;
/// returns the next step.
fn until_done(
    c: &mut EngineClient,
    mut s: u64,
    task: TaskId,
    deadline: Duration,
) -> Result<u64, String> {
    loop {
        let sealed = Instant::now();
        let f = seal(c, s, deadline).map_err(|e| e.to_string())?;
        c.ack(Step(s)).map_err(|e| e.to_string())?;
        s += 1;
        if let Some(o) = f.finished.iter().find(|o| o.task == task) {
            return match &o.result {
                OutcomeResult::Ok => Ok(s),
                r => Err(format!("task {task} ended {r:?}")),
            };
        }
        if let Some(rest) = STEP_INTERVAL.checked_sub(sealed.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}

/// The shortest time between two steps while a round waits for an outcome, as an engine
/// whose steps take time: without it the leader would seal empty steps as fast as it can and
/// the faster loop would flood the follower (`STEP_INTERVAL_S` in tandem/bench.py).
const STEP_INTERVAL: Duration = Duration::from_micros(500);

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}
