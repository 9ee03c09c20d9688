//! The frame ring's bytes: one header, then fixed-size slots, in a shared-memory file both the
//! agent (the one writer) and its engines (readers) map.
//!
//! Owns the offsets, the geometry and the typed views ([`Header`], [`Slot`]) of the words both
//! sides touch. Every word is an atomic, so a racing reader never reads a value the writer is
//! storing through a plain access (the payload too is a run of atomic 64-bit words). It never
//! decides what a slot means: the writer (`super::writer`) and the reader (`super::reader`)
//! keep the seqlock protocol.
//!
//! ```text
//! header (64 bytes):  magic u64 | version u32 | slots u32 | slot_bytes u32 | pad u32
//!                     | epoch u64 (0: closed) | latest u64 (last step + 1; 0: none)
//!                     | oldest u64 (oldest step still readable) | wake u32 (futex word) | pad
//! slot (32 bytes + slot_bytes, rounded to 64):
//!                     seq u64 (odd while written) | epoch u64 | step u64 | len u64 | payload
//! ```

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// First word of every ring: `b"TANDRING"` read as a little-endian `u64`.
pub const MAGIC: u64 = u64::from_le_bytes(*b"TANDRING");

/// Version of this layout; a reader refuses a ring of another.
pub const LAYOUT_VERSION: u32 = 1;

/// Bytes of the header.
pub const HEADER_BYTES: usize = 64;

/// Bytes of a slot's own words before its payload.
pub const SLOT_HEADER_BYTES: usize = 32;

/// A slot's `len` when the frame did not fit its payload: the reader asks the socket.
pub const TOO_BIG: u64 = u64::MAX;

/// Slots of the ring the agent creates: frames of the last 128 steps.
pub const DEFAULT_SLOTS: u32 = 128;

/// Payload bytes of each slot of the ring the agent creates (16 KiB: an empty frame is tens of
/// bytes; a frame of a few tasks of 64 blocks fits).
pub const DEFAULT_SLOT_BYTES: u32 = 16 * 1024;

/// The shape of one ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Slots; step `s` lives in slot `s % slots`.
    pub slots: u32,
    /// Payload bytes of one slot (a multiple of 8).
    pub slot_bytes: u32,
}

impl Geometry {
    /// `slots` slots of at least `slot_bytes` payload bytes (rounded up to 8; at least one slot).
    pub fn new(slots: u32, slot_bytes: u32) -> Geometry {
        Geometry {
            slots: slots.max(1),
            slot_bytes: slot_bytes.max(8).div_ceil(8) * 8,
        }
    }

    /// Bytes from one slot to the next (a multiple of 64).
    pub fn stride(&self) -> usize {
        (SLOT_HEADER_BYTES + self.slot_bytes as usize).div_ceil(64) * 64
    }

    /// Bytes of the whole ring.
    pub fn total_bytes(&self) -> usize {
        HEADER_BYTES + self.stride() * self.slots as usize
    }

    /// The slot of `step`.
    pub fn slot_of(&self, step: u64) -> usize {
        (step % u64::from(self.slots)) as usize
    }
}

/// A mapping of a ring, as a base address and a length: never a Rust slice, because the other
/// side changes the bytes under it (every access goes through the atomics below).
#[derive(Clone, Copy)]
pub(crate) struct Mapped<'a> {
    ptr: *const u8,
    len: usize,
    _map: std::marker::PhantomData<&'a ()>,
}

impl<'a> Mapped<'a> {
    /// The mapping at `ptr` of `len` bytes, page-aligned, alive for `'a`.
    ///
    /// # Safety
    /// `ptr..ptr + len` is a live shared mapping for `'a` whose bytes are only ever accessed
    /// through this module's atomics.
    pub(crate) unsafe fn new(ptr: *const u8, len: usize) -> Mapped<'a> {
        Mapped {
            ptr,
            len,
            _map: std::marker::PhantomData,
        }
    }

    fn u64_at(&self, off: usize) -> &'a AtomicU64 {
        assert!(
            off + 8 <= self.len && off % 8 == 0,
            "ring offset {off} out of its mapping"
        );
        // SAFETY: in bounds and 8-aligned (checked above; the mapping is page-aligned), alive
        // for 'a, and only ever accessed atomically (see `Mapped::new`).
        unsafe { AtomicU64::from_ptr(self.ptr.add(off) as *mut u64) }
    }

    fn u32_at(&self, off: usize) -> &'a AtomicU32 {
        assert!(
            off + 4 <= self.len && off % 4 == 0,
            "ring offset {off} out of its mapping"
        );
        // SAFETY: as `u64_at`.
        unsafe { AtomicU32::from_ptr(self.ptr.add(off) as *mut u32) }
    }
}

/// The header's words, viewed in a mapping.
pub(crate) struct Header<'a> {
    map: Mapped<'a>,
}

/// One slot's words, viewed in a mapping.
pub(crate) struct Slot<'a> {
    map: Mapped<'a>,
    start: usize,
    words: usize,
}

impl<'a> Header<'a> {
    /// The header at the start of `map` (at least [`HEADER_BYTES`] long).
    pub(crate) fn new(map: Mapped<'a>) -> Header<'a> {
        Header { map }
    }
    fn u64_at(&self, off: usize) -> &'a AtomicU64 {
        self.map.u64_at(off)
    }
    pub(crate) fn magic(&self) -> &'a AtomicU64 {
        self.u64_at(0)
    }
    /// Version (low 32 bits) and slots (high 32 bits).
    pub(crate) fn version_slots(&self) -> &'a AtomicU64 {
        self.u64_at(8)
    }
    /// Slot bytes (low 32 bits).
    pub(crate) fn slot_bytes(&self) -> &'a AtomicU64 {
        self.u64_at(16)
    }
    /// The epoch whose frames the slots hold; 0: closed (no epoch is readable).
    pub(crate) fn epoch(&self) -> &'a AtomicU64 {
        self.u64_at(24)
    }
    /// The last step published, plus one (0: none this epoch).
    pub(crate) fn latest(&self) -> &'a AtomicU64 {
        self.u64_at(32)
    }
    /// The oldest step a read may still be answered with (the agent's retention).
    pub(crate) fn oldest(&self) -> &'a AtomicU64 {
        self.u64_at(40)
    }
    /// The futex word: changes at every publish, reset and close.
    pub(crate) fn wake(&self) -> &'a AtomicU32 {
        self.map.u32_at(48)
    }

    /// The geometry the header names, if its magic and version are this layout's.
    pub(crate) fn geometry(&self) -> Option<Geometry> {
        let vs = self.version_slots().load(Ordering::Acquire);
        let (version, slots) = (vs as u32, (vs >> 32) as u32);
        let slot_bytes = self.slot_bytes().load(Ordering::Acquire) as u32;
        (self.magic().load(Ordering::Acquire) == MAGIC
            && version == LAYOUT_VERSION
            && slots > 0
            && slot_bytes % 8 == 0)
            .then_some(Geometry { slots, slot_bytes })
    }
}

impl<'a> Slot<'a> {
    /// Slot `index` of a ring of `geometry` in `map`.
    pub(crate) fn new(map: Mapped<'a>, geometry: Geometry, index: usize) -> Slot<'a> {
        Slot {
            map,
            start: HEADER_BYTES + index * geometry.stride(),
            words: geometry.slot_bytes as usize / 8,
        }
    }
    fn u64_at(&self, off: usize) -> &'a AtomicU64 {
        self.map.u64_at(self.start + off)
    }
    /// The seqlock: odd while the writer changes the slot.
    pub(crate) fn seq(&self) -> &'a AtomicU64 {
        self.u64_at(0)
    }
    pub(crate) fn epoch(&self) -> &'a AtomicU64 {
        self.u64_at(8)
    }
    pub(crate) fn step(&self) -> &'a AtomicU64 {
        self.u64_at(16)
    }
    /// Payload bytes, or [`TOO_BIG`].
    pub(crate) fn len(&self) -> &'a AtomicU64 {
        self.u64_at(24)
    }
    /// Payload capacity, bytes.
    pub(crate) fn capacity(&self) -> usize {
        self.words * 8
    }
    /// Payload word `i`.
    pub(crate) fn word(&self, i: usize) -> &'a AtomicU64 {
        self.u64_at(SLOT_HEADER_BYTES + i * 8)
    }

    /// Store `bytes` into the payload (relaxed: the seqlock orders them).
    pub(crate) fn store_payload(&self, bytes: &[u8]) {
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.word(i).store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
    }

    /// Load `len` payload bytes into `out` (relaxed: the seqlock checks them).
    pub(crate) fn load_payload(&self, len: usize, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(len);
        for i in 0..len.div_ceil(8) {
            let w = self.word(i).load(Ordering::Relaxed).to_le_bytes();
            let take = (len - i * 8).min(8);
            out.extend_from_slice(&w[..take]);
        }
    }
}
