//! The window-stall watch: when the leader's window stays full, which follower holds it and
//! since when (docs/DESIGN.md, "The window").
//!
//! Owns [`WindowWatch`]: whether the open step is refused by the window now, since when it
//! has been, and the stall declared once it has been for the grace. The grace is the group's
//! heartbeat timeout: a follower whose agent answers heartbeats but whose engine stopped
//! acknowledging is named after as long as a silent rank would be. A stall makes the leader
//! not ready (`NotReady::WindowStalled`, the reason names the rank) and is counted; it never
//! fails the epoch, refuses a request or changes what is sealed: the window itself does that.
//!
//! It never reads a clock: time is the `now_ms` of each observation.

use tandem_proto::{Leader, Rank, Step};

/// A declared stall: the window has been full for at least the grace.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct WindowStall {
    /// The follower holding the window (the lowest rank among equals).
    pub(crate) rank: Rank,
    /// Its last acknowledged step (`None`: none yet).
    pub(crate) slowest_ack: Option<Step>,
    /// The step the window refuses.
    pub(crate) step: Step,
    /// When the window became full, ms.
    pub(crate) since_ms: u64,
}

/// See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct WindowWatch {
    /// When the window became full, while it is.
    full_since_ms: Option<u64>,
    stall: Option<WindowStall>,
    /// Stalls declared in this epoch.
    stalls: u64,
}

impl WindowWatch {
    /// Look at `leader`'s window at `now_ms`, with `grace_ms` before a full window is a stall.
    pub(crate) fn observe(&mut self, leader: &Leader, grace_ms: u64, now_ms: u64) {
        if !window_full(leader) {
            if let Some(s) = self.stall.take() {
                tracing::info!(
                    rank = s.rank.0,
                    stalled_ms = now_ms.saturating_sub(s.since_ms),
                    "window open again"
                );
            }
            self.full_since_ms = None;
            return;
        }
        let since_ms = *self.full_since_ms.get_or_insert(now_ms);
        let Some(rank) = leader.slowest_rank() else {
            return;
        };
        let stall = WindowStall {
            rank,
            slowest_ack: leader.slowest_ack(),
            step: leader.open_step(),
            since_ms,
        };
        match &mut self.stall {
            Some(s) => *s = stall,
            None if now_ms >= since_ms.saturating_add(grace_ms) => {
                tracing::warn!(
                    rank = rank.0,
                    slowest_ack = ?stall.slowest_ack.map(|s| s.0),
                    step = stall.step.0,
                    full_ms = now_ms.saturating_sub(since_ms),
                    "window stalled: a follower stopped acknowledging"
                );
                self.stalls += 1;
                self.stall = Some(stall);
            }
            None => {}
        }
    }

    /// When the full window becomes a stall, ms, while it is full and not yet one.
    pub(crate) fn poll_timeout(&self, grace_ms: u64) -> Option<u64> {
        match (self.full_since_ms, &self.stall) {
            (Some(since), None) => Some(since.saturating_add(grace_ms)),
            _ => None,
        }
    }

    /// The declared stall, if any.
    pub(crate) fn stall(&self) -> Option<&WindowStall> {
        self.stall.as_ref()
    }

    /// Stalls declared in this epoch.
    pub(crate) fn stalls(&self) -> u64 {
        self.stalls
    }
}

impl WindowStall {
    /// The readiness reason: names the rank and both positions, for example "window
    /// stalled: rank 1 acknowledged step 11, the leader cannot seal step 20 (window 8 steps)".
    pub(crate) fn reason(&self, window: u64) -> String {
        let acked = match self.slowest_ack {
            Some(s) => format!("acknowledged step {}", s.0),
            None => "acknowledged no step".into(),
        };
        format!(
            "window stalled: rank {} {acked}, the leader cannot seal step {} (window {window} steps)",
            self.rank.0, self.step.0
        )
    }
}

/// Whether the window refuses the open step now (a group of one rank has no window).
fn window_full(leader: &Leader) -> bool {
    let config = leader.config();
    if config.world_size <= 1 {
        return false;
    }
    let base = leader.slowest_ack().map_or(0, |a| a.0.saturating_add(1));
    leader.open_step().0 >= base.saturating_add(config.window_steps)
}
