//! The engine's KV page pool as a shared-memory region: a file, or a memfd without a path.
//!
//! In production the engine's pages live in GPU memory and the `cuda` tier of the store engine
//! copies them; in tests, in `tandem replay` and in Python engines that keep KV in host memory,
//! the engine keeps its pages here and its agent maps the same region, by path or by the
//! descriptor the client passes it ([`crate::EngineClient::register_buffer`]). Owns creating,
//! attaching and mapping the region and its geometry checks; it never talks to the agent.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use memmap2::MmapMut;
use tandem_proto::ids::PageId;

/// Why a page pool could not be created or attached, or a page not addressed.
#[derive(Debug, thiserror::Error)]
pub enum PagePoolError {
    /// Creating, opening, sizing or mapping the region failed.
    #[error("page pool {path}: {source}")]
    Io {
        /// The region's file, or `descriptor N` / `memfd NAME`.
        path: String,
        /// The IO error.
        source: std::io::Error,
    },
    /// Zero pages or zero-byte pages.
    #[error("page pool must have at least one page of at least one byte (got {pages} pages of {page_size_bytes} bytes)")]
    Empty {
        /// Pages asked for.
        pages: u64,
        /// Page size asked for, bytes.
        page_size_bytes: u64,
    },
    /// An attached region is not a whole, positive number of pages.
    #[error("page pool {path}: {size_bytes} bytes is not a whole number of {page_size_bytes}-byte pages")]
    Geometry {
        /// The region's file or descriptor.
        path: String,
        /// The region's size, bytes.
        size_bytes: u64,
        /// The page size asked for, bytes.
        page_size_bytes: u64,
    },
    /// A page id past the end of the pool.
    #[error("page {page} is out of range: the pool has {pages} pages")]
    OutOfRange {
        /// The page asked for.
        page: u32,
        /// Pages in the pool.
        pages: u64,
    },
}

/// A pool of equal pages in one shared-memory region; page `i` is bytes
/// `[i × page_size_bytes, (i + 1) × page_size_bytes)`.
pub struct PagePool {
    /// The region's file (kept open: its descriptor is what a pool without a path passes).
    file: File,
    /// The region's path; `None` for a memfd or a descriptor handed in.
    path: Option<PathBuf>,
    /// Remove the file when the pool is dropped (pools this process created).
    owns_path: bool,
    /// How errors name the region.
    label: String,
    map: MmapMut,
    page_size_bytes: u64,
    pages: u64,
}

impl PagePool {
    /// Create (or truncate) the file at `path` with `pages × page_size_bytes` zeroed bytes and
    /// map it. The file is removed when the pool is dropped.
    ///
    /// # Errors
    /// [`PagePoolError::Empty`], [`PagePoolError::Io`].
    pub fn create(
        path: impl AsRef<Path>,
        pages: u64,
        page_size_bytes: u64,
    ) -> Result<Self, PagePoolError> {
        // The agent runs elsewhere: it must be told where the file is, not where it is from here.
        let path = absolute(path.as_ref())?;
        let label = path.display().to_string();
        let size = size_of(&label, pages, page_size_bytes)?;
        let io = |source| PagePoolError::Io {
            path: label.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(io)?;
        file.set_len(size).map_err(io)?;
        let mut pool = Self::map(file, label, page_size_bytes)?;
        pool.path = Some(path);
        pool.owns_path = true;
        Ok(pool)
    }

    /// Create an anonymous region (a memfd named `name`, for debugging only) of
    /// `pages × page_size_bytes` zeroed bytes and map it. It has no path: registering it passes
    /// its descriptor to the agent.
    ///
    /// # Errors
    /// [`PagePoolError::Empty`], [`PagePoolError::Io`].
    pub fn create_memfd(
        name: &str,
        pages: u64,
        page_size_bytes: u64,
    ) -> Result<Self, PagePoolError> {
        let label = format!("memfd {name}");
        let size = size_of(&label, pages, page_size_bytes)?;
        let io = |source: std::io::Error| PagePoolError::Io {
            path: label.clone(),
            source,
        };
        let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| io(e.into()))?;
        let file = File::from(fd);
        file.set_len(size).map_err(io)?;
        Self::map(file, label, page_size_bytes)
    }

    /// Map an existing region file at `path` (another process created it); its size must be a
    /// whole, positive number of `page_size_bytes` pages. The file stays when the pool is
    /// dropped.
    ///
    /// # Errors
    /// [`PagePoolError::Io`] (for example, no such file), [`PagePoolError::Geometry`].
    pub fn attach(path: impl AsRef<Path>, page_size_bytes: u64) -> Result<Self, PagePoolError> {
        let path = absolute(path.as_ref())?;
        let label = path.display().to_string();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|source| PagePoolError::Io {
                path: label.clone(),
                source,
            })?;
        let mut pool = Self::map(file, label, page_size_bytes)?;
        pool.path = Some(path);
        Ok(pool)
    }

    /// Map the region behind `fd` (for example SGLang's memfd host pool); its size must be a
    /// whole, positive number of `page_size_bytes` pages. The pool owns `fd` from now on.
    ///
    /// # Errors
    /// [`PagePoolError::Io`] (a descriptor that cannot be mapped read-write),
    /// [`PagePoolError::Geometry`].
    pub fn from_fd(fd: OwnedFd, page_size_bytes: u64) -> Result<Self, PagePoolError> {
        let label = format!("descriptor {}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        Self::map(File::from(fd), label, page_size_bytes)
    }

    /// Map `file` whole, checking that it is a positive number of pages.
    fn map(file: File, label: String, page_size_bytes: u64) -> Result<Self, PagePoolError> {
        let io = |source| PagePoolError::Io {
            path: label.clone(),
            source,
        };
        let size_bytes = file.metadata().map_err(io)?.len();
        if page_size_bytes == 0 || size_bytes == 0 || size_bytes % page_size_bytes != 0 {
            return Err(PagePoolError::Geometry {
                path: label,
                size_bytes,
                page_size_bytes,
            });
        }
        // SAFETY: the region is shared with the agent by design; the agent only touches pages
        // named in tasks, which the engine contract keeps from concurrent use, and the mapping
        // lies within the file (its length is the file's size, checked above).
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
        Ok(Self {
            file,
            path: None,
            owns_path: false,
            label,
            map,
            page_size_bytes,
            pages: size_bytes / page_size_bytes,
        })
    }

    /// The region's file path (absolute), as the agent is told in `RegisterBuffer`; `None` for
    /// a region without one (registered by descriptor).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The region's descriptor (valid while the pool lives).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// How errors name the region: its path, `memfd NAME` or `descriptor N`.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Bytes of one page.
    pub fn page_size_bytes(&self) -> u64 {
        self.page_size_bytes
    }

    /// Pages in the pool.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Bytes of the whole region.
    pub fn size_bytes(&self) -> u64 {
        self.pages * self.page_size_bytes
    }

    /// Read one page.
    ///
    /// # Errors
    /// [`PagePoolError::OutOfRange`].
    pub fn page(&self, id: PageId) -> Result<&[u8], PagePoolError> {
        let range = self.range(id)?;
        Ok(&self.map[range])
    }

    /// Write one page.
    ///
    /// # Errors
    /// [`PagePoolError::OutOfRange`].
    pub fn page_mut(&mut self, id: PageId) -> Result<&mut [u8], PagePoolError> {
        let range = self.range(id)?;
        Ok(&mut self.map[range])
    }

    fn range(&self, id: PageId) -> Result<std::ops::Range<usize>, PagePoolError> {
        if u64::from(id.0) >= self.pages {
            return Err(PagePoolError::OutOfRange {
                page: id.0,
                pages: self.pages,
            });
        }
        let start = (u64::from(id.0) * self.page_size_bytes) as usize;
        Ok(start..start + self.page_size_bytes as usize)
    }
}

impl Drop for PagePool {
    fn drop(&mut self) {
        // A region this process created is the engine's: it goes away with the engine.
        if let (true, Some(path)) = (self.owns_path, &self.path) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// `path` made absolute (against the current directory), as the agent must be told it.
fn absolute(path: &Path) -> Result<PathBuf, PagePoolError> {
    std::path::absolute(path).map_err(|source| PagePoolError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// `pages × page_size_bytes`, refusing empty pools and overflow.
fn size_of(label: &str, pages: u64, page_size_bytes: u64) -> Result<u64, PagePoolError> {
    if pages == 0 || page_size_bytes == 0 {
        return Err(PagePoolError::Empty {
            pages,
            page_size_bytes,
        });
    }
    pages
        .checked_mul(page_size_bytes)
        .ok_or_else(|| PagePoolError::Io {
            path: label.to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "pages × page_size_bytes overflows",
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_disjoint_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let mut pool = PagePool::create(dir.path().join("pool"), 4, 16).unwrap();
        pool.page_mut(PageId(1)).unwrap().fill(7);
        assert_eq!(pool.page(PageId(0)).unwrap(), &[0u8; 16]);
        assert_eq!(pool.page(PageId(1)).unwrap(), &[7u8; 16]);
        assert_eq!(pool.size_bytes(), 64);
        let e = pool.page(PageId(4)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "page 4 is out of range: the pool has 4 pages"
        );
        let e = PagePool::create(dir.path().join("empty"), 0, 16)
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "page pool must have at least one page of at least one byte (got 0 pages of 16 bytes)"
        );
    }

    #[test]
    fn attached_pools_share_bytes_and_outlive_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let mut created = PagePool::create(&path, 3, 8).unwrap();
        created.page_mut(PageId(2)).unwrap().fill(5);
        let attached = PagePool::attach(&path, 8).unwrap();
        assert_eq!(attached.pages(), 3);
        assert_eq!(attached.page(PageId(2)).unwrap(), &[5u8; 8]);
        drop(attached);
        assert!(path.exists(), "an attached pool leaves the file alone");
        let e = PagePool::attach(&path, 5).err().unwrap();
        assert_eq!(
            e.to_string(),
            format!(
                "page pool {}: 24 bytes is not a whole number of 5-byte pages",
                path.display()
            )
        );
        drop(created);
        assert!(!path.exists(), "a created pool removes its file");
        assert!(matches!(
            PagePool::attach(&path, 8),
            Err(PagePoolError::Io { .. })
        ));
    }

    #[test]
    fn memfd_pools_have_no_path_and_map_by_descriptor() {
        let mut pool = PagePool::create_memfd("t", 2, 32).unwrap();
        assert!(pool.path().is_none());
        assert_eq!(pool.label(), "memfd t");
        pool.page_mut(PageId(1)).unwrap().fill(9);
        let dup = pool.fd().try_clone_to_owned().unwrap();
        let other = PagePool::from_fd(dup, 32).unwrap();
        assert_eq!(other.page(PageId(1)).unwrap(), &[9u8; 32]);
        let dup = pool.fd().try_clone_to_owned().unwrap();
        let e = PagePool::from_fd(dup, 48).err().unwrap();
        assert!(
            e.to_string()
                .ends_with(": 64 bytes is not a whole number of 48-byte pages"),
            "{e}"
        );
    }
}
