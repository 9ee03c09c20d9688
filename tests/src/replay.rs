//! Replays in a thread of the test, through a group of real agent processes, and the checks
//! every replay ends with.
//!
//! - [`InProcessReplay`]: `tandem_replay::run_replay` in a thread, over a group's engine
//!   sockets (or a proxy's), with its progress.
//! - [`assert_exactly_once`] and [`summary_short`]: the replay's verdict and figures.
//!
//! A `tandem replay` process with its own cluster is [`crate::replay_process`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tandem_replay::{
    pool_pages_needed, run_replay, Capacity, ReplayError, ReplayParams, ReplaySummary,
};
use tandem_trace::{SynthWorkload, TraceRecord};

use crate::cluster::Group;

/// A replay running in a thread.
pub struct InProcessReplay {
    handle: JoinHandle<Result<ReplaySummary, ReplayError>>,
    done: Arc<AtomicU64>,
}

impl InProcessReplay {
    /// Replay `requests` synthetic requests (seed `seed`) through `sockets`.
    pub fn start(g: &Group, sockets: Vec<PathBuf>, requests: usize, seed: u64) -> Self {
        Self::start_with(g, sockets, requests, seed, Duration::from_secs(60))
    }

    /// As [`Self::start`], with the engines' recovery deadline.
    pub fn start_with(
        g: &Group,
        sockets: Vec<PathBuf>,
        requests: usize,
        seed: u64,
        recovery: Duration,
    ) -> Self {
        let records: Vec<_> = SynthWorkload::new(requests, seed % 1000).collect();
        let mut params = ReplayParams::new(sockets);
        params.pool_pages = pool_pages_needed(&records).max(256);
        params.pool_dir = g.path().join("pools");
        params.expected_capacity = Capacity::Unlimited;
        params.deadlines.stall = Duration::from_secs(90);
        params.deadlines.recovery = recovery;
        Self::run(params, records)
    }

    /// Replay `records` with `params` (the caller's sockets, pools and deadlines).
    pub fn run(params: ReplayParams, records: Vec<TraceRecord>) -> Self {
        let done = Arc::new(AtomicU64::new(0));
        let seen = done.clone();
        let handle = std::thread::spawn(move || {
            let progress = move |p: &tandem_replay::ReplayProgress| {
                seen.store(p.requests_done, Ordering::SeqCst)
            };
            run_replay(&params, records, Some(&progress))
        });
        Self { handle, done }
    }

    /// True once the run ended.
    pub fn done(&self) -> bool {
        self.handle.is_finished()
    }

    /// Requests completed so far.
    pub fn progress(&self) -> u64 {
        self.done.load(Ordering::SeqCst)
    }

    /// The summary, or the error as text.
    pub fn finish(self) -> Result<ReplaySummary, String> {
        match self.handle.join() {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the replay thread panicked".into()),
        }
    }
}

/// No outcome lost, duplicated or corrupted; no mismatch.
pub fn assert_exactly_once(s: &ReplaySummary, what: &str) {
    assert_eq!(
        (
            s.verify_failures,
            s.lost_completions,
            s.duplicate_completions,
            s.mismatches
        ),
        (0, 0, 0, 0),
        "{what}: {}",
        s.to_json()
    );
}

/// The summary's figures as JSON.
pub fn summary_short(s: &ReplaySummary) -> serde_json::Value {
    serde_json::json!({
        "requests": s.requests, "epochs": s.epochs, "restarts": s.restarts, "recovery_ms_max": s.recovery_ms_max,
        "verify_failures": s.verify_failures, "lost": s.lost_completions, "duplicates": s.duplicate_completions,
        "mismatches": s.mismatches, "loads_failed": s.loads_failed, "stores_failed": s.stores_failed,
        "redelivered_unacked": s.redelivered_unacked, "hit_ratio": s.block_prefix_hit_ratio, "wall_s": s.wall_seconds,
    })
}
