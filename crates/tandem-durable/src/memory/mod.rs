//! The in-memory twin of [`crate::RedisLog`]: [`MemoryLog`] implements
//! [`crate::CompletionStream`], [`crate::EpochStore`] and [`crate::LivenessStore`] with the
//! same contracts, for tests, the simulator and model checking, where a real redis-server
//! would be slow or nondeterministic.
//!
//! Owns one group's state behind one mutex, mirroring what Redis keeps: the stream (entries
//! by id, the last id ever generated, one position per rank), the epoch counter, the
//! supervisor state, membership sets, expiring heartbeats and manifests, and the failure
//! list. Expiry reads the [`WallClock`] it was given. Every call is atomic and never waits,
//! so the Redis twin's script atomicity (`next_epoch`) holds trivially. It is not durable
//! and not shared between processes: never a production backend.
//!
//! [`MemoryLog::set_unavailable`] makes every call fail with
//! [`DurableError::Unavailable`], as an outage of Redis does, so drivers' handling of an
//! unreachable log can be tested without one.

pub mod epochs;
pub mod liveness;
pub mod stream;

use crate::clock::{SystemClock, WallClock};
use crate::error::{DurableError, Result};
use crate::id::StreamEntryId;
use crate::liveness::{FailureReport, Heartbeat};
use crate::record::StreamEntry;
use crate::supervisor::SupervisorState;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use tandem_proto::{Epoch, Rank};

/// The URL the in-memory twin reports in [`DurableError::Unavailable`].
pub const MEMORY_URL: &str = "memory://";

/// One group's durable state, in memory. Cheap to clone; clones share the state (as clones of
/// a [`crate::RedisLog`] share one server).
#[derive(Clone)]
pub struct MemoryLog {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn WallClock>,
    world_size: u32,
}

impl fmt::Debug for MemoryLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLog")
            .field("world_size", &self.world_size)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// A value that reads as absent from `expires_at_ms` on.
#[derive(Clone, Debug)]
struct Expiring<T> {
    value: T,
    expires_at_ms: u64,
}

/// One rank's consumer group: what XINFO GROUPS and XPENDING would say.
#[derive(Clone, Debug, Default)]
struct Position {
    last_delivered: StreamEntryId,
    pending: BTreeSet<StreamEntryId>,
}

/// Everything Redis would hold for one group.
#[derive(Debug, Default)]
struct State {
    /// Retained entries, by id.
    entries: BTreeMap<StreamEntryId, StreamEntry>,
    /// The highest id ever generated (Redis's `last-generated-id`: kept across trims).
    last_id: StreamEntryId,
    /// Rank `r`'s position at index `r`.
    positions: Vec<Position>,
    /// The epoch counter.
    epoch: u64,
    supervisor: Option<SupervisorState>,
    members: BTreeMap<Epoch, BTreeSet<Rank>>,
    heartbeats: BTreeMap<Rank, Expiring<Heartbeat>>,
    manifests: BTreeMap<(Epoch, Rank), Expiring<Vec<u8>>>,
    failures: VecDeque<FailureReport>,
    /// The next KV cache event sequence number.
    event_seq: u64,
    /// Why every call fails, while set.
    unavailable: Option<String>,
}

impl MemoryLog {
    /// An empty group of `world_size` ranks whose expiries follow the system clock.
    pub fn new(world_size: u32) -> Self {
        MemoryLog::with_clock(world_size, Arc::new(SystemClock))
    }

    /// An empty group of `world_size` ranks whose expiries follow `clock` (a
    /// [`crate::ManualClock`] in tests).
    pub fn with_clock(world_size: u32, clock: Arc<dyn WallClock>) -> Self {
        let state = State {
            positions: vec![Position::default(); world_size as usize],
            ..State::default()
        };
        MemoryLog {
            state: Arc::new(Mutex::new(state)),
            clock,
            world_size,
        }
    }

    /// While `reason` is `Some`, every call fails with [`DurableError::Unavailable`] naming
    /// it and changes nothing; `None` ends the outage. Nothing is lost meanwhile.
    pub fn set_unavailable(&self, reason: Option<&str>) {
        self.lock().unavailable = reason.map(str::to_string);
    }

    /// The shared state, for operation `op`: refused while unavailable. A poisoned lock
    /// (a panic while it was held, only possible in a test) is taken over: every change
    /// below is applied whole before anything can panic.
    fn state(&self, op: &'static str) -> Result<MutexGuard<'_, State>> {
        let state = self.lock();
        match &state.unavailable {
            Some(reason) => Err(DurableError::Unavailable {
                url: MEMORY_URL.to_string(),
                op,
                reason: reason.clone(),
            }),
            None => Ok(state),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn check_rank(&self, rank: Rank) -> Result<()> {
        crate::error::check_rank(rank, self.world_size)
    }
}

impl<T: Clone> Expiring<T> {
    fn new(value: T, now_ms: u64, ttl_ms: u64) -> Self {
        Expiring {
            value,
            expires_at_ms: now_ms.saturating_add(ttl_ms.max(1)),
        }
    }

    /// The value while it has not expired at `now_ms`.
    fn get(&self, now_ms: u64) -> Option<T> {
        (now_ms < self.expires_at_ms).then(|| self.value.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CompletionStream, EpochStore, LivenessStore};
    use tandem_proto::Step;

    #[tokio::test]
    async fn an_outage_refuses_every_call_and_loses_nothing() {
        let log = MemoryLog::new(1);
        let e = log.next_epoch().await.unwrap();
        let id = log.append_step(e, Step(0), &[], &[]).await.unwrap();
        log.set_unavailable(Some("test outage"));
        let err = log.append_step(e, Step(1), &[], &[]).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "redis at memory:// is unavailable during append_step: test outage"
        );
        assert!(matches!(
            log.heartbeats().await,
            Err(DurableError::Unavailable {
                op: "heartbeats",
                ..
            })
        ));
        assert!(log.next_epoch().await.is_err());
        log.set_unavailable(None);
        assert_eq!(log.current_epoch().await.unwrap(), e, "nothing moved");
        let read = log.read_new(Rank(0), 10).await.unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].id, id);
    }
}
