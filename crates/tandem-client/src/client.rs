//! The blocking engine client: one connection from an engine to its rank's agent.
//!
//! Every call sends one request under a new [`CallId`] and waits for the reply that names that
//! id, at most the request's own deadline plus a slack ([`EngineClient::set_reply_slack`]), so
//! no call waits forever. A call that runs out of time returns [`ClientError::Timeout`] and
//! leaves the connection usable: the agent's late reply to it is read and discarded by a later
//! call (it names an older id), and bytes of a message cut by the deadline stay buffered, so
//! the stream never falls out of step. A reply that cannot belong to any call sent (a later id,
//! no id, bytes that do not decode) breaks the connection for good
//! ([`ClientError::Broken`]): [`EngineClient::reconnect`].
//!
//! **Frames from the ring.** After each hello on a new connection the client asks its agent
//! for the rank's frame ring ([`crate::ring`]) and maps it; [`EngineClient::frame`] then reads
//! a published frame from shared memory and waits for one on the ring's futex, and asks the
//! socket only for what the ring cannot answer (so every refusal is the agent's, as before).
//! `TANDEM_FRAME_RING=0` in the environment turns it off (every frame on the socket).

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{send, SendFlags};
use tandem_proto::frame::{Frame, LookupResult};
use tandem_proto::ids::{BlockHash, Epoch, PageId, RequestId, Step, TaskId};

use crate::api::{AgentError, BufferSource, CallId, EngineReply, EngineRequest};
use crate::pages::PagePool;
use crate::ring::{RingReader, Waited};
use crate::wire::{decode_call, encode_call, split_message, WireError};

/// Default slack added to a request's deadline before the call gives up waiting for its reply.
pub const DEFAULT_REPLY_SLACK: Duration = Duration::from_secs(2);

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 64 * 1024;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The agent refused the request (typed; see [`AgentError`]).
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The socket failed, timed out, or carried a malformed message.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// Connecting did not succeed before the deadline.
    #[error("cannot connect to agent at {path} within {waited_ms} ms: {source}")]
    Connect {
        /// The agent's socket.
        path: String,
        /// How long it tried, milliseconds.
        waited_ms: u64,
        /// The last connect error.
        source: std::io::Error,
    },
    /// The agent answered the call with a reply of the wrong kind (a bug on one side).
    #[error("unexpected reply to {request}: {reply}")]
    UnexpectedReply {
        /// The request's kind.
        request: &'static str,
        /// The reply, debug-printed.
        reply: String,
    },
    /// No reply to the call within its deadline plus the slack. The agent may still carry the
    /// request out; its late reply is discarded by a later call, and the connection stays
    /// usable.
    #[error(
        "no reply to {request} (call {call}) within {waited_ms} ms; a late reply will be discarded"
    )]
    Timeout {
        /// The request's kind.
        request: &'static str,
        /// The call's id on this connection.
        call: CallId,
        /// How long the call waited, milliseconds.
        waited_ms: u64,
    },
    /// A page pool's descriptor could not be passed (for example it is closed): nothing was
    /// sent and the connection stays usable.
    #[error("cannot pass descriptor {fd} to the agent: {source}")]
    Descriptor {
        /// The descriptor number.
        fd: i32,
        /// The error `sendmsg` gave (`EBADF` for a closed descriptor).
        source: std::io::Error,
    },
    /// The connection can no longer be trusted (the agent closed it, or sent a reply that
    /// belongs to no call this client sent); every call fails until
    /// [`EngineClient::reconnect`].
    #[error("engine connection broken: {reason}; reconnect")]
    Broken {
        /// What happened.
        reason: String,
    },
}

/// Where the group stood when the client said hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The current epoch.
    pub epoch: Epoch,
    /// This rank.
    pub rank: u32,
    /// Ranks in the group.
    pub world_size: u32,
    /// Bytes of one block shard: the page size the agent expects.
    pub shard_bytes: u64,
    /// Where this engine goes on: the leader's, the next step the leader will seal; a
    /// follower's, the first frame its rank has not acknowledged (the step to
    /// [`crate::EngineSession::seek`] to when it joins an epoch under way).
    pub next_step: Step,
}

/// Epochs of task ids kept for duplicate suppression, counting back from the newest seen.
const DEDUP_EPOCHS: u64 = 16;

/// A connection to one agent. Not thread-safe: one engine thread drives it.
///
/// Besides carrying requests, it suppresses duplicate outcomes: an outcome the agent delivers
/// again in a reconciliation (`redelivered`) is removed when this engine has already received
/// it (the agent's own filter relies on acknowledgements that a crash can lose). The filtered
/// frame 0 of an epoch is kept, so re-reading it returns the same frame.
pub struct EngineClient {
    stream: UnixStream,
    path: std::path::PathBuf,
    welcome: Welcome,
    /// Task ids whose outcome this engine received, of the last [`DEDUP_EPOCHS`] epochs.
    seen: std::collections::BTreeSet<tandem_proto::ids::TaskId>,
    /// Frame 0 of the current epoch as first returned (after filtering).
    frame0: Option<Frame>,
    /// The id of the last call sent on this connection (ids start at 1).
    last_call: u64,
    /// Bytes read and not yet part of a whole reply (a read cut by a deadline).
    inbox: Vec<u8>,
    /// Bytes of a request whose write was cut by a deadline: sent before the next request, so
    /// the agent never sees a torn message.
    outbox: Vec<u8>,
    /// Late replies of timed-out calls, read and discarded.
    late_replies: u64,
    /// Why the connection cannot be used, once it cannot.
    broken: Option<String>,
    reply_slack: Duration,
    /// Ask the agent for its frame ring at each new connection (`TANDEM_FRAME_RING` not `0`).
    ring_wanted: bool,
    /// The agent's frame ring, when it handed one out on this connection.
    ring: Option<RingReader>,
    /// The bytes of the last frame read from the ring (reused).
    ring_buf: Vec<u8>,
    /// Frames answered from the ring.
    ring_reads: u64,
    /// Descriptors that arrived with reply bytes (only a `FrameRing` answer brings one).
    fds_in: Vec<OwnedFd>,
}

impl EngineClient {
    /// Connect to the agent's socket (retrying until `timeout` while the agent starts) and
    /// say hello as `rank`.
    ///
    /// # Errors
    /// [`ClientError::Connect`], or the agent's refusal (for example a rank mismatch).
    pub fn connect(
        path: impl AsRef<Path>,
        rank: u32,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let stream = open(path.as_ref(), timeout)?;
        let mut client = Self {
            stream,
            path: path.as_ref().to_path_buf(),
            welcome: Welcome {
                epoch: Epoch(0),
                rank,
                world_size: 0,
                shard_bytes: 0,
                next_step: Step(0),
            },
            seen: std::collections::BTreeSet::new(),
            frame0: None,
            last_call: 0,
            inbox: Vec::new(),
            outbox: Vec::new(),
            late_replies: 0,
            broken: None,
            reply_slack: DEFAULT_REPLY_SLACK,
            ring_wanted: !matches!(std::env::var("TANDEM_FRAME_RING").as_deref(), Ok("0")),
            ring: None,
            ring_buf: Vec::new(),
            ring_reads: 0,
            fds_in: Vec::new(),
        };
        client.hello()?;
        client.map_ring(timeout)?;
        Ok(client)
    }

    /// Connect again to the same agent (after it restarted) and say hello, keeping what this
    /// engine already received, so that redeliveries it has seen stay suppressed. Register the
    /// page pool again afterwards.
    ///
    /// # Errors
    /// As [`EngineClient::connect`].
    pub fn reconnect(&mut self, timeout: Duration) -> Result<Welcome, ClientError> {
        self.stream = open(&self.path, timeout)?;
        self.inbox.clear();
        self.outbox.clear();
        self.broken = None;
        self.hello()?;
        self.map_ring(timeout)?;
        Ok(self.welcome)
    }

    /// Ask the agent for its frame ring and map it; without one, frames are read on the
    /// socket. An agent that cannot decode the request (a build before the ring) closes the
    /// connection: it is opened again, with a hello, and used without a ring.
    fn map_ring(&mut self, timeout: Duration) -> Result<(), ClientError> {
        self.ring = None;
        self.fds_in.clear();
        if !self.ring_wanted {
            return Ok(());
        }
        match self.call(EngineRequest::FrameRing, 0) {
            Ok(EngineReply::FrameRing { .. }) => {
                if let Some(fd) = self.fds_in.pop() {
                    self.ring = RingReader::map(fd).ok();
                }
            }
            Err(ClientError::Agent(_)) if self.broken.is_some() => {
                self.stream = open(&self.path, timeout)?;
                self.inbox.clear();
                self.outbox.clear();
                self.broken = None;
                self.hello()?;
            }
            // No ring (refused, or an answer of another kind): the socket carries frames.
            Ok(_) | Err(ClientError::Agent(_)) => {}
            Err(e) => return Err(e),
        }
        self.fds_in.clear();
        Ok(())
    }

    /// Whether frames are read from the agent's frame ring on this connection.
    pub fn has_frame_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// Frames this client read from the ring (the rest came over the socket).
    pub fn ring_reads(&self) -> u64 {
        self.ring_reads
    }

    /// How long past a request's own deadline a call waits for its reply (default
    /// [`DEFAULT_REPLY_SLACK`]); requests without a deadline wait this long.
    pub fn set_reply_slack(&mut self, slack: Duration) {
        self.reply_slack = slack;
    }

    /// Late replies of timed-out calls that later calls read and discarded.
    pub fn late_replies(&self) -> u64 {
        self.late_replies
    }

    /// Say hello again (after a [`AgentError::StaleEpoch`]) to learn the current epoch.
    ///
    /// # Errors
    /// As [`EngineClient::connect`].
    pub fn hello(&mut self) -> Result<Welcome, ClientError> {
        match self.call(EngineRequest::hello(self.welcome.rank), 0)? {
            EngineReply::Welcome {
                epoch,
                rank,
                world_size,
                shard_bytes,
                next_step,
            } => {
                self.welcome = Welcome {
                    epoch,
                    rank,
                    world_size,
                    shard_bytes,
                    next_step,
                };
                Ok(self.welcome)
            }
            other => Err(unexpected("hello", other)),
        }
    }

    /// What the last hello answered.
    pub fn welcome(&self) -> Welcome {
        self.welcome
    }

    /// The epoch this client speaks for.
    pub fn epoch(&self) -> Epoch {
        self.welcome.epoch
    }

    /// Register the engine's page pool (by path, or by descriptor for a pool without one);
    /// returns its page count. Registering again replaces the pool.
    ///
    /// # Errors
    /// [`AgentError::Buffer`] when the page size is not the shard size, the size is not a whole
    /// number of pages, or the region cannot be mapped; [`ClientError::Descriptor`].
    pub fn register_buffer(&mut self, pool: &PagePool) -> Result<u64, ClientError> {
        match pool.path() {
            Some(path) => self.register_buffer_path(
                &path.display().to_string(),
                pool.size_bytes(),
                pool.page_size_bytes(),
            ),
            None => self.register_buffer_fd(pool.fd(), pool.size_bytes(), pool.page_size_bytes()),
        }
    }

    /// Register the page pool in the file at `path` (`size_bytes` in pages of
    /// `page_size_bytes`), which the agent opens and maps.
    ///
    /// # Errors
    /// As [`EngineClient::register_buffer`].
    pub fn register_buffer_path(
        &mut self,
        path: &str,
        size_bytes: u64,
        page_size_bytes: u64,
    ) -> Result<u64, ClientError> {
        let req = EngineRequest::RegisterBuffer {
            source: BufferSource::Path(path.to_string()),
            size_bytes,
            page_size_bytes,
        };
        let reply = self.call(req, 0);
        self.registered(reply)
    }

    /// Register a page pool by descriptor (for example SGLang's memfd host pool): `fd` is
    /// passed to the agent with the request (`SCM_RIGHTS`, see [`crate::fdpass`]) and the agent
    /// maps `size_bytes` of it in pages of `page_size_bytes`. The engine keeps its own `fd`.
    ///
    /// # Errors
    /// [`ClientError::Descriptor`] when `fd` cannot be passed (a closed descriptor: nothing is
    /// sent, the connection stays usable); [`AgentError::Buffer`] as
    /// [`EngineClient::register_buffer`], also for a descriptor that cannot be mapped
    /// read-write or is smaller than `size_bytes`.
    pub fn register_buffer_fd(
        &mut self,
        fd: BorrowedFd<'_>,
        size_bytes: u64,
        page_size_bytes: u64,
    ) -> Result<u64, ClientError> {
        let req = EngineRequest::RegisterBuffer {
            source: BufferSource::Descriptor,
            size_bytes,
            page_size_bytes,
        };
        let reply = self.call_with(req, 0, Some(fd));
        self.registered(reply)
    }

    /// Register the engine's KV cache in GPU memory (agent feature `cuda`): `pages` pages of
    /// `page_size_bytes` bytes in the allocation behind `ipc_handle` (the 64 bytes of
    /// `cudaIpcGetMemHandle`) on GPU `ordinal`. Returns the pages registered.
    ///
    /// # Errors
    /// [`AgentError::Buffer`] naming the cause: an agent built without the `cuda` feature, no
    /// CUDA driver library on the agent's machine, a handle that is not 64 bytes, a page size
    /// other than the shard size, a driver error; transport errors as every call.
    pub fn register_device(
        &mut self,
        ordinal: u32,
        ipc_handle: &[u8],
        pages: u64,
        page_size_bytes: u64,
    ) -> Result<u64, ClientError> {
        let req = EngineRequest::RegisterDevice {
            ordinal,
            ipc_handle: ipc_handle.to_vec(),
            pages,
            page_size_bytes,
        };
        let reply = self.call(req, 0);
        self.registered(reply)
    }

    fn registered(&self, reply: Result<EngineReply, ClientError>) -> Result<u64, ClientError> {
        match reply? {
            EngineReply::Registered { pages } => Ok(pages),
            other => Err(unexpected("register_buffer", other)),
        }
    }

    /// Leader: look up the cached prefix of `block_hashes` in `step` for `request`; matched
    /// blocks are pinned until the request's load, [`EngineClient::release`], or a new epoch.
    /// Asking again for the same request and blocks returns the same answer and holds the same
    /// pins (one pin set per request).
    ///
    /// # Errors
    /// [`AgentError::NotLeader`], [`AgentError::StaleEpoch`], [`AgentError::NotReady`].
    pub fn lookup(
        &mut self,
        step: Step,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
    ) -> Result<LookupResult, ClientError> {
        let req = EngineRequest::Lookup {
            epoch: self.epoch(),
            step,
            request,
            block_hashes,
        };
        match self.call(req, 0)? {
            EngineReply::Lookup(r) => Ok(r),
            other => Err(unexpected("lookup", other)),
        }
    }

    /// Leader: store `block_hashes[i]` from page `page_ids[i]` on every rank. The pages must
    /// not be reused until a frame lists the returned task as finished.
    ///
    /// # Errors
    /// [`AgentError::BadRequest`] for mismatched lists, and as [`EngineClient::lookup`]. A page
    /// past the end of a rank's pool fails that rank's shard: the task's outcome is `Failed`
    /// with a reason naming the page ([`crate::EngineSession`] refuses it before sending).
    pub fn store(
        &mut self,
        step: Step,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
        page_ids: Vec<PageId>,
    ) -> Result<TaskId, ClientError> {
        let req = EngineRequest::Store {
            epoch: self.epoch(),
            step,
            request,
            block_hashes,
            page_ids,
        };
        self.started("store", req)
    }

    /// Leader: load `block_hashes[i]` into page `page_ids[i]` on every rank. The pages hold
    /// the blocks only once a frame lists the returned task as finished `Ok`.
    ///
    /// # Errors
    /// As [`EngineClient::store`].
    pub fn load(
        &mut self,
        step: Step,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
        page_ids: Vec<PageId>,
    ) -> Result<TaskId, ClientError> {
        let req = EngineRequest::Load {
            epoch: self.epoch(),
            step,
            request,
            block_hashes,
            page_ids,
        };
        self.started("load", req)
    }

    /// Leader: load like [`EngineClient::load`], copied layer by layer on every rank: the
    /// leader decides the plan (this rank layout's layers in ascending order, each within
    /// `layer_timeout`) and the frame that starts the load carries it (`Frame::layerwise`).
    /// Each rank's engine then calls [`EngineClient::wait_layer`] per layer.
    ///
    /// # Errors
    /// As [`EngineClient::store`].
    pub fn load_layerwise(
        &mut self,
        step: Step,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
        page_ids: Vec<PageId>,
        layer_timeout: Duration,
    ) -> Result<TaskId, ClientError> {
        let req = EngineRequest::LoadLayerwise {
            epoch: self.epoch(),
            step,
            request,
            block_hashes,
            page_ids,
            layer_timeout_ms: layer_timeout.as_millis() as u64,
        };
        self.started("load_layerwise", req)
    }

    /// Any rank: wait at most `deadline` until layer `layer` (this rank's own layer index,
    /// `0..layers_per_rank`) of layerwise load `task` is in this engine's pages; returns the
    /// layers this rank has copied so far. Call it once the frame that starts the task has
    /// been read (on a follower: and acknowledged, which releases the copy).
    ///
    /// # Errors
    /// [`AgentError::Layer`] by the deadline, never later: `Timeout` (not there yet), `Failed`
    /// (the task failed on some rank: recompute), `UnknownTask`, `OutOfRange`; each names the
    /// task, the layer, and the layers ready against the layers asked.
    /// [`AgentError::StaleEpoch`], [`AgentError::NotReady`] (the epoch ended).
    pub fn wait_layer(
        &mut self,
        task: TaskId,
        layer: u32,
        deadline: Duration,
    ) -> Result<u32, ClientError> {
        let deadline_ms = deadline.as_millis() as u64;
        let req = EngineRequest::WaitLayer {
            epoch: self.epoch(),
            task,
            layer,
            deadline_ms,
        };
        match self.call(req, deadline_ms)? {
            EngineReply::LayerReady { layers_ready, .. } => Ok(layers_ready),
            other => Err(unexpected("wait_layer", other)),
        }
    }

    /// Leader: seal `step` and return its frame, waiting at most `deadline` while the window
    /// of unacknowledged steps is full.
    ///
    /// # Errors
    /// [`AgentError::WindowFull`], [`AgentError::WrongStep`], [`AgentError::StaleEpoch`].
    pub fn end_step(&mut self, step: Step, deadline: Duration) -> Result<Frame, ClientError> {
        let deadline_ms = deadline.as_millis() as u64;
        let req = EngineRequest::EndStep {
            epoch: self.epoch(),
            step,
            deadline_ms,
        };
        self.frame_reply("end_step", req, deadline_ms)
    }

    /// The frame of `step`: positional and idempotent, waiting at most `deadline` for the
    /// leader to seal it.
    ///
    /// # Errors
    /// [`AgentError::LeaderBehind`] after the deadline, [`AgentError::FrameExpired`],
    /// [`AgentError::StaleEpoch`].
    pub fn frame(&mut self, step: Step, deadline: Duration) -> Result<Frame, ClientError> {
        let mut deadline = deadline;
        if let (Some(ring), None) = (&self.ring, &self.broken) {
            let until = Instant::now() + deadline;
            let mut buf = std::mem::take(&mut self.ring_buf);
            let stream = &self.stream;
            let waited = ring.wait(self.welcome.epoch.0, step.0, until, &mut buf, || {
                hung_up(stream)
            });
            let frame = match waited {
                Waited::Frame => postcard::from_bytes::<Frame>(&buf).ok(),
                Waited::Socket => None,
                Waited::Hangup => {
                    self.ring_buf = buf;
                    return Err(self.break_with("the agent closed the connection".into()));
                }
            };
            self.ring_buf = buf;
            if let Some(frame) = frame {
                // As on the socket: an agent that is gone is an error, even for a frame its
                // ring still holds.
                if hung_up(&self.stream) {
                    return Err(self.break_with("the agent closed the connection".into()));
                }
                self.ring_reads += 1;
                return Ok(self.deduplicate(frame));
            }
            // The socket answers what the ring could not, within what is left of the deadline.
            deadline = until.saturating_duration_since(Instant::now());
        }
        let deadline_ms = deadline.as_millis() as u64;
        let req = EngineRequest::Frame {
            epoch: self.epoch(),
            step,
            deadline_ms,
        };
        self.frame_reply("frame", req, deadline_ms)
    }

    /// Any rank: this engine's pages for `task`, a store or load started without page ids: one
    /// page per block of the task, in the order of its `block_hashes` in the frame that starts
    /// it. This rank copies the task's shards only once bound; without a bind within
    /// `protocol.bind_timeout_ms` of the task reaching this rank, its shard fails and the task
    /// finishes `Failed` on every rank.
    ///
    /// # Errors
    /// [`AgentError::Bind`] (unknown task, wrong count, page out of the registered pool, already
    /// bound, past the deadline), [`AgentError::StaleEpoch`].
    pub fn bind(&mut self, task: TaskId, page_ids: Vec<PageId>) -> Result<(), ClientError> {
        let req = EngineRequest::Bind {
            epoch: self.epoch(),
            task,
            page_ids,
        };
        match self.call(req, 0)? {
            EngineReply::Bound { .. } => Ok(()),
            other => Err(unexpected("bind", other)),
        }
    }

    /// Leader: `request` is done with its lookup: the blocks it pinned and no load took are
    /// given back; returns how many (0 when none was held).
    ///
    /// # Errors
    /// [`AgentError::NotLeader`], [`AgentError::StaleEpoch`].
    pub fn release(&mut self, request: RequestId) -> Result<u32, ClientError> {
        let req = EngineRequest::Release {
            epoch: self.epoch(),
            request,
        };
        match self.call(req, 0)? {
            EngineReply::Released { blocks } => Ok(blocks),
            other => Err(unexpected("release", other)),
        }
    }

    /// Tell the agent the engine has applied every frame up to and including `step`.
    ///
    /// # Errors
    /// [`AgentError::StaleEpoch`].
    pub fn ack(&mut self, step: Step) -> Result<(), ClientError> {
        match self.call(
            EngineRequest::Ack {
                epoch: self.epoch(),
                step,
            },
            0,
        )? {
            EngineReply::Acked => Ok(()),
            other => Err(unexpected("ack", other)),
        }
    }

    fn started(&mut self, what: &'static str, req: EngineRequest) -> Result<TaskId, ClientError> {
        match self.call(req, 0)? {
            EngineReply::Started { task } => Ok(task),
            other => Err(unexpected(what, other)),
        }
    }

    fn frame_reply(
        &mut self,
        what: &'static str,
        req: EngineRequest,
        deadline_ms: u64,
    ) -> Result<Frame, ClientError> {
        match self.call(req, deadline_ms)? {
            EngineReply::Frame(f) => Ok(self.deduplicate(*f)),
            other => Err(unexpected(what, other)),
        }
    }

    /// Remove redeliveries this engine already received (see the type's docs) and remember
    /// every outcome the frame carries.
    fn deduplicate(&mut self, mut frame: Frame) -> Frame {
        if frame.step.0 == 0 {
            if let Some(f) = self.frame0.as_ref().filter(|f| f.epoch == frame.epoch) {
                return f.clone();
            }
            if let Some(rec) = frame.reconciliation.as_mut() {
                rec.redelivered.retain(|o| !self.seen.contains(&o.task));
            }
        }
        for o in frame.outcomes() {
            self.seen.insert(o.task);
        }
        let floor = frame.epoch.0.saturating_sub(DEDUP_EPOCHS);
        if self.seen.first().is_some_and(|t| t.epoch < floor) {
            self.seen = self.seen.split_off(&tandem_proto::ids::TaskId {
                epoch: floor,
                seq: 0,
            });
        }
        if frame.step.0 == 0 {
            self.frame0 = Some(frame.clone());
        }
        frame
    }

    /// Send `req` as a new call and wait for the reply that names it (see the module docs).
    fn call(&mut self, req: EngineRequest, deadline_ms: u64) -> Result<EngineReply, ClientError> {
        self.call_with(req, deadline_ms, None)
    }

    /// [`Self::call`], passing `fd` with the request's bytes when given.
    fn call_with(
        &mut self,
        req: EngineRequest,
        deadline_ms: u64,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<EngineReply, ClientError> {
        if let Some(reason) = &self.broken {
            return Err(ClientError::Broken {
                reason: reason.clone(),
            });
        }
        let what = kind(&req);
        let started = Instant::now();
        let give_up = started + Duration::from_millis(deadline_ms).saturating_add(self.reply_slack);
        self.last_call += 1;
        let call = CallId(self.last_call);
        let bytes = encode_call(&req, call)?;
        let timeout = |started: Instant| ClientError::Timeout {
            request: what,
            call,
            waited_ms: started.elapsed().as_millis() as u64,
        };
        if let Some(fd) = fd {
            // The descriptor must travel with this request's first byte, so every earlier byte
            // goes first (see `fdpass`).
            match self.flush(give_up) {
                Ok(true) => {}
                Ok(false) => return Err(timeout(started)),
                Err(e) => return Err(self.break_with(e)),
            }
            match self.send_fd(&bytes, fd, give_up) {
                Ok(Some(sent)) => self.outbox.extend_from_slice(&bytes[sent..]),
                Ok(None) => return Err(timeout(started)),
                Err(FdSendError::Descriptor(source)) => {
                    return Err(ClientError::Descriptor {
                        fd: fd.as_raw_fd(),
                        source,
                    });
                }
                Err(FdSendError::Socket(e)) => return Err(self.break_with(e)),
            }
        } else {
            self.outbox.extend_from_slice(&bytes);
        }
        match self.flush(give_up) {
            Ok(true) => {}
            Ok(false) => {
                // Not one byte of this request left: take it back, the agent never sees it. A
                // request partly written stays, so that the agent never reads a torn message.
                if self.outbox.len() >= bytes.len() {
                    self.outbox.truncate(self.outbox.len() - bytes.len());
                }
                return Err(timeout(started));
            }
            Err(e) => return Err(self.break_with(e)),
        }
        loop {
            match split_message(&self.inbox) {
                Ok(Some((payload, used))) => {
                    let decoded = decode_call::<EngineReply>(&self.inbox[payload]);
                    self.inbox.drain(..used);
                    match decoded {
                        Ok((reply, Some(id))) if id == call => {
                            return match reply {
                                EngineReply::Error(e) => Err(ClientError::Agent(e)),
                                reply => Ok(reply),
                            };
                        }
                        // The late reply of a call that timed out: it answers nobody now.
                        Ok((_, Some(id))) if id < call && id != CallId::NONE => {
                            self.late_replies += 1;
                            continue;
                        }
                        // The agent could not read a request of ours and closes the connection.
                        Ok((EngineReply::Error(e), Some(CallId::NONE))) => {
                            self.broken = Some(format!("the agent refused a request: {e}"));
                            return Err(ClientError::Agent(e));
                        }
                        Ok((reply, id)) => {
                            let id = id.map_or("no call id".to_string(), |i| format!("call {i}"));
                            return Err(self.break_with(format!(
                                "a reply naming {id} arrived while call {call} ({what}) waited: {reply:?}"
                            )));
                        }
                        Err(e) => return Err(self.break_with(e.to_string())),
                    }
                }
                Ok(None) => {}
                Err(e) => return Err(self.break_with(e.to_string())),
            }
            let Some(left) = give_up
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                return Err(timeout(started));
            };
            match ready(&self.stream, PollFlags::IN, left) {
                Ok(true) => {}
                // Timed out or interrupted: the deadline is checked above.
                Ok(false) => continue,
                Err(e) => return Err(self.break_with(e.to_string())),
            }
            let at = self.inbox.len();
            self.inbox.resize(at + READ_CHUNK, 0);
            // `recvmsg`: a `FrameRing` answer brings a descriptor with its bytes.
            let got =
                crate::fdpass::recv_with_fds_now(&self.stream, &mut self.inbox[at..]).map(|r| {
                    self.fds_in.extend(r.fds);
                    r.bytes
                });
            self.inbox.truncate(at + *got.as_ref().unwrap_or(&0));
            match got {
                Ok(0) => return Err(self.break_with("the agent closed the connection".into())),
                Ok(_) => {}
                Err(e) if timed_out(&e) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.break_with(e.to_string())),
            }
        }
    }

    /// Send the first bytes of `bytes` with `fd` attached: `Some(sent)`, or `None` when not one
    /// byte could be written before `give_up`.
    fn send_fd(
        &mut self,
        bytes: &[u8],
        fd: BorrowedFd<'_>,
        give_up: Instant,
    ) -> Result<Option<usize>, FdSendError> {
        loop {
            let Some(left) = give_up
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                return Ok(None);
            };
            self.stream
                .set_write_timeout(Some(left))
                .map_err(|e| FdSendError::Socket(e.to_string()))?;
            match crate::fdpass::send_with_fd(&self.stream, bytes, fd) {
                Ok(0) => {
                    return Err(FdSendError::Socket(
                        "the agent closed the connection".into(),
                    ))
                }
                Ok(n) => return Ok(Some(n)),
                Err(e) if timed_out(&e) => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // The descriptor itself is refused before anything is sent.
                Err(e) if e.raw_os_error() == Some(libc_ebadf()) => {
                    return Err(FdSendError::Descriptor(e))
                }
                Err(e) => return Err(FdSendError::Socket(e.to_string())),
            }
        }
    }

    /// Write the outbox until it is empty (`Ok(true)`) or `give_up` passes (`Ok(false)`);
    /// `Err` names a socket failure. Writes never block (`MSG_DONTWAIT`); a full socket is
    /// waited for with `poll`, so no socket option is set per call.
    fn flush(&mut self, give_up: Instant) -> Result<bool, String> {
        while !self.outbox.is_empty() {
            let Some(left) = give_up
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                return Ok(false);
            };
            match send(
                &self.stream,
                &self.outbox,
                SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
            ) {
                Ok(0) => return Err("the agent closed the connection".into()),
                Ok(n) => {
                    self.outbox.drain(..n);
                }
                Err(Errno::AGAIN) => {
                    // Full: wait for room (or the deadline, checked above).
                    ready(&self.stream, PollFlags::OUT, left).map_err(|e| e.to_string())?;
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(std::io::Error::from(e).to_string()),
            }
        }
        Ok(true)
    }

    /// Mark the connection unusable and say why.
    fn break_with(&mut self, reason: String) -> ClientError {
        self.broken = Some(reason.clone());
        ClientError::Broken { reason }
    }
}

/// Why a request with a descriptor was not sent.
enum FdSendError {
    /// The descriptor is not open: nothing was sent.
    Descriptor(std::io::Error),
    /// The socket failed.
    Socket(String),
}

/// Whether the agent closed its end of `stream` (checked between futex sleeps: a reply that
/// waits to be read is not a hang-up).
fn hung_up(stream: &UnixStream) -> bool {
    use rustix::event::poll;
    let mut fds = [PollFd::new(stream, PollFlags::RDHUP)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&zero)) {
        Ok(0) => false,
        Ok(_) => fds[0]
            .revents()
            .intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR),
        Err(_) => false,
    }
}

/// Wait at most `left` until `stream` is ready for `flags` (or hung up, or failed: the read or
/// write that follows says which): `Ok(false)` when the time ran out or a signal interrupted.
///
/// Replies are waited for with `poll`, never in a blocking `recvmsg` under `SO_RCVTIMEO`, for
/// two reasons measured on the frame path (docs/BENCHMARKS.md, "Frame latency"): no socket
/// option to set per call (two `setsockopt` calls fewer), and a thread blocked in `recvmsg` is
/// woken, for nothing, when the agent reads the request (the kernel signals write space on the
/// same wait queue), which costs the agent's read an extra wake-up and this thread a context
/// switch; `poll` for input is not woken by a write-space signal.
///
/// # Errors
/// `poll`'s own error (not a timeout or a signal).
fn ready(stream: &UnixStream, flags: PollFlags, left: Duration) -> std::io::Result<bool> {
    let mut fds = [PollFd::new(stream, flags)];
    let timeout = rustix::event::Timespec {
        tv_sec: left.as_secs() as i64,
        tv_nsec: i64::from(left.subsec_nanos()),
    };
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(0) | Err(Errno::INTR) => Ok(false),
        Ok(_) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// `EBADF`, the error for a descriptor that is not open.
fn libc_ebadf() -> i32 {
    rustix::io::Errno::BADF.raw_os_error()
}

/// A read or write that ran out of time (`SO_RCVTIMEO`/`SO_SNDTIMEO` give `WouldBlock` on
/// Linux).
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// The request's kind, for errors.
fn kind(req: &EngineRequest) -> &'static str {
    match req {
        EngineRequest::Hello { .. } | EngineRequest::HelloVersioned { .. } => "hello",
        EngineRequest::Bind { .. } => "bind",
        EngineRequest::Release { .. } => "release",
        EngineRequest::RegisterBuffer { .. } => "register_buffer",
        EngineRequest::RegisterDevice { .. } => "register_device",
        EngineRequest::Lookup { .. } => "lookup",
        EngineRequest::Store { .. } => "store",
        EngineRequest::Load { .. } => "load",
        EngineRequest::EndStep { .. } => "end_step",
        EngineRequest::Frame { .. } => "frame",
        EngineRequest::Ack { .. } => "ack",
        EngineRequest::LoadLayerwise { .. } => "load_layerwise",
        EngineRequest::WaitLayer { .. } => "wait_layer",
        EngineRequest::FrameRing => "frame_ring",
    }
}

/// Connect to the agent's socket, retrying until `timeout` while the agent starts.
fn open(path: &Path, timeout: Duration) -> Result<UnixStream, ClientError> {
    let started = Instant::now();
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(source) if started.elapsed() >= timeout => {
                return Err(ClientError::Connect {
                    path: path.display().to_string(),
                    waited_ms: started.elapsed().as_millis() as u64,
                    source,
                })
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn unexpected(request: &'static str, reply: EngineReply) -> ClientError {
    ClientError::UnexpectedReply {
        request,
        reply: format!("{reply:?}"),
    }
}
