//! The engine's side of the frame ring: a reader that never returns a torn or stale slot.
//!
//! Owns the engine's read-only mapping of its agent's ring. A read takes the frame bytes of
//! `(epoch, step)` only when the ring is open for that epoch, the step is published and still
//! retained, and a seqlock snapshot of its slot names that epoch and step; anything else is
//! "not yet" (wait) or "ask the socket". A wait sleeps on the ring's futex word in short
//! slices, checking between them that the agent's socket is still open, so an engine whose
//! agent died gets its typed error by the deadline instead of sleeping on a word nobody will
//! change. It never decodes frames and never decides an answer the socket would give
//! differently: every refusal (`LeaderBehind`, `FrameExpired`, `StaleEpoch`, `NotReady`) comes
//! from the socket.

use std::os::fd::OwnedFd;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use memmap2::Mmap;

use super::layout::{Geometry, Header, Mapped, Slot, HEADER_BYTES, TOO_BIG};
use super::RingError;

/// The longest one futex sleep lasts before the reader checks its agent is alive.
pub const WAIT_SLICE: Duration = Duration::from_millis(10);

/// Snapshots of one slot tried before a read gives up on it (the writer rewrote it every
/// time) and asks the socket.
const SNAPSHOT_TRIES: u32 = 64;

/// What one look at the ring found.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The frame's bytes are in the buffer handed in.
    Frame,
    /// The ring is open for the epoch and the step is not published yet: wait.
    NotYet,
    /// The ring cannot answer (another epoch or closed, the slot reused by a later step, the
    /// step older than the agent retains, a frame too big for a slot): ask the socket.
    Socket,
}

/// How a [`RingReader::wait`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited {
    /// The frame's bytes are in the buffer handed in.
    Frame,
    /// Ask the socket (the ring cannot answer, or the deadline passed first).
    Socket,
    /// The agent's socket closed while waiting.
    Hangup,
}

/// An engine's mapping of its agent's ring. See the module docs.
pub struct RingReader {
    map: Mmap,
    geometry: Geometry,
}

impl RingReader {
    /// Map the ring behind `fd` (read only) and check its layout.
    ///
    /// # Errors
    /// [`RingError::Map`] when it cannot be mapped, [`RingError::Layout`] when it is not a
    /// ring of this layout version or is shorter than its header says.
    pub fn map(fd: OwnedFd) -> Result<RingReader, RingError> {
        let file = std::fs::File::from(fd);
        // SAFETY: the agent never truncates its ring; every access goes through `layout`'s
        // atomics (the bytes change under the mapping).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| RingError::Map {
            reason: e.to_string(),
        })?;
        if map.len() < HEADER_BYTES {
            return Err(RingError::Layout {
                reason: format!("{} bytes, shorter than the header", map.len()),
            });
        }
        // SAFETY: as above.
        let mapped = unsafe { Mapped::new(map.as_ptr(), map.len()) };
        let geometry = Header::new(mapped)
            .geometry()
            .ok_or_else(|| RingError::Layout {
                reason: "not a frame ring of this layout version".into(),
            })?;
        if map.len() < geometry.total_bytes() {
            return Err(RingError::Layout {
                reason: format!(
                    "{} bytes, the header names {}",
                    map.len(),
                    geometry.total_bytes()
                ),
            });
        }
        Ok(RingReader { map, geometry })
    }

    /// The ring's shape.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn mapped(&self) -> Mapped<'_> {
        // SAFETY: the mapping lives as long as `self`; every access goes through the atomics.
        unsafe { Mapped::new(self.map.as_ptr(), self.map.len()) }
    }

    /// The epoch the ring is open for (0: closed).
    pub fn epoch(&self) -> u64 {
        Header::new(self.mapped()).epoch().load(Ordering::Acquire)
    }

    /// The last step published this epoch, plus one (0: none).
    pub fn published_end(&self) -> u64 {
        Header::new(self.mapped()).latest().load(Ordering::Acquire)
    }

    /// One look for the frame of `(epoch, step)`; on [`Lookup::Frame`] its bytes are in `out`.
    pub fn lookup(&self, epoch: u64, step: u64, out: &mut Vec<u8>) -> Lookup {
        let h = Header::new(self.mapped());
        if epoch == 0 || h.epoch().load(Ordering::Acquire) != epoch {
            return Lookup::Socket;
        }
        if step >= h.latest().load(Ordering::Acquire) {
            return Lookup::NotYet;
        }
        let slot = Slot::new(self.mapped(), self.geometry, self.geometry.slot_of(step));
        for _ in 0..SNAPSHOT_TRIES {
            let before = slot.seq().load(Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let (e, s, len) = (
                slot.epoch().load(Ordering::Relaxed),
                slot.step().load(Ordering::Relaxed),
                slot.len().load(Ordering::Relaxed),
            );
            let ours = e == epoch && s == step && len <= slot.capacity() as u64;
            if ours {
                slot.load_payload(len as usize, out);
            }
            // Every load above happens before the second look at `seq`.
            fence(Ordering::Acquire);
            if slot.seq().load(Ordering::Relaxed) != before {
                continue;
            }
            if !ours || len == TOO_BIG {
                // Published, but this slot holds another step (reused by a later one) or the
                // frame did not fit: the socket answers.
                return Lookup::Socket;
            }
            // Still this epoch, and still retained, after the copy.
            if h.epoch().load(Ordering::Acquire) != epoch
                || step < h.oldest().load(Ordering::Acquire)
            {
                return Lookup::Socket;
            }
            return Lookup::Frame;
        }
        Lookup::Socket
    }

    /// Wait until `deadline` for the frame of `(epoch, step)`; on [`Waited::Frame`] its bytes
    /// are in `out`. Between futex sleeps of at most [`WAIT_SLICE`], `hung_up` says whether
    /// the agent's socket closed.
    pub fn wait(
        &self,
        epoch: u64,
        step: u64,
        deadline: Instant,
        out: &mut Vec<u8>,
        mut hung_up: impl FnMut() -> bool,
    ) -> Waited {
        let word = Header::new(self.mapped()).wake();
        loop {
            // Read before the look: a publish after it changes the word, so the sleep below
            // returns at once instead of missing the wake-up.
            let seen = word.load(Ordering::SeqCst);
            match self.lookup(epoch, step, out) {
                Lookup::Frame => return Waited::Frame,
                Lookup::Socket => return Waited::Socket,
                Lookup::NotYet => {}
            }
            let now = Instant::now();
            let Some(left) = deadline
                .checked_duration_since(now)
                .filter(|d| !d.is_zero())
            else {
                return Waited::Socket;
            };
            if hung_up() {
                return Waited::Hangup;
            }
            let slice = left.min(WAIT_SLICE);
            let timeout = rustix::thread::futex::Timespec {
                tv_sec: slice.as_secs() as i64,
                tv_nsec: i64::from(slice.subsec_nanos()),
            };
            // Woken, timed out, interrupted, or the word already changed: look again.
            let _ = rustix::thread::futex::wait(
                word,
                rustix::thread::futex::Flags::empty(),
                seen,
                Some(&timeout),
            );
        }
    }
}
