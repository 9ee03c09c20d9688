//! The leader's write-ahead pipeline (docs/DESIGN.md invariant 5), in the shape of raft-rs's
//! `Ready`/`advance`: task starts and finished outcomes → batch handed to the driver → durable
//! → revealed in a frame.
//!
//! Owns the order starts and outcomes move through those stages. A start is logged before any
//! rank sees it, so that after a crash every task an engine saw started is known to the log
//! (and reported aborted if it has no outcome); an outcome is logged before any engine sees it.
//! It never talks to Redis: the driver appends each [`PersistBatch`] and reports back. While
//! Redis is down, starts and outcomes wait here; sealing goes on with nothing new revealed.

use crate::frame::{TaskOutcome, TaskStart};
use crate::ids::{Epoch, TaskKind};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fmt;

/// The id of one persist batch, increasing within a leader's life.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct BatchId(pub u64);

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A task start as the log records it: the start and whether it stores or loads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StartedTask {
    /// Store or load.
    pub kind: TaskKind,
    /// The start, exactly as the frame will reveal it.
    pub start: TaskStart,
}

/// Starts and outcomes the driver must append to the durable stream, then confirm with
/// [`crate::Leader::handle_persisted`] (or hand back with
/// [`crate::Leader::handle_persist_failed`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PersistBatch {
    /// The batch id to confirm.
    pub id: BatchId,
    /// The epoch whose leader started or finished these tasks.
    pub epoch: Epoch,
    /// Task starts, in start order.
    pub started: Vec<StartedTask>,
    /// The outcomes, in finish order.
    pub outcomes: Vec<TaskOutcome>,
}

impl PersistBatch {
    /// Nothing to append.
    pub fn is_empty(&self) -> bool {
        self.started.is_empty() && self.outcomes.is_empty()
    }
}

/// Starts and outcomes between the leader's decision and their reveal. Up to a limit of
/// batches (1 unless [`Self::set_limit`] raised it) are in flight at once; they are confirmed
/// or failed in the order they were handed out. A failed batch goes back to the front of the
/// queue, so what later batches hold may become durable, and be revealed, before it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PersistQueue {
    epoch: Epoch,
    next_id: u64,
    limit: usize,
    started: Vec<StartedTask>,
    finished: Vec<TaskOutcome>,
    in_flight: VecDeque<PersistBatch>,
    durable_started: Vec<StartedTask>,
    durable: Vec<TaskOutcome>,
}

impl PersistQueue {
    /// An empty pipeline for `epoch`, one batch in flight at a time.
    pub fn new(epoch: Epoch) -> PersistQueue {
        PersistQueue {
            epoch,
            next_id: 0,
            limit: 1,
            started: Vec::new(),
            finished: Vec::new(),
            in_flight: VecDeque::new(),
            durable_started: Vec::new(),
            durable: Vec::new(),
        }
    }

    /// At most `limit` batches in flight at once (at least 1).
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.max(1);
    }

    /// Batches handed out and not yet confirmed or failed.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The leader started a task.
    pub fn push_started(&mut self, started: StartedTask) {
        self.started.push(started);
    }

    /// A task finished by quorum (or was refused without starting).
    pub fn push_finished(&mut self, outcome: TaskOutcome) {
        self.finished.push(outcome);
    }

    /// The next batch to append: everything started and not yet batched, and the outcomes
    /// finished so far up to the first one whose start is in a batch still in flight (that
    /// outcome, and every later one, waits for a later batch: an outcome is never durable
    /// before its start, even when the batch holding the start fails and a later one holding
    /// the outcome lands). `None` while the limit of batches is in flight or nothing can go.
    pub fn poll(&mut self) -> Option<PersistBatch> {
        if self.in_flight.len() >= self.limit {
            return None;
        }
        let ready = self.outcomes_ready();
        if ready == 0 && self.started.is_empty() {
            return None;
        }
        let later = self.finished.split_off(ready);
        let batch = PersistBatch {
            id: BatchId(self.next_id),
            epoch: self.epoch,
            started: std::mem::take(&mut self.started),
            outcomes: std::mem::replace(&mut self.finished, later),
        };
        self.next_id += 1;
        self.in_flight.push_back(batch.clone());
        Some(batch)
    }

    /// How many of the waiting outcomes, from the first, may go in the next batch: those
    /// before the first whose task's start is in a batch in flight (a task whose copy finished
    /// before its start was confirmed: the leader copies its own shard when the task starts).
    fn outcomes_ready(&self) -> usize {
        let in_flight = |o: &TaskOutcome| {
            self.in_flight
                .iter()
                .any(|b| b.started.iter().any(|s| s.start.task == o.task))
        };
        if self.in_flight.iter().all(|b| b.started.is_empty()) {
            return self.finished.len();
        }
        self.finished
            .iter()
            .position(in_flight)
            .unwrap_or(self.finished.len())
    }

    /// The batch `id` is durable: its starts and outcomes may be revealed. Returns how many
    /// outcomes it held, or `None` when `id` is not the oldest batch in flight (batches are
    /// confirmed in order: a later one is never durable before an earlier one).
    pub fn persisted(&mut self, id: BatchId) -> Option<usize> {
        if self.in_flight.front().map(|b| b.id) != Some(id) {
            return None;
        }
        let batch = self.in_flight.pop_front()?;
        let n = batch.outcomes.len();
        self.durable_started.extend(batch.started);
        self.durable.extend(batch.outcomes);
        Some(n)
    }

    /// Appending batch `id`, the oldest in flight, failed: its starts and outcomes go back to
    /// the front of the queue, to be batched again by the next [`Self::poll`]. Later batches in
    /// flight stay in flight (each is confirmed or fails on its own answer: what they hold
    /// never depends on what a batch not yet durable holds, since nothing is revealed before it
    /// is durable). Returns `false` when `id` is not the oldest batch in flight.
    pub fn failed(&mut self, id: BatchId) -> bool {
        if self.in_flight.front().map(|b| b.id) != Some(id) {
            return false;
        }
        if let Some(batch) = self.in_flight.pop_front() {
            let later = std::mem::replace(&mut self.finished, batch.outcomes);
            self.finished.extend(later);
            let later = std::mem::replace(&mut self.started, batch.started);
            self.started.extend(later);
        }
        true
    }

    /// Take every durable, unrevealed outcome for the frame being sealed, in finish order.
    pub fn take_durable(&mut self) -> Vec<TaskOutcome> {
        std::mem::take(&mut self.durable)
    }

    /// Take every durable, unrevealed start for the frame being sealed, in start order.
    pub fn take_durable_started(&mut self) -> Vec<StartedTask> {
        std::mem::take(&mut self.durable_started)
    }

    /// Outcomes finished but not yet durable (waiting, or in a batch in flight).
    pub fn not_durable(&self) -> impl Iterator<Item = &TaskOutcome> {
        self.in_flight
            .iter()
            .flat_map(|b| b.outcomes.iter())
            .chain(&self.finished)
    }

    /// Outcomes durable but not yet revealed in a frame.
    pub fn durable_unrevealed(&self) -> &[TaskOutcome] {
        &self.durable
    }

    /// Starts durable but not yet revealed in a frame, in start order.
    pub fn durable_started(&self) -> &[StartedTask] {
        &self.durable_started
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::OutcomeResult;
    use crate::ids::{PageId, RequestId, TaskId, TaskKind};

    fn ok(seq: u64) -> TaskOutcome {
        TaskOutcome {
            task: TaskId { epoch: 1, seq },
            kind: TaskKind::Store,
            request: RequestId(seq),
            result: OutcomeResult::Ok,
        }
    }

    #[test]
    fn one_batch_in_flight_then_durable_in_order() {
        let mut q = PersistQueue::new(Epoch(1));
        assert_eq!(q.poll(), None);
        q.push_finished(ok(0));
        q.push_finished(ok(1));
        let b = q.poll().unwrap();
        assert_eq!((b.id, b.outcomes.len()), (BatchId(0), 2));
        q.push_finished(ok(2));
        assert_eq!(q.poll(), None, "one batch at a time");
        assert_eq!(q.not_durable().count(), 3);
        assert_eq!(q.persisted(BatchId(7)), None);
        assert_eq!(q.persisted(b.id), Some(2));
        assert_eq!(q.durable_unrevealed().len(), 2);
        let b2 = q.poll().unwrap();
        assert_eq!(b2.id, BatchId(1));
        assert_eq!(q.take_durable(), vec![ok(0), ok(1)]);
        assert!(q.take_durable().is_empty());
    }

    #[test]
    fn failed_batch_is_retried_first() {
        let mut q = PersistQueue::new(Epoch(1));
        q.push_finished(ok(0));
        let b = q.poll().unwrap();
        q.push_finished(ok(1));
        assert!(!q.failed(BatchId(9)));
        assert!(q.failed(b.id));
        let again = q.poll().unwrap();
        assert_eq!(again.outcomes, vec![ok(0), ok(1)]);
        assert_ne!(again.id, b.id);
    }

    fn start(seq: u64) -> StartedTask {
        StartedTask {
            kind: TaskKind::Load,
            start: TaskStart {
                task: TaskId { epoch: 1, seq },
                request: RequestId(seq),
                block_hashes: vec![],
                page_ids: vec![PageId(0)],
                tiers: vec![],
            },
        }
    }

    #[test]
    fn starts_travel_with_outcomes_and_are_revealed_only_when_durable() {
        let mut q = PersistQueue::new(Epoch(1));
        q.push_started(start(0));
        let b = q.poll().unwrap();
        assert_eq!((b.started.len(), b.outcomes.len()), (1, 0));
        assert!(q.take_durable_started().is_empty(), "not durable yet");
        q.push_started(start(1));
        assert!(q.failed(b.id));
        let again = q.poll().unwrap();
        assert_eq!(
            again.started,
            vec![start(0), start(1)],
            "failed starts go first"
        );
        q.persisted(again.id).unwrap();
        assert_eq!(q.take_durable_started(), vec![start(0), start(1)]);
        assert!(q.poll().is_none());
    }

    fn done(seq: u64) -> TaskOutcome {
        TaskOutcome {
            kind: TaskKind::Load,
            ..ok(seq)
        }
    }

    #[test]
    fn an_outcome_never_goes_out_before_its_start_is_confirmed() {
        let mut q = PersistQueue::new(Epoch(1));
        q.set_limit(4);
        q.push_started(start(0));
        let a = q.poll().unwrap();
        // Task 0 finished while its start is in flight; a refusal after it keeps its order.
        q.push_finished(done(0));
        q.push_finished(ok(9));
        assert_eq!(q.poll(), None, "the outcome waits for its start's batch");
        assert_eq!(q.not_durable().count(), 2);
        q.persisted(a.id).unwrap();
        let b = q.poll().unwrap();
        assert_eq!(b.outcomes, vec![done(0), ok(9)]);
        assert!(b.started.is_empty());
    }

    #[test]
    fn a_failed_start_goes_out_again_with_its_outcome() {
        let mut q = PersistQueue::new(Epoch(1));
        q.set_limit(4);
        q.push_finished(ok(7));
        q.push_started(start(0));
        let a = q.poll().unwrap();
        q.push_finished(done(0));
        q.push_started(start(1));
        let b = q.poll().unwrap();
        assert_eq!(
            (b.started.clone(), b.outcomes.clone()),
            (vec![start(1)], vec![]),
            "a later start goes, the outcome of a start in flight does not"
        );
        assert!(q.failed(a.id));
        let again = q.poll().unwrap();
        assert_eq!(again.started, vec![start(0)]);
        assert_eq!(
            again.outcomes,
            vec![ok(7), done(0)],
            "start and outcome together"
        );
    }

    #[test]
    fn several_batches_in_flight_are_confirmed_in_order() {
        let mut q = PersistQueue::new(Epoch(1));
        q.set_limit(3);
        let mut ids = Vec::new();
        for seq in 0..4 {
            q.push_finished(ok(seq));
            if let Some(b) = q.poll() {
                ids.push(b.id);
            }
        }
        assert_eq!(ids.len(), 3, "the limit holds the fourth back");
        assert_eq!(q.in_flight(), 3);
        assert_eq!(
            q.persisted(ids[1]),
            None,
            "a later batch is never durable first"
        );
        assert_eq!(q.persisted(ids[0]), Some(1));
        assert_eq!(q.take_durable(), vec![ok(0)]);
        let b = q.poll().unwrap();
        assert_eq!(b.outcomes, vec![ok(3)]);
    }

    #[test]
    fn a_failure_in_the_middle_hands_back_only_that_batch() {
        let mut q = PersistQueue::new(Epoch(1));
        q.set_limit(4);
        let mut ids = Vec::new();
        for seq in 0..3 {
            q.push_finished(ok(seq));
            ids.push(q.poll().unwrap().id);
        }
        q.push_finished(ok(3));
        assert_eq!(q.persisted(ids[0]), Some(1));
        assert!(!q.failed(ids[2]), "only the oldest can fail");
        assert!(q.failed(ids[1]));
        assert_eq!(q.in_flight(), 1);
        assert_eq!(
            q.persisted(ids[2]),
            Some(1),
            "the later batch stands on its own"
        );
        assert_eq!(q.take_durable(), vec![ok(0), ok(2)]);
        let again = q.poll().unwrap();
        assert_eq!(again.outcomes, vec![ok(1), ok(3)]);
    }
}
