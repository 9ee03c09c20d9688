//! What rank 0's protocol actor holds: the epoch's [`CacheEventDeriver`] and the sink.
//!
//! It feeds the deriver the epoch's start (the rebuilt group index, at `Ready`) and every
//! frame the leader seals, and hands what comes out to the publisher. No rule lives here.

use tandem_core::{CacheEventDeriver, LeaderCore};
use tandem_proto::{Epoch, Frame, Tier};

use super::EventSink;

/// Events per batch when a rebuilt index is restated.
const EVENTS_PER_RESTATED_BATCH: usize = 16;

/// The deriver of one epoch and where its events go.
#[derive(Debug)]
pub struct EventTap {
    deriver: CacheEventDeriver,
    sink: EventSink,
}

impl EventTap {
    /// A tap that publishes to `sink`.
    pub fn new(sink: EventSink) -> Self {
        Self {
            deriver: CacheEventDeriver::new(),
            sink,
        }
    }

    /// `epoch` is ready on the leader: all cleared, then the blocks its rebuilt index holds.
    pub fn ready(&mut self, epoch: Epoch, leader: &LeaderCore) {
        let index = leader.index();
        let kept = Tier::PLACED
            .into_iter()
            .flat_map(|t| index.lru_order(t).into_iter().map(move |h| (h, t)))
            .filter(|(h, _)| index.contains(*h));
        let events = self.deriver.begin_epoch(epoch, kept.collect::<Vec<_>>());
        // A large index is restated over several batches (each event holds at most
        // `MAX_HASHES_PER_EVENT` hashes), so no message grows with the index.
        for batch in events.chunks(EVENTS_PER_RESTATED_BATCH) {
            self.sink.publish(epoch, batch.to_vec());
        }
    }

    /// The leader sealed `frame`.
    pub fn sealed(&mut self, frame: &Frame) {
        let events = self.deriver.apply_frame(frame);
        self.sink.publish(frame.epoch, events);
    }
}
