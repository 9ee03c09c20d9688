//! The leader's side of peer connections: admission by handshake, lost connections, and the
//! dispatch of messages arriving on an admitted connection.
//!
//! Owns which ranks joined this epoch. It never re-admits a rank inside an epoch: a lost
//! connection is a rank failure for the supervisor to handle with a new epoch.

use super::{Leader, LeaderEvent};
use crate::error::LeaderError;
use crate::ids::Rank;
use crate::quorum::ReportOutcome;
use crate::wire::handshake::{HandshakeError, Membership, Nonce};
use crate::wire::{Hello, Message};
use std::collections::BTreeSet;

impl Leader {
    /// Leader side of the handshake for a follower that answered `nonce` with `hello`, at
    /// `now_ms`. Checks it against `membership` (with this leader's epoch and world size),
    /// records the rank as joined (and as heard from at `now_ms`: its heartbeat deadline
    /// counts from its admission) and returns the `Welcome` to send.
    ///
    /// Errors: the [`HandshakeError`] naming the differing field (send it back as
    /// `Message::Refused { reason }` and close the connection); a rank that already joined
    /// this epoch is refused with [`HandshakeError::DuplicateRank`].
    pub fn admit(
        &mut self,
        membership: &Membership,
        nonce: &Nonce,
        hello: &Hello,
        now_ms: u64,
    ) -> Result<Message, HandshakeError> {
        let mut ours = membership.clone();
        ours.epoch = self.config.epoch;
        ours.world_size = self.config.world_size;
        match ours.check_hello(nonce, hello, &self.joined) {
            Ok(rank) => {
                self.joined.insert(rank);
                self.liveness.touch(rank, now_ms);
                self.stats.handshakes_admitted += 1;
                Ok(Message::Welcome {
                    epoch: self.config.epoch,
                    sealed_step: self.sealed_step(),
                })
            }
            Err(e) => {
                self.stats.handshakes_refused += 1;
                Err(e)
            }
        }
    }

    /// Follower ranks admitted so far in this epoch.
    pub fn joined(&self) -> &BTreeSet<Rank> {
        &self.joined
    }

    /// True once every follower rank has been admitted (the supervisor waits for this before
    /// step 0 is sealed).
    pub fn all_joined(&self) -> bool {
        self.joined.len() as u64 + 1 >= u64::from(self.config.world_size)
    }

    /// The connection of `rank` was lost at `now_ms`. Inside an epoch that is a rank failure:
    /// it becomes a [`LeaderEvent::RankLost`] for the supervisor (once per rank), and the rank
    /// is never re-admitted in this epoch.
    pub fn handle_disconnect(&mut self, rank: Rank, now_ms: u64) {
        if self.joined.contains(&rank) && !self.lost.contains(&rank) {
            self.lost.insert(rank);
            self.stats.ranks_lost += 1;
            self.events
                .push_back(LeaderEvent::RankLost { rank, now_ms });
        }
    }

    /// Dispatch a message that arrived on rank `from`'s admitted connection at `now_ms`.
    /// Returns the report's outcome for a `ShardReport`, `None` otherwise.
    ///
    /// Errors: those of the `handle_*` method called; [`LeaderError::RankMismatch`] when the
    /// message claims another rank; [`LeaderError::UnexpectedMessage`] for messages a leader
    /// never receives in an epoch (handshake messages are handled by the driver).
    pub fn handle_message(
        &mut self,
        from: Rank,
        msg: &Message,
        now_ms: u64,
    ) -> Result<Option<ReportOutcome>, LeaderError> {
        let claimed = match msg {
            Message::ShardReport(r) => r.rank,
            Message::Ack(a) => a.rank,
            Message::Heartbeat(h) => h.rank,
            other => return Err(LeaderError::UnexpectedMessage { kind: other.kind() }),
        };
        if claimed != from {
            return Err(LeaderError::RankMismatch {
                connection: from,
                claimed,
            });
        }
        match msg {
            Message::ShardReport(r) => self.handle_report(r).map(Some),
            Message::Ack(a) => self.handle_ack(a).map(|_| None),
            Message::Heartbeat(h) => self.handle_heartbeat(h, now_ms).map(|_| None),
            other => Err(LeaderError::UnexpectedMessage { kind: other.kind() }),
        }
    }
}
