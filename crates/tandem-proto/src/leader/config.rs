//! The leader's configuration, counters and supervisor events: plain data, no behaviour.

use crate::ids::{Epoch, Rank};

/// How a leader runs one epoch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaderConfig {
    /// The epoch (from the supervisor's Redis counter).
    pub epoch: Epoch,
    /// Ranks in the group, including the leader (at least 1).
    pub world_size: u32,
    /// W: the most sealed steps the leader may be ahead of the slowest follower's
    /// acknowledgement (steps, at least 1). Step `s` may be sealed only while
    /// `s <= slowest_ack + W` (or `s < W` before any acknowledgement).
    pub window_steps: u64,
    /// Sealed frames kept readable through [`crate::Leader::frame`] (frames, at least 1;
    /// at least `window_steps` so that every unacknowledged frame stays readable).
    pub retention_steps: u64,
    /// A follower not heard from for this long is reported silent (ms).
    pub heartbeat_timeout_ms: u64,
    /// The caller's clock when the epoch starts; every follower counts as seen then (ms).
    pub start_ms: u64,
    /// Largest `Message::Frame` payload a peer accepts, in bytes (`protocol.max_frame_bytes`):
    /// the leader admits a request only while every frame it could seal stays within it.
    pub max_frame_bytes: u64,
}

/// Counters for metrics. All counts since the leader was created.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeaderStats {
    /// Frames sealed.
    pub steps_sealed: u64,
    /// Steps whose seal the full window refused (each counted once, however often the driver
    /// tries again: the count says how often the window held the group back, not how a driver
    /// retries).
    pub window_full: u64,
    /// Messages rejected because they belong to an older epoch.
    pub stale_epoch_rejected: u64,
    /// Messages rejected because they belong to a later epoch.
    pub future_epoch_rejected: u64,
    /// Shard reports recorded (first report of a rank on a task).
    pub reports_accepted: u64,
    /// Shard reports ignored as duplicates.
    pub duplicate_reports: u64,
    /// Shard reports rejected for an unknown task or rank.
    pub rejected_reports: u64,
    /// Tasks finished by quorum, successfully.
    pub tasks_ok: u64,
    /// Tasks finished by quorum with a failure.
    pub tasks_failed: u64,
    /// Outcomes confirmed durable.
    pub outcomes_persisted: u64,
    /// Persist batches handed back as failed.
    pub persist_failures: u64,
    /// Outcomes revealed in sealed frames.
    pub outcomes_revealed: u64,
    /// Acknowledgements accepted.
    pub acks: u64,
    /// Heartbeats accepted.
    pub heartbeats: u64,
    /// Times a rank was reported silent.
    pub ranks_silent: u64,
    /// Ranks whose connection was lost inside the epoch.
    pub ranks_lost: u64,
    /// Ranks admitted by the handshake.
    pub handshakes_admitted: u64,
    /// Handshakes refused.
    pub handshakes_refused: u64,
    /// Requests refused because a frame could have exceeded `max_frame_bytes`.
    pub frame_limit_refusals: u64,
}

/// Something the supervisor must hear about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LeaderEvent {
    /// `rank` has sent no heartbeat since `last_seen_ms`; `now_ms` is when that was noticed.
    RankSilent {
        /// The silent rank.
        rank: Rank,
        /// Its last heartbeat, on the leader's clock (ms).
        last_seen_ms: u64,
        /// When the silence was detected (ms).
        now_ms: u64,
    },
    /// `rank`'s connection was lost at `now_ms`: a rank failure, never re-established inside
    /// the same epoch.
    RankLost {
        /// The rank whose connection was lost.
        rank: Rank,
        /// When the loss was reported (ms).
        now_ms: u64,
    },
}
