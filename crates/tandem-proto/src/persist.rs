//! The leader's durability pipeline for task outcomes (DESIGN.md invariant 5), in the shape
//! of raft-rs's `Ready`/`advance`: finished → batch handed to the driver → durable →
//! revealed in a frame.
//!
//! Owns the order outcomes move through those stages. It never talks to Redis: the driver
//! appends each [`PersistBatch`] and reports back. While Redis is down, outcomes wait here;
//! sealing goes on with nothing new revealed.

use crate::frame::TaskOutcome;
use crate::ids::Epoch;
use serde::{Deserialize, Serialize};
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

/// Outcomes the driver must append to the durable stream, then confirm with
/// [`crate::Leader::handle_persisted`] (or hand back with
/// [`crate::Leader::handle_persist_failed`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PersistBatch {
    /// The batch id to confirm.
    pub id: BatchId,
    /// The epoch whose leader finished these tasks.
    pub epoch: Epoch,
    /// The outcomes, in finish order.
    pub outcomes: Vec<TaskOutcome>,
}

/// Outcomes between quorum and reveal. At most one batch is in flight at a time, so outcomes
/// become durable, and are revealed, in finish order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PersistQueue {
    epoch: Epoch,
    next_id: u64,
    finished: Vec<TaskOutcome>,
    in_flight: Option<PersistBatch>,
    durable: Vec<TaskOutcome>,
}

impl PersistQueue {
    /// An empty pipeline for `epoch`.
    pub fn new(epoch: Epoch) -> PersistQueue {
        PersistQueue {
            epoch,
            next_id: 0,
            finished: Vec::new(),
            in_flight: None,
            durable: Vec::new(),
        }
    }

    /// A task finished by quorum.
    pub fn push_finished(&mut self, outcome: TaskOutcome) {
        self.finished.push(outcome);
    }

    /// The next batch to append: everything finished and not yet batched, unless a batch is
    /// already in flight or nothing is waiting.
    pub fn poll(&mut self) -> Option<PersistBatch> {
        if self.in_flight.is_some() || self.finished.is_empty() {
            return None;
        }
        let batch = PersistBatch {
            id: BatchId(self.next_id),
            epoch: self.epoch,
            outcomes: std::mem::take(&mut self.finished),
        };
        self.next_id += 1;
        self.in_flight = Some(batch.clone());
        Some(batch)
    }

    /// The batch `id` is durable: its outcomes may be revealed. Returns how many outcomes it
    /// held, or `None` when `id` is not the batch in flight.
    pub fn persisted(&mut self, id: BatchId) -> Option<usize> {
        if self.in_flight.as_ref().map(|b| b.id) != Some(id) {
            return None;
        }
        let batch = self.in_flight.take()?;
        let n = batch.outcomes.len();
        self.durable.extend(batch.outcomes);
        Some(n)
    }

    /// Appending batch `id` failed: its outcomes go back to the front of the queue, to be
    /// batched again by the next [`Self::poll`]. Returns `false` when `id` is not in flight.
    pub fn failed(&mut self, id: BatchId) -> bool {
        if self.in_flight.as_ref().map(|b| b.id) != Some(id) {
            return false;
        }
        if let Some(batch) = self.in_flight.take() {
            let later = std::mem::replace(&mut self.finished, batch.outcomes);
            self.finished.extend(later);
        }
        true
    }

    /// Take every durable, unrevealed outcome for the frame being sealed, in finish order.
    pub fn take_durable(&mut self) -> Vec<TaskOutcome> {
        std::mem::take(&mut self.durable)
    }

    /// Outcomes finished but not yet durable (waiting, or in the batch in flight).
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::OutcomeResult;
    use crate::ids::{RequestId, TaskId, TaskKind};

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
}
