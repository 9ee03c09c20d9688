//! The group's epoch counter, the supervisor's saved state and per-epoch membership, as a
//! contract.
//!
//! Owns the [`EpochStore`] trait. The Redis implementation is [`crate::RedisLog`], the
//! in-memory twin [`crate::MemoryLog`]. It never decides when to restart or whom to admit:
//! the supervisor does, and keeps here only what a restarted supervisor needs to continue.

use crate::error::Result;
use crate::supervisor::SupervisorState;
use async_trait::async_trait;
use std::fmt;
use tandem_proto::{Epoch, Rank};

/// Epochs, supervisor state and membership of one group.
///
/// # Contract (both implementations, checked by the contract suite)
///
/// 1. **Epochs only move forward.** [`Self::current_epoch`] is `Epoch(0)` before the first
///    [`Self::next_epoch`], which returns 1; every call returns a new, higher epoch, also to
///    concurrent callers, and never one whose barrier is already in the completion stream.
/// 2. **The fence.** [`Self::next_epoch`] writes the new epoch's barrier `{e}-0` into the
///    same backend's [`crate::CompletionStream`] in the same atomic step as it moves the
///    counter, so from then on every append of an older epoch is refused.
/// 3. **Supervisor state** is replaced whole by [`Self::save_supervisor_state`] and read back
///    equal; `None` before the first save.
/// 4. **Membership** of an epoch is a set: joining twice changes nothing (the second call
///    returns `false`); [`Self::members`] lists ranks ascending; a rank outside
///    `0..world_size` is refused with [`crate::DurableError::RankOutOfRange`].
/// 5. **Per-epoch keys are bounded.** [`Self::next_epoch`] to epoch `e` deletes the
///    membership of epoch `e - 1` and its manifests ([`crate::LivenessStore::put_manifest`]),
///    and [`Self::join`] of an epoch older than the counter is refused with
///    [`crate::DurableError::EpochOver`], so no late join re-creates them: however many epochs
///    pass, a group holds the membership of its current epoch only, and manifests of its
///    current epoch plus any put late for an ended one (those expire with their TTL).
/// 6. **Bounded** calls, as every call of this crate.
///
/// Object safe (`Arc<dyn EpochStore>`), with `Send` futures.
#[async_trait]
pub trait EpochStore: Send + Sync + fmt::Debug {
    /// Moves the group to a new epoch and returns it, writing its barrier atomically
    /// (contract rules 1 and 2).
    ///
    /// # Errors
    /// [`crate::DurableError::Unavailable`], [`crate::DurableError::Timeout`] (it may have
    /// been applied), [`crate::DurableError::Rejected`] (a key holds something else),
    /// [`crate::DurableError::NotReplicated`] (a backend waiting for replicas: too few are
    /// connected, nothing moved; or they did not take the move in time, which may have
    /// been applied).
    async fn next_epoch(&self) -> Result<Epoch>;

    /// The group's current epoch; `Epoch(0)` before the first [`Self::next_epoch`].
    ///
    /// # Errors
    /// The connection errors and [`crate::DurableError::Corrupt`].
    async fn current_epoch(&self) -> Result<Epoch>;

    /// Saves the supervisor's state, replacing the previous one in one step.
    ///
    /// # Errors
    /// The connection errors.
    async fn save_supervisor_state(&self, state: &SupervisorState) -> Result<()>;

    /// The saved supervisor state, `None` when none was ever saved.
    ///
    /// # Errors
    /// [`crate::DurableError::Corrupt`] naming the bad field, and the connection errors.
    async fn load_supervisor_state(&self) -> Result<Option<SupervisorState>>;

    /// Records that `rank` joined `epoch`. Returns `true` the first time, `false` when it
    /// had already joined.
    ///
    /// # Errors
    /// [`crate::DurableError::EpochOver`] when the group's counter is past `epoch` (nothing
    /// written: a late join never re-creates an ended epoch's membership),
    /// [`crate::DurableError::RankOutOfRange`] and the connection errors.
    async fn join(&self, epoch: Epoch, rank: Rank) -> Result<bool>;

    /// The ranks that joined `epoch`, ascending.
    ///
    /// # Errors
    /// [`crate::DurableError::Corrupt`] for a member that is not a rank number, and the
    /// connection errors.
    async fn members(&self, epoch: Epoch) -> Result<Vec<Rank>>;

    /// Deletes the membership record of `epoch` (the supervisor drops old epochs' records).
    ///
    /// # Errors
    /// The connection errors.
    async fn forget_members(&self, epoch: Epoch) -> Result<()>;
}
