//! What an agent reports about its epoch on `/status` and `/readyz`.

use serde::Serialize;

/// One rank's view of its epoch. Steps are within the epoch; counts since it started.
#[derive(Clone, Debug, Serialize)]
pub struct AgentStatus {
    /// The group.
    pub group: String,
    /// This rank.
    pub rank: u32,
    /// The agent's process id (for operators and fault-injection tools).
    pub pid: u32,
    /// `leader` or `follower`.
    pub role: &'static str,
    /// The epoch.
    pub epoch: u64,
    /// Ready in this epoch: every rank joined (leader) or admitted by the leader (follower),
    /// and nothing failed.
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
    /// Messages from another epoch rejected.
    pub stale_epoch_rejected: u64,
    /// Tasks finished successfully (leader).
    pub tasks_ok: u64,
    /// Tasks finished with a failure (leader).
    pub tasks_failed: u64,
    /// Blocks in the group index (leader).
    pub index_blocks: u64,
}
