//! Bounded growth of the completion stream without losing anything a reader still needs.
//!
//! Owns the choice of the trim point, as the pure [`TrimScan`] both
//! [`crate::CompletionStream`] implementations fold the retained stream with. Redis 7.0 has no
//! "trim only acknowledged entries" option, so the trim point is computed here and applied
//! with `XTRIM MINID` (which removes every entry with a smaller id; the in-memory twin does
//! the same). An entry is removable only when all three hold:
//! - every rank's consumer group has acknowledged it: the id is below each group's lowest
//!   pending id and at or below its last delivered id (a missing group blocks all trimming);
//! - no task started in it is still without an outcome, or recovery could no longer report
//!   that task aborted;
//! - the stream is longer than `max_len`, and the entry is among the oldest `len - max_len`.
//!
//! Entries that [`crate::recovery::EntryCheck`] rejects (copies of earlier entries, records
//! inconsistent with their id) hold nothing back: their starts are not starts. The trim point
//! never falls strictly between such a copy and the entry that shows it to be one (the last
//! accepted record of its epoch before it): a later scan, and the recovery of a later epoch,
//! would otherwise take the copy, now first of its epoch, for a real record and resurrect its
//! tasks. The copy and that entry leave together.
//!
//! It never moves a consumer group and never trims approximately (`~`), so the count it
//! returns is exact. A trim reads the whole retained stream once (in pages), so callers
//! trim every so many steps, not every step. Races are harmless: acknowledgements and
//! appends that land meanwhile only raise the safe point.

use crate::id::StreamEntryId;
use crate::record::StreamEntry;
use crate::recovery::{EntryCheck, EntryRejection};
use std::collections::{BTreeMap, BTreeSet};
use tandem_proto::TaskId;

/// One rank group's acknowledgement floor input: its last delivered id and lowest pending id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupFloor {
    /// Last entry handed to the group.
    pub last_delivered: StreamEntryId,
    /// Lowest entry handed out and not acknowledged, if any.
    pub lowest_pending: Option<StreamEntryId>,
}

impl GroupFloor {
    /// The lowest id this group has not acknowledged (pending or not yet delivered).
    pub fn floor(&self) -> StreamEntryId {
        let undelivered = self.last_delivered.successor();
        self.lowest_pending
            .map_or(undelivered, |p| p.min(undelivered))
    }
}

/// Folds the retained stream (in order) to find the open-start floor and the length cut.
#[derive(Clone, Debug, Default)]
pub struct TrimScan {
    ids: Vec<StreamEntryId>,
    open: BTreeMap<TaskId, StreamEntryId>,
    finished: BTreeSet<TaskId>,
    check: EntryCheck,
    /// Rejected copies and the entry each repeats: (evidence, copy).
    copies: Vec<(StreamEntryId, StreamEntryId)>,
}

impl TrimScan {
    /// Adds the next entry; a rejected one is counted, holds nothing back, and its rejection
    /// is returned for the caller's log.
    pub fn push(&mut self, entry: &StreamEntry) -> Option<EntryRejection> {
        self.ids.push(entry.id());
        if let Err(r) = self.check.check(entry) {
            if let EntryRejection::StepRepeated { id, last_id, .. } = &r {
                self.copies.push((*last_id, *id));
            }
            return Some(r);
        }
        let StreamEntry::Step(entry) = entry else {
            return None;
        };
        for s in &entry.record.started {
            if !self.finished.contains(&s.start.task) {
                self.open.entry(s.start.task).or_insert(entry.id);
            }
        }
        for o in &entry.record.finished {
            self.finished.insert(o.task);
            self.open.remove(&o.task);
        }
        None
    }

    /// Entries rejected by the check so far.
    pub fn rejected(&self) -> u64 {
        self.check.rejected()
    }

    /// The exclusive trim point: entries below it may go. `None` when nothing may be
    /// removed. `groups` holds one floor per rank, `None` for a rank without a group.
    pub fn min_id(&self, groups: &[Option<GroupFloor>], max_len: usize) -> Option<StreamEntryId> {
        let excess = self.ids.len().checked_sub(max_len).filter(|n| *n > 0)?;
        let length_cut = match self.ids.get(excess) {
            Some(id) => *id,
            None => self.ids.last()?.successor(),
        };
        let mut min = length_cut;
        for g in groups {
            min = min.min(g.as_ref()?.floor());
        }
        if let Some(open) = self.open.values().min() {
            min = min.min(*open);
        }
        // Never keep a copy without the entry that shows it to be one.
        while let Some(&(evidence, _)) = self
            .copies
            .iter()
            .find(|(evidence, copy)| *evidence < min && min <= *copy)
        {
            min = evidence;
        }
        let first = self.ids.first()?;
        (min > *first).then_some(min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{LoggedStep, StartedTask, StepRecord};
    use tandem_proto::{Epoch, OutcomeResult, RequestId, Step, TaskKind, TaskOutcome, TaskStart};

    /// The id the fenced append gives the record of epoch 1 appended `n`-th.
    fn id(n: u64) -> StreamEntryId {
        StreamEntryId { ms: 1, seq: n }
    }
    fn entry(ms: u64, start: Option<u64>, finish: Option<u64>) -> StreamEntry {
        let task = |seq| TaskId::new(Epoch(1), seq);
        StreamEntry::Step(LoggedStep {
            id: id(ms),
            record: StepRecord {
                epoch: Epoch(1),
                step: Step(ms),
                started: start
                    .map(|s| StartedTask {
                        kind: TaskKind::Store,
                        start: TaskStart {
                            task: task(s),
                            request: RequestId(s),
                            block_hashes: vec![],
                            page_ids: vec![],
                            tiers: vec![],
                        },
                    })
                    .into_iter()
                    .collect(),
                finished: finish
                    .map(|s| TaskOutcome {
                        task: task(s),
                        kind: TaskKind::Store,
                        request: RequestId(s),
                        result: OutcomeResult::Ok,
                    })
                    .into_iter()
                    .collect(),
            },
        })
    }
    fn acked_through(ms: u64) -> Option<GroupFloor> {
        Some(GroupFloor {
            last_delivered: id(ms),
            lowest_pending: None,
        })
    }
    fn scan(entries: &[StreamEntry]) -> TrimScan {
        let mut s = TrimScan::default();
        for e in entries {
            s.push(e);
        }
        s
    }

    #[test]
    fn floor_is_lowest_pending_or_next_undelivered() {
        let g = GroupFloor {
            last_delivered: id(9),
            lowest_pending: Some(id(4)),
        };
        assert_eq!(g.floor(), id(4));
        assert_eq!(acked_through(9).unwrap().floor(), id(9).successor());
    }

    #[test]
    fn lagging_group_holds_the_trim_point() {
        let s = scan(&[
            entry(1, None, None),
            entry(2, None, None),
            entry(3, None, None),
        ]);
        assert_eq!(
            s.min_id(&[acked_through(3), acked_through(1)], 0),
            Some(id(1).successor())
        );
        let pending = Some(GroupFloor {
            last_delivered: id(3),
            lowest_pending: Some(id(1)),
        });
        assert_eq!(s.min_id(&[acked_through(3), pending], 0), None);
        assert_eq!(
            s.min_id(&[acked_through(3), None], 0),
            None,
            "missing group"
        );
        assert_eq!(s.min_id(&[acked_through(3)], 0), Some(id(3).successor()));
    }

    #[test]
    fn max_len_keeps_the_newest_and_open_starts_stay() {
        let s = scan(&[
            entry(1, None, None),
            entry(2, None, None),
            entry(3, None, None),
        ]);
        assert_eq!(s.min_id(&[acked_through(3)], 1), Some(id(3)));
        assert_eq!(s.min_id(&[acked_through(3)], 3), None);
        let s = scan(&[
            entry(1, Some(1), None),
            entry(2, Some(2), Some(1)),
            entry(3, None, None),
        ]);
        assert_eq!(
            s.min_id(&[acked_through(3)], 0),
            Some(id(2)),
            "task 2 still open"
        );
        let same = scan(&[entry(1, Some(1), Some(1)), entry(2, None, None)]);
        assert_eq!(same.min_id(&[acked_through(2)], 0), Some(id(2).successor()));
        assert_eq!(TrimScan::default().min_id(&[acked_through(3)], 0), None);
    }

    /// A copy of `entry` appended later under `id`.
    fn copy_as(entry: &StreamEntry, id: StreamEntryId) -> StreamEntry {
        let StreamEntry::Step(s) = entry else {
            panic!("a step entry")
        };
        StreamEntry::Step(LoggedStep {
            id,
            record: s.record.clone(),
        })
    }

    #[test]
    fn a_copy_of_an_old_entry_never_holds_trimming() {
        // Task 1 starts in step 1 and finishes in step 2; entry 5 is a copy of entry 1.
        let original = entry(1, Some(1), None);
        let mut entries = vec![
            original.clone(),
            entry(2, None, Some(1)),
            entry(3, None, None),
            entry(4, None, None),
        ];
        entries.push(copy_as(&original, id(5)));
        entries.extend([entry(6, None, None), entry(7, None, None)]);
        let s = scan(&entries);
        assert_eq!(s.rejected(), 1);
        // Everything below the newest two may go; the copy's start holds nothing.
        assert_eq!(s.min_id(&[acked_through(7)], 2), Some(id(6)));
        // With the original and its outcome gone, the copy is still rejected (step 1 of epoch
        // 1 after step 4) and still holds nothing.
        let s = scan(&entries[2..]);
        assert_eq!(s.rejected(), 1);
        assert_eq!(s.min_id(&[acked_through(7)], 1), Some(id(7)));
    }

    #[test]
    fn the_cut_never_separates_a_copy_from_its_evidence() {
        let original = entry(1, Some(1), None);
        let entries = vec![
            original.clone(),
            entry(2, None, Some(1)),
            entry(3, None, None),
            copy_as(&original, id(4)),
            entry(5, None, None),
            entry(6, None, None),
        ];
        let s = scan(&entries);
        // Keeping the newest three would cut between entry 3 (step 3, the evidence) and the
        // copy: the cut stays at the evidence instead.
        assert_eq!(s.min_id(&[acked_through(6)], 3), Some(id(3)));
        // Keeping the newest two removes both.
        assert_eq!(s.min_id(&[acked_through(6)], 2), Some(id(5)));
    }

    #[test]
    fn a_copy_in_a_later_epoch_is_rejected_by_its_id() {
        let original = entry(1, Some(1), None);
        let later = StreamEntryId { ms: 2, seq: 3 };
        let s = scan(&[entry(2, None, None), copy_as(&original, later)]);
        assert_eq!(s.rejected(), 1);
        let acked = Some(GroupFloor {
            last_delivered: later,
            lowest_pending: None,
        });
        assert_eq!(
            s.min_id(&[acked], 0),
            Some(later.successor()),
            "no open start"
        );
    }
}
