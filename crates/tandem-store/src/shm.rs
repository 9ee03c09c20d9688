//! File-backed shared memory: a file (in /dev/shm or any directory) mapped read-write.
//!
//! Owns [`ShmFile`] and [`ShmError`]: creating, opening and sizing a shared mapping. Engines
//! publish their KV page pools this way and the host tier keeps its slab this way, so that
//! another process (the agent, or a restarted agent) maps the same bytes. It must never
//! interpret the bytes.
//!
//! Another process may write the file while it is mapped here; that is the point of sharing.
//! The engine contract (pages are not reused before the frame that reports the copy finished)
//! is what keeps such writes away from pages being copied.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use memmap2::MmapRaw;

/// Why a shared-memory file could not be created, opened or mapped.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A mapping of zero bytes was asked for.
    #[error("shared memory {path}: size must be at least one byte")]
    ZeroSize {
        /// The file.
        path: PathBuf,
    },
    /// The existing file is smaller than the mapping asked for.
    #[error("shared memory {path}: file holds {actual} bytes, need {needed}")]
    TooSmall {
        /// The file.
        path: PathBuf,
        /// The size asked for, in bytes.
        needed: u64,
        /// The file's size, in bytes.
        actual: u64,
    },
    /// An I/O call failed.
    #[error("shared memory {path}: {op} failed: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done (`create`, `open`, `resize`, `allocate`, `map`, `stat`).
        op: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// A file mapped read-write and shared with other processes.
#[derive(Debug)]
pub struct ShmFile {
    path: PathBuf,
    /// A raw mapping, not `MmapMut`: views of it are made from a pointer while other holders
    /// of the same `Arc<ShmFile>` exist ([`ShmFile::as_mut_ptr`]), which a `&MmapMut` cast to
    /// `*mut` would not allow.
    map: MmapRaw,
    /// Kept open for the lifetime of the mapping.
    _file: File,
}

/// What [`ShmFile::open_or_create`] found on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileOrigin {
    /// The file existed with exactly the size asked for: its bytes are kept.
    Reused,
    /// The file did not exist, or had another size: it now holds `size` zero bytes.
    Fresh,
}

impl ShmFile {
    /// Creates (or truncates) `path` to `size` zero bytes, reserves them (`posix_fallocate`)
    /// and maps it; parent directories are created. Used by engines publishing a page pool and
    /// by the host tier for its slab.
    ///
    /// Errors: [`ShmError::ZeroSize`], [`ShmError::Io`].
    pub fn create(path: &Path, size: u64) -> Result<ShmFile, ShmError> {
        let file = create_file(path, size, true)?;
        ShmFile::map_file(path, file)
    }

    /// Maps an existing file of at least `size` bytes (only the first `size` bytes).
    ///
    /// Errors: [`ShmError::ZeroSize`], [`ShmError::TooSmall`], [`ShmError::Io`] (for example,
    /// the file does not exist).
    pub fn open(path: &Path, size: u64) -> Result<ShmFile, ShmError> {
        if size == 0 {
            return Err(ShmError::ZeroSize {
                path: path.to_path_buf(),
            });
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io(path, "open"))?;
        let actual = file.metadata().map_err(io(path, "stat"))?.len();
        if actual < size {
            return Err(ShmError::TooSmall {
                path: path.to_path_buf(),
                needed: size,
                actual,
            });
        }
        // The mapping is shared with other processes by design (see module docs); its length
        // is within the file.
        let map = memmap2::MmapOptions::new()
            .len(size as usize)
            .map_raw(&file)
            .map_err(io(path, "map"))?;
        Ok(ShmFile {
            path: path.to_path_buf(),
            map,
            _file: file,
        })
    }

    /// Maps the first `size` bytes of the region behind `fd` (a descriptor an engine passed:
    /// a memfd, or any file of at least `size` bytes), read-write and shared. The mapping keeps
    /// `fd`. Errors name the region `descriptor N (target)`, the target read from
    /// `/proc/self/fd` (for example `/memfd:kv (deleted)`).
    ///
    /// Errors: [`ShmError::ZeroSize`], [`ShmError::TooSmall`], [`ShmError::Io`] (`stat`, or
    /// `map` for a descriptor that cannot be mapped read-write: a pipe, a socket, a directory,
    /// a file opened read-only).
    pub fn from_fd(fd: OwnedFd, size: u64) -> Result<ShmFile, ShmError> {
        let raw = fd.as_raw_fd();
        let path = match std::fs::read_link(format!("/proc/self/fd/{raw}")) {
            Ok(target) => PathBuf::from(format!("descriptor {raw} ({})", target.display())),
            Err(_) => PathBuf::from(format!("descriptor {raw}")),
        };
        if size == 0 {
            return Err(ShmError::ZeroSize { path });
        }
        let file = File::from(fd);
        let actual = file.metadata().map_err(io(&path, "stat"))?.len();
        if actual < size {
            return Err(ShmError::TooSmall {
                path,
                needed: size,
                actual,
            });
        }
        // As in `open`: shared by design, and the length is within the file.
        let map = memmap2::MmapOptions::new()
            .len(size as usize)
            .map_raw(&file)
            .map_err(io(&path, "map"))?;
        Ok(ShmFile {
            path,
            map,
            _file: file,
        })
    }

    /// Maps `path` with exactly `size` bytes, keeping its contents when it already has that
    /// size and starting from zeros otherwise. Used by the host tier so that a restarted agent
    /// finds its slab again.
    ///
    /// Errors: [`ShmError::ZeroSize`], [`ShmError::Io`].
    pub fn open_or_create(path: &Path, size: u64) -> Result<(ShmFile, FileOrigin), ShmError> {
        let existing = std::fs::metadata(path).ok().map(|m| m.len());
        if existing == Some(size) && size > 0 {
            // A slab left by a start whose reservation failed has the right length but holes:
            // reserve again, so that a full tmpfs is an error now and not a SIGBUS later.
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map_err(io(path, "open"))?;
            reserve(&file, size).map_err(io(path, "allocate"))?;
            return Ok((ShmFile::open(path, size)?, FileOrigin::Reused));
        }
        Ok((ShmFile::create(path, size)?, FileOrigin::Fresh))
    }

    fn map_file(path: &Path, file: File) -> Result<ShmFile, ShmError> {
        // As in `open`; the file was just sized to the mapping length.
        let map = MmapRaw::map_raw(&file).map_err(io(path, "map"))?;
        Ok(ShmFile {
            path: path.to_path_buf(),
            map,
            _file: file,
        })
    }

    /// Fault every page of the mapping in now, writable (`MADV_POPULATE_WRITE`, Linux 5.14
    /// and later), so that copies through it never stop on a first-touch page fault: one
    /// system call for the whole mapping instead of a fault per 4 KiB page on the data path.
    /// The bytes are unchanged. Only for a file in shared memory (tmpfs, a memfd): on a file
    /// system with writeback it would mark every page dirty. Best effort: false when skipped
    /// or refused (older kernels); the pages then fault in on first use, as before.
    pub fn populate(&self) -> bool {
        use std::os::fd::AsRawFd;
        /// `TMPFS_MAGIC` from `linux/magic.h` (tmpfs and memfds).
        const TMPFS_MAGIC: i64 = 0x0102_1994;
        // SAFETY: fstatfs on our own open descriptor into a zeroed struct it fills.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstatfs(self._file.as_raw_fd(), &mut fs) } != 0
            || fs.f_type as i64 != TMPFS_MAGIC
        {
            return false;
        }
        // SAFETY: madvise on this mapping's own address range; POPULATE_WRITE changes no byte
        // (it only faults pages in) and the range stays mapped for `self`'s lifetime.
        let rc = unsafe {
            libc::madvise(
                self.map.as_ptr() as *mut libc::c_void,
                self.map.len(),
                libc::MADV_POPULATE_WRITE,
            )
        };
        rc == 0
    }

    /// The mapped file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: mappings of zero bytes are refused.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len()` bytes, valid while `self` lives; writers through
        // `as_mut_ptr` promise not to overlap a borrow made here.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), self.map.len()) }
    }

    /// The mapped bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` excludes every other borrow made here.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr(), self.map.len()) }
    }

    /// The mapping's first byte, writable, without borrowing the bytes: for views made
    /// while other holders of the same `Arc<ShmFile>` exist (the engine's pool, shared with
    /// the disk tier's transfers that keep it mapped). Writing through it is up to the caller
    /// (the views must not overlap one another or a `bytes()` borrow).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
}

fn create_file(path: &Path, size: u64, truncate: bool) -> Result<File, ShmError> {
    if size == 0 {
        return Err(ShmError::ZeroSize {
            path: path.to_path_buf(),
        });
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io(path, "create"))?;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .open(path)
        .map_err(io(path, "create"))?;
    file.set_len(size).map_err(io(path, "resize"))?;
    if let Err(e) = reserve(&file, size) {
        // Leave no full-length file with holes behind for the next start to trust.
        let _ = std::fs::remove_file(path);
        return Err(io(path, "allocate")(e));
    }
    Ok(file)
}

/// Reserves the file's pages now, so that a full tmpfs is a typed error here rather than a
/// SIGBUS on the first write through the mapping. File systems that cannot preallocate are
/// left sparse.
fn reserve(file: &File, size: u64) -> std::io::Result<()> {
    let len =
        libc::off_t::try_from(size).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain syscall on an open descriptor.
    match unsafe { libc::posix_fallocate(std::os::unix::io::AsRawFd::as_raw_fd(file), 0, len) } {
        0 | libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        err => Err(std::io::Error::from_raw_os_error(err)),
    }
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> ShmError + 'a {
    move |source| ShmError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn populate_keeps_the_bytes_in_shared_memory_and_elsewhere() {
        let shm = std::path::Path::new("/dev/shm");
        let dirs = [
            shm.is_dir().then(|| tempfile::tempdir_in(shm).unwrap()),
            Some(tempfile::tempdir().unwrap()),
        ];
        for dir in dirs.iter().flatten() {
            let path = dir.path().join("region");
            let mut a = ShmFile::create(&path, 3 * 4096).unwrap();
            a.bytes_mut()[5000] = 7;
            let b = ShmFile::open(&path, 3 * 4096).unwrap();
            b.populate();
            assert_eq!(b.bytes()[5000], 7);
            assert!(b.bytes()[..5000].iter().all(|&x| x == 0));
            a.bytes_mut()[9000] = 9;
            assert_eq!(
                b.bytes()[9000],
                9,
                "still one shared mapping after populate"
            );
        }
    }

    #[test]
    fn create_write_reopen_sees_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/region");
        let mut a = ShmFile::create(&path, 4096).unwrap();
        a.bytes_mut()[10] = 42;
        let b = ShmFile::open(&path, 4096).unwrap();
        assert_eq!(b.bytes()[10], 42, "two mappings share the bytes");
        drop(a);
        let (c, origin) = ShmFile::open_or_create(&path, 4096).unwrap();
        assert_eq!(origin, FileOrigin::Reused);
        assert_eq!(c.bytes()[10], 42);
        let (d, origin) = ShmFile::open_or_create(&path, 8192).unwrap();
        assert_eq!(origin, FileOrigin::Fresh);
        assert_eq!(d.len(), 8192);
        assert!(d.bytes().iter().all(|&b| b == 0));
    }

    #[test]
    fn a_descriptor_maps_the_same_bytes_and_bad_ones_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let mut a = ShmFile::create(&path, 4096).unwrap();
        a.bytes_mut()[7] = 3;
        let fd: OwnedFd = File::options()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap()
            .into();
        let mut b = ShmFile::from_fd(fd, 4096).unwrap();
        assert_eq!(b.bytes()[7], 3);
        b.bytes_mut()[8] = 4;
        assert_eq!(a.bytes()[8], 4, "both mappings share the bytes");
        assert!(b.path().display().to_string().starts_with("descriptor "));
        let fd: OwnedFd = File::open(&path).unwrap().into();
        let e = ShmFile::from_fd(fd, 8192).unwrap_err();
        assert!(
            e.to_string().ends_with("file holds 4096 bytes, need 8192"),
            "{e}"
        );
        // Read-only: cannot be mapped for writing.
        let fd: OwnedFd = File::open(&path).unwrap().into();
        let e = ShmFile::from_fd(fd, 4096).unwrap_err();
        assert!(matches!(e, ShmError::Io { op: "map", .. }), "{e}");
        // A directory is no region.
        let fd: OwnedFd = File::open(dir.path()).unwrap().into();
        assert!(matches!(
            ShmFile::from_fd(fd, 10),
            Err(ShmError::Io { .. } | ShmError::TooSmall { .. })
        ));
    }

    #[test]
    fn errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let e = ShmFile::create(&path, 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "shared memory {}: size must be at least one byte",
                path.display()
            )
        );
        ShmFile::create(&path, 100).unwrap();
        let e = ShmFile::open(&path, 200).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "shared memory {}: file holds 100 bytes, need 200",
                path.display()
            )
        );
        let missing = dir.path().join("missing");
        let e = ShmFile::open(&missing, 10).unwrap_err();
        assert!(matches!(e, ShmError::Io { op: "open", .. }));
        assert!(e.to_string().starts_with(&format!(
            "shared memory {}: open failed: ",
            missing.display()
        )));
    }
}
