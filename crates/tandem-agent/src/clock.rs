//! The agent's monotonic clock in milliseconds: the `now_ms` every sans-IO input carries.

use std::time::Instant;

/// Milliseconds since the clock was made; never goes backwards.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock starting at 0 now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    /// Milliseconds since [`Clock::new`].
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}
