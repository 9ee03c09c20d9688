//! One engine's task → outcome map: which task ids it requested, which a frame started, which
//! outcomes it received, so that every task reaches the engine exactly once, as an outcome or
//! as "never started".
//!
//! Pure bookkeeping over the frames an engine applies, in order ([`TaskBook::observe`]); it
//! never does IO. [`crate::EngineSession`] drives it; it is public so that an engine which
//! drives [`crate::EngineClient`] itself can keep the same map.
//!
//! # Rules (each has a test below)
//! 1. **Requested, started, settled.** A `store` or `load` reply names a task
//!    ([`TaskBook::requested`], leader only). A frame that lists it in `stores` or `loads`
//!    starts it. An outcome settles it.
//! 2. **Each outcome once.** The first time a task's outcome appears (in `finished`, or in a
//!    reconciliation's `redelivered` or `aborted`) it is delivered, with the task's start when
//!    this engine saw it. Later appearances are not delivered: one seen again after the frame
//!    that first delivered it was acknowledged is a *duplicate* (an agent bug), one whose
//!    first frame was never acknowledged is a *redelivery* (the agent is right to send it
//!    again). Both are counted.
//! 3. **Settled by the first frame of a later epoch.** When that frame has been applied (its
//!    reconciliation first), a task the engine requested in an earlier epoch that no frame
//!    started and no outcome settled *never started*: its pages are the engine's again; a task
//!    started in an earlier epoch and still without an outcome is *lost* (the reconciliation
//!    should have aborted it). Both are delivered once, in that frame's [`Observed`].
//! 4. **Outcomes of unseen tasks** (a follower that joined after the start frame) are
//!    delivered without a start and counted.
//! 5. **Bounded memory.** Delivered task ids are kept for the last [`KEPT_EPOCHS`] epochs, as
//!    the client keeps its own filter ([`crate::EngineClient`]); older redeliveries cannot
//!    arrive.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use tandem_proto::frame::{Frame, TaskOutcome, TaskStart};
use tandem_proto::ids::{Epoch, RequestId, Step, TaskId, TaskKind};

/// Epochs whose delivered task ids are kept, counting back from the newest frame's epoch.
pub const KEPT_EPOCHS: u64 = 16;

/// A task a frame started, as this engine saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartedTask {
    /// Store or load.
    pub kind: TaskKind,
    /// The start as the frame listed it (task, request, blocks, pages, tiers).
    pub start: TaskStart,
}

/// A task id a `store` or `load` call returned (leader only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestedTask {
    /// The task.
    pub task: TaskId,
    /// Store or load.
    pub kind: TaskKind,
    /// The engine's request.
    pub request: RequestId,
}

/// An outcome delivered to the engine, once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The group's verdict.
    pub outcome: TaskOutcome,
    /// The task's start, when this engine applied the frame that listed it (`None`: rule 4).
    pub start: Option<StartedTask>,
}

/// What one applied frame brought (rule 3's lists are empty except on the first frame of a
/// later epoch).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Outcomes delivered for the first time, in apply order (redelivered, aborted, finished).
    pub outcomes: Vec<Delivered>,
    /// Tasks this engine requested in an earlier epoch that never started.
    pub not_started: Vec<RequestedTask>,
    /// Tasks started in an earlier epoch that this frame did not settle.
    pub lost: Vec<StartedTask>,
}

/// Counters of one engine's task map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TaskTally {
    /// Outcomes delivered (each task once).
    pub outcomes: u64,
    /// Outcomes seen again after the frame that delivered them was acknowledged (not
    /// delivered again; an agent bug).
    pub duplicates: u64,
    /// Outcomes seen again whose first frame was never acknowledged (not delivered again; the
    /// agent is right to send them).
    pub redelivered_unacked: u64,
    /// Outcomes of tasks this engine never saw started (delivered without a start).
    pub unseen_outcomes: u64,
    /// Tasks started and never settled (rule 3, and [`TaskBook::close`]).
    pub lost: u64,
    /// Tasks requested that never started.
    pub not_started: u64,
    /// Starts of a task already started or settled (not applied twice; an agent bug).
    pub repeated_starts: u64,
}

/// One engine's task → outcome map (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct TaskBook {
    requested: BTreeMap<TaskId, RequestedTask>,
    open: BTreeMap<TaskId, StartedTask>,
    delivered: HashMap<TaskId, (u64, u64)>,
    acked: BTreeMap<u64, u64>,
    epoch: Option<u64>,
    tally: TaskTally,
}

impl TaskBook {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// A `store` or `load` call returned `task` (rule 1). Noting a task again changes nothing.
    pub fn requested(&mut self, task: TaskId, kind: TaskKind, request: RequestId) {
        if self.open.contains_key(&task) || self.delivered.contains_key(&task) {
            return;
        }
        self.requested.entry(task).or_insert(RequestedTask {
            task,
            kind,
            request,
        });
    }

    /// Apply `frame`, read in order: its starts, then its outcomes (rule 2), then, for the first
    /// frame of a later epoch, settle the earlier epochs (rule 3).
    pub fn observe(&mut self, frame: &Frame) -> Observed {
        let mut observed = Observed::default();
        let position = (frame.epoch.0, frame.step.0);
        for (kind, start) in frame.started() {
            let task = start.task;
            if self.open.contains_key(&task) || self.delivered.contains_key(&task) {
                self.tally.repeated_starts += 1;
                continue;
            }
            self.requested.remove(&task);
            self.open.insert(
                task,
                StartedTask {
                    kind,
                    start: start.clone(),
                },
            );
        }
        for outcome in frame.outcomes() {
            let task = outcome.task;
            if let Some(&(epoch, step)) = self.delivered.get(&task) {
                if self.acked.get(&epoch).is_some_and(|&a| a >= step) {
                    self.tally.duplicates += 1;
                } else {
                    self.tally.redelivered_unacked += 1;
                }
                continue;
            }
            self.delivered.insert(task, position);
            self.requested.remove(&task);
            let start = self.open.remove(&task);
            if start.is_none() {
                self.tally.unseen_outcomes += 1;
            }
            self.tally.outcomes += 1;
            observed.outcomes.push(Delivered {
                outcome: outcome.clone(),
                start,
            });
        }
        if self.epoch.is_none_or(|e| frame.epoch.0 > e) {
            self.settle_before(frame.epoch.0, &mut observed);
            self.epoch = Some(frame.epoch.0);
        }
        observed
    }

    /// `ack(step)` succeeded in `epoch`: every frame up to `step` is acknowledged.
    pub fn acked(&mut self, epoch: Epoch, step: Step) {
        let a = self.acked.entry(epoch.0).or_insert(step.0);
        *a = (*a).max(step.0);
    }

    /// Tasks started and still without an outcome.
    pub fn open_tasks(&self) -> usize {
        self.open.len()
    }

    /// Tasks requested that no frame has started yet.
    pub fn pending_requests(&self) -> usize {
        self.requested.len()
    }

    /// The counters so far.
    pub fn tally(&self) -> TaskTally {
        self.tally
    }

    /// End of the engine's run: tasks still open are lost and counted; they are returned.
    pub fn close(&mut self) -> Vec<StartedTask> {
        let open = std::mem::take(&mut self.open);
        self.tally.lost += open.len() as u64;
        open.into_values().collect()
    }

    /// Rule 3 for the first frame of `epoch`, and rule 5.
    fn settle_before(&mut self, epoch: u64, observed: &mut Observed) {
        let older = |t: &TaskId| t.epoch < epoch;
        let not_started: Vec<TaskId> = self.requested.keys().copied().filter(older).collect();
        for task in not_started {
            if let Some(r) = self.requested.remove(&task) {
                self.tally.not_started += 1;
                observed.not_started.push(r);
            }
        }
        let lost: Vec<TaskId> = self.open.keys().copied().filter(older).collect();
        for task in lost {
            if let Some(s) = self.open.remove(&task) {
                self.tally.lost += 1;
                observed.lost.push(s);
            }
        }
        let floor = epoch.saturating_sub(KEPT_EPOCHS);
        self.delivered.retain(|t, _| t.epoch >= floor);
        self.acked.retain(|&e, _| e >= floor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::frame::{OutcomeResult, Reconciliation};
    use tandem_proto::ids::{BlockHash, PageId};

    fn id(epoch: u64, seq: u64) -> TaskId {
        TaskId { epoch, seq }
    }

    fn start(epoch: u64, seq: u64) -> TaskStart {
        TaskStart {
            task: id(epoch, seq),
            request: RequestId(seq),
            block_hashes: vec![BlockHash::from(seq)],
            page_ids: vec![PageId(0)],
            tiers: vec![],
        }
    }

    fn outcome(epoch: u64, seq: u64, result: OutcomeResult) -> TaskOutcome {
        TaskOutcome {
            task: id(epoch, seq),
            kind: TaskKind::Store,
            request: RequestId(seq),
            result,
        }
    }

    fn frame(epoch: u64, step: u64, stores: Vec<TaskStart>, finished: Vec<TaskOutcome>) -> Frame {
        let mut f = Frame::empty(Epoch(epoch), Step(step));
        f.stores = stores;
        f.finished = finished;
        f
    }

    /// Frame 0 of `epoch` with a reconciliation.
    fn frame0(epoch: u64, redelivered: Vec<TaskOutcome>, aborted: Vec<TaskOutcome>) -> Frame {
        let mut f = Frame::empty(Epoch(epoch), Step(0));
        f.reconciliation = Some(Reconciliation {
            redelivered,
            aborted,
        });
        f
    }

    fn started(epoch: u64, seq: u64) -> StartedTask {
        StartedTask {
            kind: TaskKind::Store,
            start: start(epoch, seq),
        }
    }

    #[test]
    fn rule_1_and_2_each_outcome_is_delivered_once_with_its_start() {
        let mut b = TaskBook::new();
        b.requested(id(1, 0), TaskKind::Store, RequestId(0));
        assert_eq!(b.pending_requests(), 1);
        let o = b.observe(&frame(1, 0, vec![start(1, 0)], vec![]));
        assert_eq!(o, Observed::default());
        assert_eq!((b.pending_requests(), b.open_tasks()), (0, 1));
        let o = b.observe(&frame(1, 1, vec![], vec![outcome(1, 0, OutcomeResult::Ok)]));
        assert_eq!(
            o.outcomes,
            vec![Delivered {
                outcome: outcome(1, 0, OutcomeResult::Ok),
                start: Some(started(1, 0)),
            }]
        );
        assert_eq!(b.open_tasks(), 0);
        assert_eq!(
            b.tally(),
            TaskTally {
                outcomes: 1,
                ..TaskTally::default()
            }
        );
    }

    #[test]
    fn rule_2_repeats_after_an_ack_are_duplicates_and_before_it_redeliveries() {
        let mut b = TaskBook::new();
        b.observe(&frame(1, 0, vec![start(1, 0), start(1, 1)], vec![]));
        b.observe(&frame(1, 1, vec![], vec![outcome(1, 0, OutcomeResult::Ok)]));
        b.acked(Epoch(1), Step(1));
        b.observe(&frame(1, 2, vec![], vec![outcome(1, 1, OutcomeResult::Ok)]));
        // The ack of step 2 never succeeded; the group restarts and redelivers both outcomes.
        let o = b.observe(&frame0(
            2,
            vec![
                outcome(1, 0, OutcomeResult::Ok),
                outcome(1, 1, OutcomeResult::Ok),
            ],
            vec![],
        ));
        assert!(o.outcomes.is_empty(), "nothing is delivered twice");
        let t = b.tally();
        assert_eq!((t.duplicates, t.redelivered_unacked), (1, 1));
        // A start listed twice is not applied twice.
        b.observe(&frame(2, 1, vec![start(1, 0)], vec![]));
        assert_eq!(b.tally().repeated_starts, 1);
        assert_eq!(b.open_tasks(), 0);
    }

    #[test]
    fn rule_3_frame_0_settles_never_started_and_lost_tasks_after_its_reconciliation() {
        let mut b = TaskBook::new();
        for seq in 0..5 {
            b.requested(id(1, seq), TaskKind::Store, RequestId(seq));
        }
        // Tasks 0..3 start; 3 and 4 were requested but no frame listed them before the
        // restart (the reply of the end_step that sealed 3 was lost, so only frame 0 knows).
        b.observe(&frame(
            1,
            0,
            vec![start(1, 0), start(1, 1), start(1, 2)],
            vec![],
        ));
        b.observe(&frame(1, 1, vec![], vec![outcome(1, 2, OutcomeResult::Ok)]));
        let o = b.observe(&frame0(
            2,
            vec![],
            vec![
                outcome(1, 0, OutcomeResult::Aborted),
                outcome(1, 3, OutcomeResult::Aborted),
            ],
        ));
        let delivered: Vec<TaskId> = o.outcomes.iter().map(|d| d.outcome.task).collect();
        assert_eq!(delivered, vec![id(1, 0), id(1, 3)]);
        assert_eq!(
            o.not_started,
            vec![RequestedTask {
                task: id(1, 4),
                kind: TaskKind::Store,
                request: RequestId(4),
            }]
        );
        assert_eq!(o.lost, vec![started(1, 1)]);
        let t = b.tally();
        assert_eq!((t.not_started, t.lost, t.unseen_outcomes), (1, 1, 1));
        // Settled once: the next frame of the epoch settles nothing more.
        let o = b.observe(&frame(2, 1, vec![], vec![]));
        assert_eq!(o, Observed::default());
        // Tasks open at the end are lost too.
        b.observe(&frame(2, 2, vec![start(2, 0)], vec![]));
        assert_eq!(b.close(), vec![started(2, 0)]);
        assert_eq!(b.tally().lost, 2);
    }

    #[test]
    fn rule_4_outcomes_of_unseen_tasks_are_delivered_without_a_start() {
        let mut b = TaskBook::new();
        let o = b.observe(&frame0(
            3,
            vec![],
            vec![outcome(2, 7, OutcomeResult::Aborted)],
        ));
        assert_eq!(o.outcomes[0].start, None);
        assert_eq!(b.tally().unseen_outcomes, 1);
    }

    #[test]
    fn rule_5_delivered_ids_are_kept_for_a_bounded_number_of_epochs() {
        let mut b = TaskBook::new();
        b.observe(&frame(1, 0, vec![], vec![outcome(1, 0, OutcomeResult::Ok)]));
        b.observe(&frame0(1 + KEPT_EPOCHS, vec![], vec![]));
        assert_eq!(b.delivered.len(), 1, "still within the kept epochs");
        b.observe(&frame0(2 + KEPT_EPOCHS, vec![], vec![]));
        assert!(b.delivered.is_empty() && b.acked.is_empty());
    }

    #[test]
    fn requesting_a_settled_task_again_changes_nothing() {
        let mut b = TaskBook::new();
        b.observe(&frame(1, 0, vec![start(1, 0)], vec![]));
        b.requested(id(1, 0), TaskKind::Store, RequestId(0));
        assert_eq!(b.pending_requests(), 0);
        b.observe(&frame(1, 1, vec![], vec![outcome(1, 0, OutcomeResult::Ok)]));
        b.requested(id(1, 0), TaskKind::Store, RequestId(0));
        assert_eq!(b.pending_requests(), 0);
    }
}
