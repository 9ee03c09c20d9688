//! Tandem's durable group state: completions written ahead, per-rank delivery tracking,
//! recovery for a new epoch, bounded stream growth, the epoch counter, the supervisor's state,
//! membership, heartbeats, failure reports and manifests (docs/DESIGN.md invariants 4 and 5).
//!
//! # Three contracts, two implementations
//!
//! | trait | concern | contract |
//! |---|---|---|
//! | [`CompletionStream`] | the completion stream: append, read, ack, pending, recovery, trim | fencing by epoch, per-rank acks, recovery, safe trimming |
//! | [`EpochStore`] | the epoch counter, the supervisor's state, membership | epochs only move forward, each with its barrier; state replaced whole; membership a set |
//! | [`LivenessStore`] | heartbeats, failure reports, manifests | expiry on the backend's clock, reports in order once, one slot per rank |
//!
//! [`RedisLog`] implements all three on Redis (the production backend), [`MemoryLog`] in
//! memory with the same contracts (tests, simulation; its expiries follow a [`WallClock`]
//! such as [`ManualClock`]). One contract suite (`tests/contract/`) runs against both. The
//! traits are object safe, with `Send` futures ([`macro@async_trait`]), so drivers hold
//! `Arc<dyn CompletionStream>` and the like and await them from tokio tasks and actix
//! actors alike; the boxed future costs one allocation per call, nothing beside a round
//! trip to Redis. The pure folds [`RecoveryBuilder`] and [`TrimScan`] are shared by both.
//!
//! Every Redis call has a deadline and ends in a [`DurableError`] (never waits forever);
//! while Redis is unreachable calls fail fast with [`DurableError::Unavailable`] or
//! [`DurableError::Timeout`] and succeed again by themselves once it is back. Credentials in
//! the URL never reach an error, a `Debug` print or a log.
//!
//! # Key layout (per group `g`)
//!
//! | key | type | holds |
//! |---|---|---|
//! | `tandem:{g}:completions` | stream | entry id `{epoch}-{n}`; one entry per step written ahead: fields `v` (record version) and `rec` (a postcard [`StepRecord`]: epoch, step, tasks started, outcomes finished); plus one barrier per epoch, id `{epoch}-0`, fields `v` and `barrier` |
//! | `tandem:{g}:completions` groups `rank-{r}` | consumer groups | one per rank, consumer `agent`: delivered = read by the rank's agent, acknowledged = its engine acknowledged the frame |
//! | `tandem:{g}:epoch` | string counter | the group's current epoch (INCR with the barrier, in one script; absent = 0 before the first) |
//! | `tandem:{g}:supervisor` | hash | `v`, `epoch`, `restarts_ms`, `state`, `reason`: what a restarted supervisor continues from |
//! | `tandem:{g}:members:{epoch}` | set | ranks that joined that epoch; deleted when the next epoch starts (a join of an ended epoch is refused, so none comes back) |
//! | `tandem:{g}:heartbeat:{rank}` | string, `PX` expiry | `epoch:unix_ms` of the rank's last heartbeat |
//! | `tandem:{g}:failures` | list | JSON [`FailureReport`]s, oldest first, at most [`liveness::MAX_FAILURE_REPORTS`] |
//! | `tandem:{g}:manifest:{epoch}:{rank}` | string, `PX` expiry | the shard manifest the rank published for that epoch; deleted when the next epoch starts |
//! | `tandem:{g}:events:seq` | string counter | the last KV cache event sequence number handed out, plus one (INCRBY) |
//!
//! Every key is bounded or expires: two counters, one hash, one capped list, one trimmed
//! stream, one heartbeat per rank, and the membership and manifests of the current epoch only
//! (a manifest put late for an ended epoch expires with its TTL).
//!
//! The braces are literal: they make every key of a group one Redis Cluster hash slot, so
//! `next_epoch` (a script touching the stream and the counter, both declared as keys) stays
//! legal there, a group's keys move together in a resharding, and different groups hash to
//! different slots and so spread over the masters. No key is shared between groups: a
//! group's trim, epoch or failure never touches another's.
//!
//! # Deployments
//!
//! [`RedisEndpoint`] names one server, a Redis Cluster (the redis crate's `cluster-async`
//! client: slot map from seed nodes, `MOVED`/`ASK` followed) or a primary watched by
//! Sentinel (the redis crate's `SentinelClient` names the primary; the connection asks it
//! again after a failover). [`ReplicationWait`] makes each append and epoch change wait for
//! replicas (`WAIT` in the same round trip) so that nothing revealed is lost with the
//! primary; an append that does not reach them fails with [`DurableError::NotReplicated`]
//! and is taken back. `DurableConfig::from_config` builds both from the `[redis]` section.
//!
//! # Protocol
//!
//! 1. Leader, each step: [`CompletionStream::append_step`] with the tasks started and the
//!    outcomes finished, then seal the frame. The append is one plain XADD with id
//!    `{epoch}-*` (followed by `WAIT` in the same round trip when replicas are waited for);
//!    once [`EpochStore::next_epoch`] wrote a newer epoch's barrier, Redis refuses it
//!    ([`DurableError::StaleEpoch`]), so every append that succeeded is seen by the next
//!    epoch's recovery.
//! 2. Each rank's agent: [`CompletionStream::read_new`] feeds an [`AckTracker`]; when the
//!    engine acknowledges frame `(epoch, step)`, [`AckTracker::on_engine_ack`] gives the ids
//!    for [`CompletionStream::ack`].
//! 3. New epoch: [`EpochStore::next_epoch`], then [`CompletionStream::recover`]; the leader
//!    passes [`Recovery::redelivered`] and [`Recovery::in_flight`] to
//!    `tandem_proto::reconcile`, appends [`Recovery::aborted`] in the step-0 record, seals
//!    step 0; each agent filters with [`Recovery::acknowledged_by_rank`] and, once its
//!    engine acknowledged step 0, calls [`CompletionStream::ack_through`] with
//!    [`Recovery::last_entry_id`].
//! 4. Every so many steps the leader calls [`CompletionStream::trim`].
//!
//! A stream that disappears under a running group (`DEL`, `FLUSHDB`, a Redis restarted
//! without persistence) is never created again silently by an append (`XADD ... NOMKSTREAM`)
//! or by a process connecting: every call that finds it or a consumer group missing fails
//! with [`DurableError::StreamLost`], and the next epoch's barrier script creates the stream
//! and every missing consumer group again (docs/DESIGN.md, "A completion stream that is gone").
//!
//! For durability across a Redis restart, run redis-server with `appendonly yes`
//! (`appendfsync everysec` survives a process kill; `always` also survives power loss).
//!
//! # Layout
//!
//! - [`stream`], [`epochs`], [`liveness`]: the three traits and their value types
//!   ([`RankCursor`], [`FailureReport`], [`Heartbeat`]).
//! - [`mod@redis`]: [`RedisLog`] and [`DurableConfig`]; one file per trait, and the writes
//!   that wait for replicas.
//! - [`endpoint`]: [`RedisEndpoint`] (standalone, cluster, Sentinel) and [`ReplicationWait`].
//! - [`memory`]: [`MemoryLog`]; one file per trait.
//! - [`clock`]: [`WallClock`], [`SystemClock`], [`ManualClock`].
//! - [`error`]: [`DurableError`], [`mask_url`].
//! - [`id`]: [`StreamEntryId`], the ordered ids Redis gives stream entries.
//! - [`keys`]: [`Keys`], the names above.
//! - [`record`]: [`StepRecord`], [`StartedTask`], [`LoggedStep`], [`StreamEntry`], the
//!   versioned encoding.
//! - [`conn`]: the connection to each kind of endpoint, with per-call deadlines
//!   ([`ConnTimeouts`]).
//! - [`recovery`]: [`Recovery`] and the pure [`RecoveryBuilder`].
//! - [`trim`]: the pure trim-point computation ([`TrimScan`], [`GroupFloor`]).
//! - [`supervisor`]: [`SupervisorState`], [`GroupState`] and their hash encoding.
//! - [`tracker`]: [`AckTracker`], sans IO.

pub mod clock;
pub mod conn;
pub mod endpoint;
pub mod epochs;
pub mod error;
pub mod id;
pub mod keys;
pub mod liveness;
pub mod memory;
pub mod record;
pub mod recovery;
pub mod redis;
pub mod stream;
pub mod supervisor;
pub mod tracker;
pub mod trim;

pub use async_trait::async_trait;
pub use clock::{ManualClock, SystemClock, WallClock};
pub use conn::ConnTimeouts;
pub use endpoint::{RedisEndpoint, ReplicationWait};
pub use epochs::EpochStore;
pub use error::{mask_url, DurableError, Result};
pub use id::StreamEntryId;
pub use keys::{consumer_group, Keys};
pub use liveness::{FailureReport, Heartbeat, LivenessStore};
pub use memory::MemoryLog;
pub use record::{LoggedStep, StartedTask, StepRecord, StreamEntry, RECORD_VERSION};
pub use recovery::{Recovery, RecoveryBuilder};
pub use redis::{DurableConfig, RedisLog};
pub use stream::{CompletionStream, RankCursor};
pub use supervisor::{GroupState, SupervisorState};
pub use tracker::AckTracker;
pub use trim::{GroupFloor, TrimScan};
