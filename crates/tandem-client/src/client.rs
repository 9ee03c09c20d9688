//! The blocking engine client: one connection from an engine to its rank's agent.
//!
//! Every call sends one request and waits for its one reply, with a socket deadline a little
//! past the request's own deadline, so no call waits forever.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use tandem_proto::frame::{Frame, LookupResult};
use tandem_proto::ids::{BlockHash, Epoch, PageId, RequestId, Step, TaskId};

use crate::api::{AgentError, EngineReply, EngineRequest};
use crate::pages::PagePool;
use crate::wire::{read_message, write_message, WireError};

/// Slack added to a request's deadline for the socket read, milliseconds.
const SOCKET_SLACK_MS: u64 = 2_000;

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
    /// The agent answered with a reply of the wrong kind (a bug on one side).
    #[error("unexpected reply to {request}: {reply}")]
    UnexpectedReply {
        /// The request's kind.
        request: &'static str,
        /// The reply, debug-printed.
        reply: String,
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
    /// The next step the leader will seal.
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
        };
        client.hello()?;
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
        self.hello()
    }

    /// Say hello again (after a [`AgentError::StaleEpoch`]) to learn the current epoch.
    ///
    /// # Errors
    /// As [`EngineClient::connect`].
    pub fn hello(&mut self) -> Result<Welcome, ClientError> {
        match self.call(
            EngineRequest::Hello {
                rank: self.welcome.rank,
            },
            0,
        )? {
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

    /// Register the engine's page pool; returns its page count.
    ///
    /// # Errors
    /// [`AgentError::Buffer`] when the page size is not the shard size or the file cannot be
    /// mapped.
    pub fn register_buffer(&mut self, pool: &PagePool) -> Result<u64, ClientError> {
        let req = EngineRequest::RegisterBuffer {
            path: pool.path().display().to_string(),
            size_bytes: pool.size_bytes(),
            page_size_bytes: pool.page_size_bytes(),
        };
        match self.call(req, 0)? {
            EngineReply::Registered { pages } => Ok(pages),
            other => Err(unexpected("register_buffer", other)),
        }
    }

    /// Leader: look up the cached prefix of `block_hashes` in `step`; matched blocks are
    /// pinned until loaded (or released by a new epoch).
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
    /// [`AgentError::BadRequest`] for mismatched lists, and as [`EngineClient::lookup`].
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
        let deadline_ms = deadline.as_millis() as u64;
        let req = EngineRequest::Frame {
            epoch: self.epoch(),
            step,
            deadline_ms,
        };
        self.frame_reply("frame", req, deadline_ms)
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

    fn call(&mut self, req: EngineRequest, deadline_ms: u64) -> Result<EngineReply, ClientError> {
        let limit = Duration::from_millis(deadline_ms.saturating_add(SOCKET_SLACK_MS));
        self.stream
            .set_read_timeout(Some(limit))
            .map_err(WireError::Io)?;
        self.stream
            .set_write_timeout(Some(limit))
            .map_err(WireError::Io)?;
        write_message(&mut self.stream, &req)?;
        match read_message::<EngineReply>(&mut self.stream)? {
            EngineReply::Error(e) => Err(ClientError::Agent(e)),
            reply => Ok(reply),
        }
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
