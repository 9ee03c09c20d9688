//! The wall clock that liveness times are measured on: heartbeat times, the expiry of
//! heartbeats and manifests, the supervisor's restart window.
//!
//! Owns the one place where these times are read. Redis expires keys on the server's own
//! clock; the in-memory twin ([`crate::MemoryLog`]) and the supervisor read the [`WallClock`]
//! they are given, so a test drives them with a [`ManualClock`] instead of sleeping. It never
//! sleeps and never schedules anything.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in ms since the Unix epoch. Wall clock, not monotonic: the
/// times are stored (heartbeats, restart history) and compared across processes and across
/// a restart of the supervisor.
pub trait WallClock: Send + Sync + fmt::Debug {
    /// Now, in ms since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SystemClock;

impl WallClock for SystemClock {
    /// `SystemTime::now()` in ms since the Unix epoch (0 for a clock set before 1970).
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to: for tests and simulations. Clones share one time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock that reads `start_ms` until moved.
    pub fn new(start_ms: u64) -> Self {
        ManualClock {
            now_ms: Arc::new(AtomicU64::new(start_ms)),
        }
    }

    /// Moves the clock forward by `ms` milliseconds; returns the new time.
    pub fn advance(&self, ms: u64) -> u64 {
        self.now_ms
            .fetch_add(ms, Ordering::SeqCst)
            .saturating_add(ms)
    }

    /// Sets the clock to `now_ms` (it may move backwards, as a wall clock can).
    pub fn set(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl WallClock for ManualClock {
    /// The time last set or advanced to.
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_it() {
        let c = ManualClock::new(1_000);
        let twin = c.clone();
        assert_eq!(c.now_ms(), 1_000);
        assert_eq!(c.advance(250), 1_250);
        assert_eq!(twin.now_ms(), 1_250);
        twin.set(10);
        assert_eq!(c.now_ms(), 10);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
