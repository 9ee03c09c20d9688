//! The disk tier: one preallocated file of fixed-size slots, read and written positionally.
//!
//! Owns [`DiskTier`], [`IoMode`] and the seam its transfers run through ([`DiskIo`],
//! [`DiskTransfer`], [`InlineIo`]). Slot `s` lives at byte `s × stride`, where the stride is
//! the shard size rounded up to 4 KiB so that O_DIRECT can address every slot. Every slot
//! operation stages the shard in one page-aligned buffer the tier owns: a write copies the
//! parts into it (checksumming in the same pass) and hands the buffer to the [`DiskIo`], which
//! writes it at the slot's offset; a read has the [`DiskIo`] fill the buffer, then copies it
//! out (checksumming in the same pass). A range read (`TierSlots::read_range`, one layer of a
//! layerwise load) has the [`DiskIo`] fill the start of the same buffer with only the part of
//! the slot covering the range (widened to 4 KiB boundaries in direct mode), then copies the
//! range out unverified (the layerwise load verifies the whole shard as its layers arrive).
//! Buffered mode (the default) goes through the page cache with `pwrite`/`pread`
//! (`std::os::unix::fs::FileExt`); direct mode opens the file with O_DIRECT. docs/BENCHMARKS.md has the measurement that made buffered the default.
//!
//! Why the staging buffer: the transfer owns every byte it touches, so a [`DiskIo`] may run it
//! on another thread and give up waiting at a deadline (the agent's `DeadlineIo` does) without
//! a late `pread` landing in an engine page, or a late `pwrite` reading one that was unmapped.
//! While an overdue transfer holds the buffer, every slot operation fails at once with
//! [`TierError::DiskStalled`]; the buffer returns ([`DiskIo::reclaim`]) when the transfer ends.
//! One buffer also means one transfer at a time, in order: a slot released after an overdue
//! write is not written again before that write has ended.
//!
//! Nothing is fsynced: a shard's bytes are in the page cache when its write returns (they
//! survive the process, not a power loss); a block lost in a crash fails its checksum or is
//! absent from the manifest, and is dropped. It must never decide which slot holds which
//! block, read a clock or spawn a thread (deadlines belong to the [`DiskIo`] the agent sets).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Largest single `pwrite`/`pread`, in bytes: big enough to amortise a syscall.
const CHUNK: usize = 256 << 10;

/// How the disk tier talks to its file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// Through the page cache (`pwrite`/`pread`).
    #[default]
    Buffered,
    /// O_DIRECT through the page-aligned staging buffer, bypassing the page cache.
    Direct,
}

/// Which way a disk transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskOp {
    /// From the staging buffer into the tier file.
    Write,
    /// From the tier file into the staging buffer.
    Read,
}

impl DiskOp {
    /// `write` or `read`.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskOp::Write => "write",
            DiskOp::Read => "read",
        }
    }
}

impl std::fmt::Display for DiskOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One slot's transfer (the whole slot, or the range of it a layerwise read wants), handed to
/// a [`DiskIo`]: it owns the staging buffer and a handle on the tier file, so it can be carried
/// out on any thread, and finish late, safely.
#[derive(Debug)]
pub struct DiskTransfer {
    op: DiskOp,
    slot: SlotId,
    file: Arc<File>,
    offset: u64,
    buf: MmapMut,
    len: usize,
}

impl DiskTransfer {
    /// Read or write.
    pub fn op(&self) -> DiskOp {
        self.op
    }

    /// The slot (one block shard, one engine page).
    pub fn slot(&self) -> SlotId {
        self.slot
    }

    /// Bytes moved, padded to 4 KiB in direct mode (a range read: the range, widened to 4 KiB
    /// boundaries in direct mode).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the transfer moves no byte (never, for a valid slot).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Carries the transfer out on the calling thread, in positional calls of at most 256 KiB.
    ///
    /// # Errors
    /// The first failing `pwrite`/`pread` (a short read at the end of the file is
    /// `UnexpectedEof`).
    pub fn perform(&mut self) -> std::io::Result<()> {
        let mut done = 0;
        while done < self.len {
            let n = (self.len - done).min(CHUNK);
            let at = self.offset + done as u64;
            match self.op {
                DiskOp::Write => self.file.write_all_at(&self.buf[done..done + n], at)?,
                DiskOp::Read => self.file.read_exact_at(&mut self.buf[done..done + n], at)?,
            }
            done += n;
        }
        Ok(())
    }
}

/// What a [`DiskIo`] did with a transfer.
#[derive(Debug)]
pub enum Submitted {
    /// It ended (well or not) in time; the transfer comes back with its buffer.
    Done(DiskTransfer, std::io::Result<()>),
    /// It did not end within the deadline (ms). The [`DiskIo`] keeps it (and its buffer)
    /// until it ends, then hands it back through [`DiskIo::reclaim`].
    Overdue {
        /// The deadline it missed, in ms.
        deadline_ms: u64,
    },
}

/// Where the disk tier's transfers run: the seam for deadlines and test faults. The tier
/// hands it one transfer at a time, and asks for an overdue one back before the next.
pub trait DiskIo: Send + std::fmt::Debug {
    /// Carries out `transfer` (see [`Submitted`]).
    fn run(&mut self, transfer: DiskTransfer) -> Submitted;
    /// The overdue transfer, once it has ended (its late result is of no use: the operation
    /// was already reported failed); `None` while it runs or when none is overdue.
    fn reclaim(&mut self) -> Option<DiskTransfer>;
}

/// Runs every transfer on the calling thread, without a deadline (tools, benchmarks, tests;
/// the default of a newly opened tier).
#[derive(Debug, Default)]
pub struct InlineIo;

impl DiskIo for InlineIo {
    fn run(&mut self, mut transfer: DiskTransfer) -> Submitted {
        let result = transfer.perform();
        Submitted::Done(transfer, result)
    }

    fn reclaim(&mut self) -> Option<DiskTransfer> {
        None
    }
}

/// The overdue transfer a stalled tier waits for.
#[derive(Clone, Copy, Debug)]
struct Overdue {
    op: DiskOp,
    slot: SlotId,
    deadline_ms: u64,
}

/// Preallocated slots in one file.
#[derive(Debug)]
pub struct DiskTier {
    file: Arc<File>,
    path: PathBuf,
    slot_bytes: usize,
    stride: u64,
    capacity: u64,
    mode: IoMode,
    /// Page-aligned staging of one slot (`stride` bytes); `None` while an overdue transfer
    /// holds it.
    staging: Option<MmapMut>,
    /// Where transfers run.
    io: Box<dyn DiskIo>,
    /// The transfer holding the staging buffer, while one does.
    overdue: Option<Overdue>,
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
        let staging = MmapMut::map_anon(stride as usize).map_err(io(path, "map"))?;
        Ok((
            DiskTier {
                file: Arc::new(file),
                path: path.to_path_buf(),
                slot_bytes,
                stride,
                capacity,
                mode,
                staging: Some(staging),
                io: Box::new(InlineIo),
                overdue: None,
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

    /// Runs every later transfer through `io` (the agent's sets a deadline on each). A
    /// transfer still overdue in the one replaced keeps its buffer: the tier then stays
    /// stalled; set the I/O before the first transfer.
    pub fn set_io(&mut self, io: Box<dyn DiskIo>) {
        self.io = io;
    }

    /// The staging buffer, taken back from an overdue transfer that has ended.
    ///
    /// Errors: [`TierError::DiskStalled`] while an overdue transfer still holds it.
    fn take_staging(&mut self, op: DiskOp, slot: SlotId) -> Result<MmapMut, TierError> {
        if self.staging.is_none() {
            if let Some(t) = self.io.reclaim() {
                self.staging = Some(t.buf);
                self.overdue = None;
            }
        }
        self.staging.take().ok_or_else(|| {
            let o = self.overdue.unwrap_or(Overdue {
                op,
                slot,
                deadline_ms: 0,
            });
            TierError::DiskStalled {
                op: op.as_str(),
                slot,
                earlier_op: o.op.as_str(),
                earlier_slot: o.slot,
                deadline_ms: o.deadline_ms,
            }
        })
    }

    /// Hands the first `len` bytes of `buf` to the I/O for `op` on bytes `at .. at + len` of
    /// `slot`; the buffer back when it ended well. On an I/O error the buffer is kept for the
    /// next operation; when overdue, the I/O keeps it. In direct mode `at` and `len` must be
    /// multiples of 4 KiB (callers align them).
    fn transfer(
        &mut self,
        op: DiskOp,
        slot: SlotId,
        at: u64,
        buf: MmapMut,
        len: usize,
    ) -> Result<MmapMut, TierError> {
        let t = DiskTransfer {
            op,
            slot,
            file: self.file.clone(),
            offset: slot * self.stride + at,
            buf,
            len,
        };
        match self.io.run(t) {
            Submitted::Done(t, Ok(())) => Ok(t.buf),
            Submitted::Done(t, Err(e)) => {
                self.staging = Some(t.buf);
                Err(io(&self.path, op.as_str())(e))
            }
            Submitted::Overdue { deadline_ms } => {
                self.overdue = Some(Overdue {
                    op,
                    slot,
                    deadline_ms,
                });
                Err(TierError::DiskDeadline {
                    op: op.as_str(),
                    slot,
                    deadline_ms,
                })
            }
        }
    }

    /// Bytes a transfer of `total` bytes moves: `total`, padded to 4 KiB in direct mode.
    fn transfer_len(&self, total: usize) -> usize {
        match self.mode {
            IoMode::Buffered => total,
            IoMode::Direct => ((total as u64).div_ceil(ALIGN) * ALIGN) as usize,
        }
    }

    /// The bytes of a slot a read of `offset .. offset + len` (bytes of the slot) moves:
    /// exactly that range in buffered mode; in direct mode widened to 4 KiB boundaries (never
    /// past the slot's stride, itself a multiple of 4 KiB). Returns (start, length).
    fn range_span(&self, offset: usize, len: usize) -> (u64, usize) {
        match self.mode {
            IoMode::Buffered => (offset as u64, len),
            IoMode::Direct => {
                let start = offset as u64 / ALIGN * ALIGN;
                let end = ((offset + len) as u64).div_ceil(ALIGN) * ALIGN;
                (start, (end - start) as usize)
            }
        }
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
        let mut staging = self.take_staging(DiskOp::Write, slot)?;
        let mut hasher = ShardHasher::new(seed);
        copy_parts(&mut [&mut staging[..total]], src, &mut hasher);
        let len = self.transfer_len(total);
        staging[total..len].fill(0);
        self.staging = Some(self.transfer(DiskOp::Write, slot, 0, staging, len)?);
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
        let staging = self.take_staging(DiskOp::Read, slot)?;
        let len = self.transfer_len(total);
        let staging = self.transfer(DiskOp::Read, slot, 0, staging, len)?;
        let mut hasher = ShardHasher::new(seed);
        copy_parts(dst, &[&staging[..total]], &mut hasher);
        self.staging = Some(staging);
        Ok(hasher.finish())
    }

    /// Reads only the part of the slot that covers the range (widened to 4 KiB boundaries in
    /// direct mode) into the staging buffer, through the same [`DiskIo`] transfer as a whole
    /// read (so deadlines, stalls and fault hooks apply alike), then copies the range out.
    fn read_range(&mut self, slot: SlotId, offset: usize, dst: &mut [u8]) -> Result<(), TierError> {
        check_slot(
            Tier::Disk,
            slot,
            self.capacity,
            self.slot_bytes,
            self.slot_bytes,
        )?;
        crate::tier::check_range(Tier::Disk, offset, dst.len(), self.slot_bytes)?;
        if dst.is_empty() {
            return Ok(());
        }
        let staging = self.take_staging(DiskOp::Read, slot)?;
        let (start, len) = self.range_span(offset, dst.len());
        let staging = self.transfer(DiskOp::Read, slot, start, staging, len)?;
        let skip = offset - start as usize;
        dst.copy_from_slice(&staging[skip..skip + dst.len()]);
        self.staging = Some(staging);
        Ok(())
    }
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

    /// What the scripted test I/O does next.
    #[derive(Debug, Default)]
    struct Script {
        fail_next: bool,
        hold_next: bool,
        held: Option<DiskTransfer>,
        released: bool,
    }

    /// A test I/O: fails or holds the transfers it is told to; gives the held one back when
    /// released.
    #[derive(Debug, Default, Clone)]
    struct Scripted(std::sync::Arc<std::sync::Mutex<Script>>);

    impl DiskIo for Scripted {
        fn run(&mut self, mut t: DiskTransfer) -> Submitted {
            let mut s = self.0.lock().unwrap();
            if std::mem::take(&mut s.fail_next) {
                return Submitted::Done(t, Err(std::io::Error::from_raw_os_error(libc::ENOSPC)));
            }
            if std::mem::take(&mut s.hold_next) {
                // The transfer completes late: the bytes land, the result is not waited for.
                t.perform().unwrap();
                s.held = Some(t);
                return Submitted::Overdue { deadline_ms: 25 };
            }
            let r = t.perform();
            Submitted::Done(t, r)
        }

        fn reclaim(&mut self) -> Option<DiskTransfer> {
            let mut s = self.0.lock().unwrap();
            if s.released {
                s.held.take()
            } else {
                None
            }
        }
    }

    #[test]
    fn an_overdue_transfer_stalls_the_tier_until_it_is_reclaimed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DISK_SLAB_FILE);
        let (mut disk, _) = DiskTier::open(&path, 5000, 4, IoMode::Buffered).unwrap();
        let script = Scripted::default();
        disk.set_io(Box::new(script.clone()));
        let data = vec![7u8; 5000];

        script.0.lock().unwrap().fail_next = true;
        let e = disk.write_slot(0, &[&data], BlockHash(1)).unwrap_err();
        assert!(
            matches!(e, TierError::Io { op: "write", .. }),
            "an I/O error is reported as such: {e}"
        );

        script.0.lock().unwrap().hold_next = true;
        let e = disk.write_slot(1, &[&data], BlockHash(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "disk tier: write of slot 1 missed its deadline of 25 ms"
        );
        let mut out = vec![0u8; 5000];
        let e = disk
            .read_slot(2, &mut [&mut out[..]], BlockHash(1))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "disk tier: read of slot 2 not started: an earlier write of slot 1 missed its deadline of 25 ms and is still in flight"
        );

        let e = disk.read_range(2, 4097, &mut out[..10]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "disk tier: read of slot 2 not started: an earlier write of slot 1 missed its deadline of 25 ms and is still in flight",
            "a range read waits for the overdue transfer like a whole read"
        );

        // The late write ends: the tier takes work again, and its bytes are there.
        script.0.lock().unwrap().released = true;
        let sum = disk
            .read_slot(1, &mut [&mut out[..]], BlockHash(1))
            .unwrap();
        assert_eq!(sum, checksum(BlockHash(1), &data));
        assert_eq!(out, data);

        // A range read past its deadline is the typed deadline error, and stalls the tier
        // until it ends, like a whole read.
        script.0.lock().unwrap().hold_next = true;
        let e = disk.read_range(1, 4097, &mut out[..10]).unwrap_err();
        assert!(
            matches!(
                e,
                TierError::DiskDeadline {
                    op: "read",
                    slot: 1,
                    deadline_ms: 25
                }
            ),
            "{e}"
        );
        let mut part = [0u8; 10];
        disk.read_range(1, 4097, &mut part).unwrap();
        assert_eq!(part, data[4097..4107]);
    }
}

#[cfg(test)]
mod range_tests {
    use super::*;

    /// The transfers seen (op, byte offset in the file, bytes), and whether to fail the next.
    type Log = (Vec<(DiskOp, u64, usize)>, bool);

    /// Records where each transfer went, then carries it out (or fails it, when told).
    #[derive(Debug, Default, Clone)]
    struct Recording(std::sync::Arc<std::sync::Mutex<Log>>);

    impl DiskIo for Recording {
        fn run(&mut self, mut t: DiskTransfer) -> Submitted {
            let mut s = self.0.lock().unwrap();
            s.0.push((t.op(), t.offset, t.len()));
            if std::mem::take(&mut s.1) {
                return Submitted::Done(t, Err(std::io::Error::from_raw_os_error(libc::EIO)));
            }
            let r = t.perform();
            Submitted::Done(t, r)
        }

        fn reclaim(&mut self) -> Option<DiskTransfer> {
            None
        }
    }

    const SLOT: usize = 3 * 4096 + 100; // not a multiple of the alignment on purpose

    /// A tier of 4 slots with distinct bytes in slots 1, 2 and 3; `None` where the mode is
    /// unsupported.
    fn filled(mode: IoMode, dir: &Path) -> Option<(DiskTier, Vec<u8>, Recording)> {
        let path = dir.join(DISK_SLAB_FILE);
        let (mut disk, _) = match DiskTier::open(&path, SLOT, 4, mode) {
            Err(TierError::DirectUnsupported { .. }) => return None,
            other => other.unwrap(),
        };
        for s in 1..4u64 {
            let data: Vec<u8> = (0..SLOT).map(|i| (i * 7 + s as usize * 31) as u8).collect();
            disk.write_slot(s, &[&data], BlockHash(s as u128)).unwrap();
        }
        let mut whole = vec![0u8; SLOT];
        disk.read_slot(2, &mut [&mut whole[..]], BlockHash(2))
            .unwrap();
        let rec = Recording::default();
        disk.set_io(Box::new(rec.clone()));
        Some((disk, whole, rec))
    }

    fn ranges_equal_slices(mode: IoMode, dir: &Path) -> Option<()> {
        let (mut disk, whole, rec) = filled(mode, dir)?;
        let stride = DiskTier::slot_offset(SLOT, 1);
        let ranges = [
            (0, 1),
            (1, 4095),
            (4095, 2),
            (4096, 4096),
            (5000, 7000),
            (SLOT - 1, 1),
            (SLOT - 100, 100),
            (12000, SLOT - 12000),
            (0, SLOT),
            (777, 0),
        ];
        for (offset, len) in ranges {
            rec.0.lock().unwrap().0.clear();
            let mut out = vec![0xeeu8; len];
            disk.read_range(2, offset, &mut out).unwrap();
            assert_eq!(out, &whole[offset..offset + len], "{mode:?} {offset}+{len}");
            let moves = rec.0.lock().unwrap().0.clone();
            if len == 0 {
                assert!(moves.is_empty(), "an empty range moves nothing");
                continue;
            }
            // One read, covering the range and no more than its alignment needs.
            assert_eq!(moves.len(), 1, "{moves:?}");
            let (op, at, n) = moves[0];
            assert_eq!(op, DiskOp::Read);
            let (start, end) = (
                2 * stride + offset as u64,
                2 * stride + (offset + len) as u64,
            );
            assert!(
                at <= start && at + n as u64 >= end,
                "{mode:?} {offset}+{len}: {moves:?}"
            );
            match mode {
                IoMode::Buffered => assert_eq!((at, n), (start, len)),
                IoMode::Direct => {
                    assert_eq!(at % ALIGN, 0);
                    assert_eq!(n as u64 % ALIGN, 0);
                    assert!(start - at < ALIGN && at + n as u64 - end < ALIGN);
                }
            }
        }
        Some(())
    }

    #[test]
    fn buffered_range_reads_read_only_the_range() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ranges_equal_slices(IoMode::Buffered, dir.path()).is_some());
    }

    #[test]
    fn direct_range_reads_read_only_the_aligned_range_where_supported() {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        if ranges_equal_slices(IoMode::Direct, dir.path()).is_none() {
            eprintln!("O_DIRECT unsupported on {}", dir.path().display());
        }
    }

    #[test]
    fn a_range_read_fault_is_the_typed_error_and_the_tier_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let (mut disk, whole, rec) = filled(IoMode::Buffered, dir.path()).unwrap();
        rec.0.lock().unwrap().1 = true;
        let mut out = vec![0u8; 300];
        let e = disk.read_range(2, 4000, &mut out).unwrap_err();
        assert!(
            matches!(
                e,
                TierError::Io {
                    tier: Tier::Disk,
                    op: "read",
                    ..
                }
            ),
            "a failed range read is the tier's I/O error: {e}"
        );
        // The staging buffer came back: the next read works.
        disk.read_range(2, 4000, &mut out).unwrap();
        assert_eq!(out, &whole[4000..4300]);
    }

    #[test]
    fn a_range_outside_the_slot_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut disk, _, rec) = filled(IoMode::Buffered, dir.path()).unwrap();
        let mut out = vec![0u8; 2];
        assert!(matches!(
            disk.read_range(2, SLOT - 1, &mut out),
            Err(TierError::WrongLength { .. })
        ));
        assert!(matches!(
            disk.read_range(4, 0, &mut out),
            Err(TierError::SlotOutOfRange { .. })
        ));
        assert!(matches!(
            disk.read_range(0, usize::MAX, &mut out),
            Err(TierError::WrongLength { .. })
        ));
        assert!(rec.0.lock().unwrap().0.is_empty(), "nothing was read");
    }
}
