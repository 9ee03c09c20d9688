//! Frames and what they carry, as read-only Python objects.
//!
//! Every class is frozen: attributes are read-only and sequences come back as tuples, so an
//! engine cannot change a frame it shares with the other ranks by accident. Each object holds
//! the Rust value and converts a field when it is read (a frame's lists are built only when
//! asked for). Block hashes are ints (`0 .. 2**128`), kinds are `"store"`/`"load"`, results
//! `"ok"`/`"failed"`/`"aborted"`, tiers `"host"`/`"disk"`. Owns only conversion.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tandem_client::{tasks, Welcome as RustWelcome};
use tandem_proto::frame::{self, OutcomeResult, TierOp};
use tandem_proto::ids::{self, TaskKind};

fn kind_name(kind: TaskKind) -> &'static str {
    match kind {
        TaskKind::Store => "store",
        TaskKind::Load => "load",
    }
}

/// A group-unique task id: the epoch that started the task and its sequence number in it.
/// Hashable and ordered (by epoch, then seq); `str()` is `"epoch.seq"`.
#[pyclass(frozen, eq, hash, ord, module = "tandem")]
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct TaskId {
    /// The epoch whose leader started the task.
    #[pyo3(get)]
    epoch: u64,
    /// Its sequence number within that epoch, from 0.
    #[pyo3(get)]
    seq: u64,
}

impl From<TaskId> for ids::TaskId {
    fn from(t: TaskId) -> Self {
        ids::TaskId {
            epoch: t.epoch,
            seq: t.seq,
        }
    }
}

impl From<ids::TaskId> for TaskId {
    fn from(t: ids::TaskId) -> Self {
        Self {
            epoch: t.epoch,
            seq: t.seq,
        }
    }
}

#[pymethods]
impl TaskId {
    #[new]
    fn new(epoch: u64, seq: u64) -> Self {
        Self { epoch, seq }
    }

    fn __repr__(&self) -> String {
        format!("TaskId(epoch={}, seq={})", self.epoch, self.seq)
    }

    fn __str__(&self) -> String {
        format!("{}.{}", self.epoch, self.seq)
    }
}

/// Where the group stood when the engine said hello.
#[pyclass(frozen, module = "tandem")]
pub(crate) struct Welcome {
    /// The current epoch.
    #[pyo3(get)]
    epoch: u64,
    /// This engine's rank (0 is the leader).
    #[pyo3(get)]
    rank: u32,
    /// Ranks in the group.
    #[pyo3(get)]
    world_size: u32,
    /// Bytes of one block shard: the page size the agent expects.
    #[pyo3(get)]
    shard_bytes: u64,
    /// Where this engine goes on: the leader's, the next step the leader will seal; a
    /// follower's, the first frame its rank has not acknowledged.
    #[pyo3(get)]
    next_step: u64,
}

impl From<RustWelcome> for Welcome {
    fn from(w: RustWelcome) -> Self {
        Self {
            epoch: w.epoch.0,
            rank: w.rank,
            world_size: w.world_size,
            shard_bytes: w.shard_bytes,
            next_step: w.next_step.0,
        }
    }
}

#[pymethods]
impl Welcome {
    fn __repr__(&self) -> String {
        format!(
            "Welcome(epoch={}, rank={}, world_size={}, shard_bytes={}, next_step={})",
            self.epoch, self.rank, self.world_size, self.shard_bytes, self.next_step
        )
    }
}

/// The leader's prefix-match decision for one request.
#[pyclass(frozen, module = "tandem")]
pub(crate) struct LookupResult(pub(crate) frame::LookupResult);

#[pymethods]
impl LookupResult {
    /// The request that asked.
    #[getter]
    fn request(&self) -> u64 {
        self.0.request.0
    }

    /// The block hashes asked about, in prefix order (ints).
    #[getter]
    fn block_hashes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.0.block_hashes.iter().map(|h| h.0))
    }

    /// How many leading blocks are cached (blocks).
    #[getter]
    fn matched_blocks(&self) -> u32 {
        self.0.matched_blocks
    }

    /// Whether the matched blocks are pinned until the request's load finishes.
    #[getter]
    fn pinned(&self) -> bool {
        self.0.pinned
    }

    fn __repr__(&self) -> String {
        format!(
            "LookupResult(request={}, blocks={}, matched_blocks={}, pinned={})",
            self.0.request.0,
            self.0.block_hashes.len(),
            self.0.matched_blocks,
            if self.0.pinned { "True" } else { "False" }
        )
    }
}

/// A store or load a frame started; every rank copies its own shard of each block.
#[pyclass(frozen, module = "tandem")]
pub(crate) struct TaskStart {
    kind: TaskKind,
    start: frame::TaskStart,
}

impl TaskStart {
    fn new(kind: TaskKind, start: frame::TaskStart) -> Self {
        Self { kind, start }
    }
}

#[pymethods]
impl TaskStart {
    /// The task.
    #[getter]
    fn task(&self) -> TaskId {
        self.start.task.into()
    }

    /// `"store"` or `"load"`.
    #[getter]
    fn kind(&self) -> &'static str {
        kind_name(self.kind)
    }

    /// The engine's request.
    #[getter]
    fn request(&self) -> u64 {
        self.start.request.0
    }

    /// The blocks, in prefix order (ints).
    #[getter]
    fn block_hashes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.start.block_hashes.iter().map(|h| h.0))
    }

    /// The engine page of each block, in the same order.
    #[getter]
    fn page_ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.start.page_ids.iter().map(|p| p.0))
    }

    /// For a store: the tier each block's shard goes to (`"host"` or `"disk"`); empty for a
    /// load.
    #[getter]
    fn tiers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.start.tiers.iter().map(|t| t.to_string()))
    }

    fn __repr__(&self) -> String {
        format!(
            "TaskStart(task={}, kind={:?}, request={}, blocks={})",
            self.start.task,
            kind_name(self.kind),
            self.start.request.0,
            self.start.block_hashes.len()
        )
    }
}

/// The group's verdict on one task.
#[pyclass(frozen, module = "tandem")]
pub(crate) struct TaskOutcome(frame::TaskOutcome);

#[pymethods]
impl TaskOutcome {
    /// The task.
    #[getter]
    fn task(&self) -> TaskId {
        self.0.task.into()
    }

    /// `"store"` or `"load"`.
    #[getter]
    fn kind(&self) -> &'static str {
        kind_name(self.0.kind)
    }

    /// The engine's request.
    #[getter]
    fn request(&self) -> u64 {
        self.0.request.0
    }

    /// `"ok"` (every rank finished its shard), `"failed"` (a rank failed; see `reason`) or
    /// `"aborted"` (the epoch ended while it ran). A load that is not `"ok"` left its pages
    /// undefined: recompute them.
    #[getter]
    fn result(&self) -> &'static str {
        match self.0.result {
            OutcomeResult::Ok => "ok",
            OutcomeResult::Failed { .. } => "failed",
            OutcomeResult::Aborted => "aborted",
        }
    }

    /// `result == "ok"`.
    #[getter]
    fn ok(&self) -> bool {
        self.0.result == OutcomeResult::Ok
    }

    /// The first failure a rank reported (at most 256 bytes), or `None`.
    #[getter]
    fn reason(&self) -> Option<String> {
        match &self.0.result {
            OutcomeResult::Failed { reason } => Some(reason.clone()),
            _ => None,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "TaskOutcome(task={}, kind={:?}, request={}, result={:?})",
            self.0.task,
            kind_name(self.0.kind),
            self.0.request.0,
            self.result()
        )
    }
}

/// What the first frame of a new epoch settles about the earlier ones.
#[pyclass(frozen, module = "tandem")]
pub(crate) struct Reconciliation(frame::Reconciliation);

#[pymethods]
impl Reconciliation {
    /// Outcomes durable but not acknowledged before: delivered once more (this engine's
    /// client removes those it already received).
    #[getter]
    fn redelivered<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        outcomes(py, self.0.redelivered.iter())
    }

    /// Tasks in flight when the epoch ended, each `"aborted"`.
    #[getter]
    fn aborted<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        outcomes(py, self.0.aborted.iter())
    }
}

fn outcomes<'py, 'a>(
    py: Python<'py>,
    items: impl Iterator<Item = &'a frame::TaskOutcome>,
) -> PyResult<Bound<'py, PyTuple>> {
    let objs = items
        .map(|o| Bound::new(py, TaskOutcome(o.clone())))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, objs)
}

fn starts<'py, 'a>(
    py: Python<'py>,
    kind: TaskKind,
    items: impl Iterator<Item = &'a frame::TaskStart>,
) -> PyResult<Bound<'py, PyTuple>> {
    let objs = items
        .map(|s| Bound::new(py, TaskStart::new(kind, s.clone())))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, objs)
}

/// The leader's plan for a load started layerwise: every rank copies `layers` layers of its
/// shards in `order`, each within `layer_timeout_ms`.
#[pyclass(frozen, module = "tandem")]
pub(crate) struct LayerwiseLoad(frame::LayerwiseLoad);

#[pymethods]
impl LayerwiseLoad {
    /// The load.
    #[getter]
    fn task(&self) -> TaskId {
        self.0.task.into()
    }

    /// Layers per rank (`layers_per_rank`).
    #[getter]
    fn layers(&self) -> u32 {
        self.0.layers
    }

    /// The order every rank copies and signals the layers in.
    #[getter]
    fn order<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.0.order.iter().copied())
    }

    /// Longest time one layer may take on any rank, milliseconds.
    #[getter]
    fn layer_timeout_ms(&self) -> u64 {
        self.0.layer_timeout_ms
    }

    fn __repr__(&self) -> String {
        format!(
            "LayerwiseLoad(task={}, layers={}, layer_timeout_ms={})",
            self.0.task, self.0.layers, self.0.layer_timeout_ms
        )
    }
}

/// Everything the group decided in one step: identical on every rank (but the
/// reconciliation's `redelivered`, which each rank's agent filters for its own engine).
#[pyclass(frozen, module = "tandem")]
pub(crate) struct Frame(pub(crate) frame::Frame);

#[pymethods]
impl Frame {
    /// The epoch.
    #[getter]
    fn epoch(&self) -> u64 {
        self.0.epoch.0
    }

    /// The step, from 0 within the epoch.
    #[getter]
    fn step(&self) -> u64 {
        self.0.step.0
    }

    /// Prefix-match decisions of this step (`LookupResult`s).
    #[getter]
    fn lookups<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let objs = self
            .0
            .lookups
            .iter()
            .map(|l| Bound::new(py, LookupResult(l.clone())))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, objs)
    }

    /// Stores started in this step (`TaskStart`s): a follower computes their pages now.
    #[getter]
    fn stores<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        starts(py, TaskKind::Store, self.0.stores.iter())
    }

    /// Loads started in this step (`TaskStart`s).
    #[getter]
    fn loads<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        starts(py, TaskKind::Load, self.0.loads.iter())
    }

    /// Outcomes revealed in this step (`TaskOutcome`s), in reveal order.
    #[getter]
    fn finished<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        outcomes(py, self.0.finished.iter())
    }

    /// Every outcome in apply order: redelivered, aborted, then finished.
    #[getter]
    fn outcomes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        outcomes(py, self.0.outcomes())
    }

    /// Tier operations of this step, in order: `("evict" | "demote" | "promote", hash)`.
    #[getter]
    fn tier_ops<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(
            py,
            self.0.tier_ops.iter().map(|op| match op {
                TierOp::Evict(h) => ("evict", h.0),
                TierOp::Demote(h) => ("demote", h.0),
                TierOp::Promote(h) => ("promote", h.0),
            }),
        )
    }

    /// Present only on step 0 of an epoch that follows another.
    #[getter]
    fn reconciliation(&self) -> Option<Reconciliation> {
        self.0.reconciliation.clone().map(Reconciliation)
    }

    /// The leader's plans for the loads of this frame started layerwise (`LayerwiseLoad`s).
    #[getter]
    fn layerwise<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let objs = self
            .0
            .layerwise
            .iter()
            .map(|p| Bound::new(py, LayerwiseLoad(p.clone())))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, objs)
    }

    /// True when the frame decides nothing.
    #[getter]
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<Frame>().is_ok_and(|o| o.get().0 == self.0)
    }

    fn __repr__(&self) -> String {
        format!(
            "Frame(epoch={}, step={}, lookups={}, stores={}, loads={}, finished={}, reconciliation={})",
            self.0.epoch.0,
            self.0.step.0,
            self.0.lookups.len(),
            self.0.stores.len(),
            self.0.loads.len(),
            self.0.finished.len(),
            if self.0.reconciliation.is_some() { "yes" } else { "no" }
        )
    }
}

/// An outcome the session delivers once, with the task's start when this engine saw it.
#[pyclass(frozen, module = "tandem")]
pub(crate) struct Delivered(tasks::Delivered);

#[pymethods]
impl Delivered {
    /// The group's verdict (`TaskOutcome`).
    #[getter]
    fn outcome(&self) -> TaskOutcome {
        TaskOutcome(self.0.outcome.clone())
    }

    /// The task's start (`TaskStart`: its blocks and pages), or `None` when this engine never
    /// read the frame that started it.
    #[getter]
    fn start(&self) -> Option<TaskStart> {
        self.0
            .start
            .clone()
            .map(|s| TaskStart::new(s.kind, s.start))
    }

    fn __repr__(&self) -> String {
        format!(
            "Delivered({})",
            TaskOutcome(self.0.outcome.clone()).__repr__()
        )
    }
}

/// A task this engine requested (a `store` or `load` returned its id) that never started: no
/// outcome will come, its pages are the engine's again.
#[pyclass(frozen, module = "tandem")]
pub(crate) struct RequestedTask(tasks::RequestedTask);

#[pymethods]
impl RequestedTask {
    /// The task.
    #[getter]
    fn task(&self) -> TaskId {
        self.0.task.into()
    }

    /// `"store"` or `"load"`.
    #[getter]
    fn kind(&self) -> &'static str {
        kind_name(self.0.kind)
    }

    /// The engine's request.
    #[getter]
    fn request(&self) -> u64 {
        self.0.request.0
    }

    fn __repr__(&self) -> String {
        format!(
            "RequestedTask(task={}, kind={:?}, request={})",
            self.0.task,
            kind_name(self.0.kind),
            self.0.request.0
        )
    }
}

/// What applying one frame gave the engine (a `Session` call's answer).
#[pyclass(frozen, module = "tandem")]
pub(crate) struct Applied(pub(crate) tandem_client::Applied);

#[pymethods]
impl Applied {
    /// The frame.
    #[getter]
    fn frame(&self) -> Frame {
        Frame(self.0.frame.clone())
    }

    /// Outcomes delivered for the first time (`Delivered`s), in apply order: each task's
    /// outcome reaches the engine exactly once.
    #[getter]
    fn outcomes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let objs = self
            .0
            .observed
            .outcomes
            .iter()
            .map(|d| Bound::new(py, Delivered(d.clone())))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, objs)
    }

    /// First frame of a new epoch only: tasks this engine requested in an earlier epoch that
    /// never started (`RequestedTask`s).
    #[getter]
    fn not_started<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let objs = self
            .0
            .observed
            .not_started
            .iter()
            .map(|r| Bound::new(py, RequestedTask(*r)))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, objs)
    }

    /// First frame of a new epoch only: tasks started in an earlier epoch that it did not
    /// settle (`TaskStart`s; treat as failed).
    #[getter]
    fn lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let objs = self
            .0
            .observed
            .lost
            .iter()
            .map(|s| Bound::new(py, TaskStart::new(s.kind, s.start.clone())))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, objs)
    }

    /// Leader: this call sealed the frame (`False`: read back after a lost reply). Always
    /// `False` for a follower.
    #[getter]
    fn sealed_here(&self) -> bool {
        self.0.sealed_here
    }

    fn __repr__(&self) -> String {
        format!(
            "Applied(epoch={}, step={}, outcomes={}, not_started={}, lost={})",
            self.0.frame.epoch.0,
            self.0.frame.step.0,
            self.0.observed.outcomes.len(),
            self.0.observed.not_started.len(),
            self.0.observed.lost.len()
        )
    }
}
