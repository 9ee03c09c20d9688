//! The Tandem model: a leader and followers of the real `tandem-proto` state machines, the
//! network, the engines, the durable store and crashes, checked against the invariants of
//! docs/DESIGN.md.
//!
//! Owns the model and its properties. Must never: re-implement a protocol decision.
//!
//! # Layout
//!
//! - [`config`]: bounds (ranks, epochs, steps, stores, duplicates, window) and the variant.
//! - [`model`]: the actions and the stateright `Model`.
//! - `driver`: the body of each action (what an agent does with the state machines' outputs).
//! - [`state`]: the state: state machines, links, engines, durable store, ghost frames.
//! - [`properties`]: `always` invariants and `sometimes` examples, by name.
//! - [`trace`]: readable traces of paths.
//!
//! # What one state holds
//!
//! - the current epoch's `Leader` (rank 0) and `Follower`s (ranks 1..), untouched library
//!   state machines;
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
//! - Rank 0's engine applies each frame when it is sealed. A follower engine asks for its next
//!   step at its own moments, with a deadline (`Follower::wait`: the frame at once if it is
//!   there, otherwise a bounded wait), rereads the step it applied last (`Follower::read`),
//!   or does nothing for a while. A plain read that finds nothing changes nothing, so it is
//!   not a separate move.
//! - An engine acknowledges an outcome in the same atomic step as it applies it.
//! - A crash of any rank restarts the whole group: the driver builds the reconciliation from
//!   the durable store with `tandem_proto::reconcile` and appends the aborted outcomes before
//!   step 0 is sealed.
//! - A rank whose wait or read ended in a typed error is down: from then on the only move is
//!   the group restart (none when the epochs are used up), as the supervisor would do.
//! - Each rank reports each shard once, at any moment after it applied the frame that
//!   started the task; a bounded number of those reports, from any rank, are sent twice back
//!   to back (a retransmission the leader must ignore, stale if a restart comes between).
//! - A restart ends the copies in progress with the agents (their tasks are aborted); their
//!   reports already sent may still be in flight.
//! - A seal refused by the window leaves the state unchanged (the leader's refusal counter is
//!   not kept), so retries do not grow the state space.
//! - Time moves only when a wait deadline fires, and counts from the start of the epoch (only
//!   the current epoch's state machines ever compare times).
//!
//! # Not modelled
//!
//! Left to `tandem-proto`'s own tests and the integration tests: loads, prefix lookups and
//! pins, tier operations, refused tasks, failed shard copies, failed appends to the durable
//! store, heartbeats and the handshake.

pub mod config;
mod driver;
pub mod model;
pub mod properties;
pub mod state;
pub mod trace;

pub use config::{ConfigError, TandemConfig, Variant};
pub use model::{TandemAction, TandemModel, FIRST_EPOCH};
pub use state::{DurableLog, EngineState, TandemState};
