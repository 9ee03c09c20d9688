//! Liveness, failure reports and shard manifests between the agents, their leader and the
//! supervisor, as a contract.
//!
//! Every agent writes a heartbeat (epoch, wall-clock time and incarnation, expiring after a
//! TTL) each
//! interval, and pushes a [`FailureReport`] when it sees its epoch fail (a lost peer, a silent
//! rank, a refused frame); at the start of each epoch it publishes its shard manifest. The
//! supervisor reads heartbeats and reports, the leader reads the manifests. Owns the
//! [`LivenessStore`] trait and these value types; the Redis implementation is
//! [`crate::RedisLog`] (keys `tandem:{g}:heartbeat:{rank}`, `tandem:{g}:failures`,
//! `tandem:{g}:manifest:{epoch}:{rank}`), the in-memory twin [`crate::MemoryLog`]. It never
//! decides whether a rank failed: that is the supervisor's.
//!
//! Heartbeats carry wall-clock milliseconds, so the supervisor and agents need clocks within
//! a fraction of the heartbeat timeout of each other (one host, or NTP).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::fmt;
use tandem_proto::{Epoch, Rank};

use crate::error::Result;

/// Longest failure list kept; older reports beyond it are dropped by the writer (LTRIM).
pub const MAX_FAILURE_REPORTS: isize = 1024;

/// An agent's report that its epoch failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureReport {
    /// The epoch that failed.
    pub epoch: Epoch,
    /// The reporting rank.
    pub rank: Rank,
    /// What the agent saw (never contains secrets).
    pub reason: String,
}

/// A rank's last heartbeat: the epoch it was in, when (ms since the Unix epoch), and which
/// process start of the rank's agent wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// The epoch the agent was running.
    pub epoch: Epoch,
    /// Wall-clock time of the heartbeat, ms since the Unix epoch.
    pub unix_ms: u64,
    /// The agent's incarnation: an id that changes with every start of the rank's agent
    /// process (the agents use the tier fence's incarnation). 0: not known (a heartbeat
    /// written in the older `epoch:unix_ms` form).
    pub incarnation: u64,
}

/// Heartbeats, failure reports and manifests of one group of `world_size` ranks.
///
/// # Contract (both implementations, checked by the contract suite)
///
/// 1. **Expiry.** A heartbeat or manifest written with `ttl_ms` (at least 1) reads back until
///    `ttl_ms` milliseconds have passed on the backend's clock, and as absent after that
///    (Redis: the server's clock; [`crate::MemoryLog`]: the [`crate::WallClock`] it was given,
///    so a test moves time instead of sleeping). A newer write replaces the older one and its
///    expiry.
/// 2. **Failure reports** come out in the order they went in, each once
///    ([`Self::take_failures`] removes what it returns); at most [`MAX_FAILURE_REPORTS`]
///    are kept, the oldest dropped first.
/// 3. **Per rank, per epoch.** [`Self::heartbeats`] and [`Self::manifests`] return one slot
///    per rank `0..world_size`; writing for a rank outside it is refused with
///    [`crate::DurableError::RankOutOfRange`]. Manifests are kept per epoch.
/// 4. **Bounded**, as every call of this crate.
///
/// Object safe (`Arc<dyn LivenessStore>`), with `Send` futures.
#[async_trait]
pub trait LivenessStore: Send + Sync + fmt::Debug {
    /// Writes `rank`'s heartbeat; it expires after `ttl_ms` milliseconds.
    ///
    /// # Errors
    /// [`crate::DurableError::RankOutOfRange`], [`crate::DurableError::Unavailable`],
    /// [`crate::DurableError::Timeout`], [`crate::DurableError::Rejected`].
    async fn heartbeat(&self, rank: Rank, beat: Heartbeat, ttl_ms: u64) -> Result<()>;

    /// The last heartbeat of every rank `0..world_size` (`None`: none, or expired).
    ///
    /// # Errors
    /// The connection errors, and [`crate::DurableError::Corrupt`] for an unreadable value.
    async fn heartbeats(&self) -> Result<Vec<Option<Heartbeat>>>;

    /// Pushes a failure report for the supervisor.
    ///
    /// # Errors
    /// The connection errors.
    async fn report_failure(&self, report: &FailureReport) -> Result<()>;

    /// Takes (and removes) up to `max` (at least 1) failure reports, oldest first.
    /// Undecodable reports are dropped and described in the second list.
    ///
    /// # Errors
    /// The connection errors.
    async fn take_failures(&self, max: usize) -> Result<(Vec<FailureReport>, Vec<String>)>;

    /// Publishes the shard manifest (opaque bytes) `rank` holds at the start of `epoch`;
    /// the leader of `epoch` rebuilds the group index from every rank's. Expires after
    /// `ttl_ms` milliseconds.
    ///
    /// # Errors
    /// As [`Self::heartbeat`].
    async fn put_manifest(&self, epoch: Epoch, rank: Rank, bytes: &[u8], ttl_ms: u64)
        -> Result<()>;

    /// The manifests of every rank `0..world_size` published for `epoch` (`None`: not yet,
    /// or expired).
    ///
    /// # Errors
    /// The connection errors.
    async fn manifests(&self, epoch: Epoch) -> Result<Vec<Option<Vec<u8>>>>;

    /// Reserves `n` consecutive sequence numbers of the group's KV cache event stream and
    /// returns the first: numbers never repeat or go back, across agent and group restarts
    /// (Redis: `INCRBY tandem:{g}:events:seq n`; the first number handed out is 0).
    ///
    /// # Errors
    /// The connection errors.
    async fn reserve_event_seqs(&self, n: u64) -> Result<u64>;
}
