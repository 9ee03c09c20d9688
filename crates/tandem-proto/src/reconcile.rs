//! The reconciliation that opens a new epoch (docs/DESIGN.md invariant 5), and the per-rank
//! duplicate suppression that makes every outcome reach an engine exactly once.
//!
//! Owns pure functions only. It never reads Redis: the driver gathers the inputs (durable
//! outcomes not acknowledged by every engine, tasks started without a durable outcome) and
//! passes the result to [`crate::Leader::new`]. The driver appends the `aborted`
//! outcomes to the durable stream before step 0 is sealed, so that they too are durable
//! before any engine sees them.

use crate::frame::{Frame, OutcomeResult, Reconciliation, TaskOutcome};
use crate::ids::{RequestId, TaskId, TaskKind};
use std::collections::BTreeSet;

/// A task started without a (durable) outcome yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InFlightTask {
    /// The task.
    pub task: TaskId,
    /// Store or load.
    pub kind: TaskKind,
    /// The request it serves.
    pub request: RequestId,
}

impl InFlightTask {
    /// The outcome that reports this task aborted.
    pub fn aborted(&self) -> TaskOutcome {
        TaskOutcome {
            task: self.task,
            kind: self.kind,
            request: self.request,
            result: OutcomeResult::Aborted,
        }
    }
}

/// Build the reconciliation for step 0 of a new epoch.
///
/// - `durable_unacked`: durable outcomes some engine has not acknowledged, in stream order;
///   redelivered in that order, the first occurrence of each task id kept.
/// - `in_flight`: tasks started in earlier epochs without a durable outcome; each reported
///   `Aborted` once, in task id order, unless `durable_unacked` holds an outcome for it (a
///   durable outcome always wins).
pub fn reconcile(durable_unacked: &[TaskOutcome], in_flight: &[InFlightTask]) -> Reconciliation {
    let mut seen = BTreeSet::new();
    let redelivered: Vec<TaskOutcome> = durable_unacked
        .iter()
        .filter(|o| seen.insert(o.task))
        .cloned()
        .collect();
    let mut in_flight: Vec<InFlightTask> = in_flight.to_vec();
    in_flight.sort();
    let aborted = in_flight
        .iter()
        .filter(|t| seen.insert(t.task))
        .map(InFlightTask::aborted)
        .collect();
    Reconciliation {
        redelivered,
        aborted,
    }
}

/// The outcomes of `frame` that one rank's engine has not seen yet, in apply order, given the
/// task ids that engine already acknowledged (from its durable delivery record). The frame
/// itself is identical on every rank; only this filter is per rank.
pub fn undelivered_outcomes<'a>(
    frame: &'a Frame,
    already_acknowledged: &BTreeSet<TaskId>,
) -> Vec<&'a TaskOutcome> {
    let mut seen = BTreeSet::new();
    frame
        .outcomes()
        .filter(|o| !already_acknowledged.contains(&o.task) && seen.insert(o.task))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{Epoch, Step};

    fn ok(seq: u64) -> TaskOutcome {
        TaskOutcome {
            task: TaskId { epoch: 1, seq },
            kind: TaskKind::Store,
            request: RequestId(seq),
            result: OutcomeResult::Ok,
        }
    }

    fn flying(seq: u64) -> InFlightTask {
        InFlightTask {
            task: TaskId { epoch: 1, seq },
            kind: TaskKind::Load,
            request: RequestId(seq),
        }
    }

    #[test]
    fn durable_outcomes_win_and_duplicates_vanish() {
        let r = reconcile(
            &[ok(2), ok(1), ok(2)],
            &[flying(5), flying(1), flying(3), flying(5)],
        );
        let seqs = |v: &[TaskOutcome]| v.iter().map(|o| o.task.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&r.redelivered), vec![2, 1]);
        assert_eq!(seqs(&r.aborted), vec![3, 5]);
        assert!(r.aborted.iter().all(|o| o.result == OutcomeResult::Aborted));
    }

    #[test]
    fn empty_inputs_give_an_empty_reconciliation() {
        assert_eq!(reconcile(&[], &[]), Reconciliation::default());
    }

    #[test]
    fn per_rank_filter_drops_acknowledged_outcomes() {
        let mut f = Frame::empty(Epoch(2), Step(0));
        f.reconciliation = Some(reconcile(&[ok(1), ok(2)], &[flying(3)]));
        f.finished.push(TaskOutcome {
            task: TaskId { epoch: 2, seq: 0 },
            ..ok(0)
        });
        let acked: BTreeSet<TaskId> = [TaskId { epoch: 1, seq: 1 }].into();
        let left: Vec<u64> = undelivered_outcomes(&f, &acked)
            .iter()
            .map(|o| o.task.seq)
            .collect();
        assert_eq!(left, vec![2, 3, 0]);
        assert_eq!(undelivered_outcomes(&f, &BTreeSet::new()).len(), 4);
    }
}
