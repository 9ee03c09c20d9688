//! The ProtocolActor's frame-ring hook: after every input of the rank core, the frames an
//! engine `frame(s)` read is now answered with go into this rank's ring
//! (`tandem_client::ring`), so that engines read them without a socket round trip.
//!
//! Owns what was published of this epoch. The ring is open exactly while the core serves
//! frame reads ([`FrameReads::Served`]), reset for this epoch when it opens, and closed when
//! the core refuses reads (the epoch failed) or the actor stops; readers of a closed ring ask
//! the socket, whose answer is the core's. It never decides which frame a step has: every
//! frame is [`RankCore::readable_frame`], the same frame the socket's reply carries.

use std::sync::{Arc, Mutex};

use tandem_client::ring::RingWriter;
use tandem_core::{FrameReads, RankCore};
use tandem_proto::Step;

/// The agent's ring, shared by the endpoint (which hands out its descriptor) and each epoch's
/// protocol actor (which writes it).
pub type SharedRing = Arc<Mutex<RingWriter>>;

/// One epoch's publisher. See the module docs.
pub(crate) struct RingPublisher {
    ring: SharedRing,
    epoch: u64,
    /// Open for this epoch.
    open: bool,
    /// The last step published since the ring opened.
    published: Option<Step>,
}

impl RingPublisher {
    pub(crate) fn new(ring: SharedRing, epoch: u64) -> RingPublisher {
        RingPublisher {
            ring,
            epoch,
            open: false,
            published: None,
        }
    }

    /// Bring the ring up to what `core` answers frame reads with now.
    pub(crate) fn publish(&mut self, core: &RankCore) {
        let readable = match core.frame_reads() {
            FrameReads::Refused => return self.close(),
            FrameReads::Served { readable } => readable,
        };
        let Ok(mut ring) = self.ring.lock() else {
            return;
        };
        if !self.open {
            ring.reset(self.epoch);
            self.open = true;
            self.published = None;
        }
        let Some((oldest, latest)) = readable else {
            return;
        };
        let from = self.published.map_or(oldest.0, |p| (p.0 + 1).max(oldest.0));
        for step in from..=latest.0 {
            let Some(frame) = core.readable_frame(Step(step)) else {
                continue;
            };
            match postcard::to_allocvec(&frame) {
                Ok(bytes) => {
                    ring.publish(self.epoch, step, &bytes);
                }
                // Not published: its readers wait out their deadline and ask the socket.
                Err(e) => tracing::error!(step, error = %e, "frame not encodable for the ring"),
            }
        }
        if from <= latest.0 {
            self.published = Some(latest);
        }
        ring.set_oldest(oldest.0);
    }

    /// No frame of this epoch is readable from the ring any more.
    pub(crate) fn close(&mut self) {
        if !self.open {
            return;
        }
        if let Ok(mut ring) = self.ring.lock() {
            ring.close(self.epoch);
        }
        self.open = false;
    }
}
