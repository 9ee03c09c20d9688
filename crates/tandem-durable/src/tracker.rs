//! Which stream entries a rank may acknowledge, given how far its engine acknowledged frames.
//!
//! Owns the mapping from entries read by a rank's agent ([`crate::CompletionStream::read_new`])
//! to the entry ids to XACK once the engine acknowledged frame `(epoch, step)`. Sans IO: it
//! never talks to Redis. An entry becomes acknowledgeable when the engine acknowledged the
//! frame of the entry's own `(epoch, step)` or a later one (frames are acknowledged in
//! order, and an older epoch's entries are settled by the reconciliation frame of the
//! newer one).

use crate::id::StreamEntryId;
use crate::record::LoggedStep;
use std::collections::VecDeque;
use tandem_proto::{Epoch, Step};

/// Entries read by one rank's agent and not yet acknowledged, in stream order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AckTracker {
    read: VecDeque<(StreamEntryId, Epoch, Step)>,
}

impl AckTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        AckTracker::default()
    }

    /// Records entries just read (in stream order).
    pub fn on_read(&mut self, entries: &[LoggedStep]) {
        self.read.extend(
            entries
                .iter()
                .map(|e| (e.id, e.record.epoch, e.record.step)),
        );
    }

    /// The engine acknowledged the frame of `(epoch, step)`: returns the ids of every
    /// tracked entry at or before that position, to pass to
    /// [`crate::CompletionStream::ack`], and forgets them. Entries of later positions stay.
    pub fn on_engine_ack(&mut self, epoch: Epoch, step: Step) -> Vec<StreamEntryId> {
        let mut out = Vec::new();
        self.read.retain(|(id, e, s)| {
            let done = (*e, *s) <= (epoch, step);
            if done {
                out.push(*id);
            }
            !done
        });
        out
    }

    /// Entries read and not yet handed back for acknowledgement.
    pub fn len(&self) -> usize {
        self.read.len()
    }

    /// True when nothing is waiting for the engine.
    pub fn is_empty(&self) -> bool {
        self.read.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::StepRecord;

    fn entry(ms: u64, epoch: u64, step: u64) -> LoggedStep {
        LoggedStep {
            id: StreamEntryId { ms, seq: 0 },
            record: StepRecord {
                epoch: Epoch(epoch),
                step: Step(step),
                started: vec![],
                finished: vec![],
            },
        }
    }

    #[test]
    fn acks_up_to_the_engine_position() {
        let mut t = AckTracker::new();
        t.on_read(&[
            entry(1, 1, 4),
            entry(2, 1, 5),
            entry(3, 2, 0),
            entry(4, 2, 1),
        ]);
        assert_eq!(
            t.on_engine_ack(Epoch(1), Step(4)),
            vec![StreamEntryId { ms: 1, seq: 0 }]
        );
        assert_eq!(t.len(), 3);
        let ids: Vec<u64> = t
            .on_engine_ack(Epoch(2), Step(0))
            .iter()
            .map(|i| i.ms)
            .collect();
        assert_eq!(
            ids,
            vec![2, 3],
            "older epoch settled by the new epoch's step 0"
        );
        assert!(t.on_engine_ack(Epoch(2), Step(0)).is_empty());
        assert_eq!(t.on_engine_ack(Epoch(2), Step(9)).len(), 1);
        assert!(t.is_empty());
    }
}
