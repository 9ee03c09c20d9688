//! `_NativePool`: a [`PagePool`] held for Python. The pure-Python `tandem.PagePool` creates one,
//! then maps its descriptor with Python's own `mmap` (which gives it the buffer protocol, so
//! numpy and torch view the pages without a copy, and refuses to close while a view exists).
//! Owns creation, attachment and the geometry checks (by `tandem-client`); never copies pages.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::prelude::*;
use tandem_client::PagePool;

use crate::{dup_fd, errors, lock};

/// A page pool in shared memory: `pages` pages of `page_size_bytes` bytes, in a file or a memfd.
/// Use `tandem.PagePool`, which maps it for Python.
#[pyclass(frozen, name = "_NativePool", module = "tandem")]
pub(crate) struct NativePool {
    pool: Mutex<Option<PagePool>>,
    pages: u64,
    page_size_bytes: u64,
    path: Option<PathBuf>,
    label: String,
    fd: i32,
}

impl NativePool {
    fn wrap(pool: PagePool) -> Self {
        Self {
            pages: pool.pages(),
            page_size_bytes: pool.page_size_bytes(),
            path: pool.path().map(|p| p.to_path_buf()),
            label: pool.label().to_string(),
            fd: pool.fd().as_raw_fd(),
            pool: Mutex::new(Some(pool)),
        }
    }

    /// Run `f` on the pool, or raise `tandem.Closed`.
    pub(crate) fn with<T>(&self, py: Python<'_>, f: impl FnOnce(&PagePool) -> T) -> PyResult<T> {
        match lock(&self.pool).as_ref() {
            Some(p) => Ok(f(p)),
            None => Err(errors::closed(py, "page pool")),
        }
    }

    /// The pool's mutex, for calls that run without the GIL.
    pub(crate) fn cell(&self) -> &Mutex<Option<PagePool>> {
        &self.pool
    }
}

#[pymethods]
impl NativePool {
    /// Create `pages` zeroed pages of `page_size_bytes` bytes: in the file at `path` (created or
    /// truncated, removed on `close`), or, without a path, in a memfd named `name`.
    #[staticmethod]
    #[pyo3(signature = (pages, page_size_bytes, path=None, name="tandem-pool"))]
    fn create(
        py: Python<'_>,
        pages: u64,
        page_size_bytes: u64,
        path: Option<PathBuf>,
        name: &str,
    ) -> PyResult<Self> {
        let pool = match path {
            Some(p) => PagePool::create(p, pages, page_size_bytes),
            None => PagePool::create_memfd(name, pages, page_size_bytes),
        };
        pool.map(Self::wrap).map_err(|e| errors::pool(py, e))
    }

    /// Map the existing region file at `path` (kept on `close`); its size must be a whole,
    /// positive number of `page_size_bytes` pages.
    #[staticmethod]
    fn attach_path(py: Python<'_>, path: PathBuf, page_size_bytes: u64) -> PyResult<Self> {
        PagePool::attach(path, page_size_bytes)
            .map(Self::wrap)
            .map_err(|e| errors::pool(py, e))
    }

    /// Map the region behind descriptor `fd` (duplicated: the caller keeps and closes its own);
    /// its size must be a whole, positive number of `page_size_bytes` pages.
    #[staticmethod]
    fn attach_fd(py: Python<'_>, fd: i32, page_size_bytes: u64) -> PyResult<Self> {
        let owned: OwnedFd = dup_fd(py, fd)?;
        PagePool::from_fd(owned, page_size_bytes)
            .map(Self::wrap)
            .map_err(|e| errors::pool(py, e))
    }

    /// Pages in the pool.
    #[getter]
    fn pages(&self) -> u64 {
        self.pages
    }

    /// Bytes of one page.
    #[getter]
    fn page_size_bytes(&self) -> u64 {
        self.page_size_bytes
    }

    /// Bytes of the whole region (`pages * page_size_bytes`).
    #[getter]
    fn size_bytes(&self) -> u64 {
        self.pages * self.page_size_bytes
    }

    /// The region's file, or `None` (a memfd or a descriptor: registered by descriptor).
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.path.clone()
    }

    /// How errors name the region.
    #[getter]
    fn label(&self) -> &str {
        &self.label
    }

    /// The region's descriptor (owned by the pool; valid until `close`).
    #[getter]
    fn fd(&self, py: Python<'_>) -> PyResult<i32> {
        self.with(py, |_| self.fd)
    }

    /// The byte offset of page `page`, or `tandem.PageOutOfRange`.
    fn offset(&self, py: Python<'_>, page: u32) -> PyResult<u64> {
        self.with(py, |p| p.page(tandem_proto::ids::PageId(page)).map(|_| ()))?
            .map_err(|e| errors::pool(py, e))?;
        Ok(u64::from(page) * self.page_size_bytes)
    }

    /// Unmap the pool and close its descriptor; a pool this process created in a file removes
    /// the file. Closing twice does nothing.
    fn close(&self) {
        lock(&self.pool).take();
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.pool).is_none()
    }
}

/// What a `register_buffer` call names: a `tandem.PagePool` (its native pool), or a descriptor
/// with the region's geometry.
pub(crate) enum Target {
    /// A pool: registered by path when it has one, by descriptor otherwise.
    Pool(Py<NativePool>),
    /// A descriptor (duplicated from the caller's), `size_bytes` in pages of
    /// `page_size_bytes`.
    Fd {
        /// The duplicate, closed after the call.
        fd: OwnedFd,
        /// Bytes of the region.
        size_bytes: u64,
        /// Bytes of one page.
        page_size_bytes: u64,
    },
}

/// Read `register_buffer`'s arguments: `pool` is a `tandem.PagePool` (sizes from the pool) or
/// an int descriptor (sizes required).
pub(crate) fn target(
    py: Python<'_>,
    pool: &Bound<'_, PyAny>,
    size_bytes: Option<u64>,
    page_size_bytes: Option<u64>,
) -> PyResult<Target> {
    use pyo3::exceptions::PyTypeError;
    use pyo3::types::{PyBool, PyInt};
    if pool.is_instance_of::<PyInt>() && !pool.is_instance_of::<PyBool>() {
        let fd: i32 = pool.extract().map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(format!("{pool} is not a file descriptor"))
        })?;
        let (Some(size_bytes), Some(page_size_bytes)) = (size_bytes, page_size_bytes) else {
            return Err(PyTypeError::new_err(
                "register_buffer(fd, size_bytes, page_size_bytes): a descriptor needs the region's size_bytes and page_size_bytes",
            ));
        };
        return Ok(Target::Fd {
            fd: dup_fd(py, fd)?,
            size_bytes,
            page_size_bytes,
        });
    }
    let native = match pool.cast::<NativePool>() {
        Ok(n) => n.clone(),
        Err(_) => match pool
            .getattr("_native")
            .ok()
            .map(|n| n.cast_into::<NativePool>())
        {
            Some(Ok(n)) => n,
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "register_buffer takes a tandem.PagePool or a file descriptor (int), not {}",
                    crate::keys::type_name(pool)
                )))
            }
        },
    };
    if size_bytes.is_some() || page_size_bytes.is_some() {
        return Err(PyTypeError::new_err(
            "register_buffer(pool): size_bytes and page_size_bytes come from the pool; pass them only with a descriptor",
        ));
    }
    Ok(Target::Pool(native.unbind()))
}
