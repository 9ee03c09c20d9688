//! The leader's `end_step`: the write-ahead append, the seal, and the window waits with their
//! deadlines (docs/DESIGN.md invariants 1, 5 and 6).
//!
//! With a completion log, what became persistable goes out as an append first
//! (`appends.rs`, the write-ahead pipeline) and a frame reveals only what confirmed appends
//! hold. Without a log, starts and outcomes count as durable at once. A seal refused by the
//! full window waits, until its deadline, for an acknowledgement that opens it.

use std::collections::BTreeSet;

use tandem_proto::engine::{AgentError, EngineReply};
use tandem_proto::{Frame, LeaderError, Message, Step, TaskId, TaskKind, TaskStart};

use super::appends::Flush;
use super::{EndWait, LeaderCore};
use crate::binds::Due;
use crate::output::{CallRef, Peer, StoreCommand};
use crate::shared::{leader_refusal, Shared};

/// What this rank's store was handed before the open step is sealed: the open step's tier
/// operations up to `ops`, and the copies of the tasks in `tasks` (started with page ids, not
/// sealed yet). The seal hands over only the rest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Early {
    ops: usize,
    tasks: BTreeSet<TaskId>,
}

impl LeaderCore {
    /// This rank's copy of `start`, a task started now with page ids (not layerwise) in a group
    /// of one rank: it goes to the store at once, behind the open step's tier operations
    /// recorded so far (the order the seal would hand them in), instead of when the frame is
    /// sealed. The leader's engine wrote a store's pages before asking and hands a load's pages
    /// over with the request, so nothing waits for the frame. (With followers the leader copies
    /// at the seal: the task waits for their shards, which they copy only from the frame, once
    /// their engine acknowledged it.) The shard's report may so
    /// come before the start is durable: its outcome is appended after the start
    /// (`PersistQueue::poll`), and revealed only once durable, in the frame that starts the
    /// task at the earliest (invariants 3 and 5).
    pub(super) fn copy_at_start(&mut self, sh: &mut Shared, kind: TaskKind, start: TaskStart) {
        let epoch = self.leader.epoch();
        let ops = self.leader.open_tier_ops();
        if ops.len() > self.early.ops {
            let ops = ops[self.early.ops..].to_vec();
            self.early.ops += ops.len();
            sh.store(StoreCommand::ApplyTierOps { epoch, ops });
        }
        self.early.tasks.insert(start.task);
        let tasks = vec![start];
        sh.store(match kind {
            TaskKind::Load => StoreCommand::CopyLoads { epoch, tasks },
            TaskKind::Store => StoreCommand::CopyStores { epoch, tasks },
        });
    }

    /// `end_step(step)` of call `call`, waiting at most until `deadline_ms` for the window;
    /// `flush` says how long it waits for the write-ahead.
    pub(super) fn end_step(
        &mut self,
        sh: &mut Shared,
        call: CallRef,
        (step, deadline_ms): (Step, u64),
        flush: Flush,
        now_ms: u64,
    ) {
        // Lookup pins last until the request's load or release; answers without a pin only for
        // their step.
        self.forget_unpinned_lookups();
        if sh.config.durable {
            return self.append_then_seal(sh, call, (step, deadline_ms), flush, now_ms);
        }
        self.persist_volatile();
        self.seal_or_wait(sh, call, step, deadline_ms, now_ms);
    }

    /// Without a completion log, starts and outcomes count as durable at once.
    fn persist_volatile(&mut self) {
        while let Some(batch) = self.leader.poll_persist() {
            if let Err(e) = self.leader.handle_persisted(batch.id) {
                tracing::error!(error = %e, "persist batch refused");
            }
        }
    }

    pub(super) fn seal_or_wait(
        &mut self,
        sh: &mut Shared,
        call: CallRef,
        step: Step,
        deadline_ms: u64,
        now_ms: u64,
    ) {
        if step != self.leader.open_step() {
            let err = AgentError::WrongStep {
                expected: self.leader.open_step(),
                got: step,
            };
            return sh.refuse(call, err);
        }
        match self.seal(sh, step, now_ms) {
            Ok(frame) => sh.reply(call, EngineReply::Frame(Box::new(frame))),
            // An `end_step` that may not wait (deadline 0) is refused now, not at the driver's
            // next timer tick.
            Err(LeaderError::WindowFull { .. }) if deadline_ms <= now_ms => {
                let err = AgentError::WindowFull {
                    step,
                    rank: self.leader.slowest_rank().map_or(0, |r| r.0),
                    slowest_ack: self.leader.slowest_ack(),
                    window: self.leader.config().window_steps,
                };
                sh.refuse(call, err);
            }
            Err(LeaderError::WindowFull { .. }) => self.end_waits.push(EndWait {
                call,
                step,
                deadline_ms,
            }),
            Err(e) => {
                if matches!(e, LeaderError::FrameTooLarge { .. }) {
                    // Admission keeps requests within the limit; only a reconciliation or the
                    // index rebuild's tier operations can get here. Nothing was sealed or sent.
                    tracing::error!(error = %e, step = step.0, "the open step cannot be sealed within protocol.max_frame_bytes");
                }
                sh.refuse(call, leader_refusal(e, self.leader.epoch()));
            }
        }
    }

    /// Seal `step`, send the frame to every admitted follower and start this rank's copies not
    /// started yet: tier operations first (those not handed over already), then loads and
    /// stores. A task started with page ids was copied when it started
    /// ([`Self::copy_at_start`]); a layerwise load now, with its plan; a task started without
    /// page ids once the leader's engine bound its pages (its deadline starts now).
    fn seal(&mut self, sh: &mut Shared, step: Step, now_ms: u64) -> Result<Frame, LeaderError> {
        let sealed = self.leader.seal(step, now_ms);
        self.watch_window(now_ms);
        let frame = sealed?;
        let mut to = Vec::new();
        while let Some((rank, msg)) = self.leader.poll_transmit() {
            // The leader transmits only frames, one per follower: one message for all.
            if let (Some(conn), Message::Frame(_)) = (self.conns.get(&rank), &msg) {
                to.push(*conn);
            }
        }
        if !to.is_empty() {
            sh.send(Peer::Followers(to), Message::Frame(frame.clone()));
        }
        let epoch = frame.epoch;
        // Layerwise plans are known before this rank's copies are issued.
        sh.layer_frame(&frame);
        let sent = std::mem::take(&mut self.early.ops).min(frame.tier_ops.len());
        if frame.tier_ops.len() > sent {
            let ops = frame.tier_ops[sent..].to_vec();
            sh.store(StoreCommand::ApplyTierOps { epoch, ops });
        }
        let loads = self.due(TaskKind::Load, &frame.loads, now_ms);
        if !loads.is_empty() {
            sh.store(StoreCommand::CopyLoads {
                epoch,
                tasks: loads,
            });
        }
        let stores = self.due(TaskKind::Store, &frame.stores, now_ms);
        if !stores.is_empty() {
            sh.store(StoreCommand::CopyStores {
                epoch,
                tasks: stores,
            });
        }
        Ok(frame)
    }

    /// The copies of `tasks` this rank makes now (the others wait for their bind).
    fn due(&mut self, kind: TaskKind, tasks: &[TaskStart], now_ms: u64) -> Vec<TaskStart> {
        let mut now = Vec::with_capacity(tasks.len());
        for t in tasks {
            if self.early.tasks.remove(&t.task) {
                continue; // copied when it started
            }
            self.binds.arrived(t, now_ms);
            if let Due::Copy(t) = self.binds.due(kind, t.clone()) {
                now.push(t);
            }
        }
        now
    }

    /// An acknowledgement arrived: seal for the `end_step`s the window held.
    pub(super) fn retry_end_waits(&mut self, sh: &mut Shared, now_ms: u64) {
        if self.end_waits.is_empty() {
            return;
        }
        for w in std::mem::take(&mut self.end_waits) {
            if w.step != self.leader.open_step() {
                let err = AgentError::WrongStep {
                    expected: self.leader.open_step(),
                    got: w.step,
                };
                sh.refuse(w.call, err);
                continue;
            }
            if !sh.config.durable {
                self.persist_volatile();
            } else if self.appends.blocking(w.step).is_some() {
                // An append stamped with this step is not answered yet.
                self.end_waits.push(w);
                continue;
            }
            match self.seal(sh, w.step, now_ms) {
                Ok(frame) => sh.reply(w.call, EngineReply::Frame(Box::new(frame))),
                Err(LeaderError::WindowFull { .. }) => self.end_waits.push(w),
                Err(e) => sh.refuse(w.call, leader_refusal(e, self.leader.epoch())),
            }
        }
    }
}
