//! What the leader and follower cores share: the epoch's settings, the queue of outputs, and
//! the per-rank redelivery filter every frame-0 reply passes (docs/DESIGN.md invariant 5).
//!
//! Owns [`Shared`] and the engine's view of the state machines' refusals
//! ([`leader_refusal`], [`follower_refusal`]). It never decides for the group.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use tandem_proto::engine::{AgentError, EngineReply};
use tandem_proto::{Epoch, FollowerError, Frame, LeaderError, Message, Step, TaskId};

use crate::config::CoreConfig;
use crate::layers::LayerLoads;
use crate::output::{CallRef, Event, Output, Peer, StoreCommand};

/// The settings and the output queue of one core.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Shared {
    /// Shared, so that copies of a core (the model checker's states) copy no setting.
    pub(crate) config: Arc<CoreConfig>,
    out: VecDeque<Output>,
    /// Redelivered outcomes this rank's engine already acknowledged (left out of frame 0).
    acknowledged: BTreeSet<TaskId>,
    /// Pages of the pool this rank's engine registered, as the driver last told
    /// (`RankCore::handle_pool`); `None`: none registered.
    pub(crate) pool_pages: Option<u64>,
    /// This rank's layerwise loads and the `wait_layer` calls on them.
    pub(crate) layers: LayerLoads,
    /// Shards of layerwise loads this rank cannot copy as planned, to report as failed.
    pub(crate) layer_failures: Vec<(TaskId, String)>,
}

impl Shared {
    pub(crate) fn new(config: CoreConfig, acknowledged: BTreeSet<TaskId>) -> Shared {
        Shared {
            out: VecDeque::new(),
            acknowledged,
            pool_pages: None,
            layers: LayerLoads::new(config.layers_per_rank),
            layer_failures: Vec::new(),
            config: Arc::new(config),
        }
    }

    pub(crate) fn epoch(&self) -> Epoch {
        self.config.epoch
    }

    pub(crate) fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// Answer `call`. A frame of step 0 reaches the engine without the redeliveries it already
    /// acknowledged: the frame is the same on every rank, only this filter is per rank.
    pub(crate) fn reply(&mut self, call: CallRef, reply: EngineReply) {
        let reply = match reply {
            EngineReply::Frame(mut f) => {
                self.engine_view(&mut f);
                EngineReply::Frame(f)
            }
            other => other,
        };
        self.out.push_back(Output::Reply { call, reply });
    }

    /// `frame` as this rank's engine reads it: frame 0 without the redeliveries it already
    /// acknowledged, every other frame as sealed.
    pub(crate) fn engine_view(&self, f: &mut Frame) {
        if f.step == Step(0) && !self.acknowledged.is_empty() {
            if let Some(rec) = f.reconciliation.as_mut() {
                rec.redelivered
                    .retain(|o| !self.acknowledged.contains(&o.task));
            }
        }
    }

    pub(crate) fn refuse(&mut self, call: CallRef, error: AgentError) {
        self.reply(call, EngineReply::Error(error));
    }

    pub(crate) fn send(&mut self, to: Peer, msg: Message) {
        self.out.push_back(Output::Send { to, msg });
    }

    pub(crate) fn store(&mut self, cmd: StoreCommand) {
        // A layerwise load is copied layer by layer, as its frame's plan says.
        let (cmds, failed) = self.layers.commands(cmd);
        self.out.extend(cmds.into_iter().map(Output::Store));
        self.layer_failures.extend(failed);
    }

    /// A frame reached this rank: its layerwise plans become known and its outcomes settle
    /// `wait_layer` calls.
    pub(crate) fn layer_frame(&mut self, frame: &Frame) {
        for (call, reply) in self.layers.frame(frame) {
            self.reply(call, reply);
        }
    }

    pub(crate) fn emit(&mut self, event: Event) {
        self.out.push_back(Output::Event(event));
    }

    pub(crate) fn push(&mut self, output: Output) {
        self.out.push_back(output);
    }
}

/// The engine's view of a leader refusal.
pub fn leader_refusal(e: LeaderError, epoch: Epoch) -> AgentError {
    match e {
        LeaderError::WindowFull {
            step,
            rank,
            slowest_ack,
            window,
        } => AgentError::WindowFull {
            step,
            rank: rank.0,
            slowest_ack,
            window,
        },
        LeaderError::WrongStep { expected, got } => AgentError::WrongStep { expected, got },
        LeaderError::FrameExpired {
            wanted,
            oldest_retained,
        } => AgentError::FrameExpired {
            epoch,
            wanted,
            oldest: oldest_retained,
        },
        LeaderError::AckBeyondSealed { .. } => AgentError::BadRequest {
            reason: e.to_string(),
        },
        LeaderError::FrameTooLarge { bytes, limit } => AgentError::FrameTooLarge { bytes, limit },
        other => AgentError::NotReady {
            reason: other.to_string(),
        },
    }
}

/// The engine's view of a follower refusal, for rank `rank` in `epoch`.
pub fn follower_refusal(e: FollowerError, rank: u32, epoch: Epoch) -> AgentError {
    match e {
        FollowerError::LeaderBehind {
            epoch,
            wanted,
            sealed,
        } => AgentError::LeaderBehind {
            rank,
            epoch,
            wanted,
            sealed,
        },
        FollowerError::FrameExpired {
            wanted,
            oldest_retained,
        } => AgentError::FrameExpired {
            epoch,
            wanted,
            oldest: oldest_retained,
        },
        other => AgentError::NotReady {
            reason: other.to_string(),
        },
    }
}
