//! Quorum completion of tasks (docs/DESIGN.md invariant 3).
//!
//! Owns the per-task shard reports keyed by `(epoch, task, rank)` (the epoch is part of the
//! task id). A task finishes when every rank has reported; it failed if any rank reported a
//! failure, with the first reason received. A duplicate report changes nothing. It never
//! decides when an outcome becomes visible: the leader reveals outcomes only once durable.

use crate::error::QuorumError;
use crate::frame::{OutcomeResult, TaskOutcome};
use crate::ids::{Rank, RequestId, TaskId, TaskKind};
use crate::reconcile::InFlightTask;
use std::collections::{BTreeMap, BTreeSet};

/// One task waiting for its shard reports.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pending {
    kind: TaskKind,
    request: RequestId,
    reported: BTreeSet<Rank>,
    failure: Option<String>,
}

/// What a report did.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReportOutcome {
    /// Recorded; `remaining` ranks have not reported yet.
    Recorded {
        /// Ranks still to report.
        remaining: u32,
    },
    /// This rank had already reported this task (or the task already finished): ignored.
    Duplicate,
    /// The last report arrived: the task's outcome.
    Finished(TaskOutcome),
}

/// Shard reports of the tasks in flight in one epoch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Quorum {
    world_size: u32,
    pending: BTreeMap<TaskId, Pending>,
    /// Tasks with `seq` below this were started; those not pending have finished.
    started_below: BTreeMap<u64, u64>,
}

impl Quorum {
    /// An empty quorum for a group of `world_size` ranks.
    pub fn new(world_size: u32) -> Quorum {
        Quorum {
            world_size,
            pending: BTreeMap::new(),
            started_below: BTreeMap::new(),
        }
    }

    /// Start collecting reports for `task`. Task ids of one epoch must be started in
    /// increasing `seq` order (the leader allocates them so).
    pub fn start(&mut self, task: TaskId, kind: TaskKind, request: RequestId) {
        self.pending.insert(
            task,
            Pending {
                kind,
                request,
                reported: BTreeSet::new(),
                failure: None,
            },
        );
        let below = self.started_below.entry(task.epoch).or_insert(0);
        *below = (*below).max(task.seq.saturating_add(1));
    }

    /// Record rank `rank`'s report on `task`.
    ///
    /// Errors: [`QuorumError::RankOutOfRange`] for a rank outside `0..world_size`,
    /// [`QuorumError::UnknownTask`] for a task never started here.
    pub fn record(
        &mut self,
        task: TaskId,
        rank: Rank,
        result: Result<(), String>,
    ) -> Result<ReportOutcome, QuorumError> {
        if rank.0 >= self.world_size {
            return Err(QuorumError::RankOutOfRange {
                rank,
                world_size: self.world_size,
            });
        }
        let Some(p) = self.pending.get_mut(&task) else {
            let started = self
                .started_below
                .get(&task.epoch)
                .is_some_and(|b| task.seq < *b);
            return if started {
                Ok(ReportOutcome::Duplicate)
            } else {
                Err(QuorumError::UnknownTask { task })
            };
        };
        if !p.reported.insert(rank) {
            return Ok(ReportOutcome::Duplicate);
        }
        if let Err(reason) = result {
            p.failure.get_or_insert(reason);
        }
        let remaining = self.world_size - p.reported.len() as u32;
        if remaining > 0 {
            return Ok(ReportOutcome::Recorded { remaining });
        }
        let Some(p) = self.pending.remove(&task) else {
            return Err(QuorumError::UnknownTask { task });
        };
        let result = match p.failure {
            None => OutcomeResult::Ok,
            Some(reason) => OutcomeResult::failed(reason),
        };
        Ok(ReportOutcome::Finished(TaskOutcome {
            task,
            kind: p.kind,
            request: p.request,
            result,
        }))
    }

    /// The tasks still waiting for reports, in task id order.
    pub fn in_flight(&self) -> impl Iterator<Item = InFlightTask> + '_ {
        self.pending.iter().map(|(task, p)| InFlightTask {
            task: *task,
            kind: p.kind,
            request: p.request,
        })
    }

    /// The ranks that have reported `task`, or `None` when it is not pending.
    pub fn reported(&self, task: TaskId) -> Option<&BTreeSet<Rank>> {
        self.pending.get(&task).map(|p| &p.reported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: TaskId = TaskId { epoch: 1, seq: 0 };

    fn quorum() -> Quorum {
        let mut q = Quorum::new(3);
        q.start(T, TaskKind::Store, RequestId(5));
        q
    }

    #[test]
    fn finishes_when_every_rank_reported() {
        let mut q = quorum();
        assert_eq!(
            q.record(T, Rank(2), Ok(())),
            Ok(ReportOutcome::Recorded { remaining: 2 })
        );
        assert_eq!(
            q.record(T, Rank(0), Ok(())),
            Ok(ReportOutcome::Recorded { remaining: 1 })
        );
        let out = q.record(T, Rank(1), Ok(())).unwrap();
        assert_eq!(
            out,
            ReportOutcome::Finished(TaskOutcome {
                task: T,
                kind: TaskKind::Store,
                request: RequestId(5),
                result: OutcomeResult::Ok
            })
        );
        assert_eq!(q.in_flight().count(), 0);
    }

    #[test]
    fn duplicates_change_nothing() {
        let mut q = quorum();
        q.record(T, Rank(1), Ok(())).unwrap();
        let before = q.clone();
        assert_eq!(
            q.record(T, Rank(1), Err("late".into())),
            Ok(ReportOutcome::Duplicate)
        );
        assert_eq!(q, before);
        q.record(T, Rank(0), Ok(())).unwrap();
        q.record(T, Rank(2), Ok(())).unwrap();
        let after = q.clone();
        assert_eq!(q.record(T, Rank(2), Ok(())), Ok(ReportOutcome::Duplicate));
        assert_eq!(q, after);
    }

    #[test]
    fn first_failure_reason_wins() {
        let mut q = quorum();
        q.record(T, Rank(1), Err("disk full".into())).unwrap();
        q.record(T, Rank(2), Err("timeout".into())).unwrap();
        match q.record(T, Rank(0), Ok(())).unwrap() {
            ReportOutcome::Finished(o) => {
                assert_eq!(
                    o.result,
                    OutcomeResult::Failed {
                        reason: "disk full".into()
                    }
                )
            }
            other => panic!("expected finished, got {other:?}"),
        }
    }

    #[test]
    fn unknown_tasks_and_ranks_are_rejected() {
        let mut q = quorum();
        let t = TaskId { epoch: 1, seq: 1 };
        assert_eq!(
            q.record(t, Rank(0), Ok(())),
            Err(QuorumError::UnknownTask { task: t })
        );
        let old = TaskId { epoch: 0, seq: 0 };
        assert_eq!(
            q.record(old, Rank(0), Ok(())),
            Err(QuorumError::UnknownTask { task: old })
        );
        assert_eq!(
            q.record(T, Rank(3), Ok(())),
            Err(QuorumError::RankOutOfRange {
                rank: Rank(3),
                world_size: 3
            })
        );
        assert_eq!(q.reported(T).map(|r| r.len()), Some(0));
    }
}
