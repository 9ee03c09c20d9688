//! `tandem.Client`: one engine's connection to its rank's agent ([`EngineClient`]).
//!
//! Each method converts its arguments, releases the GIL, makes the one call, and converts the
//! answer or raises the matching `tandem` exception. Calls on one client run one at a time
//! (the client sits behind a mutex); after `close()` every call raises `tandem.Closed`.

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::prelude::*;
use tandem_client::{ClientError, EngineClient};
use tandem_proto::ids::{RequestId, Step};

use crate::frames::{Frame, LookupResult, TaskId, Welcome};
use crate::pool::{target, Target};
use crate::{errors, keys, lock, secs};

/// The engine client of one rank (see `tandem-client`'s engine contract, shown in
/// docs/PYTHON.md). `Client(socket, rank, timeout_s=30.0)` connects (retrying while the agent
/// starts, at most `timeout_s` seconds) and says hello.
#[pyclass(frozen, module = "tandem")]
pub(crate) struct Client {
    inner: Mutex<Option<EngineClient>>,
}

impl Client {
    /// The client's mutex, for the benchmark's Rust loops (`bench`).
    pub(crate) fn cell(&self) -> &Mutex<Option<EngineClient>> {
        &self.inner
    }

    /// Run `f` on the client without the GIL.
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut EngineClient) -> Result<T, ClientError> + Send,
    ) -> PyResult<T> {
        let answer = py.detach(|| lock(&self.inner).as_mut().map(f));
        match answer {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(errors::client(py, e)),
            None => Err(errors::closed(py, "client")),
        }
    }
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (socket, rank, timeout_s = 30.0))]
    fn new(py: Python<'_>, socket: PathBuf, rank: u32, timeout_s: f64) -> PyResult<Self> {
        let timeout = secs(timeout_s, "timeout_s")?;
        let client = py
            .detach(|| EngineClient::connect(&socket, rank, timeout))
            .map_err(|e| errors::client(py, e))?;
        Ok(Self {
            inner: Mutex::new(Some(client)),
        })
    }

    /// What the last hello answered (`Welcome`).
    #[getter]
    fn welcome(&self, py: Python<'_>) -> PyResult<Welcome> {
        self.call(py, |c| Ok(c.welcome().into()))
    }

    /// The epoch this client speaks for.
    #[getter]
    fn epoch(&self, py: Python<'_>) -> PyResult<u64> {
        self.call(py, |c| Ok(c.epoch().0))
    }

    /// Say hello again (after `StaleEpoch`) and return where the group stands.
    fn hello(&self, py: Python<'_>) -> PyResult<Welcome> {
        self.call(py, |c| c.hello().map(Welcome::from))
    }

    /// Connect again (after the agent restarted, or `Broken`) and say hello, keeping what this
    /// engine already received. Register the pool again afterwards.
    #[pyo3(signature = (timeout_s = 5.0))]
    fn reconnect(&self, py: Python<'_>, timeout_s: f64) -> PyResult<Welcome> {
        let timeout = secs(timeout_s, "timeout_s")?;
        self.call(py, |c| c.reconnect(timeout).map(Welcome::from))
    }

    /// Register the engine's page pool: a `tandem.PagePool` (by path, or by descriptor when it
    /// has none), or a file descriptor (int) of a region of `size_bytes` bytes in pages of
    /// `page_size_bytes` bytes (passed with the request; the caller keeps its own). Returns
    /// the page count. Raises `BufferRefused` (page size is not the shard size, size not a
    /// whole number of pages, region cannot be mapped), `DescriptorError` (not an open
    /// descriptor).
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
                    let mut client = lock(&self.inner);
                    match (pool.as_ref(), client.as_mut()) {
                        (Some(p), Some(c)) => Ok(c.register_buffer(p)),
                        (None, _) => Err("page pool"),
                        (_, None) => Err("client"),
                    }
                });
                match answer {
                    Ok(r) => r.map_err(|e| errors::client(py, e)),
                    Err(what) => Err(errors::closed(py, what)),
                }
            }
            Target::Fd {
                fd,
                size_bytes,
                page_size_bytes,
            } => self.call(py, |c| {
                c.register_buffer_fd(std::os::fd::AsFd::as_fd(&fd), size_bytes, page_size_bytes)
            }),
        }
    }

    /// Leader: look up the cached prefix of `block_hashes` (ints, bytes digests or hex str)
    /// for `request` in `step`; matched blocks are pinned until the request's load, `release`,
    /// or a new epoch. The same request and blocks again: the same answer, the same pins.
    fn lookup(
        &self,
        py: Python<'_>,
        step: u64,
        request: u64,
        block_hashes: &Bound<'_, PyAny>,
    ) -> PyResult<LookupResult> {
        let hashes = keys::block_hashes(block_hashes)?;
        self.call(py, |c| {
            c.lookup(Step(step), RequestId(request), hashes)
                .map(LookupResult)
        })
    }

    /// Leader: store `block_hashes[i]` from page `page_ids[i]` on every rank, in `step`.
    /// Returns the task id; its outcome comes in a later frame. Raises `PageOutOfRange` for a
    /// page past the registered pool (nothing is sent).
    fn store(
        &self,
        py: Python<'_>,
        step: u64,
        request: u64,
        block_hashes: &Bound<'_, PyAny>,
        page_ids: &Bound<'_, PyAny>,
    ) -> PyResult<TaskId> {
        let (hashes, pages) = (keys::block_hashes(block_hashes)?, keys::page_ids(page_ids)?);
        self.call(py, |c| {
            c.store(Step(step), RequestId(request), hashes, pages)
                .map(TaskId::from)
        })
    }

    /// Leader: load `block_hashes[i]` into page `page_ids[i]` on every rank, in `step`.
    fn load(
        &self,
        py: Python<'_>,
        step: u64,
        request: u64,
        block_hashes: &Bound<'_, PyAny>,
        page_ids: &Bound<'_, PyAny>,
    ) -> PyResult<TaskId> {
        let (hashes, pages) = (keys::block_hashes(block_hashes)?, keys::page_ids(page_ids)?);
        self.call(py, |c| {
            c.load(Step(step), RequestId(request), hashes, pages)
                .map(TaskId::from)
        })
    }

    /// Leader: load like `load`, copied layer by layer on every rank as the leader's plan in
    /// the starting frame says (`Frame.layerwise`), each layer within `layer_timeout_s`
    /// seconds on every rank.
    #[pyo3(signature = (step, request, block_hashes, page_ids, layer_timeout_s = 5.0))]
    fn load_layerwise(
        &self,
        py: Python<'_>,
        step: u64,
        request: u64,
        block_hashes: &Bound<'_, PyAny>,
        page_ids: &Bound<'_, PyAny>,
        layer_timeout_s: f64,
    ) -> PyResult<TaskId> {
        let (hashes, pages) = (keys::block_hashes(block_hashes)?, keys::page_ids(page_ids)?);
        let timeout = secs(layer_timeout_s, "layer_timeout_s")?;
        self.call(py, |c| {
            c.load_layerwise(Step(step), RequestId(request), hashes, pages, timeout)
                .map(TaskId::from)
        })
    }

    /// Any rank: wait at most `deadline_s` seconds until layer `layer` of layerwise load `task`
    /// is in this engine's pages; returns the layers copied so far. Raises a `LayerError`
    /// subclass (`LayerTimeout`, `LayerFailed`, `LayerUnknownTask`, `LayerOutOfRange`) by the
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
        self.call(py, |c| c.wait_layer(task, layer, deadline))
    }

    /// Leader: seal `step` and return its frame, waiting at most `deadline_s` seconds while the
    /// window of unacknowledged steps is full (`WindowFull` after it).
    #[pyo3(signature = (step, deadline_s = 1.0))]
    fn end_step(&self, py: Python<'_>, step: u64, deadline_s: f64) -> PyResult<Frame> {
        let deadline = secs(deadline_s, "deadline_s")?;
        self.call(py, |c| c.end_step(Step(step), deadline).map(Frame))
    }

    /// The frame of `step` (positional: the same frame every time), waiting at most
    /// `deadline_s` seconds for the leader to seal it (`LeaderBehind` after it).
    #[pyo3(signature = (step, deadline_s = 1.0))]
    fn frame(&self, py: Python<'_>, step: u64, deadline_s: f64) -> PyResult<Frame> {
        let deadline = secs(deadline_s, "deadline_s")?;
        self.call(py, |c| c.frame(Step(step), deadline).map(Frame))
    }

    /// Any rank: this engine's `page_ids` for `task`, a store or load started without page ids
    /// (one page per block of the task, in its frame's block order). Raises a `BindRefused`
    /// subclass (`UnknownTask`, `BindCount`, `BindPageOutOfRange`, `AlreadyBound`,
    /// `BindExpired`).
    fn bind(
        &self,
        py: Python<'_>,
        task: PyRef<'_, TaskId>,
        page_ids: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let task: tandem_proto::TaskId = (*task).into();
        let pages = keys::page_ids(page_ids)?;
        self.call(py, |c| c.bind(task, pages))
    }

    /// Leader: `request` is done with its lookup: its pinned blocks go back; returns how many.
    fn release(&self, py: Python<'_>, request: u64) -> PyResult<u32> {
        self.call(py, |c| c.release(RequestId(request)))
    }

    /// The engine applied every frame up to and including `step`.
    fn ack(&self, py: Python<'_>, step: u64) -> PyResult<()> {
        self.call(py, |c| c.ack(Step(step)))
    }

    /// Seconds past a request's own deadline a call waits for its reply (default 2.0).
    fn set_reply_slack(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let slack = secs(seconds, "seconds")?;
        self.call(py, |c| {
            c.set_reply_slack(slack);
            Ok(())
        })
    }

    /// Late replies of timed-out calls that later calls read and discarded.
    #[getter]
    fn late_replies(&self, py: Python<'_>) -> PyResult<u64> {
        self.call(py, |c| Ok(c.late_replies()))
    }

    /// Close the connection (the agent counts an engine that leaves with tasks in flight as
    /// failed). Closing twice does nothing; later calls raise `Closed`.
    fn close(&self, py: Python<'_>) {
        py.detach(|| lock(&self.inner).take());
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
    ) {
        self.close(py);
    }
}
