//! Engine buffers: the KV page pools that engines share with their agent.
//!
//! Owns [`EngineBuffers`] (the registry of an agent's engine regions), [`RegionSpec`] and
//! [`BufferError`]. An engine registers a region `(name, size_bytes, page_size_bytes)` and
//! publishes it as a shared-memory file, or passes its descriptor (a memfd); the agent maps it
//! ([`EngineBuffers::map`], [`EngineBuffers::map_fd`]) and hands out validated page views.
//! It must never copy block bytes itself (the store does) and never hand out a view before
//! every page id and the total length have been checked.
//!
//! # Pages and shards
//! A block shard spans one or more whole pages: a store or load names the pages in order and
//! their concatenation is the shard, so `pages.len() × page_size_bytes` must equal the shard
//! size. One page per shard is the special case of a one-element list. This fits engines whose
//! page holds fewer tokens than a Tandem block (SGLang and vLLM page sizes of 1 to 64 tokens
//! against 512-token blocks) without forcing a layout on them.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::shm::{ShmError, ShmFile};

/// Index of a page inside a region, `0..size_bytes / page_size_bytes` (the protocol core's type).
pub use tandem_proto::ids::PageId;

/// What an engine registers: a region name, its size and its page size, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionSpec {
    /// Name of the region; also the file name under /dev/shm by default.
    pub name: String,
    /// Size of the region in bytes (a whole number of pages).
    pub size_bytes: u64,
    /// Size of one page in bytes.
    pub page_size_bytes: u64,
}

impl RegionSpec {
    /// Number of pages in the region.
    pub fn pages(&self) -> u64 {
        self.size_bytes
            .checked_div(self.page_size_bytes)
            .unwrap_or(0)
    }
}

/// The default path of a region's shared-memory file: `/dev/shm/<name>`.
pub fn default_region_path(name: &str) -> PathBuf {
    Path::new("/dev/shm").join(name)
}

/// Why an engine-buffer request was refused. Every refusal happens before any byte is copied.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// The region name is empty, too long, or contains `/` or a NUL byte.
    #[error("engine region name {name:?} is invalid (1..=200 bytes, no '/' or NUL)")]
    InvalidName {
        /// The name given.
        name: String,
    },
    /// The size or page size is zero, or the size is not a whole number of pages.
    #[error("engine region {name}: size {size_bytes} bytes is not a positive whole number of {page_size_bytes}-byte pages")]
    InvalidGeometry {
        /// The region.
        name: String,
        /// The size given, in bytes.
        size_bytes: u64,
        /// The page size given, in bytes.
        page_size_bytes: u64,
    },
    /// A region of that name is already registered.
    #[error("engine region {name} is already registered")]
    AlreadyRegistered {
        /// The region.
        name: String,
    },
    /// No region of that name is registered.
    #[error("engine region {name} is not registered")]
    Unregistered {
        /// The region.
        name: String,
    },
    /// The region is registered but its shared memory is not mapped.
    #[error("engine region {name} is registered but not mapped")]
    Unmapped {
        /// The region.
        name: String,
    },
    /// A page id is not below the region's page count.
    #[error("engine region {name}: page {page} out of range ({pages} pages)")]
    PageOutOfRange {
        /// The region.
        name: String,
        /// The page id given.
        page: PageId,
        /// The number of pages in the region.
        pages: u64,
    },
    /// The pages given do not add up to the shard size.
    #[error("engine region {name}: {page_count} pages × {page_size_bytes} bytes = {got} bytes, shard is {expected} bytes")]
    WrongLength {
        /// The region.
        name: String,
        /// Number of pages given.
        page_count: usize,
        /// The region's page size in bytes.
        page_size_bytes: u64,
        /// Their total in bytes.
        got: u64,
        /// The shard size in bytes.
        expected: u64,
    },
    /// A destination page appears twice in one load.
    #[error("engine region {name}: page {page} appears twice in one load")]
    DuplicatePage {
        /// The region.
        name: String,
        /// The repeated page.
        page: PageId,
    },
    /// The shared-memory file could not be mapped.
    #[error("engine region {name}: {source}")]
    Map {
        /// The region.
        name: String,
        /// The mapping error.
        source: ShmError,
    },
}

/// One registered region, mapped or not.
#[derive(Debug)]
struct Region {
    spec: RegionSpec,
    /// Shared with the disk tier's transfers that write straight from it
    /// ([`EngineBuffers::kept`]): the mapping lives until the last of them has ended.
    map: Option<Arc<ShmFile>>,
}

/// The agent's registry of engine regions.
#[derive(Debug, Default)]
pub struct EngineBuffers {
    regions: HashMap<String, Region>,
}

impl EngineBuffers {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a region (not mapped yet).
    ///
    /// Errors: [`BufferError::InvalidName`], [`BufferError::InvalidGeometry`],
    /// [`BufferError::AlreadyRegistered`].
    pub fn register(&mut self, spec: RegionSpec) -> Result<(), BufferError> {
        let name = &spec.name;
        if name.is_empty() || name.len() > 200 || name.contains('/') || name.contains('\0') {
            return Err(BufferError::InvalidName { name: name.clone() });
        }
        if spec.page_size_bytes == 0
            || spec.size_bytes == 0
            || spec.size_bytes % spec.page_size_bytes != 0
        {
            return Err(BufferError::InvalidGeometry {
                name: name.clone(),
                size_bytes: spec.size_bytes,
                page_size_bytes: spec.page_size_bytes,
            });
        }
        if self.regions.contains_key(name) {
            return Err(BufferError::AlreadyRegistered { name: name.clone() });
        }
        self.regions
            .insert(name.clone(), Region { spec, map: None });
        Ok(())
    }

    /// Maps a registered region's shared-memory file at `path` (the file must hold at least
    /// `size_bytes`). Mapping again replaces the previous mapping.
    ///
    /// Errors: [`BufferError::Unregistered`], [`BufferError::Map`].
    pub fn map(&mut self, name: &str, path: &Path) -> Result<(), BufferError> {
        let region = self
            .regions
            .get_mut(name)
            .ok_or_else(|| unregistered(name))?;
        let file =
            ShmFile::open(path, region.spec.size_bytes).map_err(|source| BufferError::Map {
                name: name.to_string(),
                source,
            })?;
        // Copies to and from engine pages never wait on a first-touch fault.
        file.populate();
        region.map = Some(Arc::new(file));
        Ok(())
    }

    /// Maps a registered region from a descriptor the engine passed (its region holds at least
    /// `size_bytes`). Mapping again replaces the previous mapping.
    ///
    /// Errors: [`BufferError::Unregistered`], [`BufferError::Map`].
    pub fn map_fd(&mut self, name: &str, fd: OwnedFd) -> Result<(), BufferError> {
        let region = self
            .regions
            .get_mut(name)
            .ok_or_else(|| unregistered(name))?;
        let file =
            ShmFile::from_fd(fd, region.spec.size_bytes).map_err(|source| BufferError::Map {
                name: name.to_string(),
                source,
            })?;
        file.populate();
        region.map = Some(Arc::new(file));
        Ok(())
    }

    /// Drops a region's mapping and keeps its registration.
    ///
    /// Errors: [`BufferError::Unregistered`].
    pub fn unmap(&mut self, name: &str) -> Result<(), BufferError> {
        let region = self
            .regions
            .get_mut(name)
            .ok_or_else(|| unregistered(name))?;
        region.map = None;
        Ok(())
    }

    /// Forgets a region (and its mapping).
    ///
    /// Errors: [`BufferError::Unregistered`].
    pub fn unregister(&mut self, name: &str) -> Result<(), BufferError> {
        self.regions
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| unregistered(name))
    }

    /// The spec of a registered region.
    pub fn spec(&self, name: &str) -> Option<&RegionSpec> {
        self.regions.get(name).map(|r| &r.spec)
    }

    /// Read views of `pages` (in order) whose concatenation is one shard of `shard_bytes`.
    ///
    /// Errors: [`BufferError::Unregistered`], [`BufferError::Unmapped`],
    /// [`BufferError::WrongLength`], [`BufferError::PageOutOfRange`].
    pub fn pages(
        &self,
        name: &str,
        pages: &[PageId],
        shard_bytes: u64,
    ) -> Result<Vec<&[u8]>, BufferError> {
        let (spec, map) = self.mapped(name)?;
        check_pages(spec, pages, shard_bytes, false)?;
        let page = spec.page_size_bytes as usize;
        let bytes = map.bytes();
        Ok(pages
            .iter()
            .map(|&p| &bytes[p.0 as usize * page..(p.0 as usize + 1) * page])
            .collect())
    }

    /// Write views of `pages` (in order) whose concatenation is one shard of `shard_bytes`.
    ///
    /// Errors: as [`EngineBuffers::pages`], plus [`BufferError::DuplicatePage`] (two views of
    /// one page would alias).
    pub fn pages_mut(
        &mut self,
        name: &str,
        pages: &[PageId],
        shard_bytes: u64,
    ) -> Result<Vec<&mut [u8]>, BufferError> {
        let region = self
            .regions
            .get_mut(name)
            .ok_or_else(|| unregistered(name))?;
        let spec = &region.spec;
        let map = region.map.as_mut().ok_or_else(|| BufferError::Unmapped {
            name: name.to_string(),
        })?;
        check_pages(spec, pages, shard_bytes, true)?;
        let page = spec.page_size_bytes as usize;
        let base = map.as_mut_ptr();
        Ok(pages
            .iter()
            .map(|&p| {
                // SAFETY: every page id is in range (so the slice lies inside the mapping) and
                // the ids are distinct (checked above), so the slices do not overlap; they
                // borrow `self` mutably for their whole lifetime, so no view of `pages` is
                // alive. (A disk transfer holding the mapping past its deadline only has the
                // kernel read it, outside Rust's view, as the engine's own writes are.)
                unsafe { std::slice::from_raw_parts_mut(base.add(p.0 as usize * page), page) }
            })
            .collect())
    }

    /// Region `name`'s mapping as memory a disk-tier batch write may read from on another
    /// thread, past its deadline even ([`crate::disk::Kept`]); `None` when the region is not
    /// registered or not mapped.
    pub fn kept(&self, name: &str) -> Option<crate::disk::Kept> {
        let map = self.regions.get(name)?.map.as_ref()?;
        Some(crate::disk::Kept::shm(map.clone()))
    }

    fn mapped(&self, name: &str) -> Result<(&RegionSpec, &ShmFile), BufferError> {
        let region = self.regions.get(name).ok_or_else(|| unregistered(name))?;
        let map = region.map.as_ref().ok_or_else(|| BufferError::Unmapped {
            name: name.to_string(),
        })?;
        Ok((&region.spec, map))
    }
}

fn unregistered(name: &str) -> BufferError {
    BufferError::Unregistered {
        name: name.to_string(),
    }
}

/// Length first (cheap and names the mismatch), then every page id, then distinctness.
fn check_pages(
    spec: &RegionSpec,
    pages: &[PageId],
    shard_bytes: u64,
    distinct: bool,
) -> Result<(), BufferError> {
    let got = pages.len() as u64 * spec.page_size_bytes;
    if got != shard_bytes {
        return Err(BufferError::WrongLength {
            name: spec.name.clone(),
            page_count: pages.len(),
            page_size_bytes: spec.page_size_bytes,
            got,
            expected: shard_bytes,
        });
    }
    let count = spec.pages();
    if let Some(&page) = pages.iter().find(|&&p| u64::from(p.0) >= count) {
        return Err(BufferError::PageOutOfRange {
            name: spec.name.clone(),
            page,
            pages: count,
        });
    }
    if distinct {
        let mut sorted = pages.to_vec();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(BufferError::DuplicatePage {
                name: spec.name.clone(),
                page: w[0],
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, size: u64, page: u64) -> RegionSpec {
        RegionSpec {
            name: name.into(),
            size_bytes: size,
            page_size_bytes: page,
        }
    }

    fn mapped(dir: &Path) -> (EngineBuffers, ShmFile) {
        let path = dir.join("eng");
        let mut engine = ShmFile::create(&path, 4 * 64).unwrap();
        for (i, b) in engine.bytes_mut().iter_mut().enumerate() {
            *b = (i / 64) as u8;
        }
        let mut bufs = EngineBuffers::new();
        bufs.register(spec("eng", 4 * 64, 64)).unwrap();
        bufs.map("eng", &path).unwrap();
        (bufs, engine)
    }

    #[test]
    fn views_follow_page_order() {
        let dir = tempfile::tempdir().unwrap();
        let (mut bufs, engine) = mapped(dir.path());
        let views = bufs.pages("eng", &[PageId(3), PageId(0)], 128).unwrap();
        assert_eq!(views[0][0], 3);
        assert_eq!(views[1][63], 0);
        let mut views = bufs.pages_mut("eng", &[PageId(2)], 64).unwrap();
        views[0].fill(9);
        assert!(
            engine.bytes()[128..192].iter().all(|&b| b == 9),
            "writes land in the shared file"
        );
        assert_eq!(default_region_path("x"), PathBuf::from("/dev/shm/x"));
    }

    #[test]
    fn each_rejection_has_its_message() {
        let dir = tempfile::tempdir().unwrap();
        let (mut bufs, _engine) = mapped(dir.path());
        let e = bufs.register(spec("a/b", 64, 64)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "engine region name \"a/b\" is invalid (1..=200 bytes, no '/' or NUL)"
        );
        let e = bufs.register(spec("g", 100, 64)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "engine region g: size 100 bytes is not a positive whole number of 64-byte pages"
        );
        assert!(matches!(
            bufs.register(spec("g", 64, 0)),
            Err(BufferError::InvalidGeometry { .. })
        ));
        let e = bufs.register(spec("eng", 64, 64)).unwrap_err();
        assert_eq!(e.to_string(), "engine region eng is already registered");
        let e = bufs.pages("nope", &[PageId(0)], 64).unwrap_err();
        assert_eq!(e.to_string(), "engine region nope is not registered");
        let e = bufs.pages("eng", &[PageId(4)], 64).unwrap_err();
        assert_eq!(
            e.to_string(),
            "engine region eng: page 4 out of range (4 pages)"
        );
        let e = bufs.pages("eng", &[PageId(0), PageId(1)], 64).unwrap_err();
        assert_eq!(
            e.to_string(),
            "engine region eng: 2 pages × 64 bytes = 128 bytes, shard is 64 bytes"
        );
        let e = bufs
            .pages_mut("eng", &[PageId(1), PageId(1)], 128)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "engine region eng: page 1 appears twice in one load"
        );
        assert!(
            bufs.pages("eng", &[PageId(1), PageId(1)], 128).is_ok(),
            "reading one page twice is harmless"
        );
        bufs.register(spec("late", 64, 64)).unwrap();
        let e = bufs.pages_mut("late", &[PageId(0)], 64).unwrap_err();
        assert_eq!(
            e.to_string(),
            "engine region late is registered but not mapped"
        );
        let e = bufs.map("late", &dir.path().join("missing")).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("engine region late: shared memory "));
        let fd: OwnedFd = std::fs::File::open(dir.path().join("eng")).unwrap().into();
        let e = bufs.map_fd("late", fd).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("engine region late: shared memory descriptor "),
            "{e}"
        );
        bufs.unmap("eng").unwrap();
        assert!(matches!(
            bufs.pages("eng", &[PageId(0)], 64),
            Err(BufferError::Unmapped { .. })
        ));
        bufs.unregister("eng").unwrap();
        assert!(matches!(
            bufs.unregister("eng"),
            Err(BufferError::Unregistered { .. })
        ));
    }
}
