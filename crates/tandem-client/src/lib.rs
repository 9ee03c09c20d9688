//! The engine client library: what an inference engine links to use its rank's Tandem agent.
//!
//! # Layout
//! - [`api`]: the requests, replies and typed refusals of the engine endpoint (defined in
//!   `tandem_proto::engine`, where the rank cores take them; re-exported here unchanged).
//! - [`wire`]: length-delimited framing of those messages over the Unix socket.
//! - [`fdpass`]: a page pool's descriptor passed with a request (`SCM_RIGHTS`).
//! - [`client`]: [`EngineClient`], the blocking client, one per engine.
//! - [`pages`]: [`PagePool`], an engine page pool in shared memory (a file or a memfd) the
//!   agent maps.
//! - [`ring`]: the agent's frame ring in shared memory, from which [`EngineClient::frame`]
//!   reads sealed frames without a socket round trip (refusals still come over the socket).
//! - [`tasks`]: [`TaskBook`], the task → outcome map that delivers each outcome once.
//! - [`session`]: [`EngineSession`], the step counter, the task map and the way back into the
//!   group after a restart, around one [`EngineClient`]: what an engine (the replay's, a
//!   Python adapter) drives instead of re-implementing the contract below.
//!
//! # The contract
//! - **Calls are matched, never assumed.** Every request carries a call id the client chose
//!   (per connection, from 1, one more per request) and every reply names the id it answers
//!   ([`api::CallId`], after the message body on the wire, see [`wire`]). The agent answers the
//!   requests of one connection one at a time, in order. [`EngineClient`] returns a reply only
//!   for the call that waits for it: a reply of the same kind under another call (a `Started`
//!   of another `store`, an `Error` of another request) is never taken as this call's.
//! - **A call that times out keeps the connection.** A call waits at most its request's
//!   deadline plus a slack ([`EngineClient::set_reply_slack`], default 2 s), then returns
//!   [`ClientError::Timeout`]. The agent may still carry that request out: its late reply names
//!   an older call and the next call reads and discards it ([`EngineClient::late_replies`]
//!   counts them); bytes of a reply or request cut by the deadline stay buffered and complete
//!   later, so the byte stream never tears. The connection is resynchronised, not dropped,
//!   because an engine that disconnects with tasks in flight fails the epoch (the group
//!   restarts): one slow call must not restart the group. What a timed-out call did is learnt
//!   from frames: a `frame` or `hello` can simply be asked again; after an `end_step` that
//!   timed out, read `frame(s)` to learn whether `s` was sealed; a `store` or `load` that timed
//!   out may have started a task, whose start and outcome frames name the engine's request
//!   ([`tandem_proto::ids::RequestId`]).
//! - **A reply for no call breaks the connection.** A reply naming a later call, no call, or
//!   bytes that do not decode mean the two sides disagree: every later call returns
//!   [`ClientError::Broken`] until [`EngineClient::reconnect`] (which, with tasks in flight,
//!   fails the epoch as a disconnect does).
//! - **Steps.** The leader engine (rank 0) calls, for step `s`: `lookup`, `store`, `load` as its
//!   scheduler decides, then `end_step(s)`, which seals and returns the frame of `s`. Follower
//!   engines call `frame(s)` to read the same frame. Reads are positional: asking twice returns
//!   the same frame, skipping steps is harmless, and a step the leader has not sealed by the
//!   deadline is a typed [`AgentError::LeaderBehind`] that names both positions, never a hang.
//! - **Decisions come from frames.** Lookup results, started tasks, finished tasks and
//!   evictions are the leader's decisions; every engine applies them from the frame, never from
//!   its own state. After applying frame `s` an engine calls `ack(s)`; the leader stays at most
//!   `protocol.window_steps` steps ahead of the slowest acknowledgement.
//! - **Page reuse.** The pages of a store may be reused only after the frame that lists the
//!   store's task in `finished`. The pages of a load hold the blocks only after the frame that
//!   lists the load `Ok`.
//! - **Failed loads.** A load that finished `Failed` or `Aborted` left the pages undefined:
//!   recompute those tokens from the last good block (the blocks before the first one not
//!   loaded), exactly as on a prefix miss.
//! - **New epoch.** A request answered [`AgentError::StaleEpoch`] means the group restarted.
//!   Call [`EngineClient::hello`], then read the new epoch's frames from step 0. Frame 0 carries
//!   the reconciliation: outcomes that were durable but not yet acknowledged (delivered once
//!   more, never twice once acknowledged) and tasks that were in flight (reported aborted: treat
//!   as failed); no pin survives an epoch. Every task's outcome reaches the engine exactly once:
//!   the agent leaves out redeliveries its engine acknowledged, and [`EngineClient`] removes any
//!   it already received (an acknowledgement can be lost in a crash).
//! - **Requests too large for a frame.** A `lookup`, `store` or `load` that could make a frame
//!   larger than the group's `protocol.max_frame_bytes` is refused with
//!   [`AgentError::FrameTooLarge`] naming the bytes and the limit, and nothing of it is
//!   recorded: split it, or send it in a later step. So every frame the leader seals reaches
//!   every rank.
//! - **Page pools.** An engine registers its pool once per connection and again after every
//!   new epoch ([`EngineClient::register_buffer`]): by path, or, for a pool without one (a
//!   memfd), by passing its descriptor with the request. The agent refuses a pool whose page
//!   size is not the block-shard size, whose size is not a positive whole number of pages, or
//!   that it cannot map read-write, with [`AgentError::Buffer`] naming the numbers.
//! - **Lookups hold one pin set per request.** `lookup(request, blocks)` pins the matched
//!   prefix; asking again with the same blocks returns the same answer on the same pins. The
//!   pins last until the request's `load`, [`EngineClient::release`] (a request that looked up
//!   and will not load must be released), or a new epoch.
//! - **Pages per rank.** A `store` or `load` with page ids uses the same pages on every rank.
//!   With no page ids, every engine (the leader's too) binds its own
//!   ([`EngineClient::bind`]): one page per block of the task, in the order of the task's
//!   blocks in the frame that starts it (a store leaves out blocks already cached, so the
//!   leader's engine binds from the frame unless none can be; a task with no block takes an
//!   empty bind or none). A rank copies only once bound; a rank that gets no
//!   bind within `protocol.bind_timeout_ms` of the task reaching it fails its shard, and the
//!   task finishes `Failed` on every rank. Refusals are [`AgentError::Bind`].
//! - **Layerwise loads.** [`EngineClient::load_layerwise`] starts a load that every rank
//!   copies layer by layer, as the leader's plan in the starting frame says
//!   (`Frame::layerwise`); each rank's engine waits per layer with [`EngineClient::wait_layer`],
//!   answered when the layer is in its pages or with [`AgentError::Layer`] by the deadline
//!   (docs/LAYERWISE.md).
//! - **Versions.** The hello carries the engine protocol version
//!   ([`api::ENGINE_PROTOCOL_VERSION`]); an agent of another version refuses it with
//!   [`AgentError::ProtocolVersion`] naming both.
//! - **Tasks that never started.** `store` and `load` return a task id at once, but the task
//!   starts only when a frame lists it in `stores` or `loads` (its start is logged first). A task
//!   id that no frame of its epoch listed when the epoch ends never started: no outcome will come
//!   for it; its pages are the engine's again.
//! - **The session keeps all of this.** [`EngineSession`] counts steps, checks each frame's
//!   position, delivers each outcome once with its task's start, reports at frame 0 of a new
//!   epoch the tasks that never started or were lost, and rejoins after a stale epoch, a "not
//!   ready" or a broken socket (hello, register the pool again, step 0), every wait bounded.
//!
//! ```no_run
//! use std::time::Duration;
//! use tandem_client::{EngineSession, PagePool, SessionConfig, SessionError, AgentError};
//! use tandem_proto::ids::{BlockHash, PageId, RequestId};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut s = EngineSession::connect("/run/tandem/rank0.sock", 0, SessionConfig::default())?;
//! let mut pool = PagePool::create_memfd("kv", 64, s.welcome().shard_bytes)?;
//! s.register_pool(&pool)?;
//! pool.page_mut(PageId(0))?.fill(7); // the engine computes a block's shard into page 0
//! s.store(RequestId(1), &[BlockHash::from_digest(b"prefix digest")], &[PageId(0)])?;
//! loop {
//!     match s.end_step(Duration::from_secs(1)) {
//!         Ok(applied) => {
//!             for d in &applied.observed.outcomes {
//!                 println!("task {} of request {}: {:?}", d.outcome.task, d.outcome.request, d.outcome.result);
//!             }
//!             s.ack()?;
//!             if s.tasks().open_tasks() + s.tasks().pending_requests() == 0 { break; }
//!         }
//!         Err(SessionError::Agent(AgentError::WindowFull { .. })) => continue,
//!         Err(SessionError::NewEpoch { .. }) => continue, // frame 0 settles the store
//!         Err(e) => return Err(e.into()),
//!     }
//! }
//! # Ok(()) }
//! ```

/// The engine endpoint's requests, replies and typed refusals: `tandem_proto::engine`,
/// re-exported so that engine code names them `tandem_client::api::*` as before.
pub mod api {
    pub use tandem_proto::engine::*;
}
pub mod client;
pub mod fdpass;
pub mod pages;
pub mod ring;
pub mod session;
pub mod tasks;
pub mod wire;

pub use api::{AgentError, BufferSource, EngineReply, EngineRequest};
pub use client::{ClientError, EngineClient, Welcome};
pub use pages::{PagePool, PagePoolError};
pub use session::{Applied, EngineSession, SessionConfig, SessionError};
pub use tasks::{Delivered, Observed, RequestedTask, StartedTask, TaskBook, TaskTally};
