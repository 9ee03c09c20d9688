//! `tandem.Session`: the engine session ([`EngineSession`]) for Python engines: the step
//! counter, the task → outcome map (each outcome exactly once) and the way back into the
//! group after a restart, all in Rust; this layer converts and raises.
//!
//! Every method releases the GIL while it runs. Calls on one session run one at a time; after
//! `close()` every call raises `tandem.Closed`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tandem_client::{EngineSession, SessionConfig, SessionError, TaskTally};
use tandem_proto::ids::{RequestId, Step};

use crate::frames::{Applied, Frame, LookupResult, TaskId, Welcome};
use crate::pool::{target, Target};
use crate::{errors, keys, lock, secs};

/// One engine's session with its rank's agent. `Session(socket, rank, connect_timeout_s=30.0,
/// recovery_s=60.0, retry_pause_s=0.05)` connects and says hello (retrying while the agent
/// starts or is not ready, at most `connect_timeout_s` seconds); each later call rejoins the
/// group after a stale epoch, "not ready" or a broken socket for at most `recovery_s` seconds.
/// A call that finds the group in a new epoch raises `NewEpoch` once the session has rejoined
/// it at step 0: read frame 0 next (`end_step` or `next_frame`), whose `Applied` settles every
/// earlier task.
#[pyclass(frozen, module = "tandem")]
pub(crate) struct Session {
    inner: Mutex<Option<EngineSession>>,
    cancel: Arc<AtomicBool>,
}

impl Session {
    /// Run `f` on the session without the GIL.
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut EngineSession) -> Result<T, SessionError> + Send,
    ) -> PyResult<T> {
        match py.detach(|| lock(&self.inner).as_mut().map(f)) {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(errors::session(py, e)),
            None => Err(errors::closed(py, "session")),
        }
    }

    /// Read the session without the GIL.
    fn read<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&EngineSession) -> T + Send,
    ) -> PyResult<T> {
        self.call(py, |s| Ok(f(s)))
    }
}

fn tally_dict<'py>(py: Python<'py>, t: TaskTally) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("outcomes", t.outcomes)?;
    d.set_item("duplicates", t.duplicates)?;
    d.set_item("redelivered_unacked", t.redelivered_unacked)?;
    d.set_item("unseen_outcomes", t.unseen_outcomes)?;
    d.set_item("lost", t.lost)?;
    d.set_item("not_started", t.not_started)?;
    d.set_item("repeated_starts", t.repeated_starts)?;
    Ok(d)
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (socket, rank, connect_timeout_s = 30.0, recovery_s = 60.0, retry_pause_s = 0.05))]
    fn new(
        py: Python<'_>,
        socket: PathBuf,
        rank: u32,
        connect_timeout_s: f64,
        recovery_s: f64,
        retry_pause_s: f64,
    ) -> PyResult<Self> {
        let config = SessionConfig {
            connect: secs(connect_timeout_s, "connect_timeout_s")?,
            recovery: secs(recovery_s, "recovery_s")?,
            retry_pause: secs(retry_pause_s, "retry_pause_s")?,
            ..SessionConfig::default()
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let flag = cancel.clone();
        let session = py
            .detach(|| EngineSession::connect_cancellable(&socket, rank, config, Some(flag)))
            .map_err(|e| errors::session(py, e))?;
        Ok(Self {
            inner: Mutex::new(Some(session)),
            cancel,
        })
    }

    /// What the last hello answered (`Welcome`).
    #[getter]
    fn welcome(&self, py: Python<'_>) -> PyResult<Welcome> {
        self.read(py, |s| s.welcome().into())
    }

    /// The epoch the session works in.
    #[getter]
    fn epoch(&self, py: Python<'_>) -> PyResult<u64> {
        self.read(py, |s| s.epoch().0)
    }

    /// This engine's rank (0: the leader).
    #[getter]
    fn rank(&self, py: Python<'_>) -> PyResult<u32> {
        self.read(py, |s| s.rank())
    }

    /// Leader: the open step (sealed by the next `end_step`). Follower: the frame the next
    /// `next_frame` reads.
    #[getter]
    fn step(&self, py: Python<'_>) -> PyResult<u64> {
        self.read(py, |s| s.step().0)
    }

    /// The last frame applied in this epoch, or `None`.
    #[getter]
    fn last_applied(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.read(py, |s| s.last_applied().map(|x| x.0))
    }

    /// The last step acknowledged in this epoch, or `None`.
    #[getter]
    fn last_acked(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.read(py, |s| s.last_acked().map(|x| x.0))
    }

    /// Tasks started (listed by a frame) and still without an outcome.
    #[getter]
    fn open_tasks(&self, py: Python<'_>) -> PyResult<usize> {
        self.read(py, |s| s.tasks().open_tasks())
    }

    /// Tasks this engine requested that no frame has started yet.
    #[getter]
    fn pending_requests(&self, py: Python<'_>) -> PyResult<usize> {
        self.read(py, |s| s.tasks().pending_requests())
    }

    /// The task map's counters: `outcomes` delivered, `duplicates` and `redelivered_unacked`
    /// seen again and not delivered, `unseen_outcomes`, `lost`, `not_started`,
    /// `repeated_starts`.
    #[getter]
    fn tally<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = self.read(py, |s| s.tally())?;
        tally_dict(py, t)
    }

    /// Register the page pool (a `tandem.PagePool`, or an int descriptor with `size_bytes`
    /// and `page_size_bytes`); the session registers it again after every rejoin. Returns the
    /// page count.
    #[pyo3(signature = (pool, size_bytes = None, page_size_bytes = None))]
    fn register_buffer(
        &self,
        py: Python<'_>,
        pool: &Bound<'_, PyAny>,
        size_bytes: Option<u64>,
        page_size_bytes: Option<u64>,
    ) -> PyResult<u64> {
        match target(py, pool, size_bytes, page_size_bytes)? {
            Target::Pool(native) => {
                let native = native.get();
                let answer = py.detach(|| {
                    let pool = lock(native.cell());
                    let mut session = lock(&self.inner);
                    match (pool.as_ref(), session.as_mut()) {
                        (Some(p), Some(s)) => Ok(s.register_pool(p)),
                        (None, _) => Err("page pool"),
                        (_, None) => Err("session"),
                    }
                });
                match answer {
                    Ok(r) => r.map_err(|e| errors::session(py, e)),
                    Err(what) => Err(errors::closed(py, what)),
                }
            }
            Target::Fd {
                fd,
                size_bytes,
                page_size_bytes,
            } => self.call(py, |s| {
                s.register_fd(std::os::fd::AsFd::as_fd(&fd), size_bytes, page_size_bytes)
            }),
        }
    }

    /// Say hello again; raises `NewEpoch` when the group moved on (the session rejoined it).
    fn hello(&self, py: Python<'_>) -> PyResult<Welcome> {
        self.call(py, |s| s.hello().map(Welcome::from))
    }

    /// Leader: the cached prefix of `block_hashes` for `request`, in the open step, pinned until
    /// the request's load or `release`; the same request and blocks again return the same
    /// answer on the same pins.
    fn lookup(
        &self,
        py: Python<'_>,
        request: u64,
        block_hashes: &Bound<'_, PyAny>,
    ) -> PyResult<LookupResult> {
        let hashes = keys::block_hashes(block_hashes)?;
        self.call(py, |s| {
            s.lookup(RequestId(request), &hashes).map(LookupResult)
        })
    }

    /// Leader: store `block_hashes[i]` from page `page_ids[i]` on every rank, in the open
    /// step. Its outcome arrives exactly once, in a later `Applied`.
    fn store(
        &self,
        py: Python<'_>,
        request: u64,
        block_hashes: &Bound<'_, PyAny>,
        page_ids: &Bound<'_, PyAny>,
    ) -> PyResult<TaskId> {
        let (hashes, pages) = (keys::block_hashes(block_hashes)?, keys::page_ids(page_ids)?);
        self.call(py, |s| {
            s.store(RequestId(request), &hashes, &pages)
                .map(TaskId::from)
        })
    }

    /// Leader: load `block_hashes[i]` into page `page_ids[i]` on every rank, in the open step.
    fn load(
        &self,
        py: Python<'_>,
        request: u64,
        block_hashes: &Bound<'_, PyAny>,
        page_ids: &Bound<'_, PyAny>,
    ) -> PyResult<TaskId> {
        let (hashes, pages) = (keys::block_hashes(block_hashes)?, keys::page_ids(page_ids)?);
        self.call(py, |s| {
            s.load(RequestId(request), &hashes, &pages)
                .map(TaskId::from)
        })
    }

    /// Leader: load like `load`, copied layer by layer on every rank as the leader's plan in
    /// the starting frame says, each layer within `layer_timeout_s` seconds on every rank.
    #[pyo3(signature = (request, block_hashes, page_ids, layer_timeout_s = 5.0))]
    fn load_layerwise(
        &self,
        py: Python<'_>,
        request: u64,
        block_hashes: &Bound<'_, PyAny>,
        page_ids: &Bound<'_, PyAny>,
        layer_timeout_s: f64,
    ) -> PyResult<TaskId> {
        let (hashes, pages) = (keys::block_hashes(block_hashes)?, keys::page_ids(page_ids)?);
        let timeout = secs(layer_timeout_s, "layer_timeout_s")?;
        self.call(py, |s| {
            s.load_layerwise(RequestId(request), &hashes, &pages, timeout)
                .map(TaskId::from)
        })
    }

    /// Any rank: wait at most `deadline_s` seconds for layer `layer` of layerwise load `task`
    /// on this rank; returns the layers copied so far, or raises a `LayerError` subclass by the
    /// deadline.
    #[pyo3(signature = (task, layer, deadline_s = 1.0))]
    fn wait_layer(
        &self,
        py: Python<'_>,
        task: PyRef<'_, TaskId>,
        layer: u32,
        deadline_s: f64,
    ) -> PyResult<u32> {
        let task: tandem_proto::TaskId = (*task).into();
        let deadline = secs(deadline_s, "deadline_s")?;
        self.call(py, |s| s.wait_layer(task, layer, deadline))
    }

    /// Leader: seal the open step and apply its frame (`Applied`); waits at most `deadline_s`
    /// seconds while the window is full (`WindowFull` after it: try again).
    #[pyo3(signature = (deadline_s = 1.0))]
    fn end_step(&self, py: Python<'_>, deadline_s: f64) -> PyResult<Applied> {
        let deadline = secs(deadline_s, "deadline_s")?;
        self.call(py, |s| s.end_step(deadline).map(Applied))
    }

    /// Follower: read and apply the frame at the session's position (`Applied`), waiting at
    /// most `deadline_s` seconds (`LeaderBehind` after it: not sealed yet, ask again).
    #[pyo3(signature = (deadline_s = 1.0))]
    fn next_frame(&self, py: Python<'_>, deadline_s: f64) -> PyResult<Applied> {
        let deadline = secs(deadline_s, "deadline_s")?;
        self.call(py, |s| s.next_frame(deadline).map(Applied))
    }

    /// The frame of `step` again, without applying it.
    #[pyo3(signature = (step, deadline_s = 1.0))]
    fn reread(&self, py: Python<'_>, step: u64, deadline_s: f64) -> PyResult<Frame> {
        let deadline = secs(deadline_s, "deadline_s")?;
        self.call(py, |s| s.reread(Step(step), deadline).map(Frame))
    }

    /// Follower: read from `step` on.
    fn seek(&self, py: Python<'_>, step: u64) -> PyResult<()> {
        self.call(py, |s| {
            s.seek(Step(step));
            Ok(())
        })
    }

    /// Any rank: this engine's `page_ids` for `task`, a store or load started without page ids
    /// (one page per block of the task, in its frame's block order). Raises `PageOutOfRange`
    /// (nothing sent) or a `BindRefused` subclass.
    fn bind(
        &self,
        py: Python<'_>,
        task: PyRef<'_, TaskId>,
        page_ids: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let task: tandem_proto::TaskId = (*task).into();
        let pages = keys::page_ids(page_ids)?;
        self.call(py, |s| s.bind(task, &pages))
    }

    /// Leader: `request` is done with its lookup: its pinned blocks go back; returns how many.
    fn release(&self, py: Python<'_>, request: u64) -> PyResult<u32> {
        self.call(py, |s| s.release(RequestId(request)))
    }

    /// Acknowledge every frame applied so far in this epoch; returns the step acknowledged
    /// (`None` before the first frame).
    fn ack(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.call(py, |s| s.ack().map(|a| a.map(|x| x.0)))
    }

    /// Make a call waiting in another thread give up (`Cancelled`) at its next pause.
    fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }

    /// End the session: tasks started and never settled count as lost. Returns the final
    /// `tally`. Later calls raise `Closed`; closing twice returns `None`.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let closed = py.detach(|| lock(&self.inner).take().map(|s| s.close().0));
        closed.map(|t| tally_dict(py, t)).transpose()
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: &Bound<'_, PyAny>,
        _value: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.close(py).map(|_| ())
    }
}
