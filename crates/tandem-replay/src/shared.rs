//! What the engine threads and the driver share: the stop flag, each rank's position, the
//! step followers must reach, and progress counters. (Each follower starts where its own
//! agent's welcome says, not at a step the leader shares.)
//!
//! Only coordination of the simulation lives here (never a group decision: those come from
//! frames). Locks are held for a few field writes; a poisoned lock is recovered rather than
//! propagated, since every field stays consistent on its own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Positions, RankPosition};

/// A snapshot of a running replay, for progress reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReplayProgress {
    /// Requests completed.
    pub requests_done: u64,
    /// Requests in the trace, when the iterator knows its length.
    pub requests_total: Option<u64>,
    /// Steps the leader sealed.
    pub steps: u64,
    /// The leader's epoch.
    pub epoch: Option<u64>,
    /// Epoch changes the leader went through.
    pub epoch_changes: u64,
}

/// State shared by the engine threads and the driver of one replay.
pub(crate) struct Shared {
    stop: Arc<AtomicBool>,
    positions: Mutex<Vec<RankPosition>>,
    target: Mutex<Option<(u64, u64)>>,
    leader_progress: Mutex<Instant>,
    requests_total: Option<u64>,
    requests_done: AtomicU64,
    steps: AtomicU64,
    epoch_changes: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    pub(crate) fn new(world_size: u32, requests_total: Option<u64>) -> Self {
        let positions = (0..world_size)
            .map(|rank| RankPosition {
                rank,
                doing: "connecting".into(),
                ..RankPosition::default()
            })
            .collect();
        Shared {
            stop: Arc::new(AtomicBool::new(false)),
            positions: Mutex::new(positions),
            target: Mutex::new(None),
            leader_progress: Mutex::new(Instant::now()),
            requests_total,
            requests_done: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            epoch_changes: AtomicU64::new(0),
        }
    }

    /// Ask every engine to stop.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// The stop flag itself, for the engine sessions' waits.
    pub(crate) fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Sleep up to `d`, in slices, returning early when the run stops.
    pub(crate) fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.stopped() {
            let now = Instant::now();
            if now >= until {
                return;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(10)));
        }
    }

    pub(crate) fn set_position(
        &self,
        rank: u32,
        epoch: u64,
        applied: Option<u64>,
        doing: impl Into<String>,
    ) {
        if let Some(p) = lock(&self.positions).get_mut(rank as usize) {
            p.epoch = Some(epoch);
            p.applied = applied;
            p.doing = doing.into();
        }
    }

    pub(crate) fn set_doing(&self, rank: u32, doing: impl Into<String>) {
        if let Some(p) = lock(&self.positions).get_mut(rank as usize) {
            p.doing = doing.into();
        }
    }

    pub(crate) fn positions(&self) -> Positions {
        Positions(lock(&self.positions).clone())
    }

    /// The `(epoch, step)` every follower must have applied before the run may end.
    pub(crate) fn set_target(&self, epoch: u64, step: u64) {
        *lock(&self.target) = Some((epoch, step));
    }

    pub(crate) fn target(&self) -> Option<(u64, u64)> {
        *lock(&self.target)
    }

    /// Whether every follower applied `target` (or a later frame).
    pub(crate) fn followers_reached(&self, target: (u64, u64)) -> bool {
        lock(&self.positions)
            .iter()
            .skip(1)
            .all(|p| match (p.epoch, p.applied) {
                (Some(e), Some(s)) => (e, s) >= target,
                // A follower that moved to a later epoch has applied nothing there yet: the
                // leader sets a new target in that epoch once it sees the change.
                _ => false,
            })
    }

    pub(crate) fn leader_progressed(&self) {
        *lock(&self.leader_progress) = Instant::now();
    }

    pub(crate) fn since_leader_progress(&self) -> Duration {
        lock(&self.leader_progress).elapsed()
    }

    pub(crate) fn add_requests_done(&self, n: u64) {
        self.requests_done.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_step(&self) {
        self.steps.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_epoch_change(&self) {
        self.epoch_changes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn progress(&self) -> ReplayProgress {
        let epoch = lock(&self.positions).first().and_then(|p| p.epoch);
        ReplayProgress {
            requests_done: self.requests_done.load(Ordering::Relaxed),
            requests_total: self.requests_total,
            steps: self.steps.load(Ordering::Relaxed),
            epoch,
            epoch_changes: self.epoch_changes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn followers_reach_a_target_in_epoch_then_step_order() {
        let s = Shared::new(3, Some(10));
        assert!(!s.followers_reached((1, 5)), "nobody joined");
        s.set_position(1, 1, Some(5), "reading");
        s.set_position(2, 1, Some(4), "reading");
        assert!(!s.followers_reached((1, 5)));
        s.set_position(2, 2, None, "rejoined");
        assert!(
            !s.followers_reached((1, 5)),
            "nothing applied in the new epoch yet"
        );
        s.set_position(2, 2, Some(0), "reading");
        assert!(
            s.followers_reached((1, 5)),
            "a later epoch is past the target"
        );
        s.set_position(0, 1, Some(9), "sealing");
        let p = s.progress();
        assert_eq!((p.epoch, p.requests_total), (Some(1), Some(10)));
        assert_eq!(
            s.positions().0[2].to_string(),
            "rank 2 (follower): epoch 2, applied step 0; reading"
        );
    }
}
