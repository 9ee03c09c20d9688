//! The messages peers exchange: handshake, frames, shard reports, acknowledgements and
//! heartbeats.
//!
//! Owns the message shapes only; every message that belongs to an epoch carries it, so a
//! receiver can fence it (invariant 4). Encoding lives in [`super::codec`].

use crate::fingerprint::ConfigFingerprint;
use crate::frame::Frame;
use crate::ids::{Epoch, GroupId, Rank, Step, TaskId};
use crate::wire::handshake::{HandshakeError, Nonce, Proof};
use serde::{Deserialize, Serialize};

/// A follower's request to join an epoch, answering the leader's [`Message::Challenge`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hello {
    /// The follower's protocol version ([`super::PROTOCOL_VERSION`]).
    pub protocol_version: u16,
    /// The group the follower believes it belongs to.
    pub group_id: GroupId,
    /// The follower's rank.
    pub rank: Rank,
    /// The epoch the follower was started in.
    pub epoch: Epoch,
    /// The follower's configuration fingerprint.
    pub fingerprint: ConfigFingerprint,
    /// HMAC-SHA256 of the group secret over nonce ‖ group id ‖ rank ‖ epoch
    /// (see [`super::hello_proof`]).
    pub proof: Proof,
}

/// One rank's verdict on its own shard of a task.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ShardReport {
    /// The epoch the sender is in.
    pub epoch: Epoch,
    /// The task.
    pub task: TaskId,
    /// The reporting rank.
    pub rank: Rank,
    /// `Ok` when the shard copy finished, otherwise the failure reason.
    pub result: Result<(), String>,
}

/// A rank's engine has applied every frame up to and including `step`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ack {
    /// The epoch the sender is in.
    pub epoch: Epoch,
    /// The acknowledging rank.
    pub rank: Rank,
    /// The highest step applied.
    pub step: Step,
}

/// A rank is alive. `now_ms` is the sender's monotonic clock, informational only: the
/// receiver judges liveness on its own clock.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The epoch the sender is in.
    pub epoch: Epoch,
    /// The sending rank.
    pub rank: Rank,
    /// The sender's monotonic clock, milliseconds.
    pub now_ms: u64,
}

/// Every message on a peer connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Message {
    /// Leader → follower on connect: a fresh random nonce the follower must sign.
    Challenge {
        /// 32 random bytes, never reused.
        nonce: Nonce,
    },
    /// Follower → leader: join request.
    Hello(Hello),
    /// Leader → follower: admitted to `epoch`; `sealed_step` is the last frame sealed so far.
    Welcome {
        /// The epoch joined.
        epoch: Epoch,
        /// The last step the leader has sealed, if any.
        sealed_step: Option<Step>,
    },
    /// Leader → follower: not admitted, and why (names the differing field).
    Refused {
        /// The reason.
        reason: HandshakeError,
    },
    /// Leader → follower: a sealed frame.
    Frame(Frame),
    /// Any rank → leader: one shard of a task finished or failed.
    ShardReport(ShardReport),
    /// Follower → leader: frames applied up to a step.
    Ack(Ack),
    /// Follower → leader: liveness.
    Heartbeat(Heartbeat),
}

impl Message {
    /// A short name for logs and metrics labels (`"frame"`, `"shard_report"`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Challenge { .. } => "challenge",
            Message::Hello(_) => "hello",
            Message::Welcome { .. } => "welcome",
            Message::Refused { .. } => "refused",
            Message::Frame(_) => "frame",
            Message::ShardReport(_) => "shard_report",
            Message::Ack(_) => "ack",
            Message::Heartbeat(_) => "heartbeat",
        }
    }

    /// The epoch the message belongs to, where it has one (`Challenge` and `Refused` do not).
    pub fn epoch(&self) -> Option<Epoch> {
        match self {
            Message::Challenge { .. } | Message::Refused { .. } => None,
            Message::Hello(h) => Some(h.epoch),
            Message::Welcome { epoch, .. } => Some(*epoch),
            Message::Frame(f) => Some(f.epoch),
            Message::ShardReport(r) => Some(r.epoch),
            Message::Ack(a) => Some(a.epoch),
            Message::Heartbeat(h) => Some(h.epoch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_epochs() {
        let m = Message::Challenge { nonce: [0; 32] };
        assert_eq!((m.kind(), m.epoch()), ("challenge", None));
        let m = Message::Ack(Ack {
            epoch: Epoch(4),
            rank: Rank(1),
            step: Step(2),
        });
        assert_eq!((m.kind(), m.epoch()), ("ack", Some(Epoch(4))));
        let m = Message::Welcome {
            epoch: Epoch(2),
            sealed_step: None,
        };
        assert_eq!((m.kind(), m.epoch()), ("welcome", Some(Epoch(2))));
        let m = Message::Heartbeat(Heartbeat {
            epoch: Epoch(5),
            rank: Rank(1),
            now_ms: 1,
        });
        assert_eq!((m.kind(), m.epoch()), ("heartbeat", Some(Epoch(5))));
        let m = Message::Frame(Frame::empty(Epoch(6), Step(0)));
        assert_eq!((m.kind(), m.epoch()), ("frame", Some(Epoch(6))));
        let m = Message::Refused {
            reason: HandshakeError::BadSecret,
        };
        assert_eq!((m.kind(), m.epoch()), ("refused", None));
        let m = Message::ShardReport(ShardReport {
            epoch: Epoch(7),
            task: TaskId { epoch: 7, seq: 0 },
            rank: Rank(0),
            result: Ok(()),
        });
        assert_eq!((m.kind(), m.epoch()), ("shard_report", Some(Epoch(7))));
    }
}
