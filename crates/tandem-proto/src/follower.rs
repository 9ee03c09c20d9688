//! The follower state machine (ranks 1..world_size): keeps the leader's frames and answers
//! the engine's positional reads (docs/DESIGN.md invariants 1, 2, 4 and 6).
//!
//! Inputs: frames from the leader ([`Follower::handle_frame`]), reads and bounded waits from
//! the engine, timeouts. Outputs: [`Follower::poll_event`] (a wait's frame or its typed
//! failure), [`Follower::poll_timeout`], and the messages built by `ack`, `report` and
//! `heartbeat` for the driver to send.
//!
//! Owns the retained frames and the waits. It never makes a group-visible decision: it only
//! stores what the leader sealed and hands it out by `(epoch, step)`, the same frame every
//! time. It never reads a clock and never lets a wait outlive its deadline.

use crate::error::FollowerError;
use crate::frame::Frame;
use crate::ids::{Epoch, Rank, Step, TaskId};
use crate::reconcile::InFlightTask;
use crate::retention::{FrameStore, Lookup};
use crate::wire::{Ack, Heartbeat, Message, ShardReport};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// The id of one bounded wait, unique within a follower.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct WaitId(pub u64);

impl fmt::Display for WaitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// How a wait ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FollowerEvent {
    /// The frame waited for is here.
    FrameReady {
        /// The wait.
        wait: WaitId,
        /// The frame (identical to what [`Follower::read`] returns).
        frame: Frame,
    },
    /// The wait failed: [`FollowerError::LeaderBehind`] at its deadline, or
    /// [`FollowerError::FrameExpired`] when the step is older than the retention.
    WaitFailed {
        /// The wait.
        wait: WaitId,
        /// Why.
        error: FollowerError,
    },
}

/// Counters for metrics. All counts since the follower was created.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FollowerStats {
    /// Frames accepted.
    pub frames_received: u64,
    /// Frames received again, identical: ignored.
    pub duplicate_frames: u64,
    /// Frames rejected because they belong to an older epoch.
    pub stale_epoch_rejected: u64,
    /// Frames rejected because they belong to a later epoch.
    pub future_epoch_rejected: u64,
    /// Frames rejected for any other reason (gap, conflict, misplaced reconciliation).
    pub frames_rejected: u64,
    /// Reads and waits of steps older than the retention.
    pub expired_reads: u64,
    /// Waits that ended in `LeaderBehind`.
    pub waits_timed_out: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Wait {
    step: Step,
    deadline_ms: u64,
}

/// A follower rank of one epoch. See the module docs for the input/output contract.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Follower {
    epoch: Epoch,
    rank: Rank,
    frames: FrameStore,
    waits: BTreeMap<WaitId, Wait>,
    next_wait: u64,
    events: VecDeque<FollowerEvent>,
    /// Tasks seen started in frames whose outcome no frame has revealed yet.
    open_tasks: BTreeMap<TaskId, InFlightTask>,
    acked: Option<Step>,
    stats: FollowerStats,
}

impl Follower {
    /// A follower of `epoch` as `rank`, keeping the last `retention_steps` frames (at least 1).
    pub fn new(epoch: Epoch, rank: Rank, retention_steps: u64) -> Follower {
        Follower {
            epoch,
            rank,
            frames: FrameStore::new(usize::try_from(retention_steps).unwrap_or(usize::MAX)),
            waits: BTreeMap::new(),
            next_wait: 0,
            events: VecDeque::new(),
            open_tasks: BTreeMap::new(),
            acked: None,
            stats: FollowerStats::default(),
        }
    }

    /// The follower's epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The follower's rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// The last step received from the leader, if any.
    pub fn received_step(&self) -> Option<Step> {
        self.frames.last_step()
    }

    /// The oldest received step still retained (readable), if any.
    pub fn oldest_retained_step(&self) -> Option<Step> {
        self.frames.oldest_step()
    }

    /// The last step this follower acknowledged, if any.
    pub fn acked_step(&self) -> Option<Step> {
        self.acked
    }

    /// Take a frame from the leader. Frames arrive once per step, in order; an identical
    /// repeat is ignored.
    ///
    /// Errors (the frame is never applied, and the rejection is counted):
    /// [`FollowerError::StaleEpoch`], [`FollowerError::FutureEpoch`],
    /// [`FollowerError::FrameGap`] for a step beyond the next expected,
    /// [`FollowerError::ConflictingFrame`] for a different frame of a step already held,
    /// [`FollowerError::MisplacedReconciliation`] for a reconciliation on a step other than 0.
    pub fn handle_frame(&mut self, frame: Frame) -> Result<(), FollowerError> {
        let ours = self.epoch;
        if frame.epoch < ours {
            self.stats.stale_epoch_rejected += 1;
            return Err(FollowerError::StaleEpoch {
                ours,
                theirs: frame.epoch,
            });
        }
        if frame.epoch > ours {
            self.stats.future_epoch_rejected += 1;
            return Err(FollowerError::FutureEpoch {
                ours,
                theirs: frame.epoch,
            });
        }
        if let Err(e) = self.check_position(&frame) {
            if e.is_none() {
                self.stats.duplicate_frames += 1;
                return Ok(());
            }
            self.stats.frames_rejected += 1;
            return Err(e.unwrap_or(FollowerError::ConflictingFrame { step: frame.step }));
        }
        self.stats.frames_received += 1;
        for (kind, t) in frame.started() {
            self.open_tasks.insert(
                t.task,
                InFlightTask {
                    task: t.task,
                    kind,
                    request: t.request,
                },
            );
        }
        for o in frame.outcomes() {
            self.open_tasks.remove(&o.task);
        }
        let step = frame.step;
        self.frames.push(frame);
        self.release_waits(step);
        Ok(())
    }

    /// `Ok(())` when `frame` is the next one; `Err(None)` for an identical repeat;
    /// `Err(Some(e))` when it must be rejected.
    fn check_position(&self, frame: &Frame) -> Result<(), Option<FollowerError>> {
        if frame.reconciliation.is_some() && frame.step != Step(0) {
            return Err(Some(FollowerError::MisplacedReconciliation {
                step: frame.step,
            }));
        }
        let expected = self.frames.next_step();
        if frame.step > expected {
            return Err(Some(FollowerError::FrameGap {
                expected,
                got: frame.step,
            }));
        }
        if frame.step < expected {
            return match self.frames.lookup(frame.step) {
                Lookup::Retained(held) if held == frame => Err(None),
                Lookup::Retained(_) => {
                    Err(Some(FollowerError::ConflictingFrame { step: frame.step }))
                }
                // Too old to compare: it cannot be applied again anyway.
                _ => Err(None),
            };
        }
        Ok(())
    }

    fn release_waits(&mut self, step: Step) {
        let ready: Vec<WaitId> = self
            .waits
            .iter()
            .filter(|(_, w)| w.step == step)
            .map(|(id, _)| *id)
            .collect();
        for id in ready {
            self.waits.remove(&id);
            if let Lookup::Retained(f) = self.frames.lookup(step) {
                self.events.push_back(FollowerEvent::FrameReady {
                    wait: id,
                    frame: f.clone(),
                });
            }
        }
    }

    /// Positional, idempotent read: the frame of `step` of this epoch, the same every time;
    /// `Ok(None)` when the leader has not sealed it yet (or it has not arrived).
    ///
    /// Errors: [`FollowerError::FrameExpired`] when `step` is older than the retention.
    pub fn read(&self, step: Step) -> Result<Option<&Frame>, FollowerError> {
        match self.frames.lookup(step) {
            Lookup::Retained(f) => Ok(Some(f)),
            Lookup::Expired { oldest } => Err(FollowerError::FrameExpired {
                wanted: step,
                oldest_retained: oldest,
            }),
            Lookup::NotYet => Ok(None),
        }
    }

    /// Wait for the frame of `step` until `deadline_ms` on the caller's clock. The wait ends
    /// with exactly one [`FollowerEvent`]: at once when the frame is already here or expired,
    /// otherwise when it arrives or at [`Self::handle_timeout`] past the deadline.
    pub fn wait(&mut self, step: Step, deadline_ms: u64) -> WaitId {
        let id = WaitId(self.next_wait);
        self.next_wait += 1;
        match self.read(step) {
            Ok(Some(f)) => {
                let frame = f.clone();
                self.events
                    .push_back(FollowerEvent::FrameReady { wait: id, frame });
            }
            Err(error) => {
                self.stats.expired_reads += 1;
                self.events
                    .push_back(FollowerEvent::WaitFailed { wait: id, error });
            }
            Ok(None) => {
                self.waits.insert(id, Wait { step, deadline_ms });
            }
        }
        id
    }

    /// Cancel a pending wait; `true` if it was pending (no event will follow).
    pub fn cancel(&mut self, wait: WaitId) -> bool {
        self.waits.remove(&wait).is_some()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<FollowerEvent> {
        self.events.pop_front()
    }

    /// The earliest pending wait deadline (ms), if any.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.waits.values().map(|w| w.deadline_ms).min()
    }

    /// Fail every wait whose deadline is at or before `now_ms` with
    /// [`FollowerError::LeaderBehind`], naming both positions.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        let due: Vec<WaitId> = self
            .waits
            .iter()
            .filter(|(_, w)| w.deadline_ms <= now_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(w) = self.waits.remove(&id) {
                self.stats.waits_timed_out += 1;
                let error = FollowerError::LeaderBehind {
                    epoch: self.epoch,
                    wanted: w.step,
                    sealed: self.received_step(),
                };
                self.events
                    .push_back(FollowerEvent::WaitFailed { wait: id, error });
            }
        }
    }

    /// The engine applied every frame up to `step`: the `Ack` to send to the leader.
    ///
    /// Errors: [`FollowerError::AckBeyondReceived`] for a step not received yet.
    pub fn ack(&mut self, step: Step) -> Result<Message, FollowerError> {
        let received = self.received_step();
        if received.is_none_or(|r| step > r) {
            return Err(FollowerError::AckBeyondReceived { step, received });
        }
        self.acked = Some(self.acked.map_or(step, |a| a.max(step)));
        Ok(Message::Ack(Ack {
            epoch: self.epoch,
            rank: self.rank,
            step,
        }))
    }

    /// This rank's shard of `task` finished (`Ok`) or failed (`Err(reason)`): the
    /// `ShardReport` to send to the leader.
    pub fn report(&self, task: TaskId, result: Result<(), String>) -> Message {
        Message::ShardReport(ShardReport {
            epoch: self.epoch,
            task,
            rank: self.rank,
            result,
        })
    }

    /// The heartbeat to send at `now_ms`.
    pub fn heartbeat(&self, now_ms: u64) -> Message {
        Message::Heartbeat(Heartbeat {
            epoch: self.epoch,
            rank: self.rank,
            now_ms,
        })
    }

    /// Dispatch a message from the leader. Only `Frame` is taken inside an epoch.
    ///
    /// Errors: those of [`Self::handle_frame`]; [`FollowerError::UnexpectedMessage`] for any
    /// other message (the handshake is handled by the driver).
    pub fn handle_message(&mut self, msg: Message) -> Result<(), FollowerError> {
        match msg {
            Message::Frame(f) => self.handle_frame(f),
            other => Err(FollowerError::UnexpectedMessage { kind: other.kind() }),
        }
    }

    /// Tasks seen started in received frames whose outcome no received frame revealed yet, in
    /// task id order. Any surviving rank can report these when the epoch ends.
    pub fn open_tasks(&self) -> Vec<InFlightTask> {
        self.open_tasks.values().copied().collect()
    }

    /// Counters for metrics.
    pub fn stats(&self) -> &FollowerStats {
        &self.stats
    }
}
