//! The engine's KV page pool as a file-backed shared-memory region.
//!
//! In production the engine's pages live in GPU memory and the `cuda` tier of the store engine
//! copies them; in tests and in `tandem replay` a simulated engine keeps its pages here, in a
//! file under `/dev/shm` that its agent maps too. Owns creating and mapping the region; it
//! never talks to the agent.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;
use tandem_proto::ids::PageId;

/// Why a page pool could not be created or a page not addressed.
#[derive(Debug, thiserror::Error)]
pub enum PagePoolError {
    /// Creating, sizing or mapping the file failed.
    #[error("page pool {path}: {source}")]
    Io {
        /// The region's file.
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
    /// A page id past the end of the pool.
    #[error("page {page} is out of range: the pool has {pages} pages")]
    OutOfRange {
        /// The page asked for.
        page: u32,
        /// Pages in the pool.
        pages: u64,
    },
}

/// A pool of equal pages in one shared-memory file; page `i` is bytes
/// `[i × page_size_bytes, (i + 1) × page_size_bytes)`.
pub struct PagePool {
    path: PathBuf,
    map: MmapMut,
    page_size_bytes: u64,
    pages: u64,
}

impl PagePool {
    /// Create (or truncate) the file at `path` with `pages × page_size_bytes` zeroed bytes and
    /// map it.
    ///
    /// # Errors
    /// [`PagePoolError::Empty`], [`PagePoolError::Io`].
    pub fn create(
        path: impl AsRef<Path>,
        pages: u64,
        page_size_bytes: u64,
    ) -> Result<Self, PagePoolError> {
        let path = path.as_ref().to_path_buf();
        if pages == 0 || page_size_bytes == 0 {
            return Err(PagePoolError::Empty {
                pages,
                page_size_bytes,
            });
        }
        let io = |source| PagePoolError::Io {
            path: path.display().to_string(),
            source,
        };
        let size = pages.checked_mul(page_size_bytes).ok_or_else(|| {
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "pages × page_size_bytes overflows",
            ))
        })?;
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
        // SAFETY: the file was just created by us at this size; the agent maps it too but only
        // touches pages named in tasks, which the engine contract keeps from concurrent use.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
        Ok(Self {
            path,
            map,
            page_size_bytes,
            pages,
        })
    }

    /// The region's file path, as the agent must be told in `RegisterBuffer`.
    pub fn path(&self) -> &Path {
        &self.path
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
        // The region is the engine's: it goes away with the engine.
        let _ = std::fs::remove_file(&self.path);
    }
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
}
