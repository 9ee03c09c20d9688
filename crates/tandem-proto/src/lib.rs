//! Tandem's group protocol core, sans IO.
//!
//! The leader and follower state machines, the frame, the wire messages with their codec and
//! handshake, and the reconciliation that opens a new epoch. Nothing here opens a socket,
//! spawns a thread or reads a clock: inputs go in through `handle_*`/`record_*` methods with
//! the caller's `now_ms` (milliseconds on its monotonic clock), outputs come out of `poll_*`
//! methods (quinn-proto's shape). Actors drive it in production; the model checker
//! (`tandem-model`) and the property tests drive it in CI. Every state machine and message is
//! `Clone + Debug + Eq + Hash` and uses ordered collections, so states can be hashed and
//! compared deterministically.
//!
//! # Layout
//!
//! - [`ids`]: `Epoch`, `Step`, `Rank`, `TaskId`, `RequestId`, `BlockHash`, `PageId`,
//!   `GroupId`, `TaskKind`.
//! - [`frame`]: `Frame` (one per `(epoch, step)`), `LookupResult`, `TaskStart`,
//!   `TaskOutcome`, `OutcomeResult`, `Reconciliation`.
//! - [`wire`]: `message` (the `Message` enum), `codec` (the length-delimited, versioned
//!   envelope; never panics, checks the length limit first), `handshake` (`Membership`,
//!   HMAC proof of the group secret, `HandshakeError` naming the differing field).
//! - [`fingerprint`]: `ConfigFingerprint`, the configuration every rank must agree on.
//! - [`quorum`]: per-task shard reports keyed by `(epoch, task, rank)`; duplicates ignored.
//! - [`persist`]: finished → durable → revealed pipeline of outcomes (`PersistBatch`).
//! - [`liveness`]: heartbeat deadlines.
//! - [`retention`]: bounded window of sealed frames shared by leader and follower.
//! - [`leader`]: `Leader`, the one decider; seals exactly one frame per step, within the
//!   acknowledgement window, revealing only durable outcomes.
//! - [`follower`]: `Follower`, positional idempotent reads and bounded waits.
//! - [`reconcile`]: pure builder of the step-0 `Reconciliation` and the per-rank filter that
//!   makes each outcome reach an engine once.
//! - [`error`]: `QuorumError`, `LeaderError`, `FollowerError`.
//!
//! # Driving a leader (one step)
//!
//! 1. `record_lookup`, `start_store`, `start_load`, `record_eviction` for the open step.
//! 2. Feed peer messages to `handle_message` (or `handle_report`/`handle_ack`/
//!    `handle_heartbeat`), and the leader's own shard reports to `handle_report`.
//! 3. Append each `poll_persist()` batch to the durable stream, then `handle_persisted(id)`
//!    (or `handle_persist_failed(id)` when the store is unreachable).
//! 4. `seal(step, now_ms)`; send every `poll_transmit()` message; apply the returned frame to
//!    the local engine.
//! 5. Arm a timer for `poll_timeout()`, call `handle_timeout(now_ms)` when it fires, and
//!    forward `poll_event()` to the supervisor.

pub mod error;
pub mod fingerprint;
pub mod follower;
pub mod frame;
pub mod ids;
pub mod leader;
pub mod liveness;
pub mod persist;
pub mod quorum;
pub mod reconcile;
pub mod retention;
pub mod wire;

pub use error::{FollowerError, LeaderError, QuorumError};
pub use fingerprint::{ConfigFingerprint, FieldMismatch};
pub use follower::{Follower, FollowerEvent, FollowerStats, WaitId};
pub use frame::{Frame, LookupResult, OutcomeResult, Reconciliation, TaskOutcome, TaskStart};
pub use ids::{BlockHash, Epoch, GroupId, PageId, Rank, RequestId, Step, TaskId, TaskKind};
pub use leader::{Leader, LeaderConfig, LeaderEvent, LeaderStats};
pub use persist::{BatchId, PersistBatch};
pub use quorum::ReportOutcome;
pub use reconcile::{reconcile, undelivered_outcomes, InFlightTask};
pub use wire::{
    decode, encode, encode_checked, Ack, CodecError, GroupSecret, HandshakeError, Heartbeat,
    Hello, Membership, Message, ShardReport, PROTOCOL_VERSION,
};
