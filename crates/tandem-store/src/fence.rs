//! The write fence of a rank's tiers: which process, in which epoch, may change them (README
//! invariant 8).
//!
//! Owns [`Fence`] and [`Fenced`]. The fence record is a small file in the disk directory
//! (`tandem.fence`, never unlinked), mapped shared by every process that opened the tiers:
//! the magic `TNDFENC1`, then the incarnation and the epoch of the process allowed to write,
//! as little-endian `u64`s. [`crate::lock::TierLock::acquire`] starts a new incarnation (one
//! more than the record's) under the rank's lock; the holder moves the epoch forward with
//! [`Fence::advance_epoch`]. Every write to a slot or to the manifest checks first that the
//! record still names the writer's own incarnation and epoch ([`Fence::check`]); a manifest
//! save is checked right before it overwrites a copy, also against the record's file (a record
//! replaced on disk fences too), and carries the incarnation, so that a stale writer's save
//! never outranks the new owner's. So a process that lost the lock (stopped, then
//! overtaken by a new process for the same rank) changes nothing once it runs again: its next
//! write is refused, and a fenced store refuses everything after. A copy already running when
//! the fence moves may still finish writing its slot's bytes, but the stale writer never
//! records them, and the new owner's own checksums reject whatever such bytes overwrote.
//! It must never decide whether to write: the store asks it.

use std::fs::OpenOptions;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::MmapMut;

/// The file name of the fence record inside the disk directory.
pub const FENCE_FILE: &str = "tandem.fence";

const MAGIC: &[u8; 8] = b"TNDFENC1";
/// Bytes of the record: magic, incarnation, epoch.
const RECORD_BYTES: u64 = 24;

/// Who may write: a process start (incarnation, from 1) and the epoch it serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FenceToken {
    /// The process start, counted per rank's tiers from 1.
    pub incarnation: u64,
    /// The epoch that process serves (0 before its first).
    pub epoch: u64,
}

impl std::fmt::Display for FenceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "incarnation {} epoch {}", self.incarnation, self.epoch)
    }
}

/// A write refused because another process (or a later epoch) now owns the tiers.
#[derive(Debug, thiserror::Error)]
pub enum Fenced {
    /// The record names another writer.
    #[error("fenced: the rank's tiers belong to {current} (record {path}), this writer is {ours}; it must stop")]
    Overtaken {
        /// The fence record.
        path: PathBuf,
        /// This writer.
        ours: FenceToken,
        /// What the record says now.
        current: FenceToken,
    },
    /// The record's file was replaced or removed since this writer mapped it.
    #[error("fenced: the fence record {path} was replaced or removed since this writer started; it must stop")]
    Replaced {
        /// The fence record.
        path: PathBuf,
    },
    /// The record could not be created or mapped.
    #[error("fence record {path}: {op} failed: {source}")]
    Io {
        /// The fence record.
        path: PathBuf,
        /// What was being done (`open`, `resize`, `map`, `stat`).
        op: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    map: MmapMut,
    /// Device and inode of the record's file when mapped.
    file_id: (u64, u64),
    incarnation: u64,
    epoch: AtomicU64,
}

impl Inner {
    /// Word `i` of the record after the magic (0: incarnation, 1: epoch).
    fn word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: the mapping is RECORD_BYTES (24) long and page-aligned, so words at offsets 8
        // and 16 are in bounds and 8-byte aligned; it lives as long as `self`; other processes
        // reach these bytes only through this same atomic view.
        unsafe { &*(self.map.as_ptr().add(8 + 8 * i) as *const AtomicU64) }
    }

    fn current(&self) -> FenceToken {
        FenceToken {
            incarnation: u64::from_le(self.word(0).load(Ordering::SeqCst)),
            epoch: u64::from_le(self.word(1).load(Ordering::SeqCst)),
        }
    }

    fn ours(&self) -> FenceToken {
        FenceToken {
            incarnation: self.incarnation,
            epoch: self.epoch.load(Ordering::SeqCst),
        }
    }
}

/// A writer's handle on the fence record. Clones share the writer's token (the store and its
/// manifest writer thread are one writer).
#[derive(Clone, Debug)]
pub struct Fence {
    inner: Arc<Inner>,
}

impl Fence {
    /// Start a new incarnation in the record at `path` (created if missing): one more than the
    /// record's, epoch 0. Call only under the rank's lock.
    ///
    /// Errors: [`Fenced::Io`].
    pub(crate) fn claim(path: &Path) -> Result<Fence, Fenced> {
        let io = |op: &'static str| {
            let path = path.to_path_buf();
            move |source| Fenced::Io { path, op, source }
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io("open"))?;
        let meta = file.metadata().map_err(io("stat"))?;
        if meta.len() < RECORD_BYTES {
            file.set_len(RECORD_BYTES).map_err(io("resize"))?;
        }
        // SAFETY: a shared mapping of a file only this crate's fence code reads and writes,
        // through atomics (see `Inner::word`).
        let mut map = unsafe {
            memmap2::MmapOptions::new()
                .len(RECORD_BYTES as usize)
                .map_mut(&file)
        }
        .map_err(io("map"))?;
        let previous = if &map[..8] == MAGIC {
            u64::from_le_bytes(map[8..16].try_into().unwrap_or_default())
        } else {
            // A missing or unreadable record: start far from any incarnation a stale writer
            // could hold, from the clock.
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        };
        map[..8].copy_from_slice(MAGIC);
        let incarnation = previous.wrapping_add(1).max(1);
        let inner = Inner {
            path: path.to_path_buf(),
            map,
            file_id: (meta.dev(), meta.ino()),
            incarnation,
            epoch: AtomicU64::new(0),
        };
        inner.word(1).store(0u64.to_le(), Ordering::SeqCst);
        inner.word(0).store(incarnation.to_le(), Ordering::SeqCst);
        inner.map.flush().map_err(io("sync"))?;
        Ok(Fence {
            inner: Arc::new(inner),
        })
    }

    /// This writer's incarnation and epoch.
    pub fn token(&self) -> FenceToken {
        self.inner.ours()
    }

    /// What the record says now.
    pub fn current(&self) -> FenceToken {
        self.inner.current()
    }

    /// The record's file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Whether this writer may still write: the record names its own incarnation and epoch.
    ///
    /// Errors: [`Fenced::Overtaken`].
    pub fn check(&self) -> Result<(), Fenced> {
        let (ours, current) = (self.inner.ours(), self.inner.current());
        if ours != current {
            return Err(Fenced::Overtaken {
                path: self.inner.path.clone(),
                ours,
                current,
            });
        }
        Ok(())
    }

    /// [`Fence::check`], and the record's path still names the file this writer mapped (what
    /// a manifest save asks before it overwrites a copy).
    ///
    /// Errors: [`Fenced::Overtaken`], [`Fenced::Replaced`].
    pub fn check_file(&self) -> Result<(), Fenced> {
        self.check()?;
        let same = std::fs::metadata(&self.inner.path)
            .map(|m| (m.dev(), m.ino()) == self.inner.file_id)
            .unwrap_or(false);
        if !same {
            return Err(Fenced::Replaced {
                path: self.inner.path.clone(),
            });
        }
        Ok(())
    }

    /// Move this writer, and the record, to `epoch` (epochs only grow; an older one is
    /// ignored).
    ///
    /// Errors: [`Fenced::Overtaken`] when the record no longer names this writer.
    pub fn advance_epoch(&self, epoch: u64) -> Result<(), Fenced> {
        self.check()?;
        if epoch > self.inner.epoch.load(Ordering::SeqCst) {
            self.inner.word(1).store(epoch.to_le(), Ordering::SeqCst);
            self.inner.epoch.store(epoch, Ordering::SeqCst);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_incarnation_fences_the_old_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FENCE_FILE);
        let old = Fence::claim(&path).unwrap();
        old.check().unwrap();
        old.advance_epoch(3).unwrap();
        assert_eq!(old.current(), old.token());
        let first = old.token().incarnation;
        let new = Fence::claim(&path).unwrap();
        assert_eq!(
            new.token(),
            FenceToken {
                incarnation: first + 1,
                epoch: 0
            }
        );
        let e = old.check().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "fenced: the rank's tiers belong to incarnation {} epoch 0 (record {}), this writer is incarnation {first} epoch 3; it must stop",
                first + 1,
                path.display()
            )
        );
        assert!(
            old.advance_epoch(9).is_err(),
            "a stale writer cannot move the fence"
        );
        new.advance_epoch(4).unwrap();
        new.advance_epoch(2).unwrap();
        assert_eq!(new.current().epoch, 4, "epochs only grow");
        new.check_file().unwrap();
    }

    #[test]
    fn a_replaced_record_fences_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FENCE_FILE);
        let f = Fence::claim(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(
            f.check().is_ok(),
            "the mapping still holds this writer's record"
        );
        assert!(matches!(f.check_file(), Err(Fenced::Replaced { .. })));
        let garbage = dir.path().join("other");
        std::fs::write(&garbage, b"not a record, longer than the magic").unwrap();
        let g = Fence::claim(&garbage).unwrap();
        assert!(g.token().incarnation > 1, "{:?}", g.token());
    }
}
