//! The disk tier: one preallocated file of fixed-size slots, read and written positionally.
//!
//! Owns [`DiskTier`], [`IoMode`] and the seam its transfers run through ([`DiskIo`],
//! [`DiskTransfer`], [`InlineIo`]). Slot `s` lives at byte `s × stride`, where the stride is
//! the shard size rounded up to 4 KiB so that O_DIRECT can address every slot. Every slot
//! operation moves the shard through two page-aligned staging buffers the tier owns, one chunk
//! of the slot at a time (a quarter of the slot, between 64 KiB and 1 MiB, a multiple of 4 KiB),
//! with two chunks in flight: a write copies the parts of chunk `k + 1` into one buffer
//! (checksumming in the same pass) while the [`DiskIo`] writes chunk `k` from the other; a read
//! copies chunk `k` out of one buffer (checksumming in the same pass) while the [`DiskIo`] reads
//! chunk `k + 1` into the other. Where the [`DiskIo`] runs transfers on a thread of its own (the
//! agent's), the copy and the kernel's copy overlap, and each chunk is copied while the other
//! side's copy has just left it in cache. A range read (`TierSlots::read_range`, one layer of a
//! layerwise load) moves only the chunks covering the range (widened to 4 KiB boundaries in
//! direct mode) and copies the range out unverified (the layerwise load verifies the whole
//! shard as its layers arrive). A batch ([`DiskTier::write_slots`], [`DiskTier::read_slots`]:
//! a task's disk shards, from `tandem_store::batch`) runs as one pipeline over all its slots:
//! pieces of several slots are packed into one transfer of up to 1 MiB (a quarter of the batch
//! at least one chunk; one `pwrite`/`pread` per run of slots that follow each other in the
//! file), so the hand-offs to the [`DiskIo`] are per transfer, not per slot, and the two
//! transfers in flight overlap across slot boundaries.
//!
//! Two batch paths skip the staging copy in buffered mode. A batch write from a mapping the
//! caller hands over as [`Kept`] (the engine's pool: [`DiskTier::write_slots_kept`]) writes
//! with `pwritev` straight from the engine's pages, each transfer holding a clone of the
//! mapping's owner so that a late one still reads mapped memory, and checksums each transfer's
//! bytes on the calling thread while the [`DiskIo`] writes them. A batch read
//! ([`DiskTier::cached_reader`], [`CachedReader`]) takes the slots whose bytes the page cache
//! holds straight into the caller's memory with `preadv2(RWF_NOWAIT)`, on the caller's threads
//! and without the [`DiskIo`]: such a read never waits for the device (a page not cached ends
//! it with `EAGAIN`, and that slot is read through the [`DiskIo`] as before), so it needs no
//! deadline; a read into the caller's memory that could wait is never made, since a late one
//! would land in a page its owner was told had failed. Buffered mode (the default) goes through the page cache with
//! `pwrite`/`pread` (`std::os::unix::fs::FileExt`); direct mode opens the file with O_DIRECT.
//! docs/BENCHMARKS.md has the measurement that made buffered the default.
//!
//! Why staging buffers (for single slots, range reads, reads not in the page cache and direct
//! mode): a transfer owns every byte it touches, so a [`DiskIo`] may run it
//! on another thread and give up waiting at a deadline (the agent's `DeadlineIo` does) without
//! a late `pread` landing in an engine page, or a late `pwrite` reading one that was unmapped.
//! While an overdue transfer (or one submitted after it) holds a buffer, every slot operation
//! fails at once with [`TierError::DiskStalled`]; the buffers return ([`DiskIo::reclaim`]) when
//! those transfers end. Transfers run in the order submitted and no slot operation starts
//! before every buffer is home: a slot released after an overdue write is not written again
//! before that write has ended.
//!
//! Nothing is fsynced: a shard's bytes are in the page cache when its write returns (they
//! survive the process, not a power loss); a block lost in a crash fails its checksum or is
//! absent from the manifest, and is dropped. It must never decide which slot holds which
//! block, read a clock or spawn a thread (deadlines belong to the [`DiskIo`] the agent sets).

use std::collections::VecDeque;
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

/// Smallest and largest chunk, in bytes: big enough to amortise a syscall and a hand-off to
/// the I/O thread, small enough that a slot of 1 MiB is moved in 4 chunks that overlap.
const CHUNK_MIN: usize = 64 << 10;
const CHUNK_MAX: usize = 1 << 20;

/// Staging buffers, and so transfers in flight at once.
const BUFFERS: usize = 2;

/// Largest transfer of a batch ([`DiskTier::write_slots`], [`DiskTier::read_slots`]), in
/// bytes, and so the size of each staging buffer: pieces of several slots are packed into one
/// transfer up to this size (one hand-off to the I/O for 16 shards of 64 KiB).
const BATCH_TRANSFER_MAX: usize = 1 << 20;

/// How the disk tier talks to its file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// Through the page cache (`pwrite`/`pread`).
    #[default]
    Buffered,
    /// O_DIRECT through the page-aligned staging buffers, bypassing the page cache.
    Direct,
}

/// Which way a disk transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskOp {
    /// From a staging buffer into the tier file.
    Write,
    /// From the tier file into a staging buffer.
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

/// One chunk of a slot's transfer, handed to a [`DiskIo`]: it owns its staging buffer and a
/// handle on the tier file, so it can be carried out on any thread, and finish late, safely.
#[derive(Debug)]
pub struct DiskTransfer {
    op: DiskOp,
    /// The first slot it moves bytes of.
    slot: SlotId,
    file: Arc<File>,
    mem: Memory,
    /// Bytes moved: the buffer's first `len` bytes.
    len: usize,
    /// Where the buffer's bytes go (come from), in buffer order: (file offset, bytes). One per
    /// slot piece the transfer carries (a batch packs pieces of several slots into one).
    segments: Vec<(u64, usize)>,
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

    /// Bytes moved (at most one staging buffer; padded to 4 KiB in direct mode).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the transfer moves no byte (never, for a valid slot).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots whose pieces it carries (1 for a transfer of one slot operation).
    pub fn segments(&self) -> usize {
        self.segments.len()
    }

    /// Carries the transfer out on the calling thread: one positional call per run of
    /// segments that follow each other in the file.
    ///
    /// # Errors
    /// The first failing `pwrite`/`pread` (a short read at the end of the file is
    /// `UnexpectedEof`); the segments after it are not moved.
    pub fn perform(&mut self) -> std::io::Result<()> {
        let mut at = 0usize;
        let mut i = 0;
        while i < self.segments.len() {
            let (offset, mut n) = self.segments[i];
            let first = i;
            i += 1;
            while i < self.segments.len() && self.segments[i].0 == offset + n as u64 {
                n += self.segments[i].1;
                i += 1;
            }
            match (&mut self.mem, self.op) {
                (Memory::Staging(buf), DiskOp::Write) => {
                    self.file.write_all_at(&buf[at..at + n], offset)?
                }
                (Memory::Staging(buf), DiskOp::Read) => {
                    self.file.read_exact_at(&mut buf[at..at + n], offset)?
                }
                (Memory::Kept { parts, .. }, DiskOp::Write) => {
                    write_parts_at(&self.file, &parts[first..i], offset)?
                }
                (Memory::Kept { .. }, DiskOp::Read) => {
                    return Err(std::io::Error::other(
                        "a read into kept memory (the tier never makes one)",
                    ))
                }
            }
            at += n;
        }
        Ok(())
    }
}

/// The memory a transfer moves bytes from or into.
#[derive(Debug)]
enum Memory {
    /// One of the tier's staging buffers (reads, and writes of staged batches).
    Staging(MmapMut),
    /// The caller's mapping, kept mapped by the transfer's clone of its owner ([`Kept`]) for
    /// as long as the transfer lives, even past a missed deadline (writes only): one
    /// (address, bytes) part per segment, in order, each inside the mapping.
    Kept {
        parts: Vec<(usize, usize)>,
        _owner: Arc<dyn std::any::Any + Send + Sync>,
    },
}

impl Memory {
    /// The staging buffer to take home, if it is one.
    fn into_staging(self) -> Option<MmapMut> {
        match self {
            Memory::Staging(buf) => Some(buf),
            Memory::Kept { .. } => None,
        }
    }
}

/// A mapping a batch write may hand to the [`DiskIo`] without staging the bytes
/// ([`DiskTier::write_slots_kept`]): the shards' pages are written with `pwritev` straight from
/// it, and each transfer holds a clone of `owner`, so that a transfer finishing late (past its
/// deadline) still reads mapped memory, never memory unmapped or mapped anew in between.
#[derive(Clone)]
pub struct Kept {
    owner: Arc<dyn std::any::Any + Send + Sync>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("start", &self.start)
            .field("len", &self.len)
            .finish()
    }
}

impl Kept {
    /// The whole of `map`'s mapping, kept mapped by `map` itself.
    pub fn shm(map: Arc<crate::shm::ShmFile>) -> Self {
        let (start, len) = (map.bytes().as_ptr() as usize, map.len());
        Kept {
            owner: map,
            start,
            len,
        }
    }

    /// Whether `part` lies inside the kept mapping.
    fn holds(&self, part: &[u8]) -> bool {
        let at = part.as_ptr() as usize;
        at >= self.start && at + part.len() <= self.start + self.len
    }
}

/// `pwritev` of every byte of `parts` (addresses and lengths, concatenated in order) at
/// `offset`, continued after a short write and retried on `EINTR`.
fn write_parts_at(file: &File, parts: &[(usize, usize)], offset: u64) -> std::io::Result<()> {
    /// At most this many parts per call (IOV_MAX is 1024 on Linux).
    const IOV: usize = 64;
    let mut iov: Vec<libc::iovec> = parts
        .iter()
        .map(|&(at, n)| libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: n,
        })
        .collect();
    let mut first = 0usize;
    let mut pos = offset;
    while first < iov.len() {
        if iov[first].iov_len == 0 {
            first += 1;
            continue;
        }
        let count = (iov.len() - first).min(IOV);
        let at = libc::off_t::try_from(pos)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: every iovec covers bytes of a mapping the transfer keeps alive (`Kept`); the
        // call only reads them.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov[first..].as_ptr(),
                count as libc::c_int,
                at,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::WriteZero));
        }
        let mut left = n as usize;
        pos += left as u64;
        while left > 0 {
            let v = &mut iov[first];
            let take = left.min(v.iov_len);
            v.iov_base = (v.iov_base as usize + take) as *mut libc::c_void;
            v.iov_len -= take;
            left -= take;
            if v.iov_len == 0 {
                first += 1;
            }
        }
    }
    Ok(())
}

/// What a [`DiskIo`] did with the transfer waited for.
#[derive(Debug)]
pub enum Submitted {
    /// It ended (well or not) in time; the transfer comes back with its buffer.
    Done(DiskTransfer, std::io::Result<()>),
    /// It did not end within the deadline (ms). The [`DiskIo`] keeps it, and every transfer
    /// submitted after it, until they end, then hands each back through [`DiskIo::reclaim`].
    Overdue {
        /// The deadline it missed, in ms.
        deadline_ms: u64,
    },
}

/// Where the disk tier's transfers run: the seam for deadlines and test faults. The tier
/// submits at most two transfers ahead, waits for them in the order submitted, never waits
/// when none is in flight, and asks for the overdue ones back before its next operation.
pub trait DiskIo: Send + std::fmt::Debug {
    /// Starts `transfer` (it runs after every transfer submitted before it).
    fn submit(&mut self, transfer: DiskTransfer);
    /// Waits for the oldest submitted transfer not waited for yet (see [`Submitted`]).
    fn wait(&mut self) -> Submitted;
    /// One transfer kept after [`Submitted::Overdue`], once it has ended (its late result is
    /// of no use: the operation was already reported failed); `None` while none has ended or
    /// none is kept.
    fn reclaim(&mut self) -> Option<DiskTransfer>;

    /// Whether a batch read may take the bytes the page cache already holds straight into the
    /// caller's memory, on the caller's threads, with `preadv2(RWF_NOWAIT)` (see
    /// [`DiskTier::cached_reader`]): such a read never waits for the device, so it needs no
    /// deadline, but it does not go through this I/O. False by default (an I/O that injects
    /// faults, or counts reads, sees every read); [`InlineIo`] and the agent's I/O say true.
    fn cache_reads(&self) -> bool {
        false
    }
}

/// Runs every transfer on the calling thread, when it is waited for, without a deadline
/// (tools, benchmarks, tests; the default of a newly opened tier).
#[derive(Debug, Default)]
pub struct InlineIo {
    queued: VecDeque<DiskTransfer>,
}

impl DiskIo for InlineIo {
    fn submit(&mut self, transfer: DiskTransfer) {
        self.queued.push_back(transfer);
    }

    fn wait(&mut self) -> Submitted {
        match self.queued.pop_front() {
            Some(mut t) => {
                let result = t.perform();
                Submitted::Done(t, result)
            }
            // The tier never waits with nothing in flight.
            None => Submitted::Overdue { deadline_ms: 0 },
        }
    }

    fn reclaim(&mut self) -> Option<DiskTransfer> {
        None
    }

    fn cache_reads(&self) -> bool {
        true
    }
}

/// Bytes of one `preadv2(RWF_NOWAIT)` of a cached read, checksummed right after it while they
/// are still in this core's cache (a quarter of a 1 MiB shard; the L2 here is 2 MiB).
const CACHED_PIECE: usize = 256 << 10;

/// Reads slots of the tier file straight into the caller's memory when the page cache holds
/// their bytes, never waiting for the device (`preadv2` with `RWF_NOWAIT`: a page not in the
/// cache ends the read with `EAGAIN`). Borrowed from the tier by [`DiskTier::cached_reader`]
/// for one batch; `Sync`, so the batch's slots may be read on several threads.
#[derive(Debug)]
pub struct CachedReader<'a> {
    file: &'a File,
    stride: u64,
    slot_bytes: usize,
    capacity: u64,
    /// Set when the file system refuses `RWF_NOWAIT` reads: the tier stops trying.
    unsupported: &'a std::sync::atomic::AtomicBool,
}

impl CachedReader<'_> {
    /// Reads the whole shard of `slot` into `dst` (exactly one shard long) and returns its
    /// checksum seeded with `seed`, or `None` when some of its bytes are not in the page cache
    /// (or the read fails, or the file system has no `RWF_NOWAIT`): `dst` then holds an
    /// unspecified prefix of the shard, and the caller reads the slot through the tier's
    /// [`DiskIo`] instead ([`DiskTier::read_slots`]), which reports errors and deadlines.
    /// Each piece is checksummed right after it lands, while it is in cache.
    pub fn read(&self, slot: SlotId, dst: &mut [u8], seed: BlockHash) -> Option<Checksum> {
        if slot >= self.capacity || dst.len() != self.slot_bytes {
            return None;
        }
        let base = slot * self.stride;
        let mut hasher = ShardHasher::new(seed);
        let mut at = 0usize;
        while at < dst.len() {
            let end = (at + CACHED_PIECE).min(dst.len());
            let piece = &mut dst[at..end];
            let n = read_nowait(self.file, piece, base + at as u64);
            match n {
                Ok(n) if n == piece.len() => {}
                Ok(_) => return None,
                Err(e) => {
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
                    ) {
                        self.unsupported
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    return None;
                }
            }
            hasher.update(&dst[at..end]);
            at = end;
        }
        Some(hasher.finish())
    }
}

/// One `preadv2(RWF_NOWAIT)` of `dst.len()` bytes at `offset`, retried on `EINTR` and
/// continued after a short read that made progress; returns the bytes read (fewer than asked
/// when the rest is not cached or the file ends).
fn read_nowait(file: &File, dst: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut done = 0usize;
    while done < dst.len() {
        let rest = &mut dst[done..];
        let iov = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let at = libc::off_t::try_from(offset + done as u64)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: one iovec over `rest`, a live exclusive slice; the call only writes into it.
        let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
        match n {
            n if n > 0 => done += n as usize,
            0 => break,
            _ => {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => break,
                    _ if done > 0 => break,
                    _ => return Err(e),
                }
            }
        }
    }
    Ok(done)
}

/// The overdue transfer a stalled tier waits for.
#[derive(Clone, Copy, Debug)]
struct Overdue {
    op: DiskOp,
    slot: SlotId,
    deadline_ms: u64,
}

/// A piece of one slot's transfer in a pipeline: bytes `at .. at + n` of the slot's span.
#[derive(Clone, Copy, Debug)]
struct Piece {
    /// The job (slot operation) of the batch it belongs to.
    job: usize,
    slot: SlotId,
    /// Offset in the slot's span.
    at: usize,
    /// Offset in the tier file.
    offset: u64,
    /// Bytes moved.
    n: usize,
    /// Of those, the shard's (the rest is direct-mode padding).
    take: usize,
}

/// One slot write of a batch ([`DiskTier::write_slots`]): the shard's parts (concatenated in
/// order), the seed of its checksum, and the result once the batch ran.
#[derive(Debug)]
pub struct SlotWrite<'a> {
    /// The slot.
    pub slot: SlotId,
    /// The shard's bytes, in parts.
    pub src: &'a [&'a [u8]],
    /// The checksum's seed (the block hash).
    pub seed: BlockHash,
    /// The shard's checksum, or why the write failed; `None` before the batch ran.
    pub result: Option<Result<Checksum, TierError>>,
}

/// One slot read of a batch ([`DiskTier::read_slots`]): where the shard goes (parts), the
/// seed of its checksum, and the result once the batch ran.
#[derive(Debug)]
pub struct SlotRead<'a> {
    /// The slot.
    pub slot: SlotId,
    /// Where the shard's bytes go, in parts.
    pub dst: Vec<&'a mut [u8]>,
    /// The checksum's seed (the block hash).
    pub seed: BlockHash,
    /// The checksum of the bytes read, or why the read failed; `None` before the batch ran.
    pub result: Option<Result<Checksum, TierError>>,
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
    /// Bytes of one chunk (a multiple of 4 KiB).
    chunk: usize,
    /// The page-aligned staging buffers at home (`chunk` bytes each).
    buffers: Vec<MmapMut>,
    /// Buffers kept by the [`DiskIo`] with overdue transfers.
    held: usize,
    /// Where transfers run.
    io: Box<dyn DiskIo>,
    /// The transfer that missed its deadline, while buffers are held.
    overdue: Option<Overdue>,
    /// Set once the file system refused an `RWF_NOWAIT` read ([`CachedReader`]).
    nowait_refused: std::sync::atomic::AtomicBool,
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

    /// Bytes of one chunk for slots of `stride` bytes: a quarter of the slot, between 64 KiB
    /// and 1 MiB, a multiple of 4 KiB, never more than the slot.
    fn chunk_bytes(stride: u64) -> usize {
        let quarter = (stride as usize / 4).div_ceil(ALIGN as usize) * ALIGN as usize;
        quarter.clamp(CHUNK_MIN, CHUNK_MAX).min(stride as usize)
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
        let chunk = Self::chunk_bytes(stride);
        let buffers = (0..BUFFERS)
            .map(|_| MmapMut::map_anon(chunk.max(BATCH_TRANSFER_MAX)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(io(path, "map"))?;
        Ok((
            DiskTier {
                file: Arc::new(file),
                path: path.to_path_buf(),
                slot_bytes,
                stride,
                capacity,
                mode,
                chunk,
                buffers,
                held: 0,
                io: Box::new(InlineIo::default()),
                overdue: None,
                nowait_refused: std::sync::atomic::AtomicBool::new(false),
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

    /// Runs every later transfer through `io` (the agent's sets a deadline on each). Transfers
    /// still overdue in the one replaced keep their buffers: the tier then stays stalled; set
    /// the I/O before the first transfer.
    pub fn set_io(&mut self, io: Box<dyn DiskIo>) {
        self.io = io;
    }

    /// Takes back the transfers an overdue batch left with the I/O that have ended since,
    /// their staging buffers to the pool; `held` counts those still out.
    fn reclaim_held(&mut self) {
        while self.held > 0 {
            let Some(t) = self.io.reclaim() else { break };
            self.buffers.extend(t.mem.into_staging());
            self.held -= 1;
        }
    }

    /// A reader of the slots whose bytes the page cache holds, straight into the caller's
    /// memory ([`CachedReader`]), for one batch; `None` (every read goes through the
    /// [`DiskIo`]) in direct mode, when the I/O does not allow it ([`DiskIo::cache_reads`]),
    /// when the file system refused such a read before, or while an overdue transfer holds a
    /// staging buffer (the tier is stalled: the reads fail as every other operation does).
    pub fn cached_reader(&mut self) -> Option<CachedReader<'_>> {
        self.reclaim_held();
        let refused = self
            .nowait_refused
            .load(std::sync::atomic::Ordering::Relaxed);
        if self.mode != IoMode::Buffered || !self.io.cache_reads() || refused || self.held > 0 {
            return None;
        }
        Some(CachedReader {
            file: &self.file,
            stride: self.stride,
            slot_bytes: self.slot_bytes,
            capacity: self.capacity,
            unsupported: &self.nowait_refused,
        })
    }

    /// Every staging buffer, the ones of overdue transfers that have ended taken back.
    ///
    /// Errors: [`TierError::DiskStalled`] while an overdue transfer still holds one.
    fn take_buffers(&mut self, op: DiskOp, slot: SlotId) -> Result<Vec<MmapMut>, TierError> {
        self.reclaim_held();
        if self.held > 0 {
            let o = self.overdue.unwrap_or(Overdue {
                op,
                slot,
                deadline_ms: 0,
            });
            return Err(TierError::DiskStalled {
                op: op.as_str(),
                slot,
                earlier_op: o.op.as_str(),
                earlier_slot: o.slot,
                deadline_ms: o.deadline_ms,
            });
        }
        self.overdue = None;
        Ok(std::mem::take(&mut self.buffers))
    }

    /// Moves bytes `start .. start + span` of `slot` (both multiples of 4 KiB in direct mode)
    /// chunk by chunk through the staging buffers, [`BUFFERS`] transfers in flight. `each(at,
    /// bytes)` is called once per chunk, in order, with the chunk's offset in the span and its
    /// first `useful - at` bytes at most (the rest is direct-mode padding): for a write before
    /// the chunk is submitted (it fills them; the padding is zeroed), for a read once the chunk
    /// has arrived (it takes them). After an I/O error no more chunks are submitted (and a read
    /// calls `each` no more); the ones in flight are waited for, so that the buffers are home.
    fn pipeline(
        &mut self,
        op: DiskOp,
        slot: SlotId,
        start: u64,
        span: usize,
        useful: usize,
        mut each: impl FnMut(usize, &mut [u8]),
    ) -> Result<(), TierError> {
        let mut pieces = Vec::with_capacity(span.div_ceil(self.chunk));
        self.split(0, slot, start, span, useful, self.chunk, &mut pieces);
        let chunk = self.chunk;
        let (_, result) = self.run_pieces(op, &pieces, chunk, |p, buf| each(p.at, buf));
        result
    }

    /// Appends the pieces of bytes `start .. start + span` of `slot` (job `job` of a batch),
    /// at most `max` bytes each, the first `useful` bytes of the span being the shard's.
    #[allow(clippy::too_many_arguments)]
    fn split(
        &self,
        job: usize,
        slot: SlotId,
        start: u64,
        span: usize,
        useful: usize,
        max: usize,
        out: &mut Vec<Piece>,
    ) {
        let mut at = 0usize;
        while at < span {
            let n = (span - at).min(max);
            out.push(Piece {
                job,
                slot,
                at,
                offset: slot * self.stride + start + at as u64,
                n,
                take: useful.saturating_sub(at).min(n),
            });
            at += n;
        }
    }

    /// Moves `pieces` in order through the staging buffers, packing consecutive pieces into
    /// one transfer up to `max` bytes, [`BUFFERS`] transfers in flight. `each(piece, bytes)`
    /// is called once per piece, in order, with its `take` bytes: for a write before its
    /// transfer is submitted (it fills them; the padding is zeroed), for a read once it has
    /// arrived (it takes them). Returns how many pieces (a prefix) were moved (and, for a read,
    /// handed to `each`) and the first error: after an I/O error no more transfers are
    /// submitted, the ones in flight are waited for, so that the buffers are home.
    fn run_pieces(
        &mut self,
        op: DiskOp,
        pieces: &[Piece],
        max: usize,
        mut each: impl FnMut(&Piece, &mut [u8]),
    ) -> (usize, Result<(), TierError>) {
        let Some(first) = pieces.first() else {
            return (0, Ok(()));
        };
        let mut free = match self.take_buffers(op, first.slot) {
            Ok(free) => free,
            Err(e) => return (0, Err(e)),
        };
        // In flight: the range of pieces each transfer carries.
        let mut in_flight: VecDeque<std::ops::Range<usize>> = VecDeque::with_capacity(BUFFERS);
        let mut next = 0usize;
        let mut moved = 0usize;
        let mut failed: Option<std::io::Error> = None;
        loop {
            while failed.is_none() && next < pieces.len() {
                let Some(mut buf) = free.pop() else { break };
                let from = next;
                let mut len = 0usize;
                let mut segments = Vec::new();
                while next < pieces.len() && (next == from || len + pieces[next].n <= max) {
                    let p = &pieces[next];
                    if op == DiskOp::Write {
                        each(p, &mut buf[len..len + p.take]);
                        buf[len + p.take..len + p.n].fill(0);
                    }
                    segments.push((p.offset, p.n));
                    len += p.n;
                    next += 1;
                }
                self.io.submit(DiskTransfer {
                    op,
                    slot: pieces[from].slot,
                    file: self.file.clone(),
                    mem: Memory::Staging(buf),
                    len,
                    segments,
                });
                in_flight.push_back(from..next);
            }
            let Some(carried) = in_flight.pop_front() else {
                break;
            };
            match self.io.wait() {
                Submitted::Done(t, Ok(())) => {
                    let Some(mut buf) = t.mem.into_staging() else {
                        continue;
                    };
                    if failed.is_none() {
                        if op == DiskOp::Read {
                            let mut at = 0usize;
                            for p in &pieces[carried.clone()] {
                                each(p, &mut buf[at..at + p.take]);
                                at += p.n;
                            }
                        }
                        moved = carried.end;
                    }
                    free.push(buf);
                }
                Submitted::Done(t, Err(e)) => {
                    free.extend(t.mem.into_staging());
                    failed.get_or_insert(e);
                }
                Submitted::Overdue { deadline_ms } => {
                    // The I/O keeps this transfer and every one submitted after it.
                    self.held = in_flight.len() + 1;
                    self.buffers = free;
                    let slot = pieces[carried.start].slot;
                    self.overdue = Some(Overdue {
                        op,
                        slot,
                        deadline_ms,
                    });
                    return (
                        moved,
                        Err(TierError::DiskDeadline {
                            op: op.as_str(),
                            slot,
                            deadline_ms,
                        }),
                    );
                }
            }
        }
        self.buffers = free;
        match failed {
            Some(e) => (moved, Err(io(&self.path, op.as_str())(e))),
            None => (moved, Ok(())),
        }
    }

    /// The size of each transfer of a batch of `total` bytes: a quarter of the batch (so that
    /// a batch moves in at least four transfers that overlap), at least one chunk, at most
    /// [`BATCH_TRANSFER_MAX`], a multiple of 4 KiB.
    fn batch_transfer(&self, total: usize) -> usize {
        let quarter = (total / 4).div_ceil(ALIGN as usize) * ALIGN as usize;
        quarter.clamp(self.chunk, self.chunk.max(BATCH_TRANSFER_MAX))
    }

    /// The pieces of a batch of jobs `(slot, bytes, result)`, in job order, each at most one
    /// transfer long, and that transfer's length (bytes); a job whose slot or size is refused
    /// gets its error in `result` and no piece. Shared by [`DiskTier::write_slots`] and
    /// [`DiskTier::read_slots`].
    fn plan_batch<'r, T: 'r>(
        &self,
        jobs: impl Iterator<Item = (SlotId, usize, &'r mut Option<Result<T, TierError>>)>,
    ) -> (Vec<Piece>, usize) {
        let mut pieces = Vec::new();
        for (j, (slot, total, result)) in jobs.enumerate() {
            match check_slot(Tier::Disk, slot, self.capacity, self.slot_bytes, total) {
                Ok(()) => {
                    let span = self.transfer_len(total);
                    self.split(j, slot, 0, span, total, usize::MAX, &mut pieces);
                }
                Err(e) => *result = Some(Err(e)),
            }
        }
        let total: usize = pieces.iter().map(|p| p.n).sum();
        let max = self.batch_transfer(total);
        let mut resplit = Vec::with_capacity(pieces.len());
        for p in &pieces {
            self.split(p.job, p.slot, 0, p.n, p.take, max, &mut resplit);
        }
        (resplit, max)
    }

    /// Writes every job's shard into its slot as one batch: the slots' pieces move through
    /// the staging buffers in one pipeline, several slots' pieces packed into one transfer
    /// (one hand-off to the [`DiskIo`] each), two transfers in flight across slot boundaries.
    /// Each job's checksum is computed as its bytes are copied into a buffer; each job gets
    /// its own result, as [`TierSlots::write_slot`] would return it. After an I/O error or a
    /// missed deadline, every job not entirely written fails with it.
    pub fn write_slots(&mut self, jobs: &mut [SlotWrite<'_>]) {
        let (resplit, max) = self.plan_batch(jobs.iter_mut().map(|job| {
            let total = job.src.iter().map(|s| s.len()).sum();
            (job.slot, total, &mut job.result)
        }));
        let mut hashers: Vec<Option<ShardHasher>> = jobs
            .iter()
            .map(|j| j.result.is_none().then(|| ShardHasher::new(j.seed)))
            .collect();
        let (moved, result) = self.run_pieces(DiskOp::Write, &resplit, max, |p, buf| {
            if let Some(h) = hashers[p.job].as_mut() {
                let n = buf.len();
                copy_parts(&mut [buf], &parts_range(jobs[p.job].src, p.at, n), h);
            }
        });
        self.settle(
            jobs.iter_mut().map(|j| &mut j.result),
            &resplit,
            moved,
            result,
            hashers,
        );
    }

    /// Writes every job's shard into its slot as one batch straight from the caller's mapping
    /// `kept` (buffered mode, every part of every shard inside `kept`; otherwise this is
    /// [`DiskTier::write_slots`]): no staging copy. Pieces of several slots go into one
    /// transfer (one `pwritev` per run of slots that follow each other in the file, its
    /// iovecs the engine's pages), two transfers in flight, and each transfer's bytes are
    /// checksummed on this thread while the [`DiskIo`] writes them. Results and failures as
    /// [`DiskTier::write_slots`]. The checksum is of the bytes this thread read from the pages
    /// and the file gets the bytes the kernel read: the same bytes unless someone writes the
    /// pages during the store (an engine must not); if it does, the load's verification fails
    /// and the shard is dropped, never served.
    pub fn write_slots_kept(&mut self, jobs: &mut [SlotWrite<'_>], kept: &Kept) {
        let inside = jobs.iter().all(|j| j.src.iter().all(|p| kept.holds(p)));
        if self.mode != IoMode::Buffered || !inside {
            return self.write_slots(jobs);
        }
        let (pieces, max) = self.plan_batch(jobs.iter_mut().map(|job| {
            let total = job.src.iter().map(|s| s.len()).sum();
            (job.slot, total, &mut job.result)
        }));
        let mut hashers: Vec<Option<ShardHasher>> = jobs
            .iter()
            .map(|j| j.result.is_none().then(|| ShardHasher::new(j.seed)))
            .collect();
        let (moved, result) = self.run_kept(&pieces, max, kept, jobs, &mut hashers);
        self.settle(
            jobs.iter_mut().map(|j| &mut j.result),
            &pieces,
            moved,
            result,
            hashers,
        );
    }

    /// The pipeline of [`DiskTier::write_slots_kept`]: `pieces` packed into transfers of at
    /// most `max` bytes that write from `kept`, [`BUFFERS`] in flight, each checksummed into
    /// `hashers` once submitted. Returns the moved prefix and the first error, as
    /// [`DiskTier::run_pieces`] does.
    fn run_kept(
        &mut self,
        pieces: &[Piece],
        max: usize,
        kept: &Kept,
        jobs: &[SlotWrite<'_>],
        hashers: &mut [Option<ShardHasher>],
    ) -> (usize, Result<(), TierError>) {
        let Some(first) = pieces.first() else {
            return (0, Ok(()));
        };
        // No buffer is used, but none may be out: a slot is never written while an overdue
        // transfer (which may write the same slot) has not ended.
        match self.take_buffers(DiskOp::Write, first.slot) {
            Ok(free) => self.buffers = free,
            Err(e) => return (0, Err(e)),
        }
        let mut in_flight: VecDeque<std::ops::Range<usize>> = VecDeque::with_capacity(BUFFERS);
        let mut next = 0usize;
        let mut moved = 0usize;
        let mut failed: Option<std::io::Error> = None;
        loop {
            while failed.is_none() && next < pieces.len() && in_flight.len() < BUFFERS {
                let from = next;
                let mut len = 0usize;
                let mut segments = Vec::new();
                let mut parts = Vec::new();
                while next < pieces.len() && (next == from || len + pieces[next].n <= max) {
                    let p = &pieces[next];
                    let mut offset = p.offset;
                    for part in parts_range(jobs[p.job].src, p.at, p.n) {
                        segments.push((offset, part.len()));
                        parts.push((part.as_ptr() as usize, part.len()));
                        offset += part.len() as u64;
                    }
                    len += p.n;
                    next += 1;
                }
                self.io.submit(DiskTransfer {
                    op: DiskOp::Write,
                    slot: pieces[from].slot,
                    file: self.file.clone(),
                    mem: Memory::Kept {
                        parts,
                        _owner: kept.owner.clone(),
                    },
                    len,
                    segments,
                });
                in_flight.push_back(from..next);
                // The checksum of what was just submitted, while the I/O writes it.
                for p in &pieces[from..next] {
                    if let Some(h) = hashers[p.job].as_mut() {
                        for part in parts_range(jobs[p.job].src, p.at, p.take) {
                            h.update(part);
                        }
                    }
                }
            }
            let Some(carried) = in_flight.pop_front() else {
                break;
            };
            match self.io.wait() {
                Submitted::Done(_, Ok(())) => {
                    if failed.is_none() {
                        moved = carried.end;
                    }
                }
                Submitted::Done(_, Err(e)) => {
                    failed.get_or_insert(e);
                }
                Submitted::Overdue { deadline_ms } => {
                    // The I/O keeps this transfer and every one submitted after it.
                    self.held = in_flight.len() + 1;
                    let slot = pieces[carried.start].slot;
                    self.overdue = Some(Overdue {
                        op: DiskOp::Write,
                        slot,
                        deadline_ms,
                    });
                    return (
                        moved,
                        Err(TierError::DiskDeadline {
                            op: DiskOp::Write.as_str(),
                            slot,
                            deadline_ms,
                        }),
                    );
                }
            }
        }
        match failed {
            Some(e) => (moved, Err(io(&self.path, DiskOp::Write.as_str())(e))),
            None => (moved, Ok(())),
        }
    }

    /// Reads every job's slot into its destination as one batch (see
    /// [`DiskTier::write_slots`]): each job's result is what [`TierSlots::read_slot`] would
    /// return for it, the checksum of the bytes copied out (the caller verifies it).
    pub fn read_slots(&mut self, jobs: &mut [SlotRead<'_>]) {
        let (resplit, max) = self.plan_batch(jobs.iter_mut().map(|job| {
            let total = job.dst.iter().map(|d| d.len()).sum();
            (job.slot, total, &mut job.result)
        }));
        let mut hashers: Vec<Option<ShardHasher>> = jobs
            .iter()
            .map(|j| j.result.is_none().then(|| ShardHasher::new(j.seed)))
            .collect();
        let (moved, result) = self.run_pieces(DiskOp::Read, &resplit, max, |p, buf| {
            if let Some(h) = hashers[p.job].as_mut() {
                let n = buf.len();
                copy_parts(
                    &mut parts_range_mut(&mut jobs[p.job].dst, p.at, n),
                    &[buf],
                    h,
                );
            }
        });
        self.settle(
            jobs.iter_mut().map(|j| &mut j.result),
            &resplit,
            moved,
            result,
            hashers,
        );
    }

    /// Each job's result after a batch: its checksum when all its pieces moved, else the
    /// batch's error (a copy of it per job).
    fn settle<'r>(
        &self,
        results: impl Iterator<Item = &'r mut Option<Result<Checksum, TierError>>>,
        pieces: &[Piece],
        moved: usize,
        result: Result<(), TierError>,
        hashers: Vec<Option<ShardHasher>>,
    ) {
        // A job is whole when its last piece lies in the moved prefix.
        let mut last = vec![None; hashers.len()];
        for (i, p) in pieces.iter().enumerate() {
            last[p.job] = Some(i);
        }
        for ((j, r), h) in results.enumerate().zip(hashers) {
            let Some(h) = h else { continue };
            *r = Some(match (last[j], &result) {
                (Some(l), _) if l < moved => Ok(h.finish()),
                (_, Err(e)) => Err(duplicate(e)),
                // A job without pieces (no bytes): nothing to move.
                (None, Ok(())) => Ok(h.finish()),
                (Some(_), Ok(())) => Err(TierError::Io {
                    tier: Tier::Disk,
                    op: "batch",
                    path: self.path.clone(),
                    source: std::io::Error::other("the batch ended before this slot was moved"),
                }),
            });
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

/// The bytes `at .. at + n` of the concatenation of `parts`, as sub-slices in order.
fn parts_range<'a>(parts: &[&'a [u8]], at: usize, n: usize) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let (mut pos, end) = (0usize, at + n);
    for &p in parts {
        let (lo, hi) = (pos.max(at), (pos + p.len()).min(end));
        if lo < hi {
            out.push(&p[lo - pos..hi - pos]);
        }
        pos += p.len();
        if pos >= end {
            break;
        }
    }
    out
}

/// The bytes `at .. at + n` of the concatenation of `parts`, as mutable sub-slices in order.
fn parts_range_mut<'a>(parts: &'a mut [&mut [u8]], at: usize, n: usize) -> Vec<&'a mut [u8]> {
    let mut out = Vec::new();
    let (mut pos, end) = (0usize, at + n);
    for p in parts.iter_mut() {
        let len = p.len();
        let (lo, hi) = (pos.max(at), (pos + len).min(end));
        if lo < hi {
            out.push(&mut p[lo - pos..hi - pos]);
        }
        pos += len;
        if pos >= end {
            break;
        }
    }
    out
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
        let mut hasher = ShardHasher::new(seed);
        let span = self.transfer_len(total);
        self.pipeline(DiskOp::Write, slot, 0, span, total, |at, buf| {
            let n = buf.len();
            copy_parts(&mut [buf], &parts_range(src, at, n), &mut hasher);
        })?;
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
        let mut hasher = ShardHasher::new(seed);
        let span = self.transfer_len(total);
        self.pipeline(DiskOp::Read, slot, 0, span, total, |at, buf| {
            let n = buf.len();
            copy_parts(&mut parts_range_mut(dst, at, n), &[buf], &mut hasher);
        })?;
        Ok(hasher.finish())
    }

    /// Reads only the chunks of the slot that cover the range (widened to 4 KiB boundaries in
    /// direct mode), through the same [`DiskIo`] transfers as a whole read (so deadlines,
    /// stalls and fault hooks apply alike), and copies the range out.
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
        let (start, span) = self.range_span(offset, dst.len());
        let skip = offset - start as usize;
        let want = dst.len();
        self.pipeline(DiskOp::Read, slot, start, span, span, |at, buf| {
            // The part of the range this chunk holds: span bytes `skip .. skip + want`.
            let (lo, hi) = (at.max(skip), (at + buf.len()).min(skip + want));
            if lo < hi {
                dst[lo - skip..hi - skip].copy_from_slice(&buf[lo - at..hi - at]);
            }
        })
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

/// A copy of a batch's error for each of its jobs that it failed (an `io::Error` is not
/// `Clone`: its kind and message are kept).
fn duplicate(e: &TierError) -> TierError {
    let copy = |source: &std::io::Error| std::io::Error::new(source.kind(), source.to_string());
    match e {
        TierError::SlotOutOfRange {
            tier,
            slot,
            capacity,
        } => TierError::SlotOutOfRange {
            tier: *tier,
            slot: *slot,
            capacity: *capacity,
        },
        TierError::WrongLength {
            tier,
            expected,
            got,
        } => TierError::WrongLength {
            tier: *tier,
            expected: *expected,
            got: *got,
        },
        TierError::InvalidGeometry {
            tier,
            slot_bytes,
            capacity,
        } => TierError::InvalidGeometry {
            tier: *tier,
            slot_bytes: *slot_bytes,
            capacity: *capacity,
        },
        TierError::DirectUnsupported { path, source } => TierError::DirectUnsupported {
            path: path.clone(),
            source: copy(source),
        },
        TierError::Io {
            tier,
            op,
            path,
            source,
        } => TierError::Io {
            tier: *tier,
            op,
            path: path.clone(),
            source: copy(source),
        },
        TierError::DiskDeadline {
            op,
            slot,
            deadline_ms,
        } => TierError::DiskDeadline {
            op,
            slot: *slot,
            deadline_ms: *deadline_ms,
        },
        TierError::DiskStalled {
            op,
            slot,
            earlier_op,
            earlier_slot,
            deadline_ms,
        } => TierError::DiskStalled {
            op,
            slot: *slot,
            earlier_op,
            earlier_slot: *earlier_slot,
            deadline_ms: *deadline_ms,
        },
        TierError::Device(m) => TierError::Device(m.clone()),
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
        queued: VecDeque<DiskTransfer>,
        held: Vec<DiskTransfer>,
        released: bool,
    }

    /// A test I/O: fails or holds the transfers it is told to (a held one keeps every
    /// transfer queued behind it); gives the held ones back when released.
    #[derive(Debug, Default, Clone)]
    struct Scripted(std::sync::Arc<std::sync::Mutex<Script>>);

    impl DiskIo for Scripted {
        fn submit(&mut self, t: DiskTransfer) {
            self.0.lock().unwrap().queued.push_back(t);
        }

        fn wait(&mut self) -> Submitted {
            let mut s = self.0.lock().unwrap();
            let mut t = s.queued.pop_front().expect("a transfer in flight");
            if std::mem::take(&mut s.fail_next) {
                return Submitted::Done(t, Err(std::io::Error::from_raw_os_error(libc::ENOSPC)));
            }
            if std::mem::take(&mut s.hold_next) {
                // The transfers complete late: the bytes land, the results are not waited for.
                t.perform().unwrap();
                s.held.push(t);
                while let Some(mut later) = s.queued.pop_front() {
                    later.perform().unwrap();
                    s.held.push(later);
                }
                return Submitted::Overdue { deadline_ms: 25 };
            }
            let r = t.perform();
            Submitted::Done(t, r)
        }

        fn reclaim(&mut self) -> Option<DiskTransfer> {
            let mut s = self.0.lock().unwrap();
            if s.released {
                s.held.pop()
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

    #[test]
    fn an_overdue_kept_write_keeps_the_pages_mapped_and_stalls_the_tier_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let slot_bytes = 64 << 10;
        let (mut disk, _) = DiskTier::open(
            &dir.path().join(DISK_SLAB_FILE),
            slot_bytes,
            8,
            IoMode::Buffered,
        )
        .unwrap();
        let script = Scripted::default();
        disk.set_io(Box::new(script.clone()));
        let mut pool =
            crate::shm::ShmFile::create(&dir.path().join("pool"), 2 * slot_bytes as u64).unwrap();
        pool.bytes_mut().fill(0x3c);
        let pool = Arc::new(pool);
        let kept = Kept::shm(pool.clone());
        let parts: Vec<[&[u8]; 1]> = pool.bytes().chunks_exact(slot_bytes).map(|p| [p]).collect();
        script.0.lock().unwrap().hold_next = true;
        let mut jobs: Vec<SlotWrite<'_>> = (0..2u64)
            .map(|i| SlotWrite {
                slot: i + 4,
                src: &parts[i as usize],
                seed: BlockHash(i as u128),
                result: None,
            })
            .collect();
        disk.write_slots_kept(&mut jobs, &kept);
        for j in &jobs {
            let e = j.result.as_ref().unwrap().as_ref().unwrap_err();
            assert_eq!(
                e.to_string(),
                "disk tier: write of slot 4 missed its deadline of 25 ms"
            );
        }
        drop(jobs);
        drop(parts);
        drop(kept);
        assert!(
            Arc::strong_count(&pool) > 1,
            "the overdue transfer holds the pages' mapping"
        );
        let data = vec![1u8; slot_bytes];
        let src = [&data[..]];
        let mut more = vec![SlotWrite {
            slot: 6,
            src: &src,
            seed: BlockHash(9),
            result: None,
        }];
        disk.write_slots_kept(&mut more, &Kept::shm(pool.clone()));
        let e = more[0].result.take().unwrap().unwrap_err();
        assert!(matches!(e, TierError::DiskStalled { .. }), "{e}");
        assert!(
            disk.cached_reader().is_none(),
            "no cached read while stalled"
        );
        script.0.lock().unwrap().released = true;
        let mut out = vec![0u8; slot_bytes];
        disk.read_slot(5, &mut [&mut out[..]], BlockHash(1))
            .unwrap();
        assert!(out.iter().all(|&b| b == 0x3c), "the late write landed");
        assert_eq!(
            Arc::strong_count(&pool),
            1,
            "reclaimed: the mapping is the pool's alone"
        );
    }

    #[test]
    fn an_overdue_chunk_holds_every_buffer_until_all_are_reclaimed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DISK_SLAB_FILE);
        let slot = (1 << 20) + 100;
        let (mut disk, _) = DiskTier::open(&path, slot, 2, IoMode::Buffered).unwrap();
        let script = Scripted::default();
        disk.set_io(Box::new(script.clone()));
        let data: Vec<u8> = (0..slot).map(|i| (i * 13 + 5) as u8).collect();
        disk.write_slot(0, &[&data], BlockHash(3)).unwrap();

        // The first chunk of a read misses its deadline with the second in flight behind it.
        script.0.lock().unwrap().hold_next = true;
        let mut out = vec![0u8; slot];
        let e = disk
            .read_slot(0, &mut [&mut out[..]], BlockHash(3))
            .unwrap_err();
        assert!(
            matches!(e, TierError::DiskDeadline { op: "read", .. }),
            "{e}"
        );
        assert_eq!(script.0.lock().unwrap().held.len(), 2, "both buffers held");
        let e = disk.write_slot(1, &[&data], BlockHash(4)).unwrap_err();
        assert!(matches!(e, TierError::DiskStalled { .. }), "{e}");

        // Both transfers end: the tier takes work again with both buffers.
        script.0.lock().unwrap().released = true;
        let sum = disk
            .read_slot(0, &mut [&mut out[..]], BlockHash(3))
            .unwrap();
        assert_eq!(sum, checksum(BlockHash(3), &data));
        assert_eq!(out, data);
        assert!(script.0.lock().unwrap().held.is_empty());
    }
}

#[cfg(test)]
mod range_tests {
    use super::*;

    /// The transfers seen (op, byte offset in the file, bytes), whether to fail the next, and
    /// the transfers submitted and not waited for yet.
    type Log = (Vec<(DiskOp, u64, usize)>, bool, VecDeque<DiskTransfer>);

    /// Records where each transfer went, then carries it out (or fails it, when told).
    #[derive(Debug, Default, Clone)]
    struct Recording(std::sync::Arc<std::sync::Mutex<Log>>);

    impl DiskIo for Recording {
        fn submit(&mut self, t: DiskTransfer) {
            let mut s = self.0.lock().unwrap();
            s.0.push((t.op(), t.segments[0].0, t.len()));
            s.2.push_back(t);
        }

        fn wait(&mut self) -> Submitted {
            let mut s = self.0.lock().unwrap();
            let mut t = s.2.pop_front().expect("a transfer in flight");
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

    fn large_slots_in_chunks(mode: IoMode, dir: &Path) -> Option<()> {
        let path = dir.join(DISK_SLAB_FILE);
        let slot = (1 << 20) + 100; // several chunks, the last one short
        let (mut disk, _) = match DiskTier::open(&path, slot, 3, mode) {
            Err(TierError::DirectUnsupported { .. }) => return None,
            other => other.unwrap(),
        };
        let rec = Recording::default();
        disk.set_io(Box::new(rec.clone()));
        let chunk = disk.chunk;
        assert!(chunk % ALIGN as usize == 0 && chunk < slot, "{chunk}");
        let data: Vec<u8> = (0..slot).map(|i| (i * 31 + i / 4099) as u8).collect();
        // Parts that do not line up with the chunks.
        let (a, rest) = data.split_at(70_001);
        let (b, c) = rest.split_at(500_000);
        let sum = disk.write_slot(1, &[a, b, c], BlockHash(9)).unwrap();
        assert_eq!(sum, crate::checksum::checksum(BlockHash(9), &data));
        let stride = DiskTier::slot_offset(slot, 1);
        let check = |rec: &Recording, op: DiskOp, from: u64, bytes: usize| {
            let moves = std::mem::take(&mut rec.0.lock().unwrap().0);
            assert_eq!(moves.len(), bytes.div_ceil(chunk), "{op:?} {moves:?}");
            let mut at = from;
            for &(o, off, n) in &moves {
                assert_eq!((o, off), (op, at), "{moves:?}");
                assert!(n <= chunk);
                at += n as u64;
            }
            assert_eq!(at, from + bytes as u64, "{moves:?}");
        };
        check(&rec, DiskOp::Write, stride, disk.transfer_len(slot));
        let mut out = vec![0u8; slot];
        let (x, rest) = out.split_at_mut(4096 * 3 + 7);
        let (y, z) = rest.split_at_mut(chunk);
        let got = disk.read_slot(1, &mut [x, y, z], BlockHash(9)).unwrap();
        assert_eq!(got, sum);
        assert_eq!(out, data);
        check(&rec, DiskOp::Read, stride, disk.transfer_len(slot));
        // A range read moves the range (in chunks from its start), not the slot.
        let (offset, len) = (chunk - 10, 5000);
        let mut part = vec![0u8; len];
        disk.read_range(1, offset, &mut part).unwrap();
        assert_eq!(part, &data[offset..offset + len]);
        let (start, span) = disk.range_span(offset, len);
        check(&rec, DiskOp::Read, stride + start, span);
        Some(())
    }

    #[test]
    fn buffered_large_slots_move_in_chunks_in_order() {
        let dir = tempfile::tempdir().unwrap();
        assert!(large_slots_in_chunks(IoMode::Buffered, dir.path()).is_some());
    }

    #[test]
    fn direct_large_slots_move_in_chunks_in_order_where_supported() {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        if large_slots_in_chunks(IoMode::Direct, dir.path()).is_none() {
            eprintln!("O_DIRECT unsupported on {}", dir.path().display());
        }
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;
    use crate::checksum::checksum;

    /// The transfers seen (op, slots carried, bytes), whether to fail the `n`-th next (1: the
    /// next), and the transfers submitted and not waited for yet.
    type Log = (Vec<(DiskOp, usize, usize)>, usize, VecDeque<DiskTransfer>);

    #[derive(Debug, Default, Clone)]
    struct Counting(std::sync::Arc<std::sync::Mutex<Log>>);

    /// A buffered disk tier of `slots` slots of `slot_bytes` in `dir`, its transfers through
    /// a [`Counting`] I/O the test can arm to fail one.
    fn counting_tier(dir: &Path, slot_bytes: usize, slots: u64) -> (DiskTier, Counting) {
        let (mut disk, _) = DiskTier::open(
            &dir.join(DISK_SLAB_FILE),
            slot_bytes,
            slots,
            IoMode::Buffered,
        )
        .unwrap();
        let rec = Counting::default();
        disk.set_io(Box::new(rec.clone()));
        (disk, rec)
    }

    impl DiskIo for Counting {
        fn submit(&mut self, t: DiskTransfer) {
            let mut s = self.0.lock().unwrap();
            s.0.push((t.op(), t.segments(), t.len()));
            s.2.push_back(t);
        }

        fn wait(&mut self) -> Submitted {
            let mut s = self.0.lock().unwrap();
            let mut t = s.2.pop_front().expect("a transfer in flight");
            if s.1 > 0 {
                s.1 -= 1;
                if s.1 == 0 {
                    return Submitted::Done(t, Err(std::io::Error::from_raw_os_error(libc::EIO)));
                }
            }
            let r = t.perform();
            Submitted::Done(t, r)
        }

        fn reclaim(&mut self) -> Option<DiskTransfer> {
            None
        }
    }

    fn shard(slot_bytes: usize, n: u64) -> Vec<u8> {
        (0..slot_bytes)
            .map(|i| (i as u64 * 7 + n * 131 + i as u64 / 4099) as u8)
            .collect()
    }

    /// 24 slots of 64 KiB + 100 bytes written as one batch (in two parts each), then read
    /// back as one batch and one by one; `None` where the mode is unsupported.
    fn batch_round_trip(mode: IoMode, dir: &Path) -> Option<()> {
        let slot_bytes = (64 << 10) + 100;
        let (mut disk, _) = match DiskTier::open(&dir.join(DISK_SLAB_FILE), slot_bytes, 40, mode) {
            Err(TierError::DirectUnsupported { .. }) => return None,
            other => other.unwrap(),
        };
        let rec = Counting::default();
        disk.set_io(Box::new(rec.clone()));
        // Slots out of order and not contiguous, as a free list hands them out.
        let slots: Vec<u64> = (0..24u64).map(|i| (i * 7) % 40).collect();
        let data: Vec<Vec<u8>> = (0..24).map(|i| shard(slot_bytes, i)).collect();
        let parts: Vec<[&[u8]; 2]> = data.iter().map(|d| [&d[..1000], &d[1000..]]).collect();
        let mut jobs: Vec<SlotWrite<'_>> = slots
            .iter()
            .zip(&parts)
            .enumerate()
            .map(|(i, (&slot, p))| SlotWrite {
                slot,
                src: p,
                seed: BlockHash(i as u128),
                result: None,
            })
            .collect();
        disk.write_slots(&mut jobs);
        for (i, j) in jobs.iter().enumerate() {
            let sum = j.result.as_ref().unwrap().as_ref().unwrap();
            assert_eq!(*sum, checksum(BlockHash(i as u128), &data[i]), "{i}");
        }
        let writes = std::mem::take(&mut rec.0.lock().unwrap().0);
        assert!(writes.len() < 24, "several slots per transfer: {writes:?}");
        assert!(
            writes.iter().all(|w| w.2 <= BATCH_TRANSFER_MAX),
            "{writes:?}"
        );
        assert_eq!(writes.iter().map(|w| w.1).sum::<usize>(), 24, "{writes:?}");

        let mut out: Vec<Vec<u8>> = (0..24).map(|_| vec![0u8; slot_bytes]).collect();
        let mut reads: Vec<SlotRead<'_>> = slots
            .iter()
            .zip(out.iter_mut())
            .enumerate()
            .map(|(i, (&slot, o))| {
                let (a, b) = o.split_at_mut(5000);
                SlotRead {
                    slot,
                    dst: vec![a, b],
                    seed: BlockHash(i as u128),
                    result: None,
                }
            })
            .collect();
        disk.read_slots(&mut reads);
        for (i, r) in reads.iter().enumerate() {
            let sum = r.result.as_ref().unwrap().as_ref().unwrap();
            assert_eq!(*sum, checksum(BlockHash(i as u128), &data[i]), "{i}");
        }
        drop(reads);
        assert!(out == data, "the batch read brought every byte back");
        for (i, &slot) in slots.iter().enumerate() {
            let mut one = vec![0u8; slot_bytes];
            let sum = disk
                .read_slot(slot, &mut [&mut one[..]], BlockHash(i as u128))
                .unwrap();
            assert_eq!(sum, checksum(BlockHash(i as u128), &data[i]));
            assert!(one == data[i], "slot {slot}");
        }
        Some(())
    }

    #[test]
    fn buffered_batches_round_trip_several_slots_per_transfer() {
        let dir = tempfile::tempdir().unwrap();
        assert!(batch_round_trip(IoMode::Buffered, dir.path()).is_some());
    }

    #[test]
    fn direct_batches_round_trip_where_supported() {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        if batch_round_trip(IoMode::Direct, dir.path()).is_none() {
            eprintln!("O_DIRECT unsupported on {}", dir.path().display());
        }
    }

    #[test]
    fn a_failed_transfer_fails_the_slots_not_yet_written_and_only_those() {
        let dir = tempfile::tempdir().unwrap();
        let slot_bytes = 256 << 10;
        let (mut disk, rec) = counting_tier(dir.path(), slot_bytes, 16);
        let data: Vec<Vec<u8>> = (0..16).map(|i| shard(slot_bytes, i)).collect();
        let parts: Vec<[&[u8]; 1]> = data.iter().map(|d| [&d[..]]).collect();
        // 16 × 256 KiB: transfers of 1 MiB, 4 slots each; the second one fails.
        rec.0.lock().unwrap().1 = 2;
        let mut jobs: Vec<SlotWrite<'_>> = (0..16u64)
            .map(|i| SlotWrite {
                slot: i,
                src: &parts[i as usize],
                seed: BlockHash(i as u128),
                result: None,
            })
            .collect();
        // A bad slot in the batch fails alone, before anything moves.
        jobs.push(SlotWrite {
            slot: 99,
            src: &parts[0],
            seed: BlockHash(99),
            result: None,
        });
        disk.write_slots(&mut jobs);
        let ok: Vec<bool> = jobs
            .iter()
            .map(|j| matches!(j.result, Some(Ok(_))))
            .collect();
        assert_eq!(ok[..4], [true; 4], "the first transfer's slots are written");
        assert!(ok[4..].iter().all(|o| !o), "{ok:?}");
        for j in &jobs[4..16] {
            let e = j.result.as_ref().unwrap().as_ref().unwrap_err();
            assert!(matches!(e, TierError::Io { op: "write", .. }), "{e}");
        }
        assert!(matches!(
            jobs[16].result,
            Some(Err(TierError::SlotOutOfRange { slot: 99, .. }))
        ));
        let moved = rec.0.lock().unwrap().0.clone();
        assert_eq!(moved[0], (DiskOp::Write, 4, 1 << 20), "{moved:?}");
        assert!(
            moved.len() <= 3,
            "nothing submitted after the failure but the one in flight: {moved:?}"
        );
        // The tier goes on: the written slots read back, a new batch writes the rest.
        for i in 0..4u64 {
            let mut out = vec![0u8; slot_bytes];
            disk.read_slot(i, &mut [&mut out[..]], BlockHash(i as u128))
                .unwrap();
            assert!(out == data[i as usize]);
        }
        let mut jobs: Vec<SlotWrite<'_>> = (4..16u64)
            .map(|i| SlotWrite {
                slot: i,
                src: &parts[i as usize],
                seed: BlockHash(i as u128),
                result: None,
            })
            .collect();
        disk.write_slots(&mut jobs);
        assert!(jobs.iter().all(|j| matches!(j.result, Some(Ok(_)))));
    }

    /// `n` shards of `slot_bytes` in one shared-memory file (the engine's pool), kept.
    fn kept_pool(dir: &Path, slot_bytes: usize, n: u64) -> (Arc<crate::shm::ShmFile>, Kept) {
        let mut pool =
            crate::shm::ShmFile::create(&dir.join("pool"), slot_bytes as u64 * n).unwrap();
        for (i, page) in pool.bytes_mut().chunks_exact_mut(slot_bytes).enumerate() {
            page.copy_from_slice(&shard(slot_bytes, i as u64));
        }
        let pool = Arc::new(pool);
        let kept = Kept::shm(pool.clone());
        (pool, kept)
    }

    #[test]
    fn a_batch_written_straight_from_kept_pages_reads_back_from_the_cache_and_through_the_io() {
        let dir = tempfile::tempdir().unwrap();
        let slot_bytes = (256 << 10) + 4096;
        let (mut disk, rec) = counting_tier(dir.path(), slot_bytes, 32);
        let (pool, kept) = kept_pool(dir.path(), slot_bytes, 12);
        // Slots out of order, some following each other in the file (one pwritev for a run).
        let slots: Vec<u64> = vec![3, 4, 5, 9, 0, 1, 20, 21, 22, 23, 30, 11];
        let parts: Vec<[&[u8]; 1]> = pool.bytes().chunks_exact(slot_bytes).map(|p| [p]).collect();
        let mut jobs: Vec<SlotWrite<'_>> = slots
            .iter()
            .zip(&parts)
            .enumerate()
            .map(|(i, (&slot, p))| SlotWrite {
                slot,
                src: p,
                seed: BlockHash(i as u128 + 1),
                result: None,
            })
            .collect();
        disk.write_slots_kept(&mut jobs, &kept);
        for (i, j) in jobs.iter().enumerate() {
            let sum = j.result.as_ref().unwrap().as_ref().unwrap();
            assert_eq!(
                *sum,
                checksum(BlockHash(i as u128 + 1), &shard(slot_bytes, i as u64))
            );
        }
        let writes = std::mem::take(&mut rec.0.lock().unwrap().0);
        assert!(
            writes.len() < slots.len(),
            "several slots per transfer: {writes:?}"
        );
        assert_eq!(writes.iter().map(|w| w.2).sum::<usize>(), 12 * slot_bytes);
        assert_eq!(
            Arc::strong_count(&pool),
            2,
            "no transfer keeps the pages once the batch is done"
        );
        drop(jobs);
        // Through the I/O (this one does not allow cached reads) ...
        assert!(disk.cached_reader().is_none());
        for (i, &slot) in slots.iter().enumerate() {
            let mut out = vec![0u8; slot_bytes];
            let sum = disk
                .read_slot(slot, &mut [&mut out[..]], BlockHash(i as u128 + 1))
                .unwrap();
            assert_eq!(sum, checksum(BlockHash(i as u128 + 1), &out));
            assert!(out == shard(slot_bytes, i as u64), "slot {slot}");
        }
        // ... and from the page cache, straight into the destination, with the same checksum.
        disk.set_io(Box::new(InlineIo::default()));
        let reader = disk.cached_reader().expect("buffered, inline I/O");
        for (i, &slot) in slots.iter().enumerate() {
            let mut out = vec![0u8; slot_bytes];
            let sum = reader
                .read(slot, &mut out, BlockHash(i as u128 + 1))
                .expect("just written: in the page cache");
            assert_eq!(
                sum,
                checksum(BlockHash(i as u128 + 1), &shard(slot_bytes, i as u64))
            );
            assert!(out == shard(slot_bytes, i as u64), "slot {slot}");
        }
        let mut short = vec![0u8; slot_bytes - 1];
        assert!(reader.read(3, &mut short, BlockHash(1)).is_none());
        let mut out = vec![0u8; slot_bytes];
        assert!(
            reader.read(32, &mut out, BlockHash(1)).is_none(),
            "out of range"
        );
    }

    #[test]
    fn a_failed_kept_write_fails_the_slots_not_yet_written_with_the_typed_error_and_loses_none() {
        let dir = tempfile::tempdir().unwrap();
        let slot_bytes = 256 << 10;
        let (mut disk, rec) = counting_tier(dir.path(), slot_bytes, 16);
        let (pool, kept) = kept_pool(dir.path(), slot_bytes, 16);
        let parts: Vec<[&[u8]; 1]> = pool.bytes().chunks_exact(slot_bytes).map(|p| [p]).collect();
        // 16 × 256 KiB: transfers of 1 MiB, 4 slots each; the second one fails (EIO).
        rec.0.lock().unwrap().1 = 2;
        let mut jobs: Vec<SlotWrite<'_>> = (0..16u64)
            .map(|i| SlotWrite {
                slot: i,
                src: &parts[i as usize],
                seed: BlockHash(i as u128),
                result: None,
            })
            .collect();
        disk.write_slots_kept(&mut jobs, &kept);
        let ok: Vec<bool> = jobs
            .iter()
            .map(|j| matches!(j.result, Some(Ok(_))))
            .collect();
        assert_eq!(ok[..4], [true; 4], "the first transfer's slots are written");
        for j in &jobs[4..] {
            let e = j.result.as_ref().unwrap().as_ref().unwrap_err();
            assert!(
                matches!(
                    e,
                    TierError::Io {
                        tier: Tier::Disk,
                        op: "write",
                        ..
                    }
                ),
                "{e}"
            );
        }
        assert!(
            rec.0.lock().unwrap().0.len() <= 3,
            "nothing submitted after the failure but the one in flight"
        );
        // Nothing written is lost, and the tier goes on: a new batch writes the rest.
        for i in 0..4u64 {
            let mut out = vec![0u8; slot_bytes];
            disk.read_slot(i, &mut [&mut out[..]], BlockHash(i as u128))
                .unwrap();
            assert!(out == shard(slot_bytes, i));
        }
        let mut jobs: Vec<SlotWrite<'_>> = (4..16u64)
            .map(|i| SlotWrite {
                slot: i,
                src: &parts[i as usize],
                seed: BlockHash(i as u128),
                result: None,
            })
            .collect();
        disk.write_slots_kept(&mut jobs, &kept);
        assert!(jobs.iter().all(|j| matches!(j.result, Some(Ok(_)))));
        for i in 0..16u64 {
            let mut out = vec![0u8; slot_bytes];
            let sum = disk
                .read_slot(i, &mut [&mut out[..]], BlockHash(i as u128))
                .unwrap();
            assert_eq!(sum, checksum(BlockHash(i as u128), &shard(slot_bytes, i)));
        }
    }

    #[test]
    fn parts_outside_the_kept_mapping_are_staged() {
        let dir = tempfile::tempdir().unwrap();
        let slot_bytes = 64 << 10;
        let (mut disk, _) = DiskTier::open(
            &dir.path().join(DISK_SLAB_FILE),
            slot_bytes,
            4,
            IoMode::Buffered,
        )
        .unwrap();
        let (_pool, kept) = kept_pool(dir.path(), slot_bytes, 1);
        let outside = shard(slot_bytes, 7);
        let src = [&outside[..]];
        let mut jobs = vec![SlotWrite {
            slot: 2,
            src: &src,
            seed: BlockHash(7),
            result: None,
        }];
        disk.write_slots_kept(&mut jobs, &kept);
        let sum = jobs[0].result.take().unwrap().unwrap();
        assert_eq!(sum, checksum(BlockHash(7), &outside));
        let mut out = vec![0u8; slot_bytes];
        disk.read_slot(2, &mut [&mut out[..]], BlockHash(7))
            .unwrap();
        assert!(out == outside);
    }
}
