//! One engine's record of what it read: every frame's digest by `(epoch, step)`, every task it
//! saw started, and how many times it saw each task's outcome.
//!
//! Definitions (per engine; the driver sums them over ranks):
//! - a **duplicate completion** is an outcome seen again after the frame that first revealed
//!   it was acknowledged (`ack` succeeded for that step or a later one of its epoch);
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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use tandem_proto::frame::TaskOutcome;
use tandem_proto::ids::TaskId;

use crate::view::{FrameView, StartView};

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

/// What one frame brought.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Outcomes seen for the first time, in apply order, with the task's start if seen.
    pub fresh: Vec<(TaskOutcome, Option<StartView>)>,
    /// Tasks of earlier epochs this frame should have settled and did not (lost).
    pub lost: Vec<StartView>,
}

/// One engine's ledger.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    started: HashMap<TaskId, StartView>,
    open: BTreeSet<TaskId>,
    first_seen: HashMap<TaskId, (u64, u64)>,
    acked: HashMap<u64, u64>,
    frames: BTreeMap<(u64, u64), u64>,
    current_epoch: Option<u64>,
    tally: LedgerTally,
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

    /// Note a task this engine started (the leader knows its tasks before their frame).
    /// Noting the same task again changes nothing.
    pub fn note_started(&mut self, start: StartView) {
        if self.first_seen.contains_key(&start.task) {
            return;
        }
        self.open.insert(start.task);
        self.started.entry(start.task).or_insert(start);
    }

    /// Record a frame read for the first time and sort its outcomes into fresh and repeated.
    pub fn observe(&mut self, view: &FrameView) -> Observed {
        self.check_reread(view.epoch, view.step, view.digest);
        for start in &view.starts {
            self.note_started(start.clone());
        }
        let mut observed = Observed::default();
        for outcome in &view.outcomes {
            if let Some(&(epoch, step)) = self.first_seen.get(&outcome.task) {
                if self.acked.get(&epoch).is_some_and(|&a| a >= step) {
                    self.tally.duplicate_completions += 1;
                } else {
                    self.tally.redelivered_unacked += 1;
                }
                continue;
            }
            self.first_seen
                .insert(outcome.task, (view.epoch, view.step));
            self.open.remove(&outcome.task);
            let start = self.started.remove(&outcome.task);
            if start.is_none() {
                self.tally.unseen_outcomes += 1;
            }
            self.tally.outcomes += 1;
            observed.fresh.push((outcome.clone(), start));
        }
        if self.current_epoch.is_none_or(|e| view.epoch > e) {
            observed.lost = self.close_before(view.epoch);
            self.current_epoch = Some(view.epoch);
        }
        observed
    }

    /// Record a digest for `(epoch, step)`: a re-read, or the first read. Returns `false`
    /// (and counts a re-read mismatch) when an earlier read of that frame differs.
    pub fn check_reread(&mut self, epoch: u64, step: u64, digest: u64) -> bool {
        match self.frames.insert((epoch, step), digest) {
            Some(before) if before != digest => {
                self.tally.reread_mismatches += 1;
                false
            }
            _ => true,
        }
    }

    /// A frame was read again; `same` is whether it equals the first read.
    pub fn reread(&mut self, same: bool) {
        if !same {
            self.tally.reread_mismatches += 1;
        }
    }

    /// `ack(step)` succeeded in `epoch`: every frame up to `step` is acknowledged.
    pub fn acked(&mut self, epoch: u64, step: u64) {
        let a = self.acked.entry(epoch).or_insert(step);
        *a = (*a).max(step);
    }

    /// Tasks seen started and still without an outcome.
    pub fn open_tasks(&self) -> usize {
        self.open.len()
    }

    /// The counters so far.
    pub fn tally(&self) -> LedgerTally {
        self.tally
    }

    /// End the ledger: tasks still open are lost.
    pub fn finish(mut self) -> LedgerReport {
        let open: Vec<TaskId> = self.open.iter().copied().collect();
        for task in open {
            self.lose(task, "by the end of the run");
        }
        LedgerReport {
            frames: self.frames,
            tally: self.tally,
            lost_samples: self.lost_samples,
        }
    }

    /// Count `task` lost; returns its start if known.
    fn lose(&mut self, task: TaskId, when: &str) -> Option<StartView> {
        self.open.remove(&task);
        self.tally.lost_completions += 1;
        let start = self.started.remove(&task);
        if self.lost_samples.len() < MAX_LOST_SAMPLES {
            let what = match &start {
                Some(s) => format!(
                    "{} of request {}, {} blocks",
                    s.kind,
                    s.request,
                    s.hashes.len()
                ),
                None => "unknown task".to_string(),
            };
            self.lost_samples
                .push(format!("task {task} ({what}): no outcome {when}"));
        }
        start
    }

    fn close_before(&mut self, epoch: u64) -> Vec<StartView> {
        let lost: Vec<TaskId> = self
            .open
            .iter()
            .copied()
            .filter(|t| t.epoch < epoch)
            .collect();
        let when = format!("by the first frame of epoch {epoch}");
        lost.into_iter()
            .filter_map(|task| self.lose(task, &when))
            .collect()
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
