//! What a rank core reports about its epoch: the `/status` document's protocol part, the
//! counters the metrics copy, and why the rank is not ready.
//!
//! Owns [`RankStatus`], [`CoreCounters`], [`TaskCounts`] and [`NotReady`]: plain data read
//! from the core, never fed back into a decision.

use serde::Serialize;

/// One rank's view of its epoch. Steps are within the epoch; counts since it started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RankStatus {
    /// The group.
    pub group: String,
    /// This rank.
    pub rank: u32,
    /// `leader` or `follower`.
    pub role: &'static str,
    /// The epoch.
    pub epoch: u64,
    /// Ready in this epoch: every rank joined and the index rebuilt (leader) or admitted by
    /// the leader (follower), the completion log answering (leader), and nothing failed.
    pub ready: bool,
    /// Why not ready.
    pub reason: Option<String>,
    /// Followers admitted (leader only).
    pub joined: Vec<u32>,
    /// The last sealed step this rank knows.
    pub sealed_step: Option<u64>,
    /// Leader: the slowest follower's acknowledgement; follower: its engine's.
    pub acked_step: Option<u64>,
    /// Tasks started and not yet finished durably (leader), or seen started without an
    /// outcome (follower).
    pub tasks_in_flight: u64,
    /// Frames sealed (leader) or received (follower).
    pub steps_sealed: u64,
    /// Messages and engine requests from another epoch rejected.
    pub stale_epoch_rejected: u64,
    /// Tasks finished successfully (leader).
    pub tasks_ok: u64,
    /// Tasks finished with a failure (leader).
    pub tasks_failed: u64,
    /// Blocks in the group index (leader).
    pub index_blocks: u64,
}

/// How the completion log answered this rank's own calls, as its epoch loop saw them
/// (`RankCore::handle_log_health`): a rank whose heartbeats do not reach the log is not ready,
/// whichever its role.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LogHealth {
    /// The last heartbeat was written.
    Up,
    /// The last heartbeat failed, with the log's reason.
    Unavailable(String),
    /// The completion stream is gone (`tandem_durable::DurableError::StreamLost`, the
    /// log's reason): what a later recovery would read is lost, so the epoch cannot go on.
    StreamLost(String),
}

/// Why a rank is not ready (the metric label `reason` of `tandem_not_ready`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotReady {
    /// The leader waits for followers to join, or a follower for the leader to admit it.
    Joining,
    /// The leader rebuilds the group index from every rank's manifest.
    RebuildingIndex,
    /// The completion log does not answer this rank: the leader's appends fail, or this
    /// rank's own heartbeats do ([`LogHealth::Unavailable`]).
    CompletionLog,
    /// The epoch failed; the rank waits for the supervisor's next epoch.
    EpochFailed,
    /// The leader's window has been full for longer than the heartbeat timeout: a follower
    /// stopped acknowledging (its rank is in the status reason and the counters).
    WindowStalled,
}

/// Task counts by kind (store 0, load 1): started, and finished by result (ok 0, failed 1,
/// aborted 2); refusals and lookups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TaskCounts {
    /// Started stores and loads.
    pub started: [u64; 2],
    /// Finished `[kind][result]`.
    pub finished: [[u64; 3]; 2],
    /// Stores refused by the group index: `[tier full, other]` (also counted as failed).
    pub stores_refused: [u64; 2],
    /// Blocks asked about by lookups: `[matched (hit), not matched (miss)]`.
    pub lookup_blocks: [u64; 2],
}

/// The cumulative counters of one core, for the metrics (each a total since the core was
/// made; a new epoch's core starts again from zero).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreCounters {
    /// Why not ready; `None` when ready.
    pub not_ready: Option<NotReady>,
    /// Frames sealed (leader) or received (follower).
    pub steps_sealed: u64,
    /// Messages and engine requests from another epoch rejected.
    pub stale_epoch_rejected: u64,
    /// The role's own counters.
    pub role: RoleCounters,
}

/// The counters only one role keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoleCounters {
    /// Rank 0.
    Leader {
        /// Requests refused because a frame could have exceeded `max_frame_bytes`.
        frame_limit_refusals: u64,
        /// Followers admitted.
        peers_joined: u64,
        /// Blocks evicted from the group (tier operations `Evict` recorded).
        evictions: u64,
        /// Task counts.
        tasks: TaskCounts,
        /// Window stalls declared in this epoch (a window full for longer than the heartbeat
        /// timeout).
        window_stalls: u64,
        /// The follower holding a stalled window, while it does.
        window_stalled_rank: Option<u32>,
    },
    /// Ranks 1.. .
    Follower {
        /// Frame waits that ended in `LeaderBehind`.
        wait_timeouts: u64,
        /// Frame requests from the engine.
        engine_frames_read: u64,
    },
}
