//! Tandem's Redis layer: durable completions, per-rank delivery tracking, recovery for a new
//! epoch, bounded stream growth, the epoch counter, the supervisor's state and membership
//! (docs/DESIGN.md invariants 4 and 5).
//!
//! One [`CompletionLog`] per group holds one self-reconnecting connection. Every call has a
//! deadline and ends in a [`DurableError`] (never waits forever); while Redis is unreachable
//! calls fail fast with [`DurableError::Unavailable`] or [`DurableError::Timeout`] and
//! succeed again by themselves once it is back. Credentials in the URL never reach an error,
//! a `Debug` print or a log.
//!
//! # Key layout (per group `g`)
//!
//! | key | type | holds |
//! |---|---|---|
//! | `tandem:{g}:completions` | stream | entry id `{epoch}-{n}`; one entry per step written ahead: fields `v` (record version) and `rec` (a postcard [`StepRecord`]: epoch, step, tasks started, outcomes finished); plus one barrier per epoch, id `{epoch}-0`, fields `v` and `barrier` |
//! | `tandem:{g}:completions` groups `rank-{r}` | consumer groups | one per rank, consumer `agent`: delivered = read by the rank's agent, acknowledged = its engine acknowledged the frame |
//! | `tandem:{g}:epoch` | string counter | the group's current epoch (INCR with the barrier, in one script; absent = 0 before the first) |
//! | `tandem:{g}:supervisor` | hash | `v`, `epoch`, `restarts_ms`, `state`, `reason`: what a restarted supervisor continues from |
//! | `tandem:{g}:members:{epoch}` | set | ranks that joined that epoch |
//!
//! The braces are literal: they make every key of a group one Redis Cluster hash slot, so
//! `next_epoch` (a script touching the stream and the counter) stays legal there.
//!
//! # Protocol
//!
//! 1. Leader, each step: [`CompletionLog::append_step`] with the tasks started and the
//!    outcomes finished, then seal the frame. The append is one plain XADD with id
//!    `{epoch}-*`; once [`CompletionLog::next_epoch`] wrote a newer epoch's barrier, Redis
//!    refuses it ([`DurableError::StaleEpoch`]), so every append that succeeded is seen by
//!    the next epoch's recovery.
//! 2. Each rank's agent: [`CompletionLog::read_new`] feeds an [`AckTracker`]; when the
//!    engine acknowledges frame `(epoch, step)`, [`AckTracker::on_engine_ack`] gives the ids
//!    for [`CompletionLog::ack`].
//! 3. New epoch: [`CompletionLog::next_epoch`], then [`CompletionLog::recover`]; the leader
//!    passes [`Recovery::redelivered`] and [`Recovery::in_flight`] to
//!    `tandem_proto::reconcile`, appends [`Recovery::aborted`] in the step-0 record, seals
//!    step 0; each agent filters with [`Recovery::acknowledged_by_rank`] and, once its
//!    engine acknowledged step 0, calls [`CompletionLog::ack_through`] with
//!    [`Recovery::last_entry_id`].
//! 4. Every so many steps the leader calls [`CompletionLog::trim`].
//!
//! For durability across a Redis restart, run redis-server with `appendonly yes`
//! (`appendfsync everysec` survives a process kill; `always` also survives power loss).
//!
//! # Layout
//!
//! - [`error`]: [`DurableError`], [`mask_url`].
//! - [`id`]: [`StreamEntryId`], the ordered ids Redis gives stream entries.
//! - [`keys`]: [`Keys`], the names above.
//! - [`record`]: [`StepRecord`], [`StartedTask`], [`LoggedStep`], [`StreamEntry`], the
//!   versioned encoding.
//! - [`conn`]: the reconnecting connection with per-call deadlines ([`ConnTimeouts`]).
//! - [`log`]: [`CompletionLog`], [`DurableConfig`], append, read, ack, pending.
//! - [`recovery`]: [`Recovery`], [`RecoveryBuilder`] and [`CompletionLog::recover`].
//! - [`trim`]: [`CompletionLog::trim`] and its pure trim-point computation.
//! - [`supervisor`]: epoch counter, [`SupervisorState`], membership.
//! - [`tracker`]: [`AckTracker`], sans IO.

pub mod conn;
pub mod error;
pub mod id;
pub mod keys;
pub mod liveness;
pub mod log;
pub mod record;
pub mod recovery;
pub mod supervisor;
pub mod tracker;
pub mod trim;

pub use conn::ConnTimeouts;
pub use error::{mask_url, DurableError, Result};
pub use id::StreamEntryId;
pub use keys::{consumer_group, Keys};
pub use log::{CompletionLog, DurableConfig, RankCursor};
pub use record::{LoggedStep, StartedTask, StepRecord, StreamEntry, RECORD_VERSION};
pub use recovery::{Recovery, RecoveryBuilder};
pub use supervisor::{GroupState, SupervisorState};
pub use tracker::AckTracker;
pub use trim::{GroupFloor, TrimScan};
