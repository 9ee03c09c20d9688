//! The engine session: what every engine does around [`EngineClient`] calls, written once.
//!
//! Owns, for one engine:
//! - **the step counter**: the leader seals the open step ([`EngineSession::end_step`]); a
//!   follower reads frames by position ([`EngineSession::next_frame`]); both check that the
//!   frame they get is the one asked for;
//! - **the task → outcome map** ([`TaskBook`]): tasks requested, started and settled, every
//!   outcome delivered exactly once, and at the first frame of a new epoch the tasks that never
//!   started or were lost ([`Applied`]);
//! - **the way back into the group**: a call refused with a stale epoch, answered "not ready",
//!   or cut by a broken socket (agent killed, reply past its deadline) rejoins: hello on the
//!   same connection, or reconnect and hello, then register the page pool again; every wait is
//!   bounded by [`SessionConfig::recovery`].
//!
//! # What a call returns after a failure
//! - The group is still in the same epoch and the call can be asked again without a second
//!   effect (a refusal "not ready" took no effect; `frame`, `ack`, `hello`, registration and
//!   `lookup` are asked again; a seal whose reply was lost is read back with `frame`): the
//!   session asks again and the call returns its answer.
//! - The group moved to a new epoch: [`SessionError::NewEpoch`]. The session already said hello
//!   and registered the pool again, and its step counter is at 0. Whatever the engine did in
//!   the open step is void; the next [`EngineSession::end_step`] (leader) or
//!   [`EngineSession::next_frame`] (follower) returns frame 0, whose [`Applied`] settles every
//!   earlier task: redelivered and aborted outcomes, tasks that never started, tasks lost.
//! - The socket broke during a `store` or `load` and the group stayed in the same epoch: the
//!   engine cannot know whether the call took effect. The agent fails the epoch when an engine
//!   with tasks in flight disconnects, so the session waits for the new epoch
//!   ([`SessionError::NewEpoch`]) and gives up with [`SessionError::Ambiguous`] after the
//!   recovery deadline.
//!
//! It never reconnects for any other reason: the agent counts an engine disconnect as a rank
//! failure. It never decides anything for the group and never touches pages: the engine
//! applies [`Applied`] to its own pages.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_proto::frame::{Frame, LookupResult};
use tandem_proto::ids::{BlockHash, Epoch, PageId, RequestId, Step, TaskId, TaskKind};

use crate::api::AgentError;
use crate::client::{ClientError, EngineClient, Welcome};
use crate::pages::PagePool;
use crate::tasks::{Observed, StartedTask, TaskBook, TaskTally};
use crate::wire::WireError;

/// The session's deadlines and pauses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionConfig {
    /// Longest wait for the first connection ([`EngineSession::connect`]), hello included.
    pub connect: Duration,
    /// Longest time one call keeps rejoining (stale epoch, not ready, broken socket) before it
    /// fails with [`SessionError::Rejoin`] or [`SessionError::Ambiguous`].
    pub recovery: Duration,
    /// Pause between rejoin attempts.
    pub retry_pause: Duration,
    /// Longest single connect attempt while rejoining, so that cancellation is seen.
    pub connect_slice: Duration,
}

impl Default for SessionConfig {
    /// 30 s to connect, 60 s to rejoin, 50 ms between attempts, 500 ms per connect attempt.
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(30),
            recovery: Duration::from_secs(60),
            retry_pause: Duration::from_millis(50),
            connect_slice: Duration::from_millis(500),
        }
    }
}

/// Why a session call failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The first connection (with its hello) did not succeed before [`SessionConfig::connect`].
    #[error("rank {rank}: cannot join the group within {waited_ms} ms: {source}")]
    Join {
        /// The rank.
        rank: u32,
        /// How long it tried, milliseconds.
        waited_ms: u64,
        /// The last error.
        source: ClientError,
    },
    /// The agent refused the call (typed; see [`AgentError`]); nothing of it took effect.
    /// `WindowFull`, `LeaderBehind` and `FrameTooLarge` are the ones an engine handles.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The group moved from epoch `from` to `to` during `call`: the session rejoined (hello,
    /// pool registered again) and its step counter is at 0. The open step's work is void; read
    /// frame 0 next (see the module docs).
    #[error("new epoch: the group moved from epoch {from} to epoch {to} during {call} ({waited_ms} ms after it first failed); the session rejoined at step 0, read frame 0 next")]
    NewEpoch {
        /// The call that found out.
        call: &'static str,
        /// The epoch before.
        from: Epoch,
        /// The epoch now.
        to: Epoch,
        /// How long the call spent from its first failure to the rejoin, milliseconds (0 when
        /// a hello found the new epoch at once).
        waited_ms: u64,
    },
    /// The group did not come back (or stayed not ready) within [`SessionConfig::recovery`].
    #[error("rank {rank}: could not rejoin the group within {waited_ms} ms after {call} failed at step {step} of epoch {epoch}; last error: {last}")]
    Rejoin {
        /// The rank.
        rank: u32,
        /// The call that failed first.
        call: &'static str,
        /// The session's epoch when it failed.
        epoch: Epoch,
        /// The session's step when it failed.
        step: Step,
        /// How long it tried, milliseconds.
        waited_ms: u64,
        /// The last error seen.
        last: String,
    },
    /// The connection broke during a `store` or `load` and the group stayed in the same epoch
    /// for the whole recovery deadline: whether the call took effect cannot be known.
    #[error("rank {rank}: the connection broke during {call} at step {step} of epoch {epoch} and the group stayed in epoch {epoch} for {waited_ms} ms: cannot tell whether the {call} took effect")]
    Ambiguous {
        /// The rank.
        rank: u32,
        /// The call.
        call: &'static str,
        /// The epoch.
        epoch: Epoch,
        /// The step.
        step: Step,
        /// How long it waited for a new epoch, milliseconds.
        waited_ms: u64,
    },
    /// The agent answered something the contract does not allow (a reply of the wrong kind, a
    /// malformed message, a frame of another position).
    #[error("rank {rank}: protocol violation in {call} at step {step} of epoch {epoch}: {detail}")]
    Protocol {
        /// The rank.
        rank: u32,
        /// The call.
        call: &'static str,
        /// The epoch.
        epoch: Epoch,
        /// The step.
        step: Step,
        /// What was wrong.
        detail: String,
    },
    /// A `store` or `load` names a page past the end of the registered pool: nothing was sent.
    #[error(
        "page {page} is out of range: the registered pool has {pages} pages; nothing was sent"
    )]
    PageOutOfRange {
        /// The page id.
        page: u32,
        /// Pages in the registered pool.
        pages: u64,
    },
    /// A client error that is neither a refusal nor a fault to rejoin from (a descriptor that
    /// cannot be passed: nothing was sent).
    #[error(transparent)]
    Client(ClientError),
    /// The session's cancel flag was raised while it waited ([`EngineSession::set_cancel`]).
    #[error("cancelled while {call} waited")]
    Cancelled {
        /// The call.
        call: &'static str,
    },
}

/// What applying one frame gave the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The frame, as the client returned it (redeliveries this engine already received are
    /// removed; see [`EngineClient`]).
    pub frame: Frame,
    /// Outcomes delivered for the first time, tasks that never started and tasks lost (see
    /// [`crate::tasks`]).
    pub observed: Observed,
    /// The leader sealed the frame with this call (`false`: read back, because the reply of the
    /// call that sealed it was lost; or a follower's read).
    pub sealed_here: bool,
}

/// What is registered, kept to register again after a rejoin.
enum Registration {
    Path(String, u64, u64),
    Descriptor(OwnedFd, u64, u64),
}

/// A call's name and whether a broken socket leaves its effect unknown.
#[derive(Clone, Copy)]
struct Call {
    name: &'static str,
    mutates: bool,
}

const HELLO: Call = Call::plain("hello");
const REGISTER: Call = Call::plain("register_buffer");
const LOOKUP: Call = Call::plain("lookup");
const STORE: Call = Call {
    name: "store",
    mutates: true,
};
const LOAD: Call = Call {
    name: "load",
    mutates: true,
};
const LOAD_LAYERWISE: Call = Call {
    name: "load_layerwise",
    mutates: true,
};
const WAIT_LAYER: Call = Call::plain("wait_layer");
const BIND: Call = Call::plain("bind");
const RELEASE: Call = Call::plain("release");
const END_STEP: Call = Call::plain("end_step");
const FRAME: Call = Call::plain("frame");
const ACK: Call = Call::plain("ack");

impl Call {
    const fn plain(name: &'static str) -> Self {
        Self {
            name,
            mutates: false,
        }
    }
}

/// A failure a rejoin can get past.
#[derive(Clone, Debug)]
enum Fault {
    Stale(String),
    NotReady(String),
    Broken(String),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Stale(s) | Fault::NotReady(s) | Fault::Broken(s) => f.write_str(s),
        }
    }
}

/// How a client error is handled.
enum Failure {
    Fault(Fault),
    Agent(AgentError),
    Protocol(String),
    Client(ClientError),
}

fn classify(err: ClientError) -> Failure {
    match err {
        ClientError::Agent(e @ AgentError::StaleEpoch { .. }) => {
            Failure::Fault(Fault::Stale(e.to_string()))
        }
        ClientError::Agent(e @ AgentError::NotReady { .. }) => {
            Failure::Fault(Fault::NotReady(e.to_string()))
        }
        ClientError::Agent(e) => Failure::Agent(e),
        ClientError::Wire(e @ WireError::Io(_)) => Failure::Fault(Fault::Broken(e.to_string())),
        e @ (ClientError::Connect { .. }
        | ClientError::Timeout { .. }
        | ClientError::Broken { .. }) => Failure::Fault(Fault::Broken(e.to_string())),
        e @ (ClientError::Wire(_) | ClientError::UnexpectedReply { .. }) => {
            Failure::Protocol(e.to_string())
        }
        e @ ClientError::Descriptor { .. } => Failure::Client(e),
    }
}

/// One engine's session with its rank's agent (see the module docs). Not thread-safe: one
/// engine thread drives it.
pub struct EngineSession {
    client: EngineClient,
    config: SessionConfig,
    registration: Option<Registration>,
    /// Pages of the registered pool, as the agent counted them.
    pool_pages: Option<u64>,
    book: TaskBook,
    /// Leader: the step to seal next; follower: the frame to read next.
    next: Step,
    /// The last frame applied in the current epoch.
    applied: Option<Step>,
    /// The last step acknowledged in the current epoch.
    acked: Option<Step>,
    cancel: Option<Arc<AtomicBool>>,
}

impl EngineSession {
    /// Connect to the agent's socket as `rank` and say hello, retrying while the agent starts
    /// or is not ready, for at most `config.connect`. The session starts at the leader's next
    /// step (leader) or at step 0 (follower; see [`EngineSession::seek`]).
    ///
    /// # Errors
    /// [`SessionError::Join`]; [`SessionError::Agent`] for a refusal no retry can fix (a rank
    /// the agent does not run).
    pub fn connect(
        path: impl AsRef<Path>,
        rank: u32,
        config: SessionConfig,
    ) -> Result<Self, SessionError> {
        Self::connect_cancellable(path, rank, config, None)
    }

    /// [`EngineSession::connect`], giving up with [`SessionError::Cancelled`] once `cancel` is
    /// raised; the session keeps the flag ([`EngineSession::set_cancel`]).
    ///
    /// # Errors
    /// As [`EngineSession::connect`].
    pub fn connect_cancellable(
        path: impl AsRef<Path>,
        rank: u32,
        config: SessionConfig,
        cancel: Option<Arc<AtomicBool>>,
    ) -> Result<Self, SessionError> {
        let started = Instant::now();
        let raised = || cancel.as_ref().is_some_and(|c| c.load(Ordering::SeqCst));
        loop {
            if raised() {
                return Err(SessionError::Cancelled { call: "hello" });
            }
            match EngineClient::connect(path.as_ref(), rank, config.connect_slice) {
                Ok(client) => {
                    let mut s = Self::new(client, config);
                    s.cancel = cancel;
                    return Ok(s);
                }
                Err(ClientError::Agent(
                    a @ (AgentError::BadRequest { .. }
                    | AgentError::NotLeader { .. }
                    | AgentError::ProtocolVersion { .. }
                    | AgentError::Buffer { .. }),
                )) => return Err(SessionError::Agent(a)),
                Err(source) if started.elapsed() >= config.connect => {
                    return Err(SessionError::Join {
                        rank,
                        waited_ms: ms(started),
                        source,
                    })
                }
                Err(_) => sleep_unless(config.retry_pause, cancel.as_deref()),
            }
        }
    }

    /// A session over a client that already said hello.
    pub fn new(client: EngineClient, config: SessionConfig) -> Self {
        let welcome = client.welcome();
        let next = if welcome.rank == 0 {
            welcome.next_step
        } else {
            Step(0)
        };
        Self {
            client,
            config,
            registration: None,
            pool_pages: None,
            book: TaskBook::new(),
            next,
            applied: None,
            acked: None,
            cancel: None,
        }
    }

    /// Stop waiting (connects, pauses between rejoin attempts) once `flag` is raised: the call
    /// then returns [`SessionError::Cancelled`].
    pub fn set_cancel(&mut self, flag: Arc<AtomicBool>) {
        self.cancel = Some(flag);
    }

    /// What the last hello answered.
    pub fn welcome(&self) -> Welcome {
        self.client.welcome()
    }

    /// The epoch the session works in.
    pub fn epoch(&self) -> Epoch {
        self.client.epoch()
    }

    /// This engine's rank.
    pub fn rank(&self) -> u32 {
        self.client.welcome().rank
    }

    /// Leader: the open step, sealed by the next [`EngineSession::end_step`]. Follower: the
    /// frame the next [`EngineSession::next_frame`] reads.
    pub fn step(&self) -> Step {
        self.next
    }

    /// The last frame applied in this epoch.
    pub fn last_applied(&self) -> Option<Step> {
        self.applied
    }

    /// The last step acknowledged in this epoch.
    pub fn last_acked(&self) -> Option<Step> {
        self.acked
    }

    /// The task → outcome map.
    pub fn tasks(&self) -> &TaskBook {
        &self.book
    }

    /// The task map's counters.
    pub fn tally(&self) -> TaskTally {
        self.book.tally()
    }

    /// Follower: read from `step` on; an engine joining an epoch under way seeks to
    /// [`Welcome::next_step`], the first frame its rank has not acknowledged. Frames skipped
    /// past that are never acknowledged by this rank: once they fill the leader's window it
    /// seals nothing more, and a read of a later step ends only in `LeaderBehind`.
    pub fn seek(&mut self, step: Step) {
        self.next = step;
    }

    /// Register `pool` (by path, or by descriptor for a pool without one); the session
    /// registers it again after every rejoin. Returns the pool's page count.
    ///
    /// # Errors
    /// [`SessionError::Agent`] with [`AgentError::Buffer`] for a refused pool;
    /// [`SessionError::Client`] for a descriptor that cannot be passed; [`SessionError::NewEpoch`]
    /// (the pool is registered in the new epoch); as any call.
    pub fn register_pool(&mut self, pool: &PagePool) -> Result<u64, SessionError> {
        match pool.path() {
            Some(path) => {
                let reg = Registration::Path(
                    path.display().to_string(),
                    pool.size_bytes(),
                    pool.page_size_bytes(),
                );
                self.register(reg)
            }
            None => self.register_fd(pool.fd(), pool.size_bytes(), pool.page_size_bytes()),
        }
    }

    /// Register the pool behind `fd` (`size_bytes` in pages of `page_size_bytes`; see
    /// [`EngineClient::register_buffer_fd`]); the session keeps a duplicate of `fd` to register
    /// again after a rejoin.
    ///
    /// # Errors
    /// [`SessionError::Client`] with [`ClientError::Descriptor`] when `fd` is not open; as
    /// [`EngineSession::register_pool`].
    pub fn register_fd(
        &mut self,
        fd: BorrowedFd<'_>,
        size_bytes: u64,
        page_size_bytes: u64,
    ) -> Result<u64, SessionError> {
        let dup = fd.try_clone_to_owned().map_err(|source| {
            SessionError::Client(ClientError::Descriptor {
                fd: fd.as_raw_fd(),
                source,
            })
        })?;
        self.register(Registration::Descriptor(dup, size_bytes, page_size_bytes))
    }

    fn register(&mut self, reg: Registration) -> Result<u64, SessionError> {
        let previous = self.registration.replace(reg);
        let result = self.run(REGISTER, send_registration);
        match &result {
            Ok(pages) => self.pool_pages = Some(*pages),
            // A refused pool is not registered: keep registering the previous one.
            Err(SessionError::Agent(_) | SessionError::Client(_)) => self.registration = previous,
            Err(_) => {}
        }
        result
    }

    /// Say hello again; returns where the group stands.
    ///
    /// # Errors
    /// [`SessionError::NewEpoch`] when the group moved on (the session rejoined it), and as any
    /// call.
    pub fn hello(&mut self) -> Result<Welcome, SessionError> {
        let from = self.epoch();
        let welcome = self.run(HELLO, |c, _| c.hello())?;
        if welcome.epoch != from {
            // The hello itself found the new epoch: register there and start at step 0.
            self.enter_epoch();
            if self.registration.is_some() {
                self.run(REGISTER, send_registration)?;
            }
            return Err(SessionError::NewEpoch {
                call: "hello",
                from,
                to: welcome.epoch,
                waited_ms: 0,
            });
        }
        Ok(welcome)
    }

    /// Leader: the cached prefix of `block_hashes` for `request`, in the open step, pinned until
    /// the request's load or [`EngineSession::release`]; asking again for the same request and
    /// blocks returns the same answer on the same pins.
    ///
    /// # Errors
    /// [`AgentError::NotLeader`], [`AgentError::FrameTooLarge`] (as [`SessionError::Agent`]),
    /// [`SessionError::NewEpoch`], and as any call.
    pub fn lookup(
        &mut self,
        request: RequestId,
        block_hashes: &[BlockHash],
    ) -> Result<LookupResult, SessionError> {
        let step = self.next;
        self.run(LOOKUP, |c, _| {
            c.lookup(step, request, block_hashes.to_vec())
        })
    }

    /// Leader: store `block_hashes[i]` from page `page_ids[i]` on every rank, in the open step.
    /// The task's outcome arrives once, in a later [`Applied`].
    ///
    /// # Errors
    /// [`SessionError::PageOutOfRange`] for a page past the registered pool (nothing is sent),
    /// as [`EngineSession::lookup`], and [`SessionError::Ambiguous`].
    pub fn store(
        &mut self,
        request: RequestId,
        block_hashes: &[BlockHash],
        page_ids: &[PageId],
    ) -> Result<TaskId, SessionError> {
        self.start(STORE, TaskKind::Store, request, block_hashes, page_ids)
    }

    /// Leader: load `block_hashes[i]` into page `page_ids[i]` on every rank, in the open step.
    ///
    /// # Errors
    /// As [`EngineSession::store`].
    pub fn load(
        &mut self,
        request: RequestId,
        block_hashes: &[BlockHash],
        page_ids: &[PageId],
    ) -> Result<TaskId, SessionError> {
        self.start(LOAD, TaskKind::Load, request, block_hashes, page_ids)
    }

    /// Leader: load like [`EngineSession::load`], copied layer by layer on every rank as the
    /// leader's plan in the starting frame says (see [`EngineClient::load_layerwise`]); every
    /// rank's engine waits for each layer with [`EngineSession::wait_layer`].
    ///
    /// # Errors
    /// As [`EngineSession::store`].
    pub fn load_layerwise(
        &mut self,
        request: RequestId,
        block_hashes: &[BlockHash],
        page_ids: &[PageId],
        layer_timeout: Duration,
    ) -> Result<TaskId, SessionError> {
        if let Some(pages) = self.pool_pages {
            if let Some(p) = page_ids.iter().find(|p| u64::from(p.0) >= pages) {
                return Err(SessionError::PageOutOfRange { page: p.0, pages });
            }
        }
        let step = self.next;
        let task = self.run(LOAD_LAYERWISE, |c, _| {
            let (h, p) = (block_hashes.to_vec(), page_ids.to_vec());
            c.load_layerwise(step, request, h, p, layer_timeout)
        })?;
        self.book.requested(task, TaskKind::Load, request);
        Ok(task)
    }

    /// Any rank: wait at most `deadline` for layer `layer` of layerwise load `task` on this
    /// rank; returns the layers copied so far (see [`EngineClient::wait_layer`]).
    ///
    /// # Errors
    /// [`AgentError::Layer`] (as [`SessionError::Agent`]) by the deadline: the layer is late,
    /// the task failed, or it is unknown; [`SessionError::NewEpoch`] (the task is aborted by
    /// frame 0), and as any call.
    pub fn wait_layer(
        &mut self,
        task: TaskId,
        layer: u32,
        deadline: Duration,
    ) -> Result<u32, SessionError> {
        self.run(WAIT_LAYER, |c, _| c.wait_layer(task, layer, deadline))
    }

    fn start(
        &mut self,
        call: Call,
        kind: TaskKind,
        request: RequestId,
        block_hashes: &[BlockHash],
        page_ids: &[PageId],
    ) -> Result<TaskId, SessionError> {
        if let Some(pages) = self.pool_pages {
            if let Some(p) = page_ids.iter().find(|p| u64::from(p.0) >= pages) {
                return Err(SessionError::PageOutOfRange { page: p.0, pages });
            }
        }
        let step = self.next;
        let task = self.run(call, |c, _| {
            let (h, p) = (block_hashes.to_vec(), page_ids.to_vec());
            match kind {
                TaskKind::Store => c.store(step, request, h, p),
                TaskKind::Load => c.load(step, request, h, p),
            }
        })?;
        self.book.requested(task, kind, request);
        Ok(task)
    }

    /// Any rank: this engine's pages for `task`, started without page ids (see
    /// [`EngineClient::bind`]): one page per block of the task as its frame lists it. Binding
    /// again with the same pages is answered the same, so a bind whose reply was lost is simply
    /// asked again.
    ///
    /// # Errors
    /// [`SessionError::PageOutOfRange`] for a page past the registered pool (nothing is sent);
    /// [`AgentError::Bind`] (as [`SessionError::Agent`]); [`SessionError::NewEpoch`] (the task
    /// is settled by frame 0), and as any call.
    pub fn bind(&mut self, task: TaskId, page_ids: &[PageId]) -> Result<(), SessionError> {
        if let Some(pages) = self.pool_pages {
            if let Some(p) = page_ids.iter().find(|p| u64::from(p.0) >= pages) {
                return Err(SessionError::PageOutOfRange { page: p.0, pages });
            }
        }
        self.run(BIND, |c, _| c.bind(task, page_ids.to_vec()))
    }

    /// Leader: `request` is done with its lookup (it loaded, finished or was dropped): the
    /// blocks its lookup still pins are given back; returns how many. A load spends the pins by
    /// itself; a request that looked up and will not load must be released, or its pins hold
    /// blocks until the epoch ends.
    ///
    /// # Errors
    /// As [`EngineSession::lookup`].
    pub fn release(&mut self, request: RequestId) -> Result<u32, SessionError> {
        self.run(RELEASE, |c, _| c.release(request))
    }

    /// Leader: seal the open step and apply its frame; the next step opens. Waits at most
    /// `deadline` while the window of unacknowledged steps is full.
    ///
    /// # Errors
    /// [`AgentError::WindowFull`] (as [`SessionError::Agent`]: try again),
    /// [`SessionError::NewEpoch`], [`SessionError::Protocol`], and as any call.
    pub fn end_step(&mut self, deadline: Duration) -> Result<Applied, SessionError> {
        let step = self.next;
        let (frame, sealed_here) = match self.run(END_STEP, |c, _| c.end_step(step, deadline)) {
            Ok(frame) => (frame, true),
            // The reply of the call that sealed it was lost: read it back.
            Err(SessionError::Agent(AgentError::WrongStep { expected, .. })) if expected > step => {
                (self.run(FRAME, |c, _| c.frame(step, deadline))?, false)
            }
            Err(e) => return Err(e),
        };
        self.apply(frame, sealed_here, "end_step")
    }

    /// Follower: read the frame of the current position and apply it, waiting at most
    /// `deadline` for the leader to seal it.
    ///
    /// # Errors
    /// [`AgentError::LeaderBehind`] (as [`SessionError::Agent`]: not sealed yet, ask again),
    /// [`AgentError::FrameExpired`], [`SessionError::NewEpoch`], [`SessionError::Protocol`],
    /// and as any call.
    pub fn next_frame(&mut self, deadline: Duration) -> Result<Applied, SessionError> {
        let step = self.next;
        let frame = self.run(FRAME, |c, _| c.frame(step, deadline))?;
        self.apply(frame, false, "frame")
    }

    /// Read the frame of `step` again, without applying it (frames are positional: the same
    /// frame every time).
    ///
    /// # Errors
    /// As [`EngineSession::next_frame`].
    pub fn reread(&mut self, step: Step, deadline: Duration) -> Result<Frame, SessionError> {
        self.run(FRAME, |c, _| c.frame(step, deadline))
    }

    /// Acknowledge every frame applied so far in this epoch (nothing to do when none is new);
    /// returns the step acknowledged.
    ///
    /// # Errors
    /// [`SessionError::NewEpoch`] (the acknowledgement is void), and as any call.
    pub fn ack(&mut self) -> Result<Option<Step>, SessionError> {
        let Some(step) = self.applied else {
            return Ok(None);
        };
        if self.acked >= Some(step) {
            return Ok(Some(step));
        }
        let epoch = self.epoch();
        self.run(ACK, |c, _| c.ack(step))?;
        self.book.acked(epoch, step);
        self.acked = Some(step);
        Ok(Some(step))
    }

    /// End the engine's run: tasks started and never settled are counted lost and returned.
    pub fn close(mut self) -> (TaskTally, Vec<StartedTask>) {
        let lost = self.book.close();
        (self.book.tally(), lost)
    }

    /// Check that `frame` is the one at the session's position, then apply it.
    fn apply(
        &mut self,
        frame: Frame,
        sealed_here: bool,
        call: &'static str,
    ) -> Result<Applied, SessionError> {
        if frame.epoch != self.epoch() || frame.step != self.next {
            let detail = format!(
                "asked for step {} of epoch {}, got step {} of epoch {}",
                self.next,
                self.epoch(),
                frame.step,
                frame.epoch
            );
            return Err(self.protocol(call, detail));
        }
        let observed = self.book.observe(&frame);
        self.applied = Some(self.next);
        self.next = Step(self.next.0 + 1);
        Ok(Applied {
            frame,
            observed,
            sealed_here,
        })
    }

    /// Run `f` until it answers, rejoining after faults (see the module docs).
    fn run<T>(
        &mut self,
        call: Call,
        mut f: impl FnMut(&mut EngineClient, Option<&Registration>) -> Result<T, ClientError>,
    ) -> Result<T, SessionError> {
        let mut since = None;
        loop {
            let err = match f(&mut self.client, self.registration.as_ref()) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let since = *since.get_or_insert_with(Instant::now);
            let fault = match classify(err) {
                Failure::Fault(fault) => fault,
                Failure::Agent(a) => return Err(SessionError::Agent(a)),
                Failure::Protocol(detail) => return Err(self.protocol(call.name, detail)),
                Failure::Client(e) => return Err(SessionError::Client(e)),
            };
            let from = self.epoch();
            self.rejoin(&fault, call, since)?;
            if self.epoch() != from {
                return Err(SessionError::NewEpoch {
                    call: call.name,
                    from,
                    to: self.epoch(),
                    waited_ms: ms(since),
                });
            }
        }
    }

    /// Get back into the group after `fault` in `call`, by `since` + the recovery deadline.
    fn rejoin(&mut self, fault: &Fault, call: Call, since: Instant) -> Result<(), SessionError> {
        let old_epoch = self.epoch();
        let mut broken = matches!(fault, Fault::Broken(_));
        let need_new_epoch = broken && call.mutates;
        let mut stayed = false;
        let mut must_register = false;
        let mut last = fault.to_string();
        let mut pause = !matches!(fault, Fault::Stale(_));
        loop {
            if self.cancelled() {
                return Err(SessionError::Cancelled { call: call.name });
            }
            if since.elapsed() > self.config.recovery {
                let (rank, epoch, step, waited_ms) = (self.rank(), old_epoch, self.next, ms(since));
                // Ambiguous only when the agent answered in the old epoch: an agent that never
                // came back is a plain failure to rejoin.
                return Err(if need_new_epoch && stayed {
                    SessionError::Ambiguous {
                        rank,
                        call: call.name,
                        epoch,
                        step,
                        waited_ms,
                    }
                } else {
                    SessionError::Rejoin {
                        rank,
                        call: call.name,
                        epoch,
                        step,
                        waited_ms,
                        last,
                    }
                });
            }
            if pause {
                sleep_unless(self.config.retry_pause, self.cancel.as_deref());
            }
            pause = true;
            let welcome = if broken {
                // The same client reconnects, so the outcomes it already received stay
                // suppressed when the new epoch redelivers them.
                match self.client.reconnect(self.config.connect_slice) {
                    Ok(w) => {
                        broken = false;
                        must_register = true;
                        w
                    }
                    Err(e) => {
                        last = e.to_string();
                        continue;
                    }
                }
            } else {
                match self.client.hello() {
                    Ok(w) => w,
                    Err(e) => {
                        last = e.to_string();
                        broken = self.settle(e, HELLO)?;
                        continue;
                    }
                }
            };
            let new_epoch = welcome.epoch != old_epoch;
            if !new_epoch && need_new_epoch {
                stayed = true;
                last = format!("the group is still in epoch {old_epoch}");
                continue;
            }
            if new_epoch || must_register {
                if let Some(reg) = &self.registration {
                    if let Err(e) = send_registration(&mut self.client, Some(reg)) {
                        last = e.to_string();
                        must_register = true;
                        broken = self.settle(e, REGISTER)?;
                        continue;
                    }
                }
            }
            if new_epoch {
                self.enter_epoch();
            }
            return Ok(());
        }
    }

    /// The group is in a new epoch: the session starts it at step 0.
    fn enter_epoch(&mut self) {
        self.next = Step(0);
        self.applied = None;
        self.acked = None;
    }

    /// Sort an error met while rejoining: `Ok(true)` when the socket broke, `Ok(false)` to
    /// retry on the same connection, `Err` when no retry can help.
    fn settle(&self, e: ClientError, call: Call) -> Result<bool, SessionError> {
        match classify(e) {
            Failure::Fault(Fault::Broken(_)) => Ok(true),
            Failure::Fault(_) => Ok(false),
            Failure::Agent(a) => Err(SessionError::Agent(a)),
            Failure::Protocol(detail) => Err(self.protocol(call.name, detail)),
            Failure::Client(e) => Err(SessionError::Client(e)),
        }
    }

    fn protocol(&self, call: &'static str, detail: String) -> SessionError {
        SessionError::Protocol {
            rank: self.rank(),
            call,
            epoch: self.epoch(),
            step: self.next,
            detail,
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst))
    }
}

/// Register `reg` (nothing to do without one).
fn send_registration(
    client: &mut EngineClient,
    reg: Option<&Registration>,
) -> Result<u64, ClientError> {
    match reg {
        None => Ok(0),
        Some(Registration::Path(path, size, page)) => {
            client.register_buffer_path(path, *size, *page)
        }
        Some(Registration::Descriptor(fd, size, page)) => {
            client.register_buffer_fd(std::os::fd::AsFd::as_fd(fd), *size, *page)
        }
    }
}

/// Sleep `d` in slices of at most 10 ms, returning early once `cancel` is raised.
fn sleep_unless(d: Duration, cancel: Option<&AtomicBool>) {
    let until = Instant::now() + d;
    loop {
        if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
            return;
        }
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(10)));
    }
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
