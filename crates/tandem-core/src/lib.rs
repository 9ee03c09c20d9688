//! Tandem's rank cores, sans IO: every group rule a rank's agent keeps, in one place.
//!
//! A [`RankCore`] is one rank's side of the group protocol for one epoch: the leader's
//! ([`LeaderCore`], rank 0: the one decider) or a follower's ([`FollowerCore`]). It composes
//! the protocol state machines of `tandem-proto` (`Leader`, `Follower`) with the group index
//! (placement, LRU, pins) and the rules that sit around them: engine requests fenced by epoch,
//! lookups and their pins, stores refused by a full tier, loads of unpinned blocks refused,
//! `end_step` waiting for the window until its deadline, the write-ahead append before any
//! frame reveals a start or an outcome (or none, without a completion log), frame waits with
//! deadlines, follower copies held until the engine acknowledged the step that started them,
//! the frame-0 redelivery filter, admission of followers, the rebuild of the index from the
//! ranks' manifests, heartbeats and readiness.
//!
//! The shape is quinn-proto's: inputs are `handle_*` calls carrying the driver's `now_ms`
//! (milliseconds on its monotonic clock); outputs are plain data taken with
//! [`RankCore::poll_output`] in order ([`Output`]: replies to engine calls, commands for the
//! rank's store, messages to peers, appends to make durable, manifest reads, events for the
//! runtime), and [`RankCore::poll_timeout`] is the one deadline to arm. Nothing here opens a
//! socket, spawns a thread, reads a clock or draws randomness: the same inputs give the same
//! outputs, and every state is `Clone + Debug + Eq + Hash`, so the agent's actors, the model
//! checker and the simulator all drive the same code, from one thread on a virtual clock if
//! they like. Ports of the agent's behaviours are tested here, cores on a virtual clock,
//! without processes (`tests/`).
//!
//! # Inputs and outputs
//!
//! | input | from | may produce |
//! |---|---|---|
//! | [`RankCore::new`] | the runtime, at an epoch's start | `Store(BeginEpoch)` |
//! | [`RankCore::handle_engine`] | an engine call | `Reply` (now or later), `Append`, `Send` (frames, acks), `Store` (copies), `Event(EngineAcked)` |
//! | [`RankCore::handle_engine_disconnect`] | the engine socket | `Event(Failed)` with tasks in flight |
//! | [`RankCore::handle_admit`] | a follower's hello (leader) | `Send(Welcome/Refused)`, `Close`, `FetchManifests`, `Event(Ready)` |
//! | [`RankCore::handle_peer_message`] / [`RankCore::handle_peer_lost`] | a follower connection (leader) | `Reply` (window waits), `Send` (frames), `Event(Failed)` |
//! | [`RankCore::handle_leader_linked`] / [`RankCore::handle_leader_message`] / [`RankCore::handle_leader_lost`] | the leader connection (follower) | `Send(Heartbeat)`, `Reply` (frame waits), `Store`, `Event` |
//! | [`RankCore::handle_shard_done`] | this rank's store | `Send(ShardReport)` (follower) |
//! | [`RankCore::handle_layers_copied`] | this rank's store (a layerwise load) | `Reply` (`wait_layer`) |
//! | [`RankCore::handle_appended`] | the completion stream (leader) | `Reply(Frame)`, `Send(Frame)`, `Store` |
//! | [`RankCore::handle_manifests`] | the liveness store (leader) | `FetchManifests` again, `Event(Ready/Failed)` |
//! | [`RankCore::handle_log_health`] | the epoch loop's heartbeats and reads ([`LogHealth`]) | readiness; `Event(Failed)` for a lost stream |
//! | [`RankCore::handle_timeout`] | the driver's one timer | `Reply` (deadlines), `Send(Heartbeat)`, `FetchManifests`, `Event(Failed)` |
//! | [`RankCore::handle_drain`] / [`RankCore::handle_stop`] | a shutdown, a new epoch | `Reply` |
//!
//! # Layout
//!
//! - [`rank`]: [`RankCore`], the rules every rank applies to its engine, and the epoch's
//!   failure and readiness.
//! - [`leader`]: [`LeaderCore`]: admission, the rebuild, timers; `tasks.rs` (lookups, pins,
//!   stores, loads); `appends.rs` (the write-ahead pipeline); `seal.rs` (`end_step`, the
//!   seal, the window waits).
//! - [`follower`]: [`FollowerCore`]: positional reads and waits, held copies, reports, acks,
//!   heartbeats.
//! - [`index`] and [`rebuild`]: the group index (placement, LRU per tier, move-only pins,
//!   plans of tier operations) and its rebuild from every rank's manifest.
//! - [`output`]: [`Output`] and its parts, [`CallRef`], [`ConnId`].
//! - [`config`]: [`CoreConfig`], [`EpochStart`].
//! - [`status`]: [`RankStatus`], [`CoreCounters`], [`NotReady`].
//! - [`shared`]: the output queue, the frame-0 filter, refusals as the engine sees them, the
//!   registered pool's size.
//! - `layers`: layerwise loads on one rank: the leader's plans from the frames, this rank's
//!   copy progress and per-layer deadline, and the engine's `wait_layer` calls
//!   (docs/LAYERWISE.md).
//! - `binds`: per-rank page binding: copies of tasks started without page ids wait for this
//!   rank's engine's `bind`, until a deadline that fails the rank's shard.
//! - [`cache_events`]: [`CacheEventDeriver`], the group's KV cache events (stored, removed,
//!   all cleared) folded from sealed frames, for the agent to publish.
//! - [`cadence`]: the fixed figures the cores decide with.
//!
//! The invariants of the group index, and the tests that prove them, are in the crate's
//! README.md.
//!
//! # Driving a leader and a follower (one store)
//!
//! ```
//! use tandem_core::*;
//! use tandem_proto::engine::{EngineReply, EngineRequest};
//! use tandem_proto::wire::handshake::{GroupSecret, Membership, PROTOCOL_VERSION};
//! use tandem_proto::*;
//!
//! let membership = Membership {
//!     protocol_version: PROTOCOL_VERSION,
//!     group_id: GroupId("g".into()),
//!     fingerprint: ConfigFingerprint::default(),
//!     secret: GroupSecret::new(b"secret".to_vec()),
//!     epoch: Epoch(1),
//!     world_size: 2,
//! };
//! let config = |rank| CoreConfig {
//!     epoch: Epoch(1), rank: Rank(rank), world_size: 2, shard_bytes: 64, layers_per_rank: 1, window_steps: 8,
//!     retention_steps: 64, max_frame_bytes: 1 << 20, heartbeat_interval_ms: 100,
//!     heartbeat_timeout_ms: 1_000, host_capacity_blocks: 4, disk_capacity_blocks: 0,
//!     bind_timeout_ms: 5_000, max_appends_in_flight: 8, append_wait_ms: 1,
//!     durable: false, membership: membership.clone(), leader_addr: "leader".into(),
//! };
//! let mut leader = RankCore::new(config(0), EpochStart::default(), 0)?;
//! let mut follower = RankCore::new(config(1), EpochStart::default(), 0)?;
//!
//! // The follower joins: the leader checks its hello, the follower is told it is in.
//! let nonce = [7u8; 32];
//! leader.handle_admit(ConnId(1), &nonce, &membership.hello(&nonce, Rank(1)), 0)?;
//! follower.handle_leader_linked(0);
//!
//! // The leader's engine stores one block and ends step 0.
//! let store = EngineRequest::Store {
//!     epoch: Epoch(1), step: Step(0), request: RequestId(7),
//!     block_hashes: vec![BlockHash(0xab)], page_ids: vec![PageId(3)],
//! };
//! leader.handle_engine(CallRef(1), store, 1);
//! leader.handle_engine(CallRef(2), EngineRequest::EndStep { epoch: Epoch(1), step: Step(0), deadline_ms: 100 }, 2);
//! let mut frame = None;
//! while let Some(out) = leader.poll_output() {
//!     match out {
//!         // Carried over TCP in production: the follower gets the frame (the welcome is
//!         // the handshake's, read by the driver before it links the follower).
//!         Output::Send { msg: msg @ Message::Frame(_), .. } => follower.handle_leader_message(msg, 3),
//!         Output::Reply { call: CallRef(2), reply: EngineReply::Frame(f) } => frame = Some(f),
//!         _ => {} // welcome, the store's commands (its copies), events
//!     }
//! }
//! let frame = frame.expect("step 0 sealed");
//! assert_eq!(frame.stores[0].block_hashes, vec![BlockHash(0xab)]);
//!
//! // The follower's engine reads the same frame by position.
//! follower.handle_engine(CallRef(1), EngineRequest::Frame { epoch: Epoch(1), step: Step(0), deadline_ms: 100 }, 4);
//! let read = std::iter::from_fn(|| follower.poll_output()).find_map(|o| match o {
//!     Output::Reply { reply: EngineReply::Frame(f), .. } => Some(f),
//!     _ => None,
//! });
//! assert_eq!(read, Some(frame));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod binds;
pub mod cache_events;
pub mod cadence;
pub mod config;
pub mod epoch_loop;
pub mod follower;
pub mod index;
mod layers;
pub mod leader;
pub mod output;
pub mod rank;
pub mod rebuild;
pub mod shared;
pub mod status;

pub use cache_events::{CacheEvent, CacheEventDeriver, MAX_HASHES_PER_EVENT};
pub use config::{CoreConfig, EpochStart};
pub use epoch_loop::{Effect, EpochLoop, LoopConfig, Note, Outcome};
pub use follower::FollowerCore;
pub use index::{GroupIndex, IndexConfig, IndexError, LoadPlan, Pin, PinPurpose, StorePlan};
pub use leader::{CoreError, LeaderCore};
pub use output::{Append, CallRef, ConnId, Event, Output, Peer, StoreCommand};
pub use rank::{FrameReads, RankCore, Role};
pub use rebuild::Rebuild;
pub use shared::{follower_refusal, leader_refusal};
pub use status::{CoreCounters, LogHealth, NotReady, RankStatus, RoleCounters, TaskCounts};
