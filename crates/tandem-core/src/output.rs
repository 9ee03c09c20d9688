//! What a rank core asks its driver to do, as plain data: the core's outputs.
//!
//! Owns [`Output`] and its parts. The driver takes them with `poll_output` in order and carries
//! each out: replies go to the engine call they name, store commands to the rank's store (in
//! order: tier operations before the copies a frame starts), messages to peers, appends to the
//! completion stream (answered with `handle_appended`), manifest reads (answered with
//! `handle_manifests`), events to the runtime. Nothing here does IO.

use std::fmt;

use tandem_proto::engine::EngineReply;
use tandem_proto::{
    Epoch, InFlightTask, LayerwiseLoad, Message, StartedTask, Step, TaskOutcome, TaskStart, TierOp,
};

/// One engine call the driver carries, unique within one core's life (the driver numbers
/// them; the core answers each exactly once with [`Output::Reply`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct CallRef(pub u64);

/// One peer connection, unique within the driver's process (a connection lost and made again
/// has a new id, so messages of a stale connection are told apart).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct ConnId(pub u64);

impl fmt::Display for CallRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Where a message goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A follower's core: its one connection to the leader.
    Leader,
    /// A leader's core: these follower connections (a frame goes to every admitted follower,
    /// encoded once; a handshake answer to the one connection asking).
    Followers(Vec<ConnId>),
}

/// Work for this rank's store, carried out in the order given.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum StoreCommand {
    /// A new epoch: work of older epochs is refused from now on; with `wipe`, every shard is
    /// dropped first (without a completion log there is no rebuild, so the new epoch's group
    /// index starts empty and shards it does not know would only hold slots).
    BeginEpoch {
        /// The epoch.
        epoch: Epoch,
        /// Drop every shard.
        wipe: bool,
    },
    /// Apply a frame's tier operations, in order.
    ApplyTierOps {
        /// The frame's epoch.
        epoch: Epoch,
        /// The operations.
        ops: Vec<TierOp>,
    },
    /// Copy these loads' shards from the tiers into the engine's pages, then report each
    /// (`handle_shard_done`).
    CopyLoads {
        /// The tasks' epoch.
        epoch: Epoch,
        /// The loads.
        tasks: Vec<TaskStart>,
    },
    /// Copy these stores' shards from the engine's pages into the tiers, then report each.
    CopyStores {
        /// The tasks' epoch.
        epoch: Epoch,
        /// The stores.
        tasks: Vec<TaskStart>,
    },
    /// Copy one load's shards layer by layer, as the leader's `plan` says: layer `order[0]`
    /// of every block, then `order[1]`, …; report progress after each layer
    /// (`handle_layers_copied`, 0 when the copy begins), then the shard (`handle_shard_done`).
    /// Stop at the first layer that fails or takes longer than `plan.layer_timeout_ms`.
    CopyLayers {
        /// The task's epoch.
        epoch: Epoch,
        /// The load.
        task: TaskStart,
        /// The leader's plan for it.
        plan: LayerwiseLoad,
    },
}

/// One step record to append to the completion stream before a frame reveals what it holds
/// (`tandem_durable::CompletionStream::append_step`); answer with `handle_appended`. Several
/// may be out at once: append them in the order output and answer them in that order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Append {
    /// The epoch.
    pub epoch: Epoch,
    /// The record's stamp: the frame of this step is sealed only after the append is
    /// answered (the `end_step` that made it, or up to `max_appends_in_flight - 1` steps
    /// later; never below an earlier append's).
    pub step: Step,
    /// Tasks started, in start order.
    pub started: Vec<StartedTask>,
    /// Outcomes: the previous epoch's aborted tasks first, then the tasks finished.
    pub finished: Vec<TaskOutcome>,
}

/// Something the runtime (the epoch loop) must hear.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// This rank is ready in `epoch` (leader: every follower joined and the group index is
    /// rebuilt; follower: admitted). Once per epoch.
    Ready {
        /// The epoch.
        epoch: Epoch,
    },
    /// `epoch` cannot go on; the supervisor must restart the group. Once per epoch.
    Failed {
        /// The epoch.
        epoch: Epoch,
        /// What happened.
        reason: String,
    },
    /// Leader: the completion stream was lost under `epoch` (`LogHealth::StreamLost`), so
    /// the next epoch's recovery cannot read what it held. What this core knows of it instead,
    /// for the next epoch's reconciliation on this same process (the epoch loop merges it
    /// with the recovery). Emitted once, just before `Failed`.
    HistoryLost {
        /// The epoch.
        epoch: Epoch,
        /// Tasks without a durable outcome (`tandem_proto::Leader::in_flight`): aborted in the
        /// next epoch's frame 0.
        in_flight: Vec<InFlightTask>,
        /// Outcomes made durable and not revealed yet (and a reconciliation's aborts not
        /// durable yet): redelivered in the next epoch's frame 0.
        unrevealed: Vec<TaskOutcome>,
    },
    /// This rank's engine applied every frame of `epoch` up to `step`.
    EngineAcked {
        /// The epoch.
        epoch: Epoch,
        /// The step.
        step: Step,
    },
}

/// One thing the driver must do.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// The one reply to engine call `call`.
    Reply {
        /// The call.
        call: CallRef,
        /// Its reply.
        reply: EngineReply,
    },
    /// Work for this rank's store.
    Store(StoreCommand),
    /// Send `msg` to `to`.
    Send {
        /// The destination.
        to: Peer,
        /// The message.
        msg: Message,
    },
    /// Close follower connection `conn` (a refused handshake; its answer was sent first).
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// Append a step record to the completion stream, then `handle_appended`.
    Append(Append),
    /// Read every rank's published manifest of this epoch
    /// (`tandem_durable::LivenessStore::manifests`), then `handle_manifests`.
    FetchManifests {
        /// The epoch.
        epoch: Epoch,
    },
    /// For the runtime.
    Event(Event),
}
