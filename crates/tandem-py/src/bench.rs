//! The Rust side of `python -m tandem.bench`: the benchmark loops written against
//! [`EngineClient`] directly, so that the same run on the same cluster measures the Rust client
//! as the baseline of the Python one. `tandem/bench.py` holds the Python twins of these loops,
//! call for call; the comparison is only fair while the two stay alike.
//!
//! Each function runs with the GIL released and returns plain numbers (nanoseconds, bytes).
//! The end of a phase is a frame with a lookup of request [`DONE_REQUEST`]: followers stop
//! after applying it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tandem_client::{AgentError, ClientError, EngineClient, PagePool};
use tandem_proto::frame::{Frame, OutcomeResult};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId};

use crate::secs;

/// The request id of the lookup that ends a benchmark phase.
const DONE_REQUEST: u64 = 1 << 62;

fn failed(what: &str, e: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(format!("bench: {what}: {e}"))
}

/// `end_step(s)`, retried while the window is full.
fn seal(c: &mut EngineClient, s: u64, deadline: Duration) -> Result<Frame, ClientError> {
    loop {
        match c.end_step(Step(s), deadline) {
            Err(ClientError::Agent(AgentError::WindowFull { .. })) => continue,
            other => return other,
        }
    }
}

/// Seal the phase's last step: a frame with the lookup of [`DONE_REQUEST`].
fn seal_done(c: &mut EngineClient, s: u64, deadline: Duration) -> Result<(), ClientError> {
    c.lookup(Step(s), RequestId(DONE_REQUEST), vec![BlockHash(u128::MAX)])?;
    seal(c, s, deadline)?;
    c.ack(Step(s))
}

/// Leader, per-step overhead: seal `steps` empty steps from the agent's next step, reading
/// each sealed frame back with `frame` and acknowledging it; returns the `end_step` and the
/// `frame` latencies (ns) and the phase's last step.
#[pyfunction]
#[pyo3(signature = (socket, steps, deadline_s = 5.0))]
pub(crate) fn bench_steps(
    py: Python<'_>,
    socket: PathBuf,
    steps: u64,
    deadline_s: f64,
) -> PyResult<(Vec<u64>, Vec<u64>, u64)> {
    let deadline = secs(deadline_s, "deadline_s")?;
    py.detach(|| {
        let mut c = EngineClient::connect(&socket, 0, Duration::from_secs(30))
            .map_err(|e| failed("connect", e))?;
        let first = c.welcome().next_step.0;
        let (mut end, mut read) = (Vec::new(), Vec::new());
        for s in first..first + steps {
            let t0 = Instant::now();
            seal(&mut c, s, deadline).map_err(|e| failed("end_step", e))?;
            let t1 = Instant::now();
            c.frame(Step(s), deadline).map_err(|e| failed("frame", e))?;
            let t2 = Instant::now();
            c.ack(Step(s)).map_err(|e| failed("ack", e))?;
            end.push((t1 - t0).as_nanos() as u64);
            read.push((t2 - t1).as_nanos() as u64);
        }
        let last = first + steps;
        seal_done(&mut c, last, deadline).map_err(|e| failed("end", e))?;
        Ok((end, read, last))
    })
}

/// Follower: from step `start`, read every frame, compute the pages of its stores (fill them),
/// acknowledge it, until the frame that ends the phase; returns the `frame` latencies (ns) and
/// the last step. Its pool (`pages` pages of the shard size, a memfd) is registered first.
#[pyfunction]
#[pyo3(signature = (socket, rank, start, pages, deadline_s = 5.0))]
pub(crate) fn bench_follow(
    py: Python<'_>,
    socket: PathBuf,
    rank: u32,
    start: u64,
    pages: u64,
    deadline_s: f64,
) -> PyResult<(Vec<u64>, u64)> {
    let deadline = secs(deadline_s, "deadline_s")?;
    py.detach(|| {
        let mut c = EngineClient::connect(&socket, rank, Duration::from_secs(30))
            .map_err(|e| failed("connect", e))?;
        let mut pool = PagePool::create_memfd("bench", pages, c.welcome().shard_bytes)
            .map_err(|e| failed("pool", e))?;
        c.register_buffer(&pool)
            .map_err(|e| failed("register_buffer", e))?;
        let mut latencies = Vec::new();
        let mut s = start;
        loop {
            let t0 = Instant::now();
            let frame = match c.frame(Step(s), deadline) {
                Ok(f) => f,
                Err(ClientError::Agent(AgentError::LeaderBehind { .. })) => continue,
                Err(e) => return Err(failed("frame", e)),
            };
            latencies.push(t0.elapsed().as_nanos() as u64);
            for t in &frame.stores {
                for (i, p) in t.page_ids.iter().enumerate() {
                    let page = pool.page_mut(*p).map_err(|e| failed("page", e))?;
                    page.fill(fill_byte(t.request.0, i, rank));
                }
            }
            c.ack(Step(s)).map_err(|e| failed("ack", e))?;
            if frame.lookups.iter().any(|l| l.request.0 == DONE_REQUEST) {
                return Ok((latencies, s));
            }
            s += 1;
        }
    })
}

/// The byte a bench page of block `i` of `request` holds on `rank` (any deterministic value).
fn fill_byte(request: u64, i: usize, rank: u32) -> u8 {
    (request as u8) ^ (i as u8).wrapping_mul(7) ^ (rank as u8).wrapping_mul(31)
}

/// Seal steps from `s` until a frame reports `task`; returns the next step.
fn until_done(
    c: &mut EngineClient,
    mut s: u64,
    task: TaskId,
    deadline: Duration,
) -> Result<u64, String> {
    loop {
        let f = seal(c, s, deadline).map_err(|e| e.to_string())?;
        c.ack(Step(s)).map_err(|e| e.to_string())?;
        s += 1;
        if let Some(o) = f.finished.iter().find(|o| o.task == task) {
            return match &o.result {
                OutcomeResult::Ok => Ok(s),
                r => Err(format!("task {task} ended {r:?}")),
            };
        }
    }
}

/// Leader, throughput: `rounds` times, compute `blocks` pages (fill them), store them, seal
/// steps until the store is reported; then look them up and load them into `blocks` other
/// pages, seal until the load is reported. Returns per round the store and load times (ns),
/// the bytes one rank moved per task, and the phase's last step.
#[pyfunction]
#[pyo3(signature = (socket, blocks, rounds, deadline_s = 5.0))]
pub(crate) fn bench_transfer(
    py: Python<'_>,
    socket: PathBuf,
    blocks: u64,
    rounds: u64,
    deadline_s: f64,
) -> PyResult<(Vec<u64>, Vec<u64>, u64, u64)> {
    let deadline = secs(deadline_s, "deadline_s")?;
    py.detach(|| {
        let mut c = EngineClient::connect(&socket, 0, Duration::from_secs(30))
            .map_err(|e| failed("connect", e))?;
        let shard = c.welcome().shard_bytes;
        let mut pool =
            PagePool::create_memfd("bench", 2 * blocks, shard).map_err(|e| failed("pool", e))?;
        c.register_buffer(&pool)
            .map_err(|e| failed("register_buffer", e))?;
        let mut s = c.welcome().next_step.0;
        let (mut stores, mut loads) = (Vec::new(), Vec::new());
        let k = blocks as usize;
        for r in 0..rounds {
            let request = 1_000_000 + r;
            let hashes: Vec<BlockHash> = (0..blocks)
                .map(|i| BlockHash((u128::from(request) << 32) | u128::from(i)))
                .collect();
            let t0 = Instant::now();
            for i in 0..k {
                let page = pool
                    .page_mut(PageId(i as u32))
                    .map_err(|e| failed("page", e))?;
                page.fill(fill_byte(request, i, 0));
            }
            let src: Vec<PageId> = (0..blocks as u32).map(PageId).collect();
            let task = c
                .store(Step(s), RequestId(request), hashes.clone(), src)
                .map_err(|e| failed("store", e))?;
            s = until_done(&mut c, s, task, deadline).map_err(|e| failed("store", e))?;
            stores.push(t0.elapsed().as_nanos() as u64);
            let t1 = Instant::now();
            c.lookup(Step(s), RequestId(request), hashes.clone())
                .map_err(|e| failed("lookup", e))?;
            let dst: Vec<PageId> = (blocks as u32..2 * blocks as u32).map(PageId).collect();
            let task = c
                .load(Step(s), RequestId(request), hashes, dst)
                .map_err(|e| failed("load", e))?;
            s = until_done(&mut c, s, task, deadline).map_err(|e| failed("load", e))?;
            loads.push(t1.elapsed().as_nanos() as u64);
        }
        seal_done(&mut c, s, deadline).map_err(|e| failed("end", e))?;
        Ok((stores, loads, blocks * shard, s))
    })
}
