//! The errors of the quorum, leader and follower state machines (codec and handshake errors
//! live beside their code in [`crate::wire`]).
//!
//! Owns the variants and their messages; each message names both sides' positions where
//! there are two (docs/DESIGN.md invariant 6).

use crate::ids::{Epoch, Rank, Step, TaskId};
use crate::persist::BatchId;
use thiserror::Error;

fn sealed_text(sealed: &Option<Step>) -> String {
    match sealed {
        Some(s) => format!("sealed step {s}"),
        None => "sealed no step yet".to_string(),
    }
}

fn acked_text(acked: &Option<Step>) -> String {
    match acked {
        Some(s) => format!("step {s}"),
        None => "no step yet".to_string(),
    }
}

/// Rejections of a shard report by the per-task quorum.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum QuorumError {
    /// No task with this id was started (or it belongs to another epoch).
    #[error("unknown task {task}: no such task was started in this epoch")]
    UnknownTask {
        /// The task reported.
        task: TaskId,
    },
    /// The reporting rank is not a member of the group.
    #[error("rank {rank} is out of range for world size {world_size}")]
    RankOutOfRange {
        /// The rank that reported.
        rank: Rank,
        /// Ranks in the group.
        world_size: u32,
    },
}

/// Rejections by the [`crate::Leader`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum LeaderError {
    /// The configuration cannot run a group.
    #[error("invalid leader configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// A message from an older epoch: rejected, counted, never applied.
    #[error("stale epoch: message from epoch {theirs} rejected, leader is at epoch {ours}")]
    StaleEpoch {
        /// The leader's epoch.
        ours: Epoch,
        /// The message's epoch.
        theirs: Epoch,
    },
    /// A message from a later epoch: this leader is stale; rejected, counted, never applied.
    #[error("future epoch: message from epoch {theirs} rejected, leader is still at epoch {ours}")]
    FutureEpoch {
        /// The leader's epoch.
        ours: Epoch,
        /// The message's epoch.
        theirs: Epoch,
    },
    /// A shard report the quorum cannot take.
    #[error(transparent)]
    Quorum(#[from] QuorumError),
    /// A message arrived on rank `connection`'s connection claiming another rank.
    #[error(
        "rank mismatch: connection of rank {connection} sent a message claiming rank {claimed}"
    )]
    RankMismatch {
        /// The rank the connection was admitted as.
        connection: Rank,
        /// The rank in the message.
        claimed: Rank,
    },
    /// A message the leader never receives (for example a `Frame`).
    #[error("unexpected {kind} message at the leader")]
    UnexpectedMessage {
        /// [`crate::Message::kind`] of the message.
        kind: &'static str,
    },
    /// `seal` was called for another step than the open one.
    #[error("wrong step: the open step is {expected}, seal was called for step {got}")]
    WrongStep {
        /// The open step.
        expected: Step,
        /// The step asked for.
        got: Step,
    },
    /// Sealing `step` would put the leader more than `window` steps ahead of the slowest
    /// follower's acknowledgement.
    #[error(
        "window full: cannot seal step {step}; the slowest follower, rank {rank}, has acknowledged {}, window is {window} steps",
        acked_text(.slowest_ack)
    )]
    WindowFull {
        /// The step that could not be sealed.
        step: Step,
        /// The slowest follower (the lowest rank among equals).
        rank: Rank,
        /// The slowest follower's last acknowledged step.
        slowest_ack: Option<Step>,
        /// The window, in steps.
        window: u64,
    },
    /// A rank acknowledged a step the leader has not sealed.
    #[error("rank {rank} acknowledged step {step}, but the leader has {}", sealed_text(.sealed))]
    AckBeyondSealed {
        /// The acknowledging rank.
        rank: Rank,
        /// The step acknowledged.
        step: Step,
        /// The leader's last sealed step.
        sealed: Option<Step>,
    },
    /// A sealed frame older than the retention was asked for.
    #[error("frame expired: wanted step {wanted}, the oldest retained is step {oldest_retained}")]
    FrameExpired {
        /// The step asked for.
        wanted: Step,
        /// The oldest step still retained.
        oldest_retained: Step,
    },
    /// Admitting the request (or sealing the step) could make a frame of `bytes` bytes, over
    /// the peers' limit of `limit` bytes (`protocol.max_frame_bytes`): refused, nothing
    /// recorded.
    #[error("frame too large: the request could make a frame of {bytes} bytes, over the limit of {limit} bytes (protocol.max_frame_bytes)")]
    FrameTooLarge {
        /// The largest frame the leader could then have to seal, in bytes.
        bytes: u64,
        /// `protocol.max_frame_bytes`.
        limit: u64,
    },
    /// `handle_persisted` or `handle_persist_failed` named a batch that is not in flight.
    #[error("unknown persist batch {batch}: it is not in flight")]
    UnknownBatch {
        /// The batch named.
        batch: BatchId,
    },
}

/// Rejections and wait failures of a [`crate::Follower`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum FollowerError {
    /// A frame from an older epoch: rejected, counted, never applied.
    #[error("stale epoch: frame of epoch {theirs} rejected, follower is at epoch {ours}")]
    StaleEpoch {
        /// The follower's epoch.
        ours: Epoch,
        /// The frame's epoch.
        theirs: Epoch,
    },
    /// A frame from a later epoch: this follower must restart; rejected, counted.
    #[error("future epoch: frame of epoch {theirs} rejected, follower is still at epoch {ours}")]
    FutureEpoch {
        /// The follower's epoch.
        ours: Epoch,
        /// The frame's epoch.
        theirs: Epoch,
    },
    /// A frame arrived out of order: frames are sealed and sent one per step, in order.
    #[error("frame gap: expected the frame of step {expected}, got step {got}")]
    FrameGap {
        /// The next step the follower expects.
        expected: Step,
        /// The step received.
        got: Step,
    },
    /// A second, different frame for a step already received.
    #[error("conflicting frame for step {step}: it differs from the one already received")]
    ConflictingFrame {
        /// The step.
        step: Step,
    },
    /// A reconciliation on a frame other than step 0.
    #[error("misplaced reconciliation on step {step}: only step 0 of an epoch may carry one")]
    MisplacedReconciliation {
        /// The step that carried it.
        step: Step,
    },
    /// The frame was received but no longer retained.
    #[error("frame expired: wanted step {wanted}, the oldest retained is step {oldest_retained}")]
    FrameExpired {
        /// The step asked for.
        wanted: Step,
        /// The oldest step still retained.
        oldest_retained: Step,
    },
    /// A wait passed its deadline before the leader sealed the step.
    #[error("follower wants step {wanted} of epoch {epoch}; leader has {}", sealed_text(.sealed))]
    LeaderBehind {
        /// The follower's epoch.
        epoch: Epoch,
        /// The step waited for.
        wanted: Step,
        /// The last step received from the leader.
        sealed: Option<Step>,
    },
    /// The engine acknowledged a step whose frame this follower has not received.
    #[error("cannot acknowledge step {step}: the follower has received {}", acked_text(.received))]
    AckBeyondReceived {
        /// The step to acknowledge.
        step: Step,
        /// The last step received.
        received: Option<Step>,
    },
    /// A message a follower never receives in an epoch (for example a `ShardReport`).
    #[error("unexpected {kind} message at a follower")]
    UnexpectedMessage {
        /// [`crate::Message::kind`] of the message.
        kind: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(err: impl std::fmt::Display, text: &str) {
        assert_eq!(err.to_string(), text);
    }

    #[test]
    fn quorum_messages() {
        let task = TaskId { epoch: 3, seq: 9 };
        check(
            QuorumError::UnknownTask { task },
            "unknown task 3.9: no such task was started in this epoch",
        );
        check(
            QuorumError::RankOutOfRange {
                rank: Rank(4),
                world_size: 4,
            },
            "rank 4 is out of range for world size 4",
        );
    }

    #[test]
    fn leader_messages() {
        let (e2, e3) = (Epoch(2), Epoch(3));
        check(
            LeaderError::InvalidConfig {
                reason: "world_size is 0".into(),
            },
            "invalid leader configuration: world_size is 0",
        );
        check(
            LeaderError::StaleEpoch {
                ours: e3,
                theirs: e2,
            },
            "stale epoch: message from epoch 2 rejected, leader is at epoch 3",
        );
        check(
            LeaderError::FutureEpoch {
                ours: e2,
                theirs: e3,
            },
            "future epoch: message from epoch 3 rejected, leader is still at epoch 2",
        );
        check(
            LeaderError::Quorum(QuorumError::UnknownTask {
                task: TaskId { epoch: 3, seq: 1 },
            }),
            "unknown task 3.1: no such task was started in this epoch",
        );
        check(
            LeaderError::RankMismatch {
                connection: Rank(1),
                claimed: Rank(2),
            },
            "rank mismatch: connection of rank 1 sent a message claiming rank 2",
        );
        check(
            LeaderError::UnexpectedMessage { kind: "frame" },
            "unexpected frame message at the leader",
        );
        check(
            LeaderError::WrongStep {
                expected: Step(5),
                got: Step(7),
            },
            "wrong step: the open step is 5, seal was called for step 7",
        );
        check(
            LeaderError::WindowFull { step: Step(12), rank: Rank(2), slowest_ack: Some(Step(3)), window: 8 },
            "window full: cannot seal step 12; the slowest follower, rank 2, has acknowledged step 3, window is 8 steps",
        );
        check(
            LeaderError::WindowFull { step: Step(8), rank: Rank(1), slowest_ack: None, window: 8 },
            "window full: cannot seal step 8; the slowest follower, rank 1, has acknowledged no step yet, window is 8 steps",
        );
        check(
            LeaderError::AckBeyondSealed {
                rank: Rank(2),
                step: Step(9),
                sealed: Some(Step(4)),
            },
            "rank 2 acknowledged step 9, but the leader has sealed step 4",
        );
        check(
            LeaderError::AckBeyondSealed {
                rank: Rank(2),
                step: Step(0),
                sealed: None,
            },
            "rank 2 acknowledged step 0, but the leader has sealed no step yet",
        );
        check(
            LeaderError::FrameExpired {
                wanted: Step(2),
                oldest_retained: Step(10),
            },
            "frame expired: wanted step 2, the oldest retained is step 10",
        );
        check(
            LeaderError::UnknownBatch { batch: BatchId(4) },
            "unknown persist batch 4: it is not in flight",
        );
        check(
            LeaderError::FrameTooLarge {
                bytes: 65_537,
                limit: 65_536,
            },
            "frame too large: the request could make a frame of 65537 bytes, over the limit of 65536 bytes (protocol.max_frame_bytes)",
        );
    }

    #[test]
    fn follower_messages() {
        let (e2, e3) = (Epoch(2), Epoch(3));
        check(
            FollowerError::StaleEpoch {
                ours: e3,
                theirs: e2,
            },
            "stale epoch: frame of epoch 2 rejected, follower is at epoch 3",
        );
        check(
            FollowerError::FutureEpoch {
                ours: e2,
                theirs: e3,
            },
            "future epoch: frame of epoch 3 rejected, follower is still at epoch 2",
        );
        check(
            FollowerError::FrameGap {
                expected: Step(4),
                got: Step(6),
            },
            "frame gap: expected the frame of step 4, got step 6",
        );
        check(
            FollowerError::ConflictingFrame { step: Step(4) },
            "conflicting frame for step 4: it differs from the one already received",
        );
        check(
            FollowerError::MisplacedReconciliation { step: Step(1) },
            "misplaced reconciliation on step 1: only step 0 of an epoch may carry one",
        );
        check(
            FollowerError::FrameExpired {
                wanted: Step(2),
                oldest_retained: Step(10),
            },
            "frame expired: wanted step 2, the oldest retained is step 10",
        );
        check(
            FollowerError::LeaderBehind {
                epoch: e3,
                wanted: Step(812),
                sealed: Some(Step(790)),
            },
            "follower wants step 812 of epoch 3; leader has sealed step 790",
        );
        check(
            FollowerError::LeaderBehind {
                epoch: e3,
                wanted: Step(0),
                sealed: None,
            },
            "follower wants step 0 of epoch 3; leader has sealed no step yet",
        );
        check(
            FollowerError::AckBeyondReceived {
                step: Step(5),
                received: Some(Step(4)),
            },
            "cannot acknowledge step 5: the follower has received step 4",
        );
        check(
            FollowerError::AckBeyondReceived {
                step: Step(0),
                received: None,
            },
            "cannot acknowledge step 0: the follower has received no step yet",
        );
        check(
            FollowerError::UnexpectedMessage { kind: "hello" },
            "unexpected hello message at a follower",
        );
    }
}
