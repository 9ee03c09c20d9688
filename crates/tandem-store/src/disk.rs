//! The disk tier: one preallocated file of fixed-size slots, read and written positionally.
//!
//! Owns [`DiskTier`] and [`IoMode`]. Slot `s` lives at byte `s × stride`, where the stride is
//! the shard size rounded up to 4 KiB so that O_DIRECT can address every slot. Buffered mode
//! (the default) writes through the page cache with `pwrite`/`pread`
//! (`std::os::unix::fs::FileExt`), checksumming each chunk while it is hot in cache; direct
//! mode opens the file with O_DIRECT and moves every chunk through one page-aligned bounce
//! buffer. docs/BENCHMARKS.md has the measurement that made buffered the default.
//! Nothing is fsynced: a block lost in a crash fails its checksum or is absent from the
//! manifest, and is dropped. It must never decide which slot holds which block.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;
use serde::{Deserialize, Serialize};

use crate::block::{BlockHash, SlotId};
use crate::checksum::{copy_parts, Checksum, ShardHasher};
use crate::shm::FileOrigin;
use crate::tier::{check_slot, Tier, TierError, TierSlots};

/// The file name of the disk tier inside the disk directory.
pub const DISK_SLAB_FILE: &str = "disk.slab";

/// Alignment of slots and direct-I/O transfers, in bytes.
const ALIGN: u64 = 4096;

/// Largest single transfer, in bytes: big enough to amortise a syscall, small enough that the
/// chunk is still in L2 cache when it is checksummed right after the copy.
const CHUNK: usize = 256 << 10;

/// How the disk tier talks to its file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// Through the page cache (`pwrite`/`pread`).
    #[default]
    Buffered,
    /// O_DIRECT through an aligned bounce buffer, bypassing the page cache.
    Direct,
}

/// Preallocated slots in one file.
#[derive(Debug)]
pub struct DiskTier {
    file: File,
    path: PathBuf,
    slot_bytes: usize,
    stride: u64,
    capacity: u64,
    mode: IoMode,
    /// Page-aligned staging for direct mode, `CHUNK` bytes (or the stride, if smaller).
    bounce: Option<MmapMut>,
}

impl DiskTier {
    /// Bytes of the tier file for `capacity` slots of `slot_bytes` (each slot padded to a
    /// 4 KiB boundary for direct I/O); `None` when it overflows. A file of exactly this size
    /// is reused by [`DiskTier::open`] (its bytes kept, no allocation).
    pub fn file_bytes(slot_bytes: usize, capacity: u64) -> Option<u64> {
        (slot_bytes as u64)
            .div_ceil(ALIGN)
            .checked_mul(ALIGN)?
            .checked_mul(capacity)
    }

    /// Byte offset of slot `slot` in the tier file (see [`DiskTier::file_bytes`]).
    pub fn slot_offset(slot_bytes: usize, slot: u64) -> u64 {
        (slot_bytes as u64).div_ceil(ALIGN) * ALIGN * slot
    }

    /// Opens (creating and preallocating if needed) the tier file at `path` for `capacity`
    /// slots of `slot_bytes`. A file of exactly the right size keeps its bytes
    /// ([`FileOrigin::Reused`]); any other size starts from zeros ([`FileOrigin::Fresh`]).
    ///
    /// Errors: [`TierError::InvalidGeometry`], [`TierError::DirectUnsupported`] (direct mode on
    /// a file system without O_DIRECT, such as tmpfs on older kernels), [`TierError::Io`].
    pub fn open(
        path: &Path,
        slot_bytes: usize,
        capacity: u64,
        mode: IoMode,
    ) -> Result<(DiskTier, FileOrigin), TierError> {
        let bad = TierError::InvalidGeometry {
            tier: Tier::Disk,
            slot_bytes,
            capacity,
        };
        if slot_bytes == 0 || capacity == 0 {
            return Err(bad);
        }
        let stride = (slot_bytes as u64).div_ceil(ALIGN) * ALIGN;
        let size = stride.checked_mul(capacity).ok_or(bad)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(path, "create"))?;
        }
        let existing = std::fs::metadata(path).ok().map(|m| m.len());
        let origin = if existing == Some(size) {
            FileOrigin::Reused
        } else {
            FileOrigin::Fresh
        };
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true);
        if mode == IoMode::Direct {
            options.custom_flags(libc::O_DIRECT);
        }
        let file = options.open(path).map_err(|source| {
            if mode == IoMode::Direct && source.raw_os_error() == Some(libc::EINVAL) {
                TierError::DirectUnsupported {
                    path: path.to_path_buf(),
                    source,
                }
            } else {
                io(path, "open")(source)
            }
        })?;
        if origin == FileOrigin::Fresh {
            file.set_len(0).map_err(io(path, "allocate"))?;
            preallocate(&file, size).map_err(io(path, "allocate"))?;
        }
        let bounce = match mode {
            IoMode::Buffered => None,
            IoMode::Direct => Some(
                MmapMut::map_anon(stride.min(CHUNK as u64) as usize).map_err(io(path, "map"))?,
            ),
        };
        Ok((
            DiskTier {
                file,
                path: path.to_path_buf(),
                slot_bytes,
                stride,
                capacity,
                mode,
                bounce,
            },
            origin,
        ))
    }

    /// The tier file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The I/O mode in use.
    pub fn mode(&self) -> IoMode {
        self.mode
    }
}

impl TierSlots for DiskTier {
    fn kind(&self) -> Tier {
        Tier::Disk
    }

    fn capacity_slots(&self) -> u64 {
        self.capacity
    }

    fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    fn write_slot(
        &mut self,
        slot: SlotId,
        src: &[&[u8]],
        seed: BlockHash,
    ) -> Result<Checksum, TierError> {
        let total = src.iter().map(|s| s.len()).sum();
        check_slot(Tier::Disk, slot, self.capacity, self.slot_bytes, total)?;
        let base = slot * self.stride;
        let mut hasher = ShardHasher::new(seed);
        match self.bounce.as_mut() {
            None => {
                let mut off = base;
                // Write first, then checksum the chunk while the kernel's copy has left it in
                // cache: the checksum then costs a cache read, not a second trip to memory.
                for chunk in src.iter().flat_map(|part| part.chunks(CHUNK)) {
                    self.file
                        .write_all_at(chunk, off)
                        .map_err(io(&self.path, "write"))?;
                    hasher.update(chunk);
                    off += chunk.len() as u64;
                }
            }
            Some(bounce) => {
                let mut done = 0;
                while done < total {
                    let n = (total - done).min(bounce.len());
                    copy_parts(
                        &mut [&mut bounce[..n]],
                        &sub_parts(src, done, n),
                        &mut hasher,
                    );
                    let padded = (n as u64).div_ceil(ALIGN) * ALIGN;
                    bounce[n..padded as usize].fill(0);
                    self.file
                        .write_all_at(&bounce[..padded as usize], base + done as u64)
                        .map_err(io(&self.path, "write"))?;
                    done += n;
                }
            }
        }
        Ok(hasher.finish())
    }

    fn read_slot(
        &mut self,
        slot: SlotId,
        dst: &mut [&mut [u8]],
        seed: BlockHash,
    ) -> Result<Checksum, TierError> {
        let total = dst.iter().map(|d| d.len()).sum();
        check_slot(Tier::Disk, slot, self.capacity, self.slot_bytes, total)?;
        let base = slot * self.stride;
        let mut hasher = ShardHasher::new(seed);
        match self.bounce.as_mut() {
            None => {
                let mut off = base;
                for chunk in dst.iter_mut().flat_map(|part| part.chunks_mut(CHUNK)) {
                    self.file
                        .read_exact_at(chunk, off)
                        .map_err(io(&self.path, "read"))?;
                    hasher.update(chunk);
                    off += chunk.len() as u64;
                }
            }
            Some(bounce) => {
                let mut done = 0;
                while done < total {
                    let n = (total - done).min(bounce.len());
                    let padded = ((n as u64).div_ceil(ALIGN) * ALIGN) as usize;
                    self.file
                        .read_exact_at(&mut bounce[..padded], base + done as u64)
                        .map_err(io(&self.path, "read"))?;
                    copy_parts(
                        &mut sub_parts_mut(dst, done, n),
                        &[&bounce[..n]],
                        &mut hasher,
                    );
                    done += n;
                }
            }
        }
        Ok(hasher.finish())
    }
}

/// The byte range `start..start + len` of the concatenation of `parts`, as slices.
fn sub_parts<'a>(parts: &[&'a [u8]], start: usize, len: usize) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let (mut skip, mut want) = (start, len);
    for part in parts {
        if want == 0 {
            break;
        }
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        let take = (part.len() - skip).min(want);
        out.push(&part[skip..skip + take]);
        skip = 0;
        want -= take;
    }
    out
}

/// As [`sub_parts`], writable.
fn sub_parts_mut<'a>(parts: &'a mut [&mut [u8]], start: usize, len: usize) -> Vec<&'a mut [u8]> {
    let mut out = Vec::new();
    let (mut skip, mut want) = (start, len);
    for part in parts.iter_mut() {
        if want == 0 {
            break;
        }
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        let take = (part.len() - skip).min(want);
        out.push(&mut part[skip..skip + take]);
        skip = 0;
        want -= take;
    }
    out
}

/// Reserves the file's blocks so that later writes cannot fail for lack of space; falls back
/// to a sparse file where the file system cannot preallocate. Public so that the tier
/// benchmark (`tandem-bench`) preallocates its baseline files exactly as the disk tier does.
///
/// # Errors
/// The `posix_fallocate` or `ftruncate` error; `EFBIG` when `size` (bytes) exceeds `off_t`.
pub fn preallocate(file: &File, size: u64) -> std::io::Result<()> {
    let len =
        libc::off_t::try_from(size).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain syscall on an open descriptor.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(size),
        err => Err(std::io::Error::from_raw_os_error(err)),
    }
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> TierError + 'a {
    move |source| TierError::Io {
        tier: Tier::Disk,
        op,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::checksum;

    fn round_trip(mode: IoMode, dir: &Path) -> Option<()> {
        let path = dir.join(DISK_SLAB_FILE);
        let slot = 3 * 4096 + 100; // not a multiple of the alignment on purpose
        let (mut disk, origin) = match DiskTier::open(&path, slot, 4, mode) {
            Err(TierError::DirectUnsupported { .. }) => return None,
            other => other.unwrap(),
        };
        assert_eq!(origin, FileOrigin::Fresh);
        assert_eq!(disk.mode(), mode);
        let data: Vec<u8> = (0..slot).map(|i| (i * 7 + 1) as u8).collect();
        let sum = disk
            .write_slot(3, &[&data[..5000], &data[5000..]], BlockHash(4))
            .unwrap();
        assert_eq!(sum, checksum(BlockHash(4), &data));
        drop(disk);
        let (mut disk, origin) = DiskTier::open(&path, slot, 4, mode).unwrap();
        assert_eq!(origin, FileOrigin::Reused);
        let mut out = vec![0u8; slot];
        let (a, b) = out.split_at_mut(4096);
        assert_eq!(disk.read_slot(3, &mut [a, b], BlockHash(4)).unwrap(), sum);
        assert_eq!(out, data);
        assert!(disk.path().ends_with(DISK_SLAB_FILE));
        Some(())
    }

    #[test]
    fn buffered_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        assert!(round_trip(IoMode::Buffered, dir.path()).is_some());
    }

    #[test]
    fn direct_round_trip_where_supported() {
        // tempdir is on the same file system as the workspace here (ext4: O_DIRECT works); on a
        // file system without O_DIRECT the open returns the typed error instead.
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        if round_trip(IoMode::Direct, dir.path()).is_none() {
            eprintln!("O_DIRECT unsupported on {}", dir.path().display());
        }
    }

    #[test]
    fn sub_parts_cut_across_boundaries() {
        let a = [1u8, 2, 3];
        let b = [4u8, 5];
        let parts: Vec<&[u8]> = vec![&a, &b];
        assert_eq!(sub_parts(&parts, 2, 2), vec![&[3u8][..], &[4u8][..]]);
        assert_eq!(sub_parts(&parts, 3, 2), vec![&[4u8, 5][..]]);
    }

    #[test]
    fn rejects_zero_geometry_and_bad_slot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DISK_SLAB_FILE);
        assert!(matches!(
            DiskTier::open(&path, 0, 1, IoMode::Buffered),
            Err(TierError::InvalidGeometry { .. })
        ));
        let (mut disk, _) = DiskTier::open(&path, 16, 1, IoMode::Buffered).unwrap();
        assert!(matches!(
            disk.write_slot(1, &[&[0u8; 16]], BlockHash(0)),
            Err(TierError::SlotOutOfRange { .. })
        ));
        let mut out = [0u8; 15];
        assert!(matches!(
            disk.read_slot(0, &mut [&mut out[..]], BlockHash(0)),
            Err(TierError::WrongLength { .. })
        ));
    }
}
