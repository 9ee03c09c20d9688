//! The agent's side of the frame ring: the one writer.
//!
//! Owns the ring's memfd and its read-write mapping; publishes a sealed frame's bytes into the
//! slot of its step under the slot's seqlock, resets the ring for a new epoch, closes it when
//! no epoch is readable, and wakes every reader blocked on the futex word after each change.
//! It never decides which frames an engine may read (the rank core does) and never reads.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

use memmap2::MmapMut;

use super::layout::{Geometry, Header, Mapped, Slot, HEADER_BYTES, LAYOUT_VERSION, MAGIC, TOO_BIG};
use super::RingError;

/// The writer of one ring. See the module docs.
pub struct RingWriter {
    fd: OwnedFd,
    map: MmapMut,
    geometry: Geometry,
}

impl RingWriter {
    /// A new ring of `geometry` in a memfd named `name` (for debugging only), closed (no
    /// epoch readable) until [`RingWriter::reset`].
    ///
    /// # Errors
    /// [`RingError::Create`] when the memfd cannot be made, sized or mapped.
    pub fn create(name: &str, geometry: Geometry) -> Result<RingWriter, RingError> {
        let err = |source: std::io::Error| RingError::Create {
            reason: source.to_string(),
        };
        let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| err(e.into()))?;
        let file = std::fs::File::from(fd);
        file.set_len(geometry.total_bytes() as u64).map_err(err)?;
        // SAFETY: the memfd is ours and never truncated; the engine side only reads it, and
        // every access to its bytes goes through `layout`'s atomics.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(err)?;
        let writer = RingWriter {
            fd: file.into(),
            map,
            geometry,
        };
        let h = writer.header();
        h.version_slots().store(
            u64::from(LAYOUT_VERSION) | (u64::from(geometry.slots) << 32),
            Ordering::Relaxed,
        );
        h.slot_bytes()
            .store(u64::from(geometry.slot_bytes), Ordering::Relaxed);
        h.magic().store(MAGIC, Ordering::Release);
        Ok(writer)
    }

    /// The ring's descriptor, to pass to an engine.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The ring's shape.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn mapped(&self) -> Mapped<'_> {
        debug_assert!(self.map.len() >= HEADER_BYTES);
        // SAFETY: the mapping lives as long as `self`; every access goes through the atomics.
        unsafe { Mapped::new(self.map.as_ptr(), self.map.len()) }
    }

    fn header(&self) -> Header<'_> {
        Header::new(self.mapped())
    }

    /// Make `epoch`'s frames the readable ones: every slot is emptied (a read of an old epoch
    /// finds nothing), no step is published yet, and blocked readers wake.
    pub fn reset(&mut self, epoch: u64) {
        let h = self.header();
        h.epoch().store(0, Ordering::SeqCst);
        for i in 0..self.geometry.slots as usize {
            self.write_slot(i, 0, 0, None);
        }
        h.latest().store(0, Ordering::SeqCst);
        h.oldest().store(0, Ordering::SeqCst);
        h.epoch().store(epoch, Ordering::SeqCst);
        self.wake();
    }

    /// `epoch` is no longer readable (it failed or stopped): its readers go to the socket. A
    /// ring already reset for a later epoch stays open.
    pub fn close(&mut self, epoch: u64) {
        let h = self.header();
        if epoch != 0 && h.epoch().load(Ordering::Relaxed) == epoch {
            h.epoch().store(0, Ordering::SeqCst);
            self.wake();
        }
    }

    /// Publish the frame of `step` of `epoch` (its encoded bytes; the ring must be reset to
    /// `epoch`); returns whether it fitted (a frame too big is marked so, and its readers ask
    /// the socket). Readers blocked on the ring wake.
    pub fn publish(&mut self, epoch: u64, step: u64, bytes: &[u8]) -> bool {
        let slot = self.geometry.slot_of(step);
        let fits = bytes.len() <= self.geometry.slot_bytes as usize;
        self.write_slot(slot, epoch, step, fits.then_some(bytes));
        let h = self.header();
        let latest = h.latest().load(Ordering::Relaxed).max(step + 1);
        h.latest().store(latest, Ordering::SeqCst);
        self.wake();
        fits
    }

    /// Reads of steps before `step` are no longer answered from the ring (the agent's
    /// retention dropped them).
    pub fn set_oldest(&mut self, step: u64) {
        let h = self.header();
        if h.oldest().load(Ordering::Relaxed) != step {
            h.oldest().store(step, Ordering::SeqCst);
        }
    }

    /// Write one slot under its seqlock; `None` payload: marked too big (or empty, epoch 0).
    fn write_slot(&self, index: usize, epoch: u64, step: u64, payload: Option<&[u8]>) {
        let slot = Slot::new(self.mapped(), self.geometry, index);
        let seq = slot.seq().load(Ordering::Relaxed);
        slot.seq().store(seq.wrapping_add(1) | 1, Ordering::Relaxed);
        // Odd before any word changes (the readers' first load of `seq` pairs with it).
        fence(Ordering::Release);
        slot.epoch().store(epoch, Ordering::Relaxed);
        slot.step().store(step, Ordering::Relaxed);
        match payload {
            Some(bytes) => {
                slot.len().store(bytes.len() as u64, Ordering::Relaxed);
                slot.store_payload(bytes);
            }
            None => slot
                .len()
                .store(if epoch == 0 { 0 } else { TOO_BIG }, Ordering::Relaxed),
        }
        slot.seq()
            .store((seq.wrapping_add(1) | 1).wrapping_add(1), Ordering::Release);
    }

    /// Bump the futex word and wake every reader waiting on it.
    fn wake(&self) {
        let word = self.header().wake();
        word.fetch_add(1, Ordering::SeqCst);
        // Shared (not private): the readers are other processes. A failure here only costs a
        // reader its wait slice.
        let _ = rustix::thread::futex::wake(
            word,
            rustix::thread::futex::Flags::empty(),
            i32::MAX as u32,
        );
    }
}
