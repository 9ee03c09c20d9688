//! Engine threads that drive empty steps through a running group and time each frame.
//!
//! One thread per rank, all in this process, each with its own `tandem_client::EngineClient`
//! on its rank's engine socket: rank 0 calls `end_step(s)`, the followers wait in `frame(s)`.
//! `Instant` is CLOCK_MONOTONIC, shared by every thread of the process, so a timestamp taken by
//! the leader thread and one taken by a follower thread subtract exactly.
//!
//! Per step: all threads meet at a barrier; each engine acknowledges the previous step and the
//! followers call `frame(s)`; the leader sleeps `gap` (so that every follower's request is
//! waiting in its agent), takes `t0` and calls `end_step(s)`; each follower takes its timestamp
//! the moment `frame(s)` returns. Acknowledgements happen outside the timed window.
//!
//! Owns timing only. Every wait is bounded by the client's deadlines; a failure on any rank
//! stops the timing but every thread still passes every barrier, so no thread is left waiting.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tandem_client::EngineClient;
use tandem_proto::ids::Step;
use tandem_proto::wire::Message;

use super::busy::{per_step_us, Busy};
use super::stats::micros;

/// How many steps to drive and how.
#[derive(Clone, Copy, Debug)]
pub(super) struct StepOptions {
    /// Steps timed (after the warm-up).
    pub steps: usize,
    /// Steps driven first and not timed.
    pub warmup: usize,
    /// Pause of the leader before each `end_step`, after the followers were released.
    pub gap: Duration,
    /// Deadline of each `end_step` and `frame` call.
    pub deadline: Duration,
}

/// What the timed steps measured, one entry per step, µs from just before `end_step(s)`.
#[derive(Clone, Debug, Default)]
pub(super) struct StepSamples {
    /// Until the last follower's `frame(s)` returned (the leader's own return with one rank).
    pub last_follower_us: Vec<f64>,
    /// Until the first follower's `frame(s)` returned.
    pub first_follower_us: Vec<f64>,
    /// Until the leader's `end_step(s)` returned.
    pub end_step_us: Vec<f64>,
    /// Per follower rank (index 0 = rank 1): its own `t0` → `frame(s)` returned, µs.
    pub by_rank_us: Vec<Vec<f64>>,
    /// Bytes of the frame as a peer message on the wire (header included).
    pub payload_bytes: usize,
    /// µs of busy CPU time of the whole machine (all CPUs, every process: agents, engines,
    /// Redis, supervisor) per timed step, the untimed acknowledgements and barrier included;
    /// `None` where `/proc/stat` is not readable.
    pub cpu_us_per_step: Option<f64>,
}

/// Drive `opts.warmup + opts.steps` empty steps through the group whose engine sockets are
/// `sockets` (index = rank).
///
/// Timestamps stay in each thread until the end (no channel, no wake-up of the leader thread
/// inside the timed window); the barrier at the start of each step is the only meeting point.
///
/// # Errors
/// A connection that fails, a call refused by an agent (the first such error is returned), or
/// a frame of the wrong step.
pub(super) fn drive_empty_steps(
    sockets: &[PathBuf],
    opts: &StepOptions,
) -> anyhow::Result<StepSamples> {
    if sockets.len() < 2 {
        bail!(
            "frame timing needs a leader and at least one follower, got {} ranks",
            sockets.len()
        );
    }
    let mut clients = Vec::new();
    for (rank, path) in sockets.iter().enumerate() {
        let c = EngineClient::connect(path, rank as u32, Duration::from_secs(30))
            .with_context(|| format!("engine of rank {rank}"))?;
        clients.push(c);
    }
    let mut leader = clients.remove(0);
    let start = leader.welcome().next_step.0;
    let epoch = leader.epoch();
    if let Some(c) = clients.iter().find(|c| c.epoch() != epoch) {
        bail!(
            "rank {} is in epoch {} while the leader is in {}",
            c.welcome().rank,
            c.epoch().0,
            epoch.0
        );
    }
    let total = opts.warmup + opts.steps;
    let barrier = Arc::new(Barrier::new(sockets.len()));
    let failed = Arc::new(AtomicBool::new(false));
    let first_error: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let fail = {
        let (failed, first_error) = (failed.clone(), first_error.clone());
        move |e: String| {
            failed.store(true, Ordering::SeqCst);
            if let Ok(mut slot) = first_error.lock() {
                slot.get_or_insert(e);
            }
        }
    };
    let mut threads = Vec::new();
    for mut client in clients {
        let (barrier, failed, fail, deadline) =
            (barrier.clone(), failed.clone(), fail.clone(), opts.deadline);
        threads.push(std::thread::spawn(move || {
            let rank = client.welcome().rank;
            let mut arrivals: Vec<Option<Instant>> = vec![None; total];
            for (i, slot) in arrivals.iter_mut().enumerate() {
                barrier.wait();
                let step = Step(start + i as u64);
                if failed.load(Ordering::SeqCst) {
                    continue;
                }
                if i > 0 {
                    if let Err(e) = client.ack(Step(step.0 - 1)) {
                        fail(format!("rank {rank} ack({}): {e}", step.0 - 1));
                        continue;
                    }
                }
                match client.frame(step, deadline) {
                    Ok(f) if f.step == step => *slot = Some(Instant::now()),
                    Ok(f) => fail(format!(
                        "rank {rank} asked for step {} and got {}",
                        step.0, f.step.0
                    )),
                    Err(e) => fail(format!("rank {rank} frame({}): {e}", step.0)),
                }
            }
            arrivals
        }));
    }
    let mut leader_times: Vec<Option<(Instant, Instant)>> = vec![None; total];
    let mut payload_bytes = 0;
    let mut busy_from = None;
    for (i, slot) in leader_times.iter_mut().enumerate() {
        if i == opts.warmup {
            busy_from = Busy::now();
        }
        barrier.wait();
        let step = Step(start + i as u64);
        if failed.load(Ordering::SeqCst) {
            continue;
        }
        if i > 0 {
            if let Err(e) = leader.ack(Step(step.0 - 1)) {
                fail(format!("leader ack({}): {e}", step.0 - 1));
                continue;
            }
        }
        std::thread::sleep(opts.gap);
        let t0 = Instant::now();
        match leader.end_step(step, opts.deadline) {
            Ok(frame) => {
                *slot = Some((t0, Instant::now()));
                if payload_bytes == 0 {
                    payload_bytes = tandem_proto::wire::encode(&Message::Frame(frame)).len();
                }
            }
            Err(e) => fail(format!("leader end_step({}): {e}", step.0)),
        }
    }
    let mut followers = Vec::new();
    for t in threads {
        match t.join() {
            Ok(a) => followers.push(a),
            Err(_) => bail!("a follower engine thread panicked"),
        }
    }
    let cpu_us_per_step = per_step_us(busy_from, Busy::now(), opts.steps);
    if let Some(e) = first_error.lock().ok().and_then(|mut e| e.take()) {
        bail!("{e}");
    }
    // The last step stays unacknowledged; that is harmless (the window is several steps).
    let mut samples = StepSamples {
        payload_bytes,
        cpu_us_per_step,
        by_rank_us: vec![Vec::new(); followers.len()],
        ..StepSamples::default()
    };
    for (i, times) in leader_times.iter().enumerate().skip(opts.warmup) {
        let Some((t0, tl)) = *times else { continue };
        let arrived: Option<Vec<Instant>> = followers.iter().map(|f| f[i]).collect();
        let Some(arrived) = arrived else { continue };
        let last = arrived.iter().max().copied().unwrap_or(tl);
        let first = arrived.iter().min().copied().unwrap_or(tl);
        samples
            .last_follower_us
            .push(micros(last.saturating_duration_since(t0)));
        samples
            .first_follower_us
            .push(micros(first.saturating_duration_since(t0)));
        samples
            .end_step_us
            .push(micros(tl.saturating_duration_since(t0)));
        for (r, t) in arrived.iter().enumerate() {
            samples.by_rank_us[r].push(micros(t.saturating_duration_since(t0)));
        }
    }
    Ok(samples)
}
