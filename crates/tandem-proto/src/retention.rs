//! A bounded window of sealed frames with contiguous steps, shared by leader and follower.
//!
//! Owns which frames are still readable. It never validates frame contents (the owners do)
//! and never holds more than its retention, so memory stays bounded however long an epoch
//! runs.

use crate::frame::Frame;
use crate::ids::Step;
use std::collections::VecDeque;

/// The most recent `retention` frames of one epoch, in step order with no gaps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FrameStore {
    retention: usize,
    frames: VecDeque<Frame>,
    /// The step the next pushed frame must have.
    next: Step,
}

impl FrameStore {
    /// An empty store keeping at most `retention` frames (at least 1).
    pub fn new(retention: usize) -> FrameStore {
        FrameStore {
            retention: retention.max(1),
            frames: VecDeque::new(),
            next: Step(0),
        }
    }

    /// The step the next frame must have.
    pub fn next_step(&self) -> Step {
        self.next
    }

    /// The last step pushed, if any.
    pub fn last_step(&self) -> Option<Step> {
        self.next.0.checked_sub(1).map(Step)
    }

    /// The oldest step still retained, if any frame was pushed.
    pub fn oldest_step(&self) -> Option<Step> {
        self.frames.front().map(|f| f.step)
    }

    /// Append the frame of [`Self::next_step`], dropping the oldest beyond the retention.
    /// The caller guarantees `frame.step == self.next_step()`.
    pub fn push(&mut self, frame: Frame) {
        self.next = frame.step.next();
        self.frames.push_back(frame);
        while self.frames.len() > self.retention {
            self.frames.pop_front();
        }
    }

    /// Where `step` stands: retained, expired (older than the oldest retained) or not yet
    /// pushed.
    pub fn lookup(&self, step: Step) -> Lookup<'_> {
        if step >= self.next {
            return Lookup::NotYet;
        }
        let Some(oldest) = self.oldest_step() else {
            return Lookup::NotYet;
        };
        if step < oldest {
            return Lookup::Expired { oldest };
        }
        match self.frames.get((step.0 - oldest.0) as usize) {
            Some(f) => Lookup::Retained(f),
            None => Lookup::NotYet,
        }
    }
}

/// The answer of [`FrameStore::lookup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// The frame is retained.
    Retained(&'a Frame),
    /// The frame was pushed but dropped; `oldest` is the oldest retained step.
    Expired {
        /// The oldest retained step.
        oldest: Step,
    },
    /// No frame for this step yet.
    NotYet,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Epoch;

    #[test]
    fn keeps_the_most_recent_frames() {
        let mut s = FrameStore::new(2);
        assert_eq!(s.lookup(Step(0)), Lookup::NotYet);
        assert_eq!(s.last_step(), None);
        for i in 0..4 {
            s.push(Frame::empty(Epoch(1), Step(i)));
        }
        assert_eq!(s.last_step(), Some(Step(3)));
        assert_eq!(s.next_step(), Step(4));
        assert_eq!(s.oldest_step(), Some(Step(2)));
        assert_eq!(s.lookup(Step(1)), Lookup::Expired { oldest: Step(2) });
        assert!(matches!(s.lookup(Step(3)), Lookup::Retained(f) if f.step == Step(3)));
        assert_eq!(s.lookup(Step(4)), Lookup::NotYet);
    }

    #[test]
    fn zero_retention_keeps_one() {
        let mut s = FrameStore::new(0);
        s.push(Frame::empty(Epoch(1), Step(0)));
        assert!(matches!(s.lookup(Step(0)), Lookup::Retained(_)));
    }
}
