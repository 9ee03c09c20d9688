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
//!   `GroupId`, `TaskKind`, `Tier` (the one definition of a tier's name).
//! - [`frame`]: `Frame` (one per `(epoch, step)`), `LookupResult`, `TaskStart`,
//!   `TaskOutcome`, `OutcomeResult`, `Reconciliation`.
//! - [`wire`]: `message` (the `Message` enum), `codec` (the length-delimited, versioned
//!   envelope; never panics, checks the length limit first), `handshake` (`Membership`,
//!   HMAC proof of the group secret, `HandshakeError` naming the differing field).
//! - [`fingerprint`]: `ConfigFingerprint`, the configuration every rank must agree on, and
//!   `LayoutFingerprint`, the model layout persisted shards are keyed by.
//! - [`quorum`]: per-task shard reports keyed by `(epoch, task, rank)`; duplicates ignored.
//! - [`persist`]: finished → durable → revealed pipeline of outcomes (`PersistBatch`).
//! - [`liveness`]: heartbeat deadlines.
//! - [`manifest`]: `RankBlocks`, the verified shards a rank publishes for the leader's
//!   rebuild of the group index.
//! - [`retention`]: bounded window of sealed frames shared by leader and follower.
//! - [`leader`]: `Leader`, the one decider; seals exactly one frame per step, within the
//!   acknowledgement window, revealing only durable outcomes, never larger than
//!   `max_frame_bytes` (`leader/budget.rs` bounds what requests may add, exactly). `leader/config.rs` holds
//!   `LeaderConfig`, `LeaderStats` and `LeaderEvent`; `leader/peers.rs` the admission of
//!   followers (`admit`), lost connections and message dispatch.
//! - [`follower`]: `Follower`, positional idempotent reads and bounded waits.
//! - [`mod@reconcile`]: pure builder of the step-0 `Reconciliation` and the per-rank filter that
//!   makes each outcome reach an engine once.
//! - [`error`]: `QuorumError`, `LeaderError`, `FollowerError`.
//! - [`engine`]: the engine endpoint's `EngineRequest`, `EngineReply`, `AgentError` and
//!   `CallId` (what an engine asks its agent and what it answers; `tandem-client` re-exports
//!   them as `tandem_client::api`).
//!
//! # Driving a leader (one step)
//!
//! 1. `check_request` each engine request (a frame too large to send is refused here, never sealed),
//!    then `record_lookup`, `start_store`, `start_load`, `record_tier_op` for the open step.
//! 2. Feed peer messages to `handle_message` (or `handle_report`/`handle_ack`/
//!    `handle_heartbeat`), and the leader's own shard reports to `handle_report`.
//! 3. Append each `poll_persist()` batch (task starts and finished outcomes) to the durable
//!    stream, then `handle_persisted(id)` (or `handle_persist_failed(id)` when the store is
//!    unreachable). A start or outcome is revealed only by a frame sealed after it is durable.
//! 4. `seal(step, now_ms)`; send every `poll_transmit()` message; apply the returned frame to
//!    the local engine.
//! 5. Arm a timer for `poll_timeout()`, call `handle_timeout(now_ms)` when it fires, and
//!    forward `poll_event()` to the supervisor.
//!
//! ```
//! use tandem_proto::*;
//!
//! let config = LeaderConfig {
//!     epoch: Epoch(1), world_size: 2, window_steps: 8, retention_steps: 64,
//!     heartbeat_timeout_ms: 3_000, start_ms: 0, max_frame_bytes: 1 << 20,
//! };
//! let mut leader = Leader::new(config, None)?;
//! let mut follower = Follower::new(Epoch(1), Rank(1), 64);
//!
//! // Step 0: the engine stores one block; once the start is durable the frame reveals it.
//! let task = leader.start_store(RequestId(7), vec![BlockHash(0xab)], vec![PageId(3)], vec![Tier::Host]);
//! let batch = leader.poll_persist().expect("one start");
//! // ... XADD batch.started to the completion stream ...
//! leader.handle_persisted(batch.id)?;
//! let frame0 = leader.seal(Step(0), 10)?;
//! assert_eq!(frame0.stores[0].task, task);
//! while let Some((_rank, msg)) = leader.poll_transmit() {
//!     let bytes = encode(&msg); // over TCP in production
//!     let (msg, _) = decode(&bytes, 1 << 20)?.expect("whole message");
//!     follower.handle_message(msg)?;
//! }
//! assert_eq!(follower.read(Step(0))?, Some(&frame0));
//!
//! // Both ranks copied their shard: quorum. The outcome becomes durable, then visible.
//! leader.handle_report(&ShardReport { epoch: Epoch(1), task, rank: Rank(0), result: Ok(()) })?;
//! leader.handle_message(Rank(1), &follower.report(task, Ok(())), 20)?;
//! let batch = leader.poll_persist().expect("one finished outcome");
//! // ... XADD batch.outcomes to the completion stream ...
//! leader.handle_persisted(batch.id)?;
//! leader.handle_message(Rank(1), &follower.ack(Step(0))?, 30)?;
//! let frame1 = leader.seal(Step(1), 40)?;
//! assert_eq!(frame1.finished[0].task, task);
//! assert_eq!(frame1.finished[0].result, OutcomeResult::Ok);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod engine;
pub mod error;
pub mod fingerprint;
pub mod follower;
pub mod frame;
pub mod ids;
pub mod leader;
pub mod liveness;
pub mod manifest;
pub mod persist;
pub mod quorum;
pub mod reconcile;
pub mod retention;
pub mod wire;

pub use error::{FollowerError, LeaderError, QuorumError};
pub use fingerprint::{ConfigFingerprint, FieldMismatch, LayoutFingerprint};
pub use follower::{Follower, FollowerEvent, FollowerStats, WaitId};
pub use frame::{
    Frame, LayerwiseLoad, LookupResult, OutcomeResult, Reconciliation, TaskOutcome, TaskStart,
    TierOp,
};
pub use ids::{BlockHash, Epoch, GroupId, PageId, Rank, RequestId, Step, TaskId, TaskKind, Tier};
pub use leader::{
    FrameBudget, Leader, LeaderConfig, LeaderEvent, LeaderStats, StepRequest, MAX_WORLD_SIZE,
};
pub use manifest::RankBlocks;
pub use persist::{BatchId, PersistBatch, StartedTask};
pub use quorum::ReportOutcome;
pub use reconcile::{reconcile, undelivered_outcomes, InFlightTask};
pub use wire::{
    decode, encode, encode_checked, Ack, CodecError, GroupSecret, HandshakeError, Heartbeat, Hello,
    Membership, Message, ShardReport, PROTOCOL_VERSION,
};
