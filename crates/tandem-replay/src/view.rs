//! What an engine reads out of a [`Frame`]: the tasks started, the outcomes revealed (the
//! reconciliation's first), the lookups, and a digest of the whole frame.
//!
//! This is the one place that looks inside a frame, so the rest of the crate does not depend
//! on fields engines must treat as opaque (evictions and block moves, tiers): those only
//! enter the digest. Owns the conversion and the digest; it never applies anything.

use tandem_proto::frame::{Frame, LookupResult, TaskOutcome};
use tandem_proto::ids::{BlockHash, PageId, RequestId, TaskId, TaskKind};

/// A task start as an engine needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartView {
    /// The task.
    pub task: TaskId,
    /// Store or load.
    pub kind: TaskKind,
    /// The request it serves.
    pub request: RequestId,
    /// Its blocks, in prefix order.
    pub hashes: Vec<BlockHash>,
    /// A page per block.
    pub pages: Vec<PageId>,
}

/// The parts of one frame an engine applies, with the frame's digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameView {
    /// The frame's epoch.
    pub epoch: u64,
    /// The frame's step.
    pub step: u64,
    /// [`frame_digest`] of the frame.
    pub digest: u64,
    /// Tasks started in this step, stores first.
    pub starts: Vec<StartView>,
    /// Outcomes in apply order: reconciliation redelivered, reconciliation aborted, finished.
    pub outcomes: Vec<TaskOutcome>,
    /// Lookup decisions of this step.
    pub lookups: Vec<LookupResult>,
}

impl FrameView {
    /// Read `frame`.
    pub fn of(frame: &Frame) -> FrameView {
        FrameView {
            epoch: frame.epoch.0,
            step: frame.step.0,
            digest: frame_digest(frame),
            starts: frame
                .started()
                .map(|(kind, t)| StartView {
                    task: t.task,
                    kind,
                    request: t.request,
                    hashes: t.block_hashes.clone(),
                    pages: t.page_ids.clone(),
                })
                .collect(),
            outcomes: frame.outcomes().cloned().collect(),
            lookups: frame.lookups.clone(),
        }
    }
}

/// A 64-bit digest (xxh3) of the frame's postcard encoding, with the reconciliation's
/// `redelivered` list left out: that list is per rank by design (each agent drops the outcomes
/// its own engine already acknowledged), everything else must be identical on every rank.
pub fn frame_digest(frame: &Frame) -> u64 {
    let mut shared = frame.clone();
    if let Some(r) = shared.reconciliation.as_mut() {
        r.redelivered.clear();
    }
    // Encoding plain data into a Vec cannot fail; a failure would digest as the empty frame.
    let bytes = postcard::to_allocvec(&shared).unwrap_or_default();
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::frame::{OutcomeResult, Reconciliation};
    use tandem_proto::ids::{Epoch, Step};

    fn outcome(seq: u64, result: OutcomeResult) -> TaskOutcome {
        TaskOutcome {
            task: TaskId { epoch: 1, seq },
            kind: TaskKind::Store,
            request: RequestId(seq),
            result,
        }
    }

    #[test]
    fn digest_ignores_only_the_per_rank_redelivered_list() {
        let mut a = Frame::empty(Epoch(2), Step(0));
        a.reconciliation = Some(Reconciliation::default());
        let mut b = a.clone();
        if let Some(r) = b.reconciliation.as_mut() {
            r.redelivered.push(outcome(1, OutcomeResult::Ok));
        }
        assert_eq!(frame_digest(&a), frame_digest(&b));
        let mut c = a.clone();
        if let Some(r) = c.reconciliation.as_mut() {
            r.aborted.push(outcome(2, OutcomeResult::Aborted));
        }
        assert_ne!(frame_digest(&a), frame_digest(&c));
        let mut d = a.clone();
        d.finished.push(outcome(3, OutcomeResult::Ok));
        assert_ne!(frame_digest(&a), frame_digest(&d));
        assert_ne!(
            frame_digest(&Frame::empty(Epoch(2), Step(1))),
            frame_digest(&Frame::empty(Epoch(2), Step(2)))
        );
    }

    #[test]
    fn view_lists_outcomes_in_apply_order() {
        let mut f = Frame::empty(Epoch(3), Step(0));
        f.finished.push(outcome(3, OutcomeResult::Ok));
        let mut r = Reconciliation::default();
        r.redelivered.push(outcome(1, OutcomeResult::Ok));
        r.aborted.push(outcome(2, OutcomeResult::Aborted));
        f.reconciliation = Some(r);
        let v = FrameView::of(&f);
        assert_eq!((v.epoch, v.step), (3, 0));
        assert_eq!(
            v.outcomes.iter().map(|o| o.task.seq).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert!(v.starts.is_empty() && v.lookups.is_empty());
        assert_eq!(v.digest, frame_digest(&f));
    }
}
