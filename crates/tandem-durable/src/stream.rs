//! The completion stream of one group, as a contract: the fenced write-ahead append,
//! per-rank delivery and acknowledgement, recovery for a new epoch and safe trimming.
//!
//! Owns the [`CompletionStream`] trait and [`RankCursor`]. The Redis implementation is
//! [`crate::RedisLog`], the in-memory twin [`crate::MemoryLog`]; both fold entries with the
//! same pure [`crate::RecoveryBuilder`] and [`crate::TrimScan`], and one contract test suite
//! (`tests/contract/`) runs against both. It never decides what an outcome is or when a frame
//! is sealed: the leader's driver appends, then seals; each rank's agent reads and
//! acknowledges after its engine did.

use crate::error::Result;
use crate::id::StreamEntryId;
use crate::record::{LoggedStep, StartedTask};
use crate::recovery::Recovery;
use async_trait::async_trait;
use std::collections::BTreeSet;
use std::fmt;
use tandem_proto::{Epoch, Rank, Step, TaskOutcome};

/// Delivery position of one rank's consumer group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankCursor {
    /// The last entry handed to this rank (`0-0` when none, or when its group is missing).
    pub last_delivered: StreamEntryId,
    /// Entries handed to this rank and not acknowledged.
    pub pending: BTreeSet<StreamEntryId>,
}

impl RankCursor {
    /// Whether this rank acknowledged entry `id` (delivered and no longer pending).
    pub fn acked(&self, id: StreamEntryId) -> bool {
        id <= self.last_delivered && !self.pending.contains(&id)
    }
}

/// The completion stream of one group of `world_size` ranks.
///
/// # Contract (both implementations, checked by the contract suite)
///
/// 1. **Ids.** Entries are ordered by [`StreamEntryId`]; the first part is the epoch. The
///    stream starts with one barrier entry `{e}-0` per epoch `e`, written by
///    [`crate::EpochStore::next_epoch`] of the same backend; the steps of epoch `e` follow as
///    `{e}-1`, `{e}-2`, ... Barriers count in [`Self::stream_len`] and are never returned by
///    [`Self::read_new`].
/// 2. **Fencing.** [`Self::append_step`] of epoch `e` fails with
///    [`crate::DurableError::StaleEpoch`] (and appends nothing) once a barrier of a newer
///    epoch exists, and for epoch 0. So every append that succeeded is seen by the recovery
///    of every later epoch.
/// 3. **Per-rank delivery.** Each rank has its own position: [`Self::read_new`] hands a rank
///    the entries after its last delivered one, in order, and leaves them pending until
///    [`Self::ack`]; acknowledging twice, or an id never handed out, changes nothing and
///    counts nothing. [`Self::ack_through`] settles everything up to an id at once.
/// 4. **Recovery.** [`Self::recover`] reads every rank's position and the whole retained
///    stream and folds them with [`crate::RecoveryBuilder`]: outcomes some rank has not
///    acknowledged are redelivered (first copy per task kept), tasks started without an
///    outcome are in flight.
/// 5. **Safe trimming.** [`Self::trim`] removes only entries that every rank acknowledged
///    and that hold no start of a still-unfinished task, keeps at least the newest `max_len`,
///    and returns the exact count removed ([`crate::TrimScan`]). Ids are never reused after
///    a trim: the fence of rule 2 holds on an emptied stream.
/// 6. **Ranks.** A rank outside `0..world_size` is refused with
///    [`crate::DurableError::RankOutOfRange`].
/// 7. **Lost.** On a backend that can lose the stream under the group (Redis: `DEL`,
///    `FLUSHDB`), a call that finds it or a rank's consumer group missing fails with
///    [`crate::DurableError::StreamLost`] and never creates it again; the next
///    [`crate::EpochStore::next_epoch`] does.
/// 8. **Bounded.** Every call ends within its deadline ([`crate::DurableError::Timeout`],
///    [`crate::DurableError::Unavailable`]); none blocks waiting for entries.
///
/// Object safe (`Arc<dyn CompletionStream>`); the futures are `Send`, so tokio tasks and
/// actix actors alike can await them.
#[async_trait]
pub trait CompletionStream: Send + Sync + fmt::Debug {
    /// Ranks in the group: one delivery position each.
    fn world_size(&self) -> u32;

    /// Writes ahead one step: the tasks `started` and the outcomes `finished` in step `step`
    /// of `epoch`, as one entry (id `{epoch}-{n}`), whatever the counts. Call before sealing
    /// the frame that reveals them. The first record of a new epoch carries the previous
    /// epoch's in-flight tasks as `Aborted` outcomes.
    ///
    /// Fenced (contract rule 2). An epoch that was never issued is not detected here; take
    /// epochs only from [`crate::EpochStore::next_epoch`].
    ///
    /// # Errors
    /// [`crate::DurableError::StaleEpoch`] (nothing appended); [`crate::DurableError::Unavailable`];
    /// [`crate::DurableError::Timeout`] (the entry may or may not have been appended:
    /// appending the same outcomes again is safe, recovery keeps the first per task id);
    /// [`crate::DurableError::NotReplicated`] (a backend waiting for replicas: fewer took
    /// it in time; the entry was taken back, best effort, and must not be revealed);
    /// [`crate::DurableError::StreamLost`] (the stream is gone from the backend: nothing was
    /// appended, and the stream is not created again here).
    async fn append_step(
        &self,
        epoch: Epoch,
        step: Step,
        started: &[StartedTask],
        finished: &[TaskOutcome],
    ) -> Result<StreamEntryId>;

    /// Hands `rank` up to `count` entries (at least 1) it has not been handed yet, in stream
    /// order; they stay pending until [`Self::ack`]. Never waits for new entries. Epoch
    /// barriers count toward `count` but are acknowledged at once and not returned, so a
    /// call may return fewer than `count` entries while more are waiting.
    ///
    /// # Errors
    /// [`crate::DurableError::RankOutOfRange`]; [`crate::DurableError::Corrupt`] naming an
    /// undecodable entry (it stays pending for `rank`); the connection errors.
    async fn read_new(&self, rank: Rank, count: usize) -> Result<Vec<LoggedStep>>;

    /// Acknowledges entries `ids` for `rank` once its engine acknowledged the frames that
    /// revealed them. Returns how many were pending and are now acknowledged; ids not
    /// pending are ignored.
    ///
    /// # Errors
    /// [`crate::DurableError::RankOutOfRange`] and the connection errors.
    async fn ack(&self, rank: Rank, ids: &[StreamEntryId]) -> Result<u64>;

    /// Entries handed to `rank` and not acknowledged, in stream order.
    ///
    /// # Errors
    /// [`crate::DurableError::RankOutOfRange`] and the connection errors.
    async fn pending(&self, rank: Rank) -> Result<Vec<StreamEntryId>>;

    /// After a reconciliation frame that settled everything up to `through` (see
    /// [`Recovery::last_entry_id`]) was acknowledged by `rank`'s engine: acknowledges every
    /// entry up to and including `through` for `rank`, pending or never handed out. Returns
    /// how many pending entries it acknowledged. Moves the rank's position forward only.
    /// Call it from the rank's own agent before it reads on.
    ///
    /// # Errors
    /// As [`Self::ack`], and [`crate::DurableError::Corrupt`] for an unreadable position.
    async fn ack_through(&self, rank: Rank, through: StreamEntryId) -> Result<u64>;

    /// Entries retained now, barriers included.
    ///
    /// # Errors
    /// The connection errors.
    async fn stream_len(&self) -> Result<u64>;

    /// Delivery positions of ranks `0..world_size`, indexed by rank, each with its pending
    /// entries.
    ///
    /// # Errors
    /// The connection errors and [`crate::DurableError::Corrupt`].
    async fn cursors(&self) -> Result<Vec<RankCursor>>;

    /// What a new epoch must settle (contract rule 4). Call after
    /// [`crate::EpochStore::next_epoch`] moved the group and before the new epoch's first
    /// append.
    ///
    /// # Errors
    /// The connection errors (per page: a long scan may take several deadlines) and
    /// [`crate::DurableError::Corrupt`] naming an undecodable entry.
    async fn recover(&self) -> Result<Recovery>;

    /// Removes the oldest entries that every rank acknowledged and that hold no start of a
    /// still-unfinished task, keeping at least the newest `max_len` entries. Returns how
    /// many were removed (for a metric). Scans the retained stream: call it every so many
    /// steps, not every step.
    ///
    /// # Errors
    /// The connection errors and [`crate::DurableError::Corrupt`].
    async fn trim(&self, max_len: usize) -> Result<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_acked_means_delivered_and_not_pending() {
        let id = |ms| StreamEntryId { ms, seq: 0 };
        let c = RankCursor {
            last_delivered: id(5),
            pending: [id(3)].into(),
        };
        assert!(c.acked(id(2)));
        assert!(!c.acked(id(3)));
        assert!(c.acked(id(5)));
        assert!(!c.acked(id(6)));
    }
}
