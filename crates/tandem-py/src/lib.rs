//! `tandem._tandem`, the native module of the `tandem-kv` wheel (import name `tandem`): Python
//! bindings of `tandem-client`.
//!
//! One implementation, a thin layer: every call converts its arguments, calls `tandem-client`
//! ([`tandem_client::EngineClient`], [`tandem_client::EngineSession`],
//! [`tandem_client::PagePool`]) and converts the answer or raises the matching exception of
//! `tandem.errors`. It never re-implements the wire, the call matching, the task map or the
//! way back into the group. Every call that can block releases the GIL (`Python::detach`,
//! pyo3's name for `allow_threads` since 0.26), so an engine's other threads run meanwhile;
//! the objects are safe to share between threads (each holds its Rust value behind a mutex,
//! and calls on one object run one at a time).
//!
//! # Layout
//! - [`keys`]: block hashes from Python (int, bytes of any digest length, hex str) and page
//!   ids, with `TypeError`/`ValueError` for the wrong ones.
//! - [`errors`]: Rust errors to the exception classes of `tandem/errors.py`, fields included.
//! - [`frames`]: frames, task starts and outcomes, lookups, welcomes, applied frames: frozen
//!   (read-only) Python objects.
//! - [`pool`]: `_NativePool`, the page pool the pure-Python `tandem.PagePool` maps.
//! - [`client`]: `Client`, the engine client.
//! - [`session`]: `Session`, the engine session.
//! - [`bench`]: the Rust side of `python -m tandem.bench`: a step, a frame read and a store+load
//!   round on the Rust client, alternated with their Python twins on the same connection.

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

mod bench;
mod client;
mod errors;
mod frames;
mod keys;
mod pool;
mod session;

/// The native module. Python code imports `tandem`, which re-exports these.
#[pymodule]
fn _tandem(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<session::Session>()?;
    m.add_class::<pool::NativePool>()?;
    m.add_class::<frames::TaskId>()?;
    m.add_class::<frames::Welcome>()?;
    m.add_class::<frames::LookupResult>()?;
    m.add_class::<frames::TaskStart>()?;
    m.add_class::<frames::TaskOutcome>()?;
    m.add_class::<frames::Reconciliation>()?;
    m.add_class::<frames::Frame>()?;
    m.add_class::<frames::LayerwiseLoad>()?;
    m.add_class::<frames::Delivered>()?;
    m.add_class::<frames::RequestedTask>()?;
    m.add_class::<frames::Applied>()?;
    m.add_function(wrap_pyfunction!(keys::block_hash, m)?)?;
    m.add_function(wrap_pyfunction!(bench::bench_step, m)?)?;
    m.add_function(wrap_pyfunction!(bench::bench_read, m)?)?;
    m.add_function(wrap_pyfunction!(bench::bench_round, m)?)?;
    Ok(())
}

/// Lock `m`; a poisoned lock (a panic while held) is taken over, since every value here stays
/// consistent between calls.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `seconds` (a non-negative, finite float named `what`) as a duration.
pub(crate) fn secs(seconds: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a finite number of seconds >= 0, not {seconds}"
        ))
    })
}

/// A close-on-exec duplicate of descriptor `fd` (the caller keeps its own), or
/// `tandem.DescriptorError` for a descriptor that is not open.
pub(crate) fn dup_fd(py: Python<'_>, fd: i32) -> PyResult<OwnedFd> {
    if fd < 0 {
        return Err(PyValueError::new_err(format!(
            "fd must be an open file descriptor (>= 0), not {fd}"
        )));
    }
    // SAFETY: fcntl on any integer is harmless: a descriptor that is not open gives EBADF.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        let e = std::io::Error::last_os_error();
        return Err(errors::descriptor_error(py, fd, &e));
    }
    // SAFETY: `dup` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}
