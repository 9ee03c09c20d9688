//! Rust errors to Python exceptions: each variant of `AgentError`, `ClientError`,
//! `SessionError` and `PagePoolError` raises the class of the same name in `tandem/errors.py`
//! (all under `tandem.TandemError`), with the Rust message as its text and the variant's
//! fields as attributes (epochs and steps as ints, `None` where the Rust field is `None`).
//!
//! The classes live in Python so that they have docstrings, stubs and `isinstance` checks like
//! any Python exception; this module only builds instances of them.

use std::fmt::Display;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tandem_client::api::{BindError, LayerError};
use tandem_client::wire::WireError;
use tandem_client::{AgentError, ClientError, PagePoolError, SessionError};

/// An exception of class `class` (in `tandem.errors`) with `message` and `fields`.
struct Raise<'py> {
    py: Python<'py>,
    class: &'static str,
    message: String,
    fields: Bound<'py, PyDict>,
    failed: Option<PyErr>,
}

impl<'py> Raise<'py> {
    fn new(py: Python<'py>, class: &'static str, message: impl Display) -> Self {
        Self {
            py,
            class,
            message: message.to_string(),
            fields: PyDict::new(py),
            failed: None,
        }
    }

    /// Add attribute `name = value`.
    fn field<V: IntoPyObject<'py>>(mut self, name: &str, value: V) -> Self {
        if let Err(e) = self.fields.set_item(name, value) {
            self.failed.get_or_insert(e);
        }
        self
    }

    fn build(self) -> PyErr {
        if let Some(e) = self.failed {
            return e;
        }
        let made = self
            .py
            .import("tandem.errors")
            .and_then(|m| m.getattr(self.class))
            .and_then(|c| c.call((self.message,), Some(&self.fields)));
        match made {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => e,
        }
    }
}

/// The exception for an agent's refusal.
pub(crate) fn agent(py: Python<'_>, e: AgentError) -> PyErr {
    let msg = e.to_string();
    match e {
        AgentError::NotLeader { rank } => Raise::new(py, "NotLeader", msg).field("rank", rank),
        AgentError::StaleEpoch { ours, theirs } => Raise::new(py, "StaleEpoch", msg)
            .field("ours", ours.0)
            .field("theirs", theirs.0),
        AgentError::LeaderBehind {
            rank,
            epoch,
            wanted,
            sealed,
        } => Raise::new(py, "LeaderBehind", msg)
            .field("rank", rank)
            .field("epoch", epoch.0)
            .field("wanted", wanted.0)
            .field("sealed", sealed.map(|s| s.0)),
        AgentError::FrameExpired {
            epoch,
            wanted,
            oldest,
        } => Raise::new(py, "FrameExpired", msg)
            .field("epoch", epoch.0)
            .field("wanted", wanted.0)
            .field("oldest", oldest.0),
        AgentError::WindowFull {
            step,
            rank,
            slowest_ack,
            window,
        } => Raise::new(py, "WindowFull", msg)
            .field("step", step.0)
            .field("rank", rank)
            .field("slowest_ack", slowest_ack.map(|s| s.0))
            .field("window", window),
        AgentError::WrongStep { expected, got } => Raise::new(py, "WrongStep", msg)
            .field("expected", expected.0)
            .field("got", got.0),
        AgentError::NotReady { reason } => Raise::new(py, "NotReady", msg).field("reason", reason),
        AgentError::Buffer { reason } => {
            Raise::new(py, "BufferRefused", msg).field("reason", reason)
        }
        AgentError::FrameTooLarge { bytes, limit } => Raise::new(py, "FrameTooLarge", msg)
            .field("bytes", bytes)
            .field("limit", limit),
        AgentError::BadRequest { reason } => {
            Raise::new(py, "BadRequest", msg).field("reason", reason)
        }
        AgentError::ProtocolVersion { agent, engine } => {
            Raise::new(py, "ProtocolVersionMismatch", msg)
                .field("agent", agent)
                .field("engine", engine)
        }
        AgentError::Bind(b) => bind(py, msg, b),
        AgentError::Layer(l) => layer(py, msg, l),
    }
    .build()
}

/// The exception for a `wait_layer` that ended without its layer: a subclass of `LayerError`
/// per variant, with the task (its text), the layer, and both positions where known.
fn layer(py: Python<'_>, msg: String, e: LayerError) -> Raise<'_> {
    match e {
        LayerError::Timeout {
            task,
            layer,
            ready,
            asked,
        } => Raise::new(py, "LayerTimeout", msg)
            .field("task", task.to_string())
            .field("layer", layer)
            .field("ready", ready)
            .field("asked", asked),
        LayerError::Failed {
            task,
            layer,
            ready,
            asked,
            reason,
        } => Raise::new(py, "LayerFailed", msg)
            .field("task", task.to_string())
            .field("layer", layer)
            .field("ready", ready)
            .field("asked", asked)
            .field("reason", reason),
        LayerError::UnknownTask { task, layer } => Raise::new(py, "LayerUnknownTask", msg)
            .field("task", task.to_string())
            .field("layer", layer),
        LayerError::OutOfRange {
            task,
            layer,
            layers,
        } => Raise::new(py, "LayerOutOfRange", msg)
            .field("task", task.to_string())
            .field("layer", layer)
            .field("layers", layers),
    }
}

/// The exception for a refused bind: a subclass of `BindRefused` per variant, with the task as
/// `task` (its text, `epoch:seq`).
fn bind(py: Python<'_>, msg: String, e: BindError) -> Raise<'_> {
    match e {
        BindError::UnknownTask { task } => {
            Raise::new(py, "UnknownTask", msg).field("task", task.to_string())
        }
        BindError::WrongCount {
            task,
            blocks,
            pages,
        } => Raise::new(py, "BindCount", msg)
            .field("task", task.to_string())
            .field("blocks", blocks)
            .field("pages", pages),
        BindError::PageOutOfRange {
            task,
            page,
            pool_pages,
        } => Raise::new(py, "BindPageOutOfRange", msg)
            .field("task", task.to_string())
            .field("page", page)
            .field("pages", pool_pages),
        BindError::AlreadyBound { task } => {
            Raise::new(py, "AlreadyBound", msg).field("task", task.to_string())
        }
        BindError::Expired {
            task,
            bind_timeout_ms,
        } => Raise::new(py, "BindExpired", msg)
            .field("task", task.to_string())
            .field("bind_timeout_ms", bind_timeout_ms),
    }
}

/// The exception for a client error.
pub(crate) fn client(py: Python<'_>, e: ClientError) -> PyErr {
    let msg = e.to_string();
    match e {
        ClientError::Agent(a) => return agent(py, a),
        ClientError::Wire(w) => {
            let kind = match &w {
                WireError::Io(_) => "io",
                WireError::TooLarge { .. } => "too_large",
                WireError::Malformed(_) => "malformed",
            };
            Raise::new(py, "WireError", msg).field("kind", kind)
        }
        ClientError::Connect {
            path, waited_ms, ..
        } => Raise::new(py, "ConnectError", msg)
            .field("path", path)
            .field("waited_ms", waited_ms),
        ClientError::UnexpectedReply { request, reply } => Raise::new(py, "UnexpectedReply", msg)
            .field("request", request)
            .field("reply", reply),
        ClientError::Timeout {
            request,
            call,
            waited_ms,
        } => Raise::new(py, "Timeout", msg)
            .field("request", request)
            .field("call", call.0)
            .field("waited_ms", waited_ms),
        ClientError::Broken { reason } => Raise::new(py, "Broken", msg).field("reason", reason),
        ClientError::Descriptor { fd, source } => descriptor(py, fd, &source),
    }
    .build()
}

/// `DescriptorError` for descriptor `fd`, which could not be duplicated (`source`).
pub(crate) fn descriptor_error(py: Python<'_>, fd: i32, source: &std::io::Error) -> PyErr {
    Raise::new(
        py,
        "DescriptorError",
        format!("descriptor {fd} is not an open file descriptor: {source}"),
    )
    .field("fd", fd)
    .field("errno", source.raw_os_error())
    .build()
}

fn descriptor<'py>(py: Python<'py>, fd: i32, source: &std::io::Error) -> Raise<'py> {
    Raise::new(
        py,
        "DescriptorError",
        format!("cannot pass descriptor {fd} to the agent: {source}"),
    )
    .field("fd", fd)
    .field("errno", source.raw_os_error())
}

/// The exception for a session error.
pub(crate) fn session(py: Python<'_>, e: SessionError) -> PyErr {
    let msg = e.to_string();
    match e {
        SessionError::Agent(a) => return agent(py, a),
        SessionError::Client(c) => return client(py, c),
        SessionError::Join {
            rank, waited_ms, ..
        } => Raise::new(py, "JoinFailed", msg)
            .field("rank", rank)
            .field("waited_ms", waited_ms),
        SessionError::NewEpoch {
            call,
            from,
            to,
            waited_ms,
        } => Raise::new(py, "NewEpoch", msg)
            .field("call", call)
            .field("from_epoch", from.0)
            .field("to_epoch", to.0)
            .field("waited_ms", waited_ms),
        SessionError::Rejoin {
            rank,
            call,
            epoch,
            step,
            waited_ms,
            last,
        } => Raise::new(py, "RejoinFailed", msg)
            .field("rank", rank)
            .field("call", call)
            .field("epoch", epoch.0)
            .field("step", step.0)
            .field("waited_ms", waited_ms)
            .field("last", last),
        SessionError::Ambiguous {
            rank,
            call,
            epoch,
            step,
            waited_ms,
        } => Raise::new(py, "Ambiguous", msg)
            .field("rank", rank)
            .field("call", call)
            .field("epoch", epoch.0)
            .field("step", step.0)
            .field("waited_ms", waited_ms),
        SessionError::Protocol {
            rank,
            call,
            epoch,
            step,
            detail,
        } => Raise::new(py, "ProtocolViolation", msg)
            .field("rank", rank)
            .field("call", call)
            .field("epoch", epoch.0)
            .field("step", step.0)
            .field("detail", detail),
        SessionError::Cancelled { call } => Raise::new(py, "Cancelled", msg).field("call", call),
        SessionError::PageOutOfRange { page, pages } => Raise::new(py, "PageOutOfRange", msg)
            .field("page", page)
            .field("pages", pages),
    }
    .build()
}

/// The exception for a page pool error.
pub(crate) fn pool(py: Python<'_>, e: PagePoolError) -> PyErr {
    let msg = e.to_string();
    match e {
        PagePoolError::Io { path, source } => Raise::new(py, "PoolIoError", msg)
            .field("path", path)
            .field("errno", source.raw_os_error()),
        PagePoolError::Empty {
            pages,
            page_size_bytes,
        } => Raise::new(py, "PoolEmpty", msg)
            .field("pages", pages)
            .field("page_size_bytes", page_size_bytes),
        PagePoolError::Geometry {
            path,
            size_bytes,
            page_size_bytes,
        } => Raise::new(py, "PoolGeometry", msg)
            .field("path", path)
            .field("size_bytes", size_bytes)
            .field("page_size_bytes", page_size_bytes),
        PagePoolError::OutOfRange { page, pages } => Raise::new(py, "PageOutOfRange", msg)
            .field("page", page)
            .field("pages", pages),
    }
    .build()
}

/// `Closed`: a call on an object after its `close()`.
pub(crate) fn closed(py: Python<'_>, what: &'static str) -> PyErr {
    Raise::new(py, "Closed", format!("the {what} is closed"))
        .field("what", what)
        .build()
}
