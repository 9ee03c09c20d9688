//! The engine endpoint's messages: what an engine asks its local agent and what it answers.
//!
//! Owns the request and reply types and the agent's typed refusals. They live in the sans-IO
//! layer because the rank cores (`tandem-core`) take requests and give replies as plain data;
//! `tandem-client` re-exports them as `tandem_client::api`. It never does IO: the engine client
//! (engine side) and the agent's endpoint (agent side) carry these over a Unix domain socket
//! with `tandem_client::wire` framing.

use crate::frame::{Frame, LookupResult};
use crate::ids::{BlockHash, Epoch, PageId, RequestId, Step, TaskId};
use serde::{Deserialize, Serialize};

/// The engine protocol version this build speaks: what an engine and its agent must agree on
/// (the requests, the replies and their meaning). Version 1 is the protocol before versions
/// were sent: its [`EngineRequest::Hello`] carries none. Version 2 adds the versioned hello
/// ([`EngineRequest::HelloVersioned`]), per-rank page binding ([`EngineRequest::Bind`]) and
/// lookups whose pins last until the request's load or [`EngineRequest::Release`]. Version 3
/// adds layerwise loads ([`EngineRequest::LoadLayerwise`], [`EngineRequest::WaitLayer`]) and
/// the frame's `layerwise` list.
///
/// An agent answers a hello of another version with [`AgentError::ProtocolVersion`] naming
/// both; a version-1 hello gets [`AgentError::BadRequest`] with the same text, the one refusal
/// a version-1 engine can decode.
pub const ENGINE_PROTOCOL_VERSION: u16 = 3;

/// The engine protocol version of an [`EngineRequest::Hello`], which carries none.
pub const UNVERSIONED_ENGINE_PROTOCOL: u16 = 1;

/// The id of one call on one engine connection: chosen by the client (from 1, one more for
/// every request it sends on the connection) and echoed by the agent in the reply, so that a
/// reply is only ever taken as the answer to the request that asked for it.
///
/// On the wire it follows the message body as a postcard varint (see `tandem_client::wire`). `0`
/// ([`CallId::NONE`]) names no call: the agent answers with it a request whose id it could not
/// read.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct CallId(pub u64);

impl CallId {
    /// No call: the id of an answer to a request whose id could not be read.
    pub const NONE: CallId = CallId(0);
}

impl std::fmt::Display for CallId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

/// One request from an engine to its rank's agent. Each gets exactly one [`EngineReply`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EngineRequest {
    /// Introduce an engine of engine protocol version 1 (before versions were sent): refused
    /// with the versions named (see [`ENGINE_PROTOCOL_VERSION`]). Kept, at its place, so that
    /// such an engine's hello decodes and its refusal is one it can read.
    Hello {
        /// The rank this engine runs as; must match the agent's.
        rank: u32,
    },
    /// Register the engine's KV page pool: a file-backed shared-memory region of
    /// `size_bytes` bytes holding pages of `page_size_bytes` bytes (one block shard per page),
    /// named by path or passed as a descriptor ([`BufferSource`]). Registering again replaces
    /// the pool.
    RegisterBuffer {
        /// Where the region is.
        source: BufferSource,
        /// Bytes of the region; a multiple of `page_size_bytes`.
        size_bytes: u64,
        /// Bytes of one page; equal to the group's block-shard size.
        page_size_bytes: u64,
    },
    /// Leader only: the longest cached prefix of `block_hashes`, pinned for the request's
    /// load. Idempotent per request: asking again with the same blocks returns the same answer
    /// and holds the same pins (one pin set per request); asking with other blocks gives the
    /// old pins back first. The pins last until the request's load, its
    /// [`EngineRequest::Release`], or the end of the epoch.
    Lookup {
        /// The epoch the engine believes current.
        epoch: Epoch,
        /// The open step.
        step: Step,
        /// The request asking.
        request: RequestId,
        /// The request's prefix block hashes, in order.
        block_hashes: Vec<BlockHash>,
    },
    /// Leader only: store `block_hashes[i]` from page `page_ids[i]` on every rank, or, with
    /// `page_ids` empty, from the pages each rank's engine binds for the task
    /// ([`EngineRequest::Bind`]).
    Store {
        /// The epoch the engine believes current.
        epoch: Epoch,
        /// The open step.
        step: Step,
        /// The request whose blocks these are.
        request: RequestId,
        /// Blocks to store, in prefix order.
        block_hashes: Vec<BlockHash>,
        /// The engine page holding each block's shard (same ids on every rank); empty: every
        /// rank binds its own.
        page_ids: Vec<PageId>,
    },
    /// Leader only: load `block_hashes[i]` into page `page_ids[i]` on every rank, or, with
    /// `page_ids` empty, into the pages each rank's engine binds for the task.
    Load {
        /// The epoch the engine believes current.
        epoch: Epoch,
        /// The open step.
        step: Step,
        /// The request that will use the blocks.
        request: RequestId,
        /// Blocks to load (a pinned prefix from a lookup).
        block_hashes: Vec<BlockHash>,
        /// Destination page of each block (same ids on every rank); empty: every rank binds
        /// its own.
        page_ids: Vec<PageId>,
    },
    /// Leader only: seal the frame of `step` and return it; waits at most `deadline_ms`
    /// milliseconds while the window of unacknowledged steps is full.
    EndStep {
        /// The epoch the engine believes current.
        epoch: Epoch,
        /// The step to seal; steps are sealed in order from 0.
        step: Step,
        /// Longest wait, milliseconds.
        deadline_ms: u64,
    },
    /// The frame of `step` (positional and idempotent); waits at most `deadline_ms`
    /// milliseconds for the leader to seal it.
    Frame {
        /// The epoch the engine believes current.
        epoch: Epoch,
        /// The step wanted.
        step: Step,
        /// Longest wait, milliseconds.
        deadline_ms: u64,
    },
    /// The engine has applied every frame up to and including `step`.
    Ack {
        /// The epoch the engine believes current.
        epoch: Epoch,
        /// The last step applied.
        step: Step,
    },
    /// Introduce the engine, naming the engine protocol version it speaks; answered with
    /// [`EngineReply::Welcome`], or [`AgentError::ProtocolVersion`] for another version.
    HelloVersioned {
        /// The rank this engine runs as; must match the agent's.
        rank: u32,
        /// [`ENGINE_PROTOCOL_VERSION`] of the engine's build.
        protocol_version: u16,
    },
    /// Any rank: the pages of this rank's engine for `task`, a store or load started without
    /// page ids: one page per block of the task, in the order of the task's `block_hashes` in
    /// the frame that starts it. This rank copies the task's shards only once bound; without a
    /// bind by `protocol.bind_timeout_ms` after the task reached this rank, its shard fails,
    /// and with it the task on every rank. Binding again with the same pages answers
    /// [`EngineReply::Bound`] again; refusals are [`AgentError::Bind`].
    Bind {
        /// The epoch the engine believes current.
        epoch: Epoch,
        /// The task, as a frame (or, on the leader, `Started`) named it.
        task: TaskId,
        /// One page of this engine's pool per block of the task.
        page_ids: Vec<PageId>,
    },
    /// Leader only: the request is done with its lookup: the blocks its lookup pinned and no
    /// load took are given back (none is fine). Answered with [`EngineReply::Released`].
    Release {
        /// The epoch the engine believes current.
        epoch: Epoch,
        /// The request.
        request: RequestId,
    },
    /// Register the engine's KV cache in GPU memory: `pages` pages of `page_size_bytes` bytes
    /// (one block shard per page, page `i` at byte `i × page_size_bytes`) in the allocation
    /// behind `ipc_handle` (the 64 bytes of `cudaIpcGetMemHandle`) on GPU `ordinal`. Answered
    /// like [`EngineRequest::RegisterBuffer`] with [`EngineReply::Registered`]; refused with
    /// [`AgentError::Buffer`] naming the cause (an agent built without the `cuda` feature, no
    /// CUDA driver library, a handle that is not 64 bytes, a page size other than the shard
    /// size, a driver error). Last in this enum so that earlier variants keep their wire index.
    RegisterDevice {
        /// The GPU (CUDA device ordinal) holding the allocation.
        ordinal: u32,
        /// The CUDA IPC memory handle, 64 bytes.
        ipc_handle: Vec<u8>,
        /// Pages in the region.
        pages: u64,
        /// Bytes of one page; equal to the group's block-shard size.
        page_size_bytes: u64,
    },
    /// Leader only: a [`EngineRequest::Load`] copied layer by layer on every rank. The leader
    /// decides the plan ([`crate::frame::LayerwiseLoad`]: the layers, their order, the
    /// per-layer deadline) and the frame that starts the load carries it; each rank's engine
    /// then waits for each layer with [`EngineRequest::WaitLayer`]. Answered with
    /// [`EngineReply::Started`]; the group outcome arrives like any load's.
    LoadLayerwise {
        /// The epoch the engine believes current.
        epoch: Epoch,
        /// The open step.
        step: Step,
        /// The request that will use the blocks.
        request: RequestId,
        /// Blocks to load (a pinned prefix from a lookup).
        block_hashes: Vec<BlockHash>,
        /// Destination page of each block (same ids on every rank); empty: every rank binds
        /// its own.
        page_ids: Vec<PageId>,
        /// Longest time, milliseconds, any rank may take to copy one layer of every block;
        /// past it that rank fails its shard and the task fails on every rank.
        layer_timeout_ms: u64,
    },
    /// Any rank: wait until layer `layer` (this rank's own layer index, `0..layers_per_rank`)
    /// of the layerwise load `task` is in this rank's engine pages; answered with
    /// [`EngineReply::LayerReady`], or [`AgentError::Layer`] by `deadline_ms` milliseconds
    /// (never later): the layer is not there yet, the task failed (its shard on some rank,
    /// or the group outcome), or the layer or task is unknown.
    WaitLayer {
        /// The epoch the engine believes current.
        epoch: Epoch,
        /// The layerwise load, as `Started` or the frame named it.
        task: TaskId,
        /// The layer wanted.
        layer: u32,
        /// Longest wait, milliseconds.
        deadline_ms: u64,
    },
    /// Ask for the agent's frame ring (`tandem_client::ring`): answered with
    /// [`EngineReply::FrameRing`] and the ring's descriptor passed with the reply's bytes
    /// (`SCM_RIGHTS`), or refused when the agent has none. A capability, not a rule: an engine
    /// that never asks reads every frame on the socket, and an engine that has the ring still
    /// gets every refusal from the socket. Last in this enum so that earlier variants keep
    /// their wire index.
    FrameRing,
}

impl EngineRequest {
    /// The hello of an engine of this build's [`ENGINE_PROTOCOL_VERSION`] running as `rank`.
    pub fn hello(rank: u32) -> EngineRequest {
        EngineRequest::HelloVersioned {
            rank,
            protocol_version: ENGINE_PROTOCOL_VERSION,
        }
    }
}

/// Where the agent finds an engine's page pool.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BufferSource {
    /// The region's file (for example under `/dev/shm`), opened by the agent.
    Path(String),
    /// The region's descriptor (for example a memfd), passed as `SCM_RIGHTS` ancillary data
    /// with this request's bytes ([`crate::fdpass`]). A request that arrives without exactly
    /// one descriptor is refused with [`AgentError::Buffer`].
    Descriptor,
}

/// The agent's answer to one [`EngineRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EngineReply {
    /// Answer to `Hello`: where the group stands.
    Welcome {
        /// The current epoch.
        epoch: Epoch,
        /// This rank.
        rank: u32,
        /// Ranks in the group.
        world_size: u32,
        /// Bytes of one block shard (the page size the agent expects).
        shard_bytes: u64,
        /// Where this engine goes on (0 at the start of an epoch): the leader's engine, the
        /// next step the leader will seal; a follower's, the first frame its rank has not
        /// acknowledged (an earlier engine of the rank may have left frames unacknowledged,
        /// and the window opens only once they are).
        next_step: Step,
    },
    /// Answer to `RegisterBuffer` and `RegisterDevice`: pages in the region.
    Registered {
        /// Pages of `page_size_bytes` bytes.
        pages: u64,
    },
    /// Answer to `Lookup`.
    Lookup(LookupResult),
    /// Answer to `Store` and `Load`: the task's group-unique id; its outcome arrives in a
    /// later frame's `finished` list.
    Started {
        /// The task.
        task: TaskId,
    },
    /// Answer to `EndStep` and `Frame`.
    Frame(Box<Frame>),
    /// Answer to `Ack`.
    Acked,
    /// The request was refused.
    Error(AgentError),
    /// Answer to `Bind`: this rank's pages for the task are recorded.
    Bound {
        /// The task.
        task: TaskId,
    },
    /// Answer to `Release`: pins given back.
    Released {
        /// Blocks the request's lookup still had pinned, now given back.
        blocks: u32,
    },
    /// Answer to `WaitLayer`: the layer is in this rank's pages.
    LayerReady {
        /// The task.
        task: TaskId,
        /// The layer asked for.
        layer: u32,
        /// Layers this rank has copied of the task so far (in the plan's order).
        layers_ready: u32,
    },
    /// Answer to `FrameRing`: the ring's descriptor came with this reply's bytes.
    FrameRing {
        /// Slots of the ring.
        slots: u32,
        /// Payload bytes of one slot.
        slot_bytes: u32,
    },
}

/// Why a [`EngineRequest::WaitLayer`] ended without its layer. Every variant names the task,
/// the layer asked for, and both positions: layers this rank has copied (`ready`) and layers
/// it must have copied for the one asked (`asked`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
pub enum LayerError {
    /// The deadline passed first; the copy may still finish (wait again) or fail.
    #[error("layer {layer} of task {task} not ready by the deadline: this rank has copied {ready} layers, the layer needs {asked}")]
    Timeout {
        /// The task.
        task: TaskId,
        /// The layer asked for.
        layer: u32,
        /// Layers copied on this rank.
        ready: u32,
        /// Layers needed for `layer`.
        asked: u32,
    },
    /// The task failed: this rank's shard (a copy or its per-layer deadline) or the group
    /// outcome (some rank's shard). Its pages hold no defined data: recompute.
    #[error("layer {layer} of task {task} will not arrive: the task failed with {ready} of {asked} layers copied on this rank: {reason}")]
    Failed {
        /// The task.
        task: TaskId,
        /// The layer asked for.
        layer: u32,
        /// Layers copied on this rank when it failed.
        ready: u32,
        /// Layers needed for `layer`.
        asked: u32,
        /// Why (the first failure this rank heard of).
        reason: String,
    },
    /// No layerwise load of this epoch under that id has reached this rank.
    #[error(
        "layer {layer} of task {task}: no layerwise load of this epoch under that id on this rank"
    )]
    UnknownTask {
        /// The task.
        task: TaskId,
        /// The layer asked for.
        layer: u32,
    },
    /// The layer is not in the task's plan.
    #[error(
        "layer {layer} of task {task}: out of range, the task copies {layers} layers per rank"
    )]
    OutOfRange {
        /// The task.
        task: TaskId,
        /// The layer asked for.
        layer: u32,
        /// Layers in the plan.
        layers: u32,
    },
}

/// Why a [`EngineRequest::Bind`] was refused; nothing was recorded.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
pub enum BindError {
    /// No task of this epoch waits for pages on this rank under that id: it was never started
    /// (or not yet seen in a frame by this rank), or its outcome is already known.
    #[error(
        "unknown task {task}: no task of this epoch waits for this rank's pages under that id"
    )]
    UnknownTask {
        /// The task named.
        task: TaskId,
    },
    /// The page list does not have one page per block of the task.
    #[error("task {task} has {blocks} blocks, the bind names {pages} pages")]
    WrongCount {
        /// The task.
        task: TaskId,
        /// Blocks of the task (its `block_hashes` in the frame that starts it).
        blocks: u32,
        /// Pages named.
        pages: u32,
    },
    /// A page past the end of this rank's registered pool (or no pool is registered:
    /// `pool_pages` 0).
    #[error("task {task}: page {page} is out of range of this rank's pool of {pool_pages} pages")]
    PageOutOfRange {
        /// The task.
        task: TaskId,
        /// The first page out of range.
        page: u32,
        /// Pages of the pool registered on this rank (0: none registered).
        pool_pages: u64,
    },
    /// The task's pages on this rank are already named: by an earlier bind with other pages,
    /// or by the page ids the task started with.
    #[error("task {task} is already bound on this rank")]
    AlreadyBound {
        /// The task.
        task: TaskId,
    },
    /// The bind came after this rank's deadline: its shard already failed, and with it the
    /// task (its outcome, `Failed`, arrives in a frame).
    #[error("task {task}: bind too late, this rank's shard failed after protocol.bind_timeout_ms = {bind_timeout_ms} ms")]
    Expired {
        /// The task.
        task: TaskId,
        /// The deadline this rank waited, milliseconds.
        bind_timeout_ms: u64,
    },
}

/// Why an agent refused an engine's request. Positions are step numbers within an epoch.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
pub enum AgentError {
    /// A leader-only request reached a follower.
    #[error(
        "rank {rank} is a follower: lookup, store, load and end_step go to the leader (rank 0)"
    )]
    NotLeader {
        /// This agent's rank.
        rank: u32,
    },
    /// The request names another epoch: the group restarted. Call `hello` again and read the
    /// new epoch's frames from step 0 (its reconciliation).
    #[error("stale epoch: request for epoch {theirs}, the group is at epoch {ours}")]
    StaleEpoch {
        /// The agent's epoch.
        ours: Epoch,
        /// The request's epoch.
        theirs: Epoch,
    },
    /// The frame was not sealed before the deadline.
    #[error("leader behind: rank {rank} wants step {wanted} of epoch {epoch}; leader has {}", sealed_text(*.sealed))]
    LeaderBehind {
        /// The asking rank.
        rank: u32,
        /// The epoch.
        epoch: Epoch,
        /// The step asked for.
        wanted: Step,
        /// The last sealed step known to this rank.
        sealed: Option<Step>,
    },
    /// The frame is older than the retention window and was dropped.
    #[error("frame expired: step {wanted} of epoch {epoch} is older than the oldest retained step {oldest}")]
    FrameExpired {
        /// The epoch.
        epoch: Epoch,
        /// The step asked for.
        wanted: Step,
        /// The oldest step still retained.
        oldest: Step,
    },
    /// The leader could not seal `step` before the deadline: a follower is more than the
    /// window behind.
    #[error("window full: cannot seal step {step}; slowest follower rank {rank} acknowledged {}, window is {window} steps", acked_text(*.slowest_ack))]
    WindowFull {
        /// The step to seal.
        step: Step,
        /// The slowest follower's rank (the lowest rank among equals).
        rank: u32,
        /// The slowest follower's last acknowledged step.
        slowest_ack: Option<Step>,
        /// The window, in steps.
        window: u64,
    },
    /// Steps are sealed in order from 0.
    #[error("wrong step: the leader's next step is {expected}, the engine asked to seal {got}")]
    WrongStep {
        /// The next step to seal.
        expected: Step,
        /// The step asked for.
        got: Step,
    },
    /// The group is not ready in this epoch (ranks still joining, restarting, or failed).
    #[error("not ready: {reason}")]
    NotReady {
        /// Why.
        reason: String,
    },
    /// The page pool or a page id was refused; nothing was written.
    #[error("buffer refused: {reason}")]
    Buffer {
        /// What was wrong (names the page id, length or region).
        reason: String,
    },
    /// The request could make a frame larger than the group's wire limit
    /// (`protocol.max_frame_bytes`): refused, nothing recorded, so that no frame is ever sealed
    /// that the leader cannot send. `bytes` is the largest frame the leader could then have to
    /// seal (its open step, with every start and outcome not yet revealed and every task in
    /// flight at its largest outcome). Split the request, or send it in a later step once
    /// outcomes have been revealed.
    #[error("frame too large: the request could make a frame of {bytes} bytes, over protocol.max_frame_bytes = {limit}; nothing was recorded (split it, or send it in a later step)")]
    FrameTooLarge {
        /// The largest frame the leader could then have to seal, in bytes.
        bytes: u64,
        /// `protocol.max_frame_bytes`, in bytes.
        limit: u64,
    },
    /// The request was malformed (for example block and page lists of different lengths).
    #[error("bad request: {reason}")]
    BadRequest {
        /// What was wrong.
        reason: String,
    },
    /// The engine speaks another engine protocol version than the agent: refused at hello.
    #[error("{}", version_text(*.agent, *.engine))]
    ProtocolVersion {
        /// The agent's [`ENGINE_PROTOCOL_VERSION`].
        agent: u16,
        /// The engine's.
        engine: u16,
    },
    /// A bind was refused; nothing was recorded.
    #[error("bind refused: {0}")]
    Bind(BindError),
    /// A `wait_layer` ended without its layer.
    #[error("{0}")]
    Layer(LayerError),
}

impl From<LayerError> for AgentError {
    fn from(e: LayerError) -> AgentError {
        AgentError::Layer(e)
    }
}

/// The text of a version refusal, naming both versions (also the reason of the
/// [`AgentError::BadRequest`] a version-1 engine gets).
pub fn version_text(agent: u16, engine: u16) -> String {
    format!("engine protocol version differs: the agent speaks {agent}, the engine speaks {engine}; run an engine and an agent of the same Tandem release")
}

fn sealed_text(sealed: Option<Step>) -> String {
    match sealed {
        Some(s) => format!("sealed step {}", s.0),
        None => "sealed no step yet".into(),
    }
}

fn acked_text(acked: Option<Step>) -> String {
    match acked {
        Some(s) => format!("step {}", s.0),
        None => "no step".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_both_positions() {
        let e = AgentError::LeaderBehind {
            rank: 2,
            epoch: Epoch(3),
            wanted: Step(812),
            sealed: Some(Step(790)),
        };
        assert_eq!(
            e.to_string(),
            "leader behind: rank 2 wants step 812 of epoch 3; leader has sealed step 790"
        );
        let e = AgentError::LeaderBehind {
            rank: 1,
            epoch: Epoch(1),
            wanted: Step(0),
            sealed: None,
        };
        assert_eq!(
            e.to_string(),
            "leader behind: rank 1 wants step 0 of epoch 1; leader has sealed no step yet"
        );
        let e = AgentError::WindowFull {
            step: Step(20),
            rank: 3,
            slowest_ack: Some(Step(11)),
            window: 8,
        };
        assert_eq!(e.to_string(), "window full: cannot seal step 20; slowest follower rank 3 acknowledged step 11, window is 8 steps");
        let e = AgentError::WindowFull {
            step: Step(9),
            rank: 1,
            slowest_ack: None,
            window: 8,
        };
        assert_eq!(e.to_string(), "window full: cannot seal step 9; slowest follower rank 1 acknowledged no step, window is 8 steps");
        let e = AgentError::StaleEpoch {
            ours: Epoch(4),
            theirs: Epoch(3),
        };
        assert_eq!(
            e.to_string(),
            "stale epoch: request for epoch 3, the group is at epoch 4"
        );
        let e = AgentError::FrameExpired {
            epoch: Epoch(2),
            wanted: Step(1),
            oldest: Step(100),
        };
        assert_eq!(
            e.to_string(),
            "frame expired: step 1 of epoch 2 is older than the oldest retained step 100"
        );
        let e = AgentError::WrongStep {
            expected: Step(5),
            got: Step(7),
        };
        assert_eq!(
            e.to_string(),
            "wrong step: the leader's next step is 5, the engine asked to seal 7"
        );
        assert_eq!(
            AgentError::NotLeader { rank: 3 }.to_string(),
            "rank 3 is a follower: lookup, store, load and end_step go to the leader (rank 0)"
        );
        assert_eq!(
            AgentError::NotReady {
                reason: "rank 2 has not joined".into()
            }
            .to_string(),
            "not ready: rank 2 has not joined"
        );
        assert_eq!(
            AgentError::Buffer {
                reason: "page 9 out of range".into()
            }
            .to_string(),
            "buffer refused: page 9 out of range"
        );
        assert_eq!(
            AgentError::BadRequest { reason: "x".into() }.to_string(),
            "bad request: x"
        );
        assert_eq!(
            AgentError::ProtocolVersion { agent: 2, engine: 1 }.to_string(),
            "engine protocol version differs: the agent speaks 2, the engine speaks 1; run an engine and an agent of the same Tandem release"
        );
        let task = TaskId { epoch: 3, seq: 9 };
        assert_eq!(
            AgentError::Bind(BindError::WrongCount {
                task,
                blocks: 4,
                pages: 3
            })
            .to_string(),
            format!("bind refused: task {task} has 4 blocks, the bind names 3 pages")
        );
        assert_eq!(
            BindError::PageOutOfRange {
                task,
                page: 64,
                pool_pages: 64
            }
            .to_string(),
            format!("task {task}: page 64 is out of range of this rank's pool of 64 pages")
        );
        assert_eq!(
            BindError::UnknownTask { task }.to_string(),
            format!("unknown task {task}: no task of this epoch waits for this rank's pages under that id")
        );
        assert_eq!(
            BindError::AlreadyBound { task }.to_string(),
            format!("task {task} is already bound on this rank")
        );
        assert_eq!(
            BindError::Expired { task, bind_timeout_ms: 500 }.to_string(),
            format!("task {task}: bind too late, this rank's shard failed after protocol.bind_timeout_ms = 500 ms")
        );
        assert_eq!(
            AgentError::FrameTooLarge {
                bytes: 65_537,
                limit: 65_536
            }
            .to_string(),
            "frame too large: the request could make a frame of 65537 bytes, over protocol.max_frame_bytes = 65536; nothing was recorded (split it, or send it in a later step)"
        );
    }
}
