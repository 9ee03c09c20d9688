//! One engine's record of what it read: every frame's digest by `(epoch, step)`, re-reads that
//! differ, and the tasks it lost, with the counters of its session's task map.
//!
//! Which outcome is fresh, repeated, unseen or lost is decided once, by the engine session's
//! task map ([`tandem_client::tasks`]); the ledger turns its counters into the replay's
//! definitions (per engine; the driver sums them over ranks):
//! - a **duplicate completion** is an outcome seen again after the frame that first revealed
//!   it was acknowledged ([`TaskTally::duplicates`]);
//! - a **redelivery after an unacknowledged frame** is an outcome seen again when the ack of
//!   the frame that first revealed it never succeeded (the agent is right to deliver it once
//!   more); it is counted apart and not applied twice;
//! - a **lost completion** is a task seen started with no outcome by the first frame of a
//!   later epoch (whose reconciliation must settle it) or by the end of the run;
//! - an **unseen outcome** is an outcome for a task this engine never saw started (for
//!   example one started in a frame it never read before a restart); applied, not an error;
//! - a **re-read mismatch** is a frame read again for the same `(epoch, step)` with a
//!   different digest.
//!
//! Pure bookkeeping: it never does IO and never decides what an outcome means for pages.

use std::collections::BTreeMap;

use serde::Serialize;
use tandem_client::{StartedTask, TaskTally};

use crate::view::FrameView;

/// Counters of one engine's ledger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LedgerTally {
    /// Outcomes seen for the first time.
    pub outcomes: u64,
    /// Outcomes seen again after their frame was acknowledged.
    pub duplicate_completions: u64,
    /// Outcomes seen again whose first frame was never acknowledged.
    pub redelivered_unacked: u64,
    /// Outcomes of tasks never seen started.
    pub unseen_outcomes: u64,
    /// Tasks seen started that never got an outcome.
    pub lost_completions: u64,
    /// Frames re-read with a different digest.
    pub reread_mismatches: u64,
}

/// One engine's ledger.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    frames: BTreeMap<(u64, u64), u64>,
    reread_mismatches: u64,
    lost_samples: Vec<String>,
}

/// A finished ledger: the frame digests, for comparison across ranks, and the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerReport {
    /// Digest of every frame read, by `(epoch, step)`.
    pub frames: BTreeMap<(u64, u64), u64>,
    /// The counters, with tasks still open at the end counted lost.
    pub tally: LedgerTally,
    /// The first lost tasks, described.
    pub lost_samples: Vec<String>,
}

/// Lost tasks described in full per ledger; the rest are only counted.
pub const MAX_LOST_SAMPLES: usize = 8;

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Ledger::default()
    }

    /// Record a frame read (its digest; a frame read again must not differ).
    pub fn observe(&mut self, view: &FrameView) {
        self.check_reread(view.epoch, view.step, view.digest);
    }

    /// Record a digest for `(epoch, step)`: a re-read, or the first read. Returns `false`
    /// (and counts a re-read mismatch) when an earlier read of that frame differs.
    pub fn check_reread(&mut self, epoch: u64, step: u64, digest: u64) -> bool {
        match self.frames.insert((epoch, step), digest) {
            Some(before) if before != digest => {
                self.reread_mismatches += 1;
                false
            }
            _ => true,
        }
    }

    /// A frame was read again; `same` is whether it equals the first read.
    pub fn reread(&mut self, same: bool) {
        if !same {
            self.reread_mismatches += 1;
        }
    }

    /// The session reported `lost` tasks (`when`: for example "by the first frame of epoch 3"):
    /// describe the first few.
    pub fn lost(&mut self, lost: &[StartedTask], when: &str) {
        for s in lost {
            if self.lost_samples.len() >= MAX_LOST_SAMPLES {
                return;
            }
            self.lost_samples.push(format!(
                "task {} ({} of request {}, {} blocks): no outcome {when}",
                s.start.task,
                s.kind,
                s.start.request,
                s.start.block_hashes.len()
            ));
        }
    }

    /// End the ledger with the session's final counters and the tasks still open (lost).
    pub fn finish(mut self, tally: TaskTally, open: &[StartedTask]) -> LedgerReport {
        self.lost(open, "by the end of the run");
        LedgerReport {
            frames: self.frames,
            tally: LedgerTally {
                outcomes: tally.outcomes,
                duplicate_completions: tally.duplicates,
                redelivered_unacked: tally.redelivered_unacked,
                unseen_outcomes: tally.unseen_outcomes,
                lost_completions: tally.lost,
                reread_mismatches: self.reread_mismatches,
            },
            lost_samples: self.lost_samples,
        }
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
