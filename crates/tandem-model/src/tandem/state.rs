//! The state of the Tandem model: the rank cores the agents run (`tandem-core`'s `RankCore`),
//! the network between them, the engines, the durable store, and the ghost record the
//! properties read.
//!
//! Owns the shape of a model state and the engine's apply rule. Must never: decide anything
//! the protocol decides (the cores do that); engines here only record what reached them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tandem_core::{Append, CallRef, FollowerCore, LeaderCore, RankCore, Role};
use tandem_proto::engine::AgentError;
use tandem_proto::{
    undelivered_outcomes, Epoch, Frame, InFlightTask, Message, Step, TaskId, TaskOutcome,
};

/// What one rank's engine has seen. The applied frames, outcome counts and acknowledgements
/// survive restarts (the acknowledgements are the rank's durable delivery record); the
/// position, wait and shard copies belong to one epoch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EngineState {
    /// The epoch the rank's agent runs in.
    pub epoch: Epoch,
    /// The next step of `epoch` this engine applies.
    pub next_step: Step,
    /// The engine call a bounded wait blocks, if any (follower ranks only).
    pub wait: Option<CallRef>,
    /// The typed error a wait or read ended in; the rank is down until the group restarts.
    pub failed: Option<AgentError>,
    /// Every frame applied, under the `(epoch, step)` position the engine applied it as.
    pub applied: BTreeMap<(Epoch, Step), Frame>,
    /// How many times each task's outcome reached this engine.
    pub outcomes: BTreeMap<TaskId, u8>,
    /// Task ids this engine acknowledged (durable; the filter for redeliveries).
    pub acknowledged: BTreeSet<TaskId>,
    /// Shards this rank's store copies in this epoch (as its core asked): task → reports sent.
    pub shards: BTreeMap<TaskId, u8>,
}

impl EngineState {
    /// A fresh engine in epoch `epoch`.
    pub fn new(epoch: Epoch) -> EngineState {
        EngineState {
            epoch,
            next_step: Step(0),
            wait: None,
            failed: None,
            applied: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            acknowledged: BTreeSet::new(),
            shards: BTreeMap::new(),
        }
    }

    /// Apply `frame` as this engine's next step. With `dedup`, outcomes this engine already
    /// acknowledged are skipped (the engine client's filter, `tandem-proto`'s
    /// `undelivered_outcomes`); without it every outcome of the frame reaches the engine. The
    /// engine acknowledges each outcome as it applies it (one atomic write of the delivery
    /// record).
    pub fn apply(&mut self, frame: &Frame, dedup: bool) {
        let outcomes: Vec<TaskOutcome> = if dedup {
            undelivered_outcomes(frame, &self.acknowledged)
                .into_iter()
                .cloned()
                .collect()
        } else {
            frame.outcomes().cloned().collect()
        };
        for outcome in outcomes {
            let count = self.outcomes.entry(outcome.task).or_insert(0);
            *count = count.saturating_add(1);
            self.acknowledged.insert(outcome.task);
        }
        self.applied
            .insert((self.epoch, self.next_step), frame.clone());
        self.next_step = self.next_step.next();
    }
}

/// The abstract durable store (Redis in production).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DurableLog {
    /// The completion stream: every outcome made durable, in append order.
    pub outcomes: Vec<TaskOutcome>,
    /// Task starts the leader logged (from its persist batches), before any frame revealed them.
    pub started: Vec<InFlightTask>,
}

/// One state of the Tandem model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TandemState {
    /// The group's current epoch, from 1.
    pub epoch: Epoch,
    /// Rank 0's core of the current epoch.
    pub leader: RankCore,
    /// The follower cores of the current epoch; index `i` is rank `i + 1`.
    pub followers: Vec<RankCore>,
    /// Leader → rank `i + 1`: messages in flight, oldest first (one ordered connection).
    pub to_follower: Vec<VecDeque<Message>>,
    /// Rank `i + 1` → leader: messages in flight, oldest first.
    pub to_leader: Vec<VecDeque<Message>>,
    /// The append the leader's `end_step` asked for, and whether it is durable yet (the
    /// driver has not confirmed it to the core either way).
    pub persisting: Option<(Append, bool)>,
    /// The leader engine's `end_step` waits for its answer (an append, or the window).
    pub sealing: bool,
    /// The durable store.
    pub durable: DurableLog,
    /// Engines of every rank; index is the rank.
    pub engines: Vec<EngineState>,
    /// Ghost: every frame the leaders sealed, by `(epoch, step)`. Read by properties only.
    pub sealed: BTreeMap<(Epoch, Step), Frame>,
    /// Stores started so far over the whole run.
    pub stores_started: u8,
    /// Duplicate shard reports sent so far over the whole run.
    pub duplicates_sent: u8,
    /// Lookups (each with its load) made so far over the whole run.
    pub loads_started: u8,
    /// Appends the log refused so far over the whole run.
    pub appends_failed: u8,
    /// Shard copies failed so far over the whole run.
    pub shards_failed: u8,
    /// The model clock (ms) since the epoch began; it moves only when a wait deadline fires.
    pub now_ms: u64,
    /// Things the cores did that no correct run does (an unexpected refusal or failure, a
    /// second frame for a sealed step, a reread that differed, an older epoch's message taken).
    /// Read by properties.
    pub anomalies: Vec<String>,
}

/// The leader core's parts (rank 0 always leads).
pub fn leader_of(core: &RankCore) -> Option<&LeaderCore> {
    match core.role() {
        Role::Leader(l) => Some(l),
        Role::Follower(_) => None,
    }
}

/// A follower core's parts.
pub fn follower_of(core: &RankCore) -> Option<&FollowerCore> {
    match core.role() {
        Role::Follower(f) => Some(f),
        Role::Leader(_) => None,
    }
}

impl TandemState {
    /// The engine of follower rank `rank` (1-based) and its core.
    pub fn follower_mut(&mut self, rank: u32) -> Option<(&mut RankCore, &mut EngineState)> {
        let i = usize::try_from(rank).ok()?;
        let follower = self.followers.get_mut(i.checked_sub(1)?)?;
        let engine = self.engines.get_mut(i)?;
        Some((follower, engine))
    }

    /// The leader's open step.
    pub fn open_step(&self) -> Step {
        leader_of(&self.leader).map_or(Step(0), LeaderCore::next_step)
    }

    /// True when nothing is left to happen on its own: the leader has sealed step 0 of its
    /// epoch (so the reconciliation is out), no message is in flight, no append is pending,
    /// nothing durable is left unrevealed, no rank failed, and every engine has applied every
    /// frame the current leader sealed.
    pub fn quiescent(&self) -> bool {
        let open = self.open_step();
        let unrevealed =
            leader_of(&self.leader).is_some_and(|l| !l.leader().durable_unrevealed().is_empty());
        open.0 > 0
            && self.to_follower.iter().all(VecDeque::is_empty)
            && self.to_leader.iter().all(VecDeque::is_empty)
            && self.persisting.is_none()
            && !self.sealing
            && !unrevealed
            && self
                .engines
                .iter()
                .all(|e| e.failed.is_none() && e.next_step == open)
    }
}
