//! Layerwise loads on one rank (docs/LAYERWISE.md): which loads of this epoch are copied
//! layer by layer, how far this rank's copy of each has got, and the engine's `wait_layer`
//! calls waiting on them.
//!
//! Owns [`LayerLoads`], one per rank core. The plan of a load (its layers, their order, the
//! per-layer deadline) is the leader's, taken from the frame that starts the load
//! ([`Frame::layerwise`]); this module never picks a layer, an order or a counter. It turns a
//! plan into this rank's copy command, follows the store's progress reports (layers copied so
//! far), and answers each `wait_layer` exactly once: the layer is here, or a typed
//! [`LayerError`] by the call's deadline. A rank whose copy does not move for the plan's
//! `layer_timeout_ms` fails its shard (reported like any copy failure, so the quorum fails the
//! task and every rank's frame says `Failed`); a failure this rank hears of (its own shard, or
//! the group outcome in a frame) ends every wait on the task at once.
//!
//! It never copies and never decides the group outcome: the rank core reports the shard
//! failures it returns, and the leader's quorum decides.

use std::collections::{BTreeMap, VecDeque};

use tandem_proto::engine::{EngineReply, LayerError};
use tandem_proto::{Epoch, Frame, LayerwiseLoad, OutcomeResult, TaskId, TaskStart};

use crate::output::{CallRef, StoreCommand};

/// Finished tasks remembered so that a late `wait_layer` gets their result, not
/// [`LayerError::UnknownTask`] (the oldest are forgotten first).
const REMEMBERED: usize = 4096;

/// How far this rank's copy of one layerwise load has got.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Progress {
    plan: LayerwiseLoad,
    /// Layers copied into this rank's pages, in the plan's order.
    ready: u32,
    /// When this rank's copy fails unless it moves, ms; `None` until the store began it (or
    /// once it ended).
    deadline_ms: Option<u64>,
    /// Why the task failed, as first heard on this rank.
    failed: Option<String>,
    /// This rank's shard result has been reported (by the store, or by the deadline).
    reported: bool,
}

/// One waiting `wait_layer` call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Wait {
    call: CallRef,
    task: TaskId,
    layer: u32,
    asked: u32,
    deadline_ms: u64,
}

/// The layerwise loads of one rank in one epoch. See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct LayerLoads {
    /// This rank's layers per block shard (`layers_per_rank`).
    layers_per_rank: u32,
    tasks: BTreeMap<TaskId, Progress>,
    /// Tasks with an outcome, oldest first (forgotten past [`REMEMBERED`]).
    done: VecDeque<TaskId>,
    waits: Vec<Wait>,
}

/// A reply to a waiting call, for the core to send.
pub(crate) type Answer = (CallRef, EngineReply);

impl LayerLoads {
    pub(crate) fn new(layers_per_rank: u32) -> LayerLoads {
        LayerLoads {
            layers_per_rank,
            ..LayerLoads::default()
        }
    }

    /// A frame reached this rank (follower: received; leader: sealed): its plans become
    /// known, and its outcomes settle their tasks' waits (a failure ends them at once).
    pub(crate) fn frame(&mut self, frame: &Frame) -> Vec<Answer> {
        for plan in &frame.layerwise {
            self.tasks.entry(plan.task).or_insert_with(|| Progress {
                plan: plan.clone(),
                ready: 0,
                deadline_ms: None,
                failed: None,
                reported: false,
            });
        }
        let mut answers = Vec::new();
        for o in frame.outcomes() {
            let Some(p) = self.tasks.get_mut(&o.task) else {
                continue;
            };
            match &o.result {
                OutcomeResult::Ok => p.ready = p.plan.layers,
                OutcomeResult::Failed { reason } => {
                    p.failed
                        .get_or_insert_with(|| format!("the group outcome is Failed: {reason}"));
                }
                OutcomeResult::Aborted => {
                    p.failed
                        .get_or_insert_with(|| "the group outcome is Aborted".into());
                }
            }
            p.deadline_ms = None;
            self.done.push_back(o.task);
            answers.extend(self.settle(o.task));
        }
        while self.done.len() > REMEMBERED {
            if let Some(t) = self.done.pop_front() {
                self.tasks.remove(&t);
            }
        }
        answers
    }

    /// The store commands for `cmd`: a load copy whose task is layerwise becomes a
    /// [`StoreCommand::CopyLayers`] (one per task); everything else passes unchanged. A plan
    /// this rank cannot carry out (another number of layers than its layout, an order that is
    /// not a permutation) fails this rank's shard instead: returned as `(task, reason)`.
    pub(crate) fn commands(
        &mut self,
        cmd: StoreCommand,
    ) -> (Vec<StoreCommand>, Vec<(TaskId, String)>) {
        let StoreCommand::CopyLoads { epoch, tasks } = cmd else {
            return (vec![cmd], Vec::new());
        };
        let (mut whole, mut out, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for t in tasks {
            match self.tasks.get(&t.task) {
                None => whole.push(t),
                Some(p) => match self.check(&p.plan) {
                    Ok(()) => out.push(copy_layers(epoch, t, p.plan.clone())),
                    Err(reason) => failed.push((t.task, reason)),
                },
            }
        }
        if !whole.is_empty() {
            out.insert(
                0,
                StoreCommand::CopyLoads {
                    epoch,
                    tasks: whole,
                },
            );
        }
        (out, failed)
    }

    fn check(&self, plan: &LayerwiseLoad) -> Result<(), String> {
        if plan.layers != self.layers_per_rank {
            return Err(format!(
                "task {}: the plan copies {} layers, this rank holds {} layers per block",
                plan.task, plan.layers, self.layers_per_rank
            ));
        }
        if !plan.is_valid() {
            return Err(format!(
                "task {}: the plan's layer order is not a permutation of 0..{}",
                plan.task, plan.layers
            ));
        }
        Ok(())
    }

    /// The store has copied `ready` layers of `task` at `now_ms` (0: it began the copy): the
    /// per-layer deadline restarts, and waits for those layers are answered.
    pub(crate) fn copied(&mut self, task: TaskId, ready: u32, now_ms: u64) -> Vec<Answer> {
        let Some(p) = self.tasks.get_mut(&task) else {
            return Vec::new();
        };
        if p.failed.is_some() || p.reported {
            return Vec::new();
        }
        p.ready = p.ready.max(ready.min(p.plan.layers));
        p.deadline_ms =
            (p.ready < p.plan.layers).then(|| now_ms.saturating_add(p.plan.layer_timeout_ms));
        self.settle(task)
    }

    /// This rank's shard of `task` ended with `result` (from the store). Returns whether the
    /// core should report it: not when the per-layer deadline already failed the shard.
    pub(crate) fn shard_done(
        &mut self,
        task: TaskId,
        result: &Result<(), String>,
    ) -> (bool, Vec<Answer>) {
        let Some(p) = self.tasks.get_mut(&task) else {
            return (true, Vec::new());
        };
        if p.reported {
            return (false, Vec::new());
        }
        p.reported = true;
        p.deadline_ms = None;
        match result {
            Ok(()) => p.ready = p.plan.layers,
            Err(reason) => {
                p.failed
                    .get_or_insert_with(|| format!("this rank's copy failed: {reason}"));
            }
        }
        (true, self.settle(task))
    }

    /// An engine's `wait_layer(task, layer)` at `now_ms`, waiting at most `deadline_ms`:
    /// answered now, or kept until the layer arrives, the task fails or the deadline passes.
    pub(crate) fn wait(
        &mut self,
        call: CallRef,
        task: TaskId,
        layer: u32,
        deadline_ms: u64,
        now_ms: u64,
    ) -> Option<Answer> {
        let Some(p) = self.tasks.get(&task) else {
            let err = LayerError::UnknownTask { task, layer };
            return Some((call, EngineReply::Error(err.into())));
        };
        let Some(asked) = p.plan.needed(layer) else {
            let err = LayerError::OutOfRange {
                task,
                layer,
                layers: p.plan.layers,
            };
            return Some((call, EngineReply::Error(err.into())));
        };
        let wait = Wait {
            call,
            task,
            layer,
            asked,
            deadline_ms: now_ms.saturating_add(deadline_ms),
        };
        if let Some(answer) = answer(p, &wait) {
            return Some(answer);
        }
        self.waits.push(wait);
        None
    }

    /// The earliest deadline: a wait's, or a copy's per-layer deadline.
    pub(crate) fn poll_timeout(&self) -> Option<u64> {
        let waits = self.waits.iter().map(|w| w.deadline_ms);
        let copies = self.tasks.values().filter_map(|p| p.deadline_ms);
        waits.chain(copies).min()
    }

    /// The time is `now_ms`: waits past their deadline end in [`LayerError::Timeout`] (or the
    /// task's failure), copies that did not move within the plan's `layer_timeout_ms` fail
    /// this rank's shard (returned as `(task, reason)` for the core to report).
    pub(crate) fn timeout(
        &mut self,
        rank: u32,
        now_ms: u64,
    ) -> (Vec<Answer>, Vec<(TaskId, String)>) {
        let mut failed = Vec::new();
        for (task, p) in &mut self.tasks {
            if p.deadline_ms.is_some_and(|d| now_ms >= d) {
                let layer = p.plan.order.get(p.ready as usize).copied().unwrap_or(0);
                let reason = format!(
                    "rank {rank}: layer {layer} of task {task} not copied within layer_timeout_ms = {} ms ({} of {} layers copied)",
                    p.plan.layer_timeout_ms, p.ready, p.plan.layers
                );
                // Reported by the core through `shard_done`, which marks it reported.
                p.deadline_ms = None;
                p.failed = Some(format!("this rank's copy failed: {reason}"));
                failed.push((*task, reason));
            }
        }
        let mut answers = Vec::new();
        for (task, _) in &failed {
            answers.extend(self.settle(*task));
        }
        let (due, keep): (Vec<Wait>, Vec<Wait>) = std::mem::take(&mut self.waits)
            .into_iter()
            .partition(|w| now_ms >= w.deadline_ms);
        self.waits = keep;
        for w in due {
            let ready = self.tasks.get(&w.task).map_or(0, |p| p.ready);
            let reply = match self.tasks.get(&w.task).and_then(|p| answer(p, &w)) {
                Some((_, reply)) => reply,
                None => EngineReply::Error(
                    LayerError::Timeout {
                        task: w.task,
                        layer: w.layer,
                        ready,
                        asked: w.asked,
                    }
                    .into(),
                ),
            };
            answers.push((w.call, reply));
        }
        (answers, failed)
    }

    /// Every waiting call, for the end of the epoch (answered by the core with its reason).
    pub(crate) fn take_waits(&mut self) -> Vec<CallRef> {
        std::mem::take(&mut self.waits)
            .into_iter()
            .map(|w| w.call)
            .collect()
    }

    /// Answer the waits on `task` that can be answered now.
    fn settle(&mut self, task: TaskId) -> Vec<Answer> {
        let Some(p) = self.tasks.get(&task) else {
            return Vec::new();
        };
        let mut answers = Vec::new();
        self.waits.retain(|w| {
            if w.task != task {
                return true;
            }
            match answer(p, w) {
                Some(a) => {
                    answers.push(a);
                    false
                }
                None => true,
            }
        });
        answers
    }
}

/// The answer to `w` now, if it has one: a failure first (a failed task's pages hold no
/// defined data, even for layers copied before), then the layer when it is here.
fn answer(p: &Progress, w: &Wait) -> Option<Answer> {
    if let Some(reason) = &p.failed {
        let err = LayerError::Failed {
            task: w.task,
            layer: w.layer,
            ready: p.ready,
            asked: w.asked,
            reason: reason.clone(),
        };
        return Some((w.call, EngineReply::Error(err.into())));
    }
    (p.ready >= w.asked).then(|| {
        let reply = EngineReply::LayerReady {
            task: w.task,
            layer: w.layer,
            layers_ready: p.ready,
        };
        (w.call, reply)
    })
}

fn copy_layers(epoch: Epoch, task: TaskStart, plan: LayerwiseLoad) -> StoreCommand {
    StoreCommand::CopyLayers { epoch, task, plan }
}
