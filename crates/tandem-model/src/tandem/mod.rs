//! The Tandem model: the rank cores the agents run (`tandem-core`'s `RankCore`, a leader's and
//! the followers'), the network, the engines, the durable store and crashes, checked against
//! the invariants of docs/DESIGN.md.
//!
//! Owns the model and its properties. Must never: re-implement a protocol decision.
//!
//! # Layout
//!
//! - [`config`]: bounds (ranks, epochs, steps, stores, duplicates, window) and the variant.
//! - [`model`]: the actions and the stateright `Model`.
//! - `driver`: the body of each action (what an agent's actors do with the cores' inputs and
//!   outputs).
//! - [`state`]: the state: cores, links, engines, durable store, ghost frames.
//! - [`properties`]: `always` invariants and `sometimes` examples, by name.
//! - [`trace`]: readable traces of paths.
//!
//! # What one state holds
//!
//! - the current epoch's rank cores: rank 0's (`LeaderCore`: the `Leader`, the group index,
//!   pins, the append before a seal, admission, the window) and the followers'
//!   (`FollowerCore`: the `Follower`, frame waits, copies held until the engine acknowledged,
//!   reports, acks, the frame-0 filter), the very code the agents drive;
//! - one ordered queue per direction per follower link; messages of an older epoch stay in
//!   flight after a restart and may still arrive;
//! - per rank, an engine: the frames it applied (by the `(epoch, step)` it applied them as),
//!   how often each task's outcome reached it, its durable acknowledgements, and the shards it
//!   copies;
//! - the durable store: the completion stream and the tasks started;
//! - a ghost map of every sealed frame, read only by properties.
//!
//! # Modelling choices
//!
//! - Rank 0's engine ends a step with `end_step`; its core appends the step's starts and
//!   outcomes first (the `Persist` move lands the append in the durable store, `PersistConfirm`
//!   answers the core, which then seals), and rank 0's engine applies the frame when it is
//!   sealed. An `end_step` the full window would only hold (nothing to append) is not a move:
//!   the engine asks again once an acknowledgement opened the window. A follower engine asks
//!   its core for its next step at its own moments, with a deadline (the frame at once if it
//!   is there, otherwise a bounded wait), rereads the step it applied last, or does nothing
//!   for a while. A plain read that finds nothing changes nothing, so it is not a separate
//!   move.
//! - An engine acknowledges an outcome in the same atomic step as it applies it.
//! - A crash of any rank restarts the whole group: new cores, the leader's started with the
//!   reconciliation built from the durable store (`tandem_core::EpochStart::leader`); its core
//!   appends the aborted outcomes with the epoch's first record, before frame 0 reveals them.
//!   Each core is started with what its engine acknowledged (its durable delivery record), as
//!   the agent's recovery gives it.
//! - A rank whose wait or read ended in a typed error is down: from then on the only move is
//!   the group restart (none when the epochs are used up), as the supervisor would do.
//! - Each rank reports each shard once, at any moment after its core asked its store for the
//!   copy (the leader at the seal, a follower once its engine acknowledged the step); a
//!   bounded number of those reports, from any rank, are sent twice back to back (a
//!   retransmission the leader must ignore, stale if a restart comes between).
//! - A restart ends the copies in progress with the agents (their tasks are aborted); their
//!   reports already sent may still be in flight.
//! - Every follower is admitted and the leader's index rebuilt (from empty manifests) when an
//!   epoch starts; heartbeats and their deadlines never fire.
//! - Time moves only when a wait deadline fires, and counts from the start of the epoch (only
//!   the current epoch's state machines ever compare times).
//!
//! - With a `loads` budget the leader's engine looks up the block of its first store and loads
//!   it in the same step (`LookupLoad`): a task when the lookup pinned the block, a task
//!   refused at once (its `Failed` outcome revealed like any) when it did not; with a host tier
//!   of `host_blocks` blocks, a store into a tier whose blocks are all pinned is refused the
//!   same way. With a `failed_appends` budget the log may refuse the leader's append
//!   (`RefuseAppend`: the core is told, seals on revealing nothing new, appends again); with a
//!   `failed_shards` budget a rank may report its copy failed (a full tier, a corrupt shard).
//!   [`TandemConfig::ci_tasks`] checks these paths on one follower in one epoch; restarts are
//!   [`TandemConfig::ci`]'s.
//!
//! # Not modelled
//!
//! Left to `tandem-core`'s and `tandem-proto`'s own tests, the deterministic simulator
//! (`tandem-sim`: heartbeats, the epoch loop, the supervisor, Redis outages, tier operations on
//! every rank) and the integration tests: disk tiers and demotions, the handshake's refusals and
//! the rebuild from real manifests, loads and refused appends across a restart (the two CI
//! bounds do not combine them: the state space grows past what CI affords).

pub mod config;
mod driver;
pub mod model;
pub mod properties;
pub mod state;
pub mod trace;

pub use config::{ConfigError, TandemConfig, Variant};
pub use model::{TandemAction, TandemModel, FIRST_EPOCH};
pub use state::{DurableLog, EngineState, TandemState};
