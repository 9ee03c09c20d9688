//! The invariants, checked as the run goes: what the simulator records about the group (every
//! frame the leader sealed, every start and outcome the log took, every outcome an engine
//! received) and the rules those records must keep.
//!
//! Owns [`Checker`] and [`Violation`]. It never drives anything: the world hands it what it
//! saw, and it answers with the first rule broken. The rules (numbered as in
//! docs/SIMULATION.md):
//!
//! 1. an engine applies, as step `s` of epoch `e`, only the frame the leader sealed for
//!    `(e, s)` (the same on every rank, except that frame 0 may leave out redeliveries that
//!    rank's engine already acknowledged);
//! 2. a frame reveals a start or an outcome only after the log took it (an append answered
//!    `Ok` by the completion log, before the seal), and the frame's own starts and outcomes
//!    only once an append holding them was answered `Ok` to the leader's core (with several
//!    appends out, answered in the order they went out); the log never takes a task's start
//!    after its outcome;
//! 3. each task's outcome reaches each engine once, counting restarts, and is the same
//!    everywhere: no engine sees a task's result flip, no task started stays unsettled by a
//!    later epoch, no start is applied twice;
//! 4. every engine call that waits ends by its deadline (plus the log's slowest answer while
//!    an append is under way), and one that does not wait is answered at once;
//! 5. a store copies a page only while the page still holds that block (the engine reused no
//!    page before the store's outcome), and a load the group calls `Ok` left the right bytes
//!    in every rank's pages;
//! 6. after the settle time every task each engine saw started has its outcome;
//! 7. at the end of a run, once every rank runs the leader's epoch and holds every frame it
//!    sealed, every block the leader's group index holds (unpinned) is held by every rank's
//!    store in the tier the index says (checked in `invariants.rs`).

use std::collections::{BTreeMap, BTreeSet};

use tandem_proto::{Epoch, Frame, OutcomeResult, Step, TaskId};

/// A rule broken, with the rule's number and what was seen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invariant {rule} broken at {now_ms} ms: {what}")]
pub struct Violation {
    /// The rule's number (module docs).
    pub rule: u8,
    /// Virtual time, ms.
    pub now_ms: u64,
    /// What was seen.
    pub what: String,
}

/// What the run recorded, and the rules over it.
#[derive(Debug, Default)]
pub struct Checker {
    /// Every frame the leader sealed, as sealed (before any rank's frame-0 filter).
    sealed: BTreeMap<(Epoch, Step), Frame>,
    /// Task starts the log took.
    durable_starts: BTreeSet<TaskId>,
    /// Outcomes the log took.
    durable_outcomes: BTreeSet<TaskId>,
    /// Task starts in appends answered `Ok` to the leader's core.
    confirmed_starts: BTreeSet<TaskId>,
    /// Outcomes in appends answered `Ok` to the leader's core.
    confirmed_outcomes: BTreeSet<TaskId>,
    /// The result each task's outcome carried when first seen by any engine.
    results: BTreeMap<TaskId, OutcomeResult>,
    /// The first violation.
    pub violation: Option<Violation>,
}

impl Checker {
    /// Records a violation of `rule` (only the first is kept).
    pub fn fail(&mut self, rule: u8, now_ms: u64, what: String) {
        if self.violation.is_none() {
            self.violation = Some(Violation { rule, now_ms, what });
        }
    }

    /// The log took a step record at `now_ms`. Rule 2 also holds the log itself to the
    /// write-ahead order: a task's start is never taken after its outcome (the leader copies its
    /// own shard when a task starts, so an outcome can be known before its start is durable;
    /// it must still go out with or after the start).
    pub fn appended(&mut self, starts: &[TaskId], outcomes: &[TaskId], now_ms: u64) {
        for t in starts {
            if !self.durable_starts.contains(t) && self.durable_outcomes.contains(t) {
                let what = format!("the log took the start of task {t} after its outcome");
                self.fail(2, now_ms, what);
            }
        }
        self.durable_starts.extend(starts.iter().copied());
        self.durable_outcomes.extend(outcomes.iter().copied());
    }

    /// An append holding these starts and outcomes was answered `Ok` to the leader's core.
    pub fn confirmed(&mut self, starts: &[TaskId], outcomes: &[TaskId]) {
        self.confirmed_starts.extend(starts.iter().copied());
        self.confirmed_outcomes.extend(outcomes.iter().copied());
    }

    /// The leader sealed `frame` (seen on its way to a follower or to the leader's engine):
    /// rule 2, and rule 1's uniqueness of the sealed frame.
    pub fn sealed(&mut self, frame: &Frame, now_ms: u64) {
        let key = (frame.epoch, frame.step);
        if let Some(old) = self.sealed.get(&key).cloned() {
            let old = &old;
            if !same_frame(old, frame) && !same_frame(frame, old) {
                let what = format!(
                    "two different frames sealed for epoch {} step {}",
                    key.0, key.1
                );
                self.fail(1, now_ms, what);
            }
            // Keep the fuller copy (the follower's, unfiltered).
            if redelivered_len(frame) > redelivered_len(old) {
                self.sealed.insert(key, frame.clone());
            }
            return;
        }
        for (_, start) in frame.started() {
            if !self.durable_starts.contains(&start.task) {
                let what = format!(
                    "frame (epoch {}, step {}) reveals the start of task {} the log never took",
                    frame.epoch, frame.step, start.task
                );
                self.fail(2, now_ms, what);
            }
        }
        for (_, start) in frame.started() {
            if !self.confirmed_starts.contains(&start.task) {
                let what = format!(
                    "frame (epoch {}, step {}) reveals the start of task {} no confirmed append holds",
                    frame.epoch, frame.step, start.task
                );
                self.fail(2, now_ms, what);
            }
        }
        for outcome in &frame.finished {
            if !self.confirmed_outcomes.contains(&outcome.task) {
                let what = format!(
                    "frame (epoch {}, step {}) reveals the outcome of task {} no confirmed append holds",
                    frame.epoch, frame.step, outcome.task
                );
                self.fail(2, now_ms, what);
            }
        }
        for outcome in frame.outcomes() {
            if !self.durable_outcomes.contains(&outcome.task) {
                let what = format!(
                    "frame (epoch {}, step {}) reveals the outcome of task {} the log never took",
                    frame.epoch, frame.step, outcome.task
                );
                self.fail(2, now_ms, what);
            }
        }
        self.sealed.insert(key, frame.clone());
    }

    /// Rank `rank`'s engine applies `frame` as step `step` of `epoch`: rule 1, and rule 3's
    /// "the same result everywhere".
    pub fn applied(&mut self, rank: u32, epoch: Epoch, step: Step, frame: &Frame, now_ms: u64) {
        match self.sealed.get(&(epoch, step)) {
            None => {
                let what = format!(
                    "rank {rank}'s engine applied a frame as epoch {epoch} step {step}, which the leader never sealed"
                );
                self.fail(1, now_ms, what);
            }
            Some(sealed) => {
                if frame.epoch != epoch || frame.step != step || !same_frame(frame, sealed) {
                    let what = format!(
                        "rank {rank}'s engine applied as epoch {epoch} step {step} a frame of epoch {} step {} that is not the sealed one",
                        frame.epoch, frame.step
                    );
                    self.fail(1, now_ms, what);
                }
            }
        }
        for outcome in frame.outcomes() {
            match self.results.get(&outcome.task) {
                Some(r) if *r != outcome.result => {
                    let what = format!(
                        "task {} reached rank {rank}'s engine as {:?}, another engine saw {:?}",
                        outcome.task, outcome.result, r
                    );
                    self.fail(3, now_ms, what);
                }
                Some(_) => {}
                None => {
                    self.results.insert(outcome.task, outcome.result.clone());
                }
            }
        }
    }

    /// Rank `rank`'s engine read `frame` as step `step` of `epoch` without applying it (a
    /// re-read, a read ahead): rule 1 only.
    pub fn applied_read(
        &mut self,
        rank: u32,
        epoch: Epoch,
        step: Step,
        frame: &Frame,
        now_ms: u64,
    ) {
        let ok = self
            .sealed
            .get(&(epoch, step))
            .is_some_and(|s| frame.epoch == epoch && frame.step == step && same_frame(frame, s));
        if !ok {
            let what = format!(
                "rank {rank}'s engine read as epoch {epoch} step {step} a frame of epoch {} step {} that is not the sealed one",
                frame.epoch, frame.step
            );
            self.fail(1, now_ms, what);
        }
    }

    /// Frames sealed so far.
    pub fn frames_sealed(&self) -> usize {
        self.sealed.len()
    }

    /// Tasks whose outcome some engine received.
    pub fn outcomes_seen(&self) -> usize {
        self.results.len()
    }
}

/// Whether `got` is `sealed` with at most some of frame 0's redeliveries left out (the
/// per-rank filter), everything else equal.
fn same_frame(got: &Frame, sealed: &Frame) -> bool {
    let strip = |f: &Frame| {
        let mut f = f.clone();
        if let Some(r) = &mut f.reconciliation {
            r.redelivered.clear();
        }
        if f.reconciliation
            .as_ref()
            .is_some_and(|r| r.aborted.is_empty())
        {
            f.reconciliation = None;
        }
        f
    };
    if strip(got) != strip(sealed) {
        return false;
    }
    let (Some(g), Some(s)) = (&got.reconciliation, &sealed.reconciliation) else {
        return true;
    };
    // Subsequence: the filter only removes.
    let mut it = s.redelivered.iter();
    g.redelivered.iter().all(|o| it.any(|x| x == o))
}

fn redelivered_len(f: &Frame) -> usize {
    f.reconciliation.as_ref().map_or(0, |r| r.redelivered.len())
}
