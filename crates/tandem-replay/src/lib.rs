//! Simulated engines that replay a request trace through a running Tandem group and check
//! every byte: the engine side of `tandem replay`.
//!
//! One thread per rank plays the inference engine of that rank, talking to its agent only
//! through a [`tandem_client::EngineSession`] (which keeps the step counter, delivers each
//! task's outcome once and rejoins the group after a restart) and a shared-memory
//! [`tandem_client::PagePool`].
//! Rank 0 runs a scheduler over the trace (lookup, load the matched prefix, compute and store
//! the rest, verify loads, recompute failed ones); the followers read the same frames at
//! moments set by their own simulated memory pressure and verify their own shards. The
//! caller (the CLI or a test) starts the cluster and passes the engine socket paths.
//!
//! # Entry points
//! - [`run_replay`]`(&ReplayParams, requests, progress) -> Result<ReplaySummary, ReplayError>`
//! - [`ReplayParams::new`]`(sockets)` for defaults; [`Speed`], [`Deadlines`], [`ReadPattern`]
//!   to adjust them; [`pool_pages_needed`]`(&records)` for the smallest page pool.
//! - [`ReplaySummary`]: `to_json()` (the `--json` object) and `Display` (the table).
//! - [`fill_shard`] / [`verify_shard`]: the deterministic shard content, for tests that
//!   check pages themselves.
//!
//! # Decisions
//! - **Store and load in the same step.** A request's lookup, the load of its matched prefix
//!   and the store of its other blocks (computed first) are all issued in the step of the
//!   lookup; the store does not wait for the load, because simulated compute needs no KV.
//!   This puts a store and a load of one request in flight together.
//! - **No lookup pin outlives its request.** A lookup's pins last until the request's load,
//!   its `release`, or the epoch's end. A lookup that matched blocks is always followed by
//!   the load of exactly those blocks in the same call (which spends the pins); the only
//!   load never issued is one queued when the epoch changed, whose pins the new epoch already
//!   dropped. So the replay needs no `release`, and a pin leak would show as observed hit
//!   ratios below the expected ones at a bounded capacity.
//! - **Pages** are freed only by the frame that reports the task finished: a store's pages
//!   on any result, a load's after its `Ok` pages were verified. A failed, aborted or lost
//!   load is recomputed into its pages and stored (the contract's "recompute from the last
//!   good block").
//! - **Arrival order.** Requests are admitted in trace order, and a request waits while
//!   another stores one of its blocks, so every lookup sees the blocks of the requests
//!   before it: the arrival model of [`tandem_trace::PrefixCacheSim`]. With unlimited
//!   capacity, no failures and an agent index that matches exactly, observed and expected hit
//!   ratios are equal.
//! - **Followers own their pages by frame position.** A follower computes a store's pages
//!   when it applies the frame that starts the store, and verifies a load's pages when it
//!   applies the frame that reports it `Ok`. So its agent may copy a store only after the
//!   engine acknowledged the start step, and may write a load only after the engine
//!   acknowledged the step before it (the page may still hold an earlier load the engine has
//!   not verified yet). A verify failure says what the page held instead.
//! - **Accounting** (lost, duplicate, mismatch...) is defined in [`ledger`] and
//!   [`summary`].
//! - **Every wait is bounded** ([`Deadlines`]); an error names every rank's position, and
//!   [`ReplayParams::cancel`] ends a run at once.
//!
//! # Tests
//! The unit tests cover the scheduler, ledger, summary and errors without a group. The
//! engines themselves run only against real agent processes, in the workspace process tests:
//! `tests/replay_engines.rs` (clean runs against the simulator, restarts by stale epoch and by
//! broken sockets, paced and cancelled runs, one rank, an empty trace), `tests/replay_cli.rs`
//! (the `tandem replay` command on the shipped traces, with and without chaos) and
//! `tests/faults.rs` (replays under process, Redis, network and disk faults).
//!
//! # Layout
//! - [`content`]: shard content, [`fill_shard`], [`verify_shard`], [`VerifyError`].
//! - [`pages`]: the leader's free list of page ids.
//! - [`request`]: one request's parts (load, store, recompute) and their states.
//! - [`scheduler`]: the leader's scheduler, sans IO.
//! - [`view`]: what an engine reads from a frame, and the frame digest.
//! - [`ledger`]: per-engine record of frames (digests, re-reads) and lost tasks, and the
//!   accounting definitions over the engine session's task counters.
//! - [`pressure`]: follower read patterns (simulated memory pressure).
//! - [`params`]: [`ReplayParams`], [`Speed`], [`Deadlines`].
//! - [`summary`]: [`ReplaySummary`], JSON and table.
//! - [`error`]: [`SchedError`], [`EngineError`], [`ReplayError`], [`Positions`].
//! - [`progress`]: the indicatif bar.
//! - `session` (joining, the pool, what session errors mean for the replay), `engine`
//!   (shared accounting), `leader`,
//!   `follower`, `source` (pacing), `shared` (thread coordination), `driver`
//!   ([`run_replay`]): the IO side, private.

pub mod content;
pub mod error;
pub mod ledger;
pub mod pages;
pub mod params;
pub mod pressure;
pub mod progress;
pub mod request;
pub mod scheduler;
pub mod summary;
pub mod view;

mod driver;
mod engine;
mod follower;
mod leader;
mod session;
mod shared;
mod source;

pub use content::{fill_shard, verify_shard, VerifyError};
pub use driver::run_replay;
pub use error::{EngineError, Positions, RankPosition, ReplayError, SchedError};
pub use params::{pool_pages_needed, Deadlines, ReplayParams, Speed};
pub use pressure::ReadPattern;
pub use shared::ReplayProgress;
pub use summary::{LatencySummary, MismatchDetail, ReplaySummary};
pub use tandem_trace::Capacity;
