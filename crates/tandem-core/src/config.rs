//! What one epoch's core runs with: the settings its rules decide by, and what the previous
//! epochs left it to settle.
//!
//! Owns [`CoreConfig`] and [`EpochStart`], plain data built by the driver from the
//! configuration and the completion log's recovery. It decides nothing.

use std::collections::BTreeSet;

use tandem_proto::wire::handshake::Membership;
use tandem_proto::{reconcile, Epoch, InFlightTask, Rank, Reconciliation, TaskId, TaskOutcome};

/// The settings of one rank's core for one epoch. Sizes in bytes and blocks, times in ms on
/// the driver's monotonic clock (the `now_ms` every input carries).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CoreConfig {
    /// The epoch.
    pub epoch: Epoch,
    /// This rank; rank 0 leads.
    pub rank: Rank,
    /// Ranks in the group (`pp_size × tp_size`).
    pub world_size: u32,
    /// Bytes of one block shard (the page size engines register).
    pub shard_bytes: u64,
    /// Layers of one block shard on this rank (`layers_per_rank` of the layout): what a
    /// layerwise load's plan holds, checked by every rank against its own.
    pub layers_per_rank: u32,
    /// Steps the leader may run ahead of the slowest acknowledgement (`protocol.window_steps`).
    pub window_steps: u64,
    /// Sealed frames kept for re-reads, steps (`protocol.frame_retention_steps`).
    pub retention_steps: u64,
    /// Largest frame a peer accepts, bytes (`protocol.max_frame_bytes`).
    pub max_frame_bytes: u64,
    /// A follower heartbeats its leader this often, ms (`supervisor.heartbeat_interval_ms`).
    pub heartbeat_interval_ms: u64,
    /// The leader judges a follower silent after this long, ms
    /// (`supervisor.heartbeat_timeout_ms`).
    pub heartbeat_timeout_ms: u64,
    /// Host tier capacity, blocks (`store.host_capacity_blocks`).
    pub host_capacity_blocks: u64,
    /// Disk tier capacity, blocks (`store.disk_capacity_blocks`).
    pub disk_capacity_blocks: u64,
    /// How long a copy of a task started without page ids waits for this rank's engine to
    /// bind its pages, from when the task reached this rank, ms (`protocol.bind_timeout_ms`).
    /// A rank's own setting: it decides only when this rank's shard fails.
    pub bind_timeout_ms: u64,
    /// Leader: write-ahead appends that may be in flight at once
    /// (`protocol.max_appends_in_flight`; 0 counts as 1).
    pub max_appends_in_flight: u32,
    /// Leader: how long an `end_step` waits for its own append before it seals without it, ms
    /// (`protocol.append_wait_ms`; 0 never waits, `u64::MAX` always waits).
    pub append_wait_ms: u64,
    /// Whether starts and outcomes are appended to a completion log before a frame reveals
    /// them (a Redis URL is configured). Without it they count as durable at once, a new
    /// epoch starts with empty tiers, and there is no manifest exchange.
    pub durable: bool,
    /// What the leader's handshake checks (group, version, fingerprint, secret).
    pub membership: Membership,
    /// The leader's address, for the status of a follower not admitted yet.
    pub leader_addr: String,
}

impl CoreConfig {
    /// Whether this rank leads.
    pub fn is_leader(&self) -> bool {
        self.rank == Rank(0)
    }
}

/// What the previous epochs left this one (from the completion log's recovery; empty for a
/// group's first epoch or without a log).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct EpochStart {
    /// Leader: frame 0's reconciliation (`tandem_proto::reconcile`), if it settles anything.
    pub reconciliation: Option<Reconciliation>,
    /// Leader: the previous epoch's in-flight tasks as `Aborted` outcomes, appended with the
    /// first record of this epoch before frame 0 reveals them.
    pub aborted: Vec<TaskOutcome>,
    /// Every rank: the redelivered outcomes this rank's engine already acknowledged; frame 0
    /// reaches the engine without them.
    pub acknowledged: BTreeSet<TaskId>,
}

impl EpochStart {
    /// What the leader of a new epoch starts with, given the durable outcomes some engine has
    /// not acknowledged and the tasks started without a durable outcome (in stream order):
    /// frame 0's reconciliation when it settles anything, and the in-flight tasks as aborted
    /// outcomes to append with the epoch's first record.
    pub fn leader(
        durable_unacked: &[TaskOutcome],
        in_flight: &[InFlightTask],
        acknowledged: BTreeSet<TaskId>,
    ) -> EpochStart {
        let rec = reconcile(durable_unacked, in_flight);
        tracing::info!(
            redelivered = rec.redelivered.len(),
            aborted = rec.aborted.len(),
            "reconciliation for the new epoch"
        );
        let aborted = rec.aborted.clone();
        let empty = rec.redelivered.is_empty() && rec.aborted.is_empty();
        EpochStart {
            reconciliation: (!empty).then_some(rec),
            aborted,
            acknowledged,
        }
    }
}
