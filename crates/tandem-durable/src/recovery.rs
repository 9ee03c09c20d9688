//! Recovery for a new epoch: what the retained stream says must be delivered again and
//! what was in flight (docs/DESIGN.md invariant 5).
//!
//! Owns the pure [`RecoveryBuilder`] that turns the retained stream and every rank's delivery
//! position into a [`Recovery`]; both [`crate::CompletionStream`] implementations read
//! (Redis: XRANGE in pages of [`crate::DurableConfig::page_entries`]) and fold with it. It
//! never talks to a backend and never appends: the new epoch's leader feeds the result to `tandem_proto::reconcile` and appends
//! the aborted outcomes itself.
//!
//! # A task started in epoch e, settled in epoch e+1
//!
//! Such a task has a start in an epoch-e record and no outcome there. Recovery lists it in
//! [`Recovery::in_flight`]. The leader of e+1 appends it, as an outcome with result
//! `Aborted`, in the first record of e+1 (step 0), before sealing step 0. From then on the
//! stream holds exactly one outcome for the task: the next recovery sees it as finished, so
//! it is never in flight again, and it reaches each engine through the normal delivery path
//! (or through redelivery if that engine did not acknowledge step 0). Because appends are
//! fenced by the epoch barrier, a leader of epoch e can no longer append an `Ok` for it
//! once e+1 began (and any append of e that succeeded is before the barrier, so this
//! recovery saw it); should two outcomes for one task ever be in the stream, the first in
//! stream order is the one every reader keeps. So a task is either delivered or aborted,
//! never both.
//!
//! # Entries that are not what the leader appended
//!
//! Whatever the stream holds, recovery must never resurrect a task whose outcome was already
//! delivered (issue 19: a byte-identical copy of an old entry, appended later under a new id,
//! outlived the original and its outcome through trimming, and the next epoch reported the
//! task aborted after it had finished). [`EntryCheck`] holds every entry to what the fenced
//! append can produce, and rejects the rest before anything is read from them:
//! - a step record's epoch is the epoch in its id (`{epoch}-{n}`), and a barrier's id is
//!   `{epoch}-0` for the epoch it names;
//! - within an epoch, steps never go back: a record for a step below the last accepted step of
//!   its epoch, or a byte-identical repeat of the last accepted record, is a copy. (An append
//!   retried after an ambiguous failure is written at the same step or a later one and is
//!   accepted; its repeated outcomes are suppressed by task id as above.)
//!
//! A rejected entry contributes nothing (no start, no outcome), is counted
//! ([`Recovery::entries_rejected`]) and still counts as scanned. [`crate::TrimScan`] uses the
//! same check, so a copy never holds trimming back, and it never cuts between a copy and the
//! entry that shows it to be one.

use crate::id::StreamEntryId;
use crate::record::{LoggedStep, StepRecord, StreamEntry};
use crate::stream::RankCursor;
use std::collections::{BTreeMap, BTreeSet};
use tandem_proto::{Epoch, InFlightTask, Rank, Step, TaskId, TaskOutcome};

/// Why [`EntryCheck`] rejected an entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryRejection {
    /// A step record whose epoch is not the epoch of its id: not written by its epoch's
    /// fenced append (for example a copy appended in a later epoch).
    #[error("entry {id} holds a record of epoch {record_epoch}, but its id is of epoch {}", .id.ms)]
    EpochMismatch {
        /// The entry.
        id: StreamEntryId,
        /// The epoch the record claims.
        record_epoch: Epoch,
    },
    /// A barrier whose id is not `{epoch}-0`.
    #[error("entry {id} is a barrier of epoch {epoch} at another place than {}-0", .epoch.0)]
    MisplacedBarrier {
        /// The entry.
        id: StreamEntryId,
        /// The epoch it names.
        epoch: Epoch,
    },
    /// A step record for a step before the last accepted step of its epoch, or a byte-identical
    /// repeat of that record: a copy appended later.
    #[error("entry {id} repeats step {step} of epoch {epoch}, already at step {last_step} (entry {last_id})")]
    StepRepeated {
        /// The entry.
        id: StreamEntryId,
        /// Its epoch.
        epoch: Epoch,
        /// Its step.
        step: Step,
        /// The last accepted step of that epoch.
        last_step: Step,
        /// The entry that holds it: the evidence that `id` is a copy.
        last_id: StreamEntryId,
    },
}

impl EntryRejection {
    /// The rejected entry.
    pub fn id(&self) -> StreamEntryId {
        match self {
            EntryRejection::EpochMismatch { id, .. }
            | EntryRejection::MisplacedBarrier { id, .. }
            | EntryRejection::StepRepeated { id, .. } => *id,
        }
    }
}

/// Holds entries, fed in stream order, to what the fenced append writes (see the module docs):
/// pure, shared by recovery, trimming and the agents' delivery tracking.
#[derive(Clone, Debug, Default)]
pub struct EntryCheck {
    /// Per epoch: the last accepted step record and its id.
    last: BTreeMap<Epoch, (StreamEntryId, StepRecord)>,
    rejected: u64,
}

impl EntryCheck {
    /// A check that has seen nothing.
    pub fn new() -> Self {
        EntryCheck::default()
    }

    /// Check the next entry; `Err` names why it must be ignored (and counts it).
    ///
    /// # Errors
    /// [`EntryRejection`].
    pub fn check(&mut self, entry: &StreamEntry) -> std::result::Result<(), EntryRejection> {
        match entry {
            StreamEntry::Step(s) => self.check_step(s),
            StreamEntry::Barrier { id, epoch } => {
                if id.ms == epoch.0 && id.seq == 0 {
                    return Ok(());
                }
                self.rejected += 1;
                Err(EntryRejection::MisplacedBarrier {
                    id: *id,
                    epoch: *epoch,
                })
            }
        }
    }

    /// [`EntryCheck::check`] of a step entry (what `CompletionLog::read_new` returns).
    ///
    /// # Errors
    /// [`EntryRejection`].
    pub fn check_step(&mut self, step: &LoggedStep) -> std::result::Result<(), EntryRejection> {
        let verdict = self.verdict(step);
        match &verdict {
            Ok(()) => {
                self.last
                    .insert(step.record.epoch, (step.id, step.record.clone()));
            }
            Err(_) => self.rejected += 1,
        }
        verdict
    }

    fn verdict(&self, step: &LoggedStep) -> std::result::Result<(), EntryRejection> {
        let (id, record) = (step.id, &step.record);
        if id.ms != record.epoch.0 {
            return Err(EntryRejection::EpochMismatch {
                id,
                record_epoch: record.epoch,
            });
        }
        if let Some((last_id, last)) = self.last.get(&record.epoch) {
            if record.step < last.step || record == last {
                return Err(EntryRejection::StepRepeated {
                    id,
                    epoch: record.epoch,
                    step: record.step,
                    last_step: last.step,
                    last_id: *last_id,
                });
            }
        }
        Ok(())
    }

    /// Entries rejected so far.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}

/// What a new epoch must settle, computed from the retained stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Ranks in the group (length of the per-rank vectors).
    pub world_size: u32,
    /// Outcomes not acknowledged by every rank, deduplicated by task id (first occurrence
    /// kept), in stream order. The `durable_unacked` input of `tandem_proto::reconcile`.
    pub redelivered: Vec<TaskOutcome>,
    /// For rank `r` (index `r`): the outcomes its engine has not acknowledged, a subset of
    /// `redelivered` in the same order.
    pub unacked_by_rank: Vec<Vec<TaskOutcome>>,
    /// For rank `r`: the task ids of `redelivered` its engine already acknowledged (it
    /// acknowledged an entry holding an outcome for the task). The `already_acknowledged`
    /// input of `tandem_proto::undelivered_outcomes`.
    pub acknowledged_by_rank: Vec<BTreeSet<TaskId>>,
    /// Tasks started with no outcome anywhere in the retained stream, in stream order.
    pub in_flight: Vec<InFlightTask>,
    /// The last entry scanned; each rank calls `CompletionStream::ack_through` with it once its
    /// engine acknowledged the reconciliation frame. `None` for an empty stream.
    pub last_entry_id: Option<StreamEntryId>,
    /// Entries scanned.
    pub entries_scanned: u64,
    /// Outcomes dropped because an earlier entry already held an outcome for the task.
    pub duplicates_suppressed: u64,
    /// Entries ignored whole by [`EntryCheck`]: copies, or records inconsistent with their id.
    pub entries_rejected: u64,
}

impl Recovery {
    /// The in-flight tasks as `Aborted` outcomes, to append in step 0 of the new epoch.
    pub fn aborted(&self) -> Vec<TaskOutcome> {
        self.in_flight.iter().map(InFlightTask::aborted).collect()
    }

    /// The outcomes rank `rank`'s engine must still be shown (empty for a rank out of
    /// range).
    pub fn unacked_for(&self, rank: Rank) -> &[TaskOutcome] {
        self.unacked_by_rank
            .get(rank.0 as usize)
            .map_or(&[], Vec::as_slice)
    }
}

/// Folds stream entries, in stream order, against fixed rank positions into a [`Recovery`].
#[derive(Clone, Debug)]
pub struct RecoveryBuilder {
    cursors: Vec<RankCursor>,
    seen: BTreeMap<TaskId, usize>,
    outcomes: Vec<(TaskOutcome, Vec<bool>)>,
    started: Vec<InFlightTask>,
    last: Option<StreamEntryId>,
    entries: u64,
    duplicates: u64,
    check: EntryCheck,
}

impl RecoveryBuilder {
    /// A builder for ranks `0..cursors.len()`, `cursors[r]` being rank `r`'s position.
    pub fn new(cursors: Vec<RankCursor>) -> Self {
        RecoveryBuilder {
            cursors,
            seen: BTreeMap::new(),
            outcomes: Vec::new(),
            started: Vec::new(),
            last: None,
            entries: 0,
            duplicates: 0,
            check: EntryCheck::new(),
        }
    }

    /// Adds the next entry (entries must come in stream order). A rejected entry is counted
    /// and contributes nothing; its rejection is returned for the caller's log.
    pub fn push(&mut self, entry: &StreamEntry) -> Option<EntryRejection> {
        self.entries += 1;
        self.last = Some(entry.id());
        if let Err(r) = self.check.check(entry) {
            return Some(r);
        }
        let StreamEntry::Step(entry) = entry else {
            return None;
        };
        let acked: Vec<bool> = self.cursors.iter().map(|c| c.acked(entry.id)).collect();
        for outcome in &entry.record.finished {
            match self.seen.get(&outcome.task) {
                Some(&i) => {
                    self.duplicates += 1;
                    let (_, by) = &mut self.outcomes[i];
                    by.iter_mut().zip(&acked).for_each(|(b, a)| *b |= *a);
                }
                None => {
                    self.seen.insert(outcome.task, self.outcomes.len());
                    self.outcomes.push((outcome.clone(), acked.clone()));
                }
            }
        }
        for s in &entry.record.started {
            self.started.push(InFlightTask {
                task: s.start.task,
                kind: s.kind,
                request: s.start.request,
            });
        }
        None
    }

    /// The recovery for everything pushed.
    pub fn finish(self) -> Recovery {
        let n = self.cursors.len();
        let mut rec = Recovery {
            world_size: u32::try_from(n).unwrap_or(u32::MAX),
            unacked_by_rank: vec![Vec::new(); n],
            acknowledged_by_rank: vec![BTreeSet::new(); n],
            last_entry_id: self.last,
            entries_scanned: self.entries,
            duplicates_suppressed: self.duplicates,
            entries_rejected: self.check.rejected(),
            ..Recovery::default()
        };
        for (outcome, acked_by) in self.outcomes {
            if acked_by.iter().all(|a| *a) {
                continue;
            }
            for (r, acked) in acked_by.iter().enumerate() {
                if *acked {
                    rec.acknowledged_by_rank[r].insert(outcome.task);
                } else {
                    rec.unacked_by_rank[r].push(outcome.clone());
                }
            }
            rec.redelivered.push(outcome);
        }
        let mut started_seen = BTreeSet::new();
        rec.in_flight = self
            .started
            .into_iter()
            .filter(|t| !self.seen.contains_key(&t.task) && started_seen.insert(t.task))
            .collect();
        rec
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::StartedTask;
    use tandem_proto::{Epoch, OutcomeResult, RequestId, Step, TaskKind, TaskStart};

    /// The id the fenced append gives the record of epoch 1 appended `n`-th.
    fn id(n: u64) -> StreamEntryId {
        StreamEntryId { ms: 1, seq: n }
    }
    fn task(seq: u64) -> TaskId {
        TaskId::new(Epoch(1), seq)
    }
    fn outcome(seq: u64, result: OutcomeResult) -> TaskOutcome {
        TaskOutcome {
            task: task(seq),
            kind: TaskKind::Store,
            request: RequestId(seq),
            result,
        }
    }
    fn start(seq: u64) -> StartedTask {
        StartedTask {
            kind: TaskKind::Load,
            start: TaskStart {
                task: task(seq),
                request: RequestId(seq),
                block_hashes: vec![],
                page_ids: vec![],
                tiers: vec![],
            },
        }
    }
    fn entry(ms: u64, started: Vec<StartedTask>, finished: Vec<TaskOutcome>) -> StreamEntry {
        StreamEntry::Step(LoggedStep {
            id: id(ms),
            record: StepRecord {
                epoch: Epoch(1),
                step: Step(ms),
                started,
                finished,
            },
        })
    }
    fn cursor(last: u64, pending: &[u64]) -> RankCursor {
        RankCursor {
            last_delivered: id(last),
            pending: pending.iter().map(|&m| id(m)).collect(),
        }
    }

    #[test]
    fn per_rank_unacked_union_and_in_flight() {
        // Rank 0 acked entries 1 and 2; rank 1 acked 1, has 2 pending, never saw 3.
        let mut b = RecoveryBuilder::new(vec![cursor(3, &[]), cursor(2, &[2])]);
        b.push(&entry(
            1,
            vec![start(1), start(2), start(3)],
            vec![outcome(1, OutcomeResult::Ok)],
        ));
        b.push(&entry(2, vec![], vec![outcome(2, OutcomeResult::Ok)]));
        b.push(&entry(3, vec![start(4)], vec![]));
        let r = b.finish();
        assert_eq!(r.redelivered, vec![outcome(2, OutcomeResult::Ok)]);
        assert!(r.unacked_by_rank[0].is_empty());
        assert_eq!(r.unacked_by_rank[1], vec![outcome(2, OutcomeResult::Ok)]);
        assert_eq!(r.acknowledged_by_rank[0], [task(2)].into());
        assert!(r.acknowledged_by_rank[1].is_empty());
        let flying: Vec<u64> = r.in_flight.iter().map(|t| t.task.seq).collect();
        assert_eq!(flying, vec![3, 4]);
        assert_eq!(r.aborted()[0].result, OutcomeResult::Aborted);
        assert_eq!(r.last_entry_id, Some(id(3)));
        assert_eq!(r.entries_scanned, 3);
    }

    #[test]
    fn duplicates_keep_the_first_and_count_acks_of_any_copy() {
        // Task 5 appended twice (an ambiguous append retried). Rank 0 acked only the second
        // copy: it has seen the task and must not get it again.
        let mut b = RecoveryBuilder::new(vec![cursor(2, &[1]), cursor(0, &[])]);
        b.push(&entry(1, vec![], vec![outcome(5, OutcomeResult::Ok)]));
        b.push(&entry(2, vec![], vec![outcome(5, OutcomeResult::Aborted)]));
        let r = b.finish();
        assert_eq!(r.duplicates_suppressed, 1);
        assert_eq!(r.redelivered, vec![outcome(5, OutcomeResult::Ok)]);
        assert!(r.unacked_by_rank[0].is_empty());
        assert_eq!(r.unacked_by_rank[1], vec![outcome(5, OutcomeResult::Ok)]);
    }

    #[test]
    fn aborted_in_the_next_epoch_is_finished_not_in_flight() {
        let mut b = RecoveryBuilder::new(vec![cursor(0, &[])]);
        b.push(&entry(1, vec![start(7)], vec![]));
        b.push(&entry(2, vec![], vec![outcome(7, OutcomeResult::Aborted)]));
        let r = b.finish();
        assert!(r.in_flight.is_empty());
        assert_eq!(r.redelivered, vec![outcome(7, OutcomeResult::Aborted)]);
    }

    #[test]
    fn fully_acked_outcomes_are_not_redelivered_and_empty_stream_is_empty() {
        let mut b = RecoveryBuilder::new(vec![cursor(9, &[]), cursor(9, &[])]);
        b.push(&entry(
            1,
            vec![start(1)],
            vec![outcome(1, OutcomeResult::Ok)],
        ));
        let r = b.finish();
        assert!(r.redelivered.is_empty() && r.in_flight.is_empty());
        let empty = RecoveryBuilder::new(vec![cursor(0, &[])]).finish();
        assert_eq!(empty.last_entry_id, None);
        assert_eq!(empty.world_size, 1);
        assert_eq!(empty.unacked_for(Rank(5)), &[] as &[TaskOutcome]);
    }

    #[test]
    fn a_copy_never_resurrects_a_delivered_task() {
        // Task 1 started in step 1 and finished Ok in step 2; the oldest entry was copied and
        // appended later in the same epoch (entry 4), and the original and its outcome were
        // then trimmed: recovery sees entries 3 and 4 only.
        let original = entry(1, vec![start(1)], vec![]);
        let copy = match &original {
            StreamEntry::Step(s) => StreamEntry::Step(LoggedStep {
                id: id(4),
                record: s.record.clone(),
            }),
            _ => unreachable!(),
        };
        let mut b = RecoveryBuilder::new(vec![cursor(9, &[])]);
        assert_eq!(b.push(&entry(3, vec![], vec![])), None);
        let r = b.push(&copy).expect("the copy is rejected");
        assert_eq!(
            r.to_string(),
            "entry 1-4 repeats step 1 of epoch 1, already at step 3 (entry 1-3)"
        );
        let rec = b.finish();
        assert!(rec.in_flight.is_empty(), "{:?}", rec.in_flight);
        assert_eq!((rec.entries_rejected, rec.entries_scanned), (1, 2));
        assert_eq!(rec.last_entry_id, Some(id(4)));
        // Appended in a later epoch, the copy is rejected by its id alone.
        let mut b = RecoveryBuilder::new(vec![cursor(0, &[])]);
        let later = match copy {
            StreamEntry::Step(mut s) => {
                s.id = StreamEntryId { ms: 3, seq: 7 };
                StreamEntry::Step(s)
            }
            _ => unreachable!(),
        };
        let r = b.push(&later).expect("rejected");
        assert_eq!(
            r.to_string(),
            "entry 3-7 holds a record of epoch 1, but its id is of epoch 3"
        );
        assert!(b.finish().in_flight.is_empty());
    }

    #[test]
    fn a_retried_append_at_the_same_step_is_read_and_an_identical_one_is_rejected() {
        let mut b = RecoveryBuilder::new(vec![cursor(0, &[])]);
        b.push(&entry(1, vec![start(1)], vec![]));
        // The append of step 1 was retried with what finished meanwhile: same step, more.
        let mut retried = entry(1, vec![start(1)], vec![outcome(1, OutcomeResult::Ok)]);
        if let StreamEntry::Step(s) = &mut retried {
            s.id = id(2);
        }
        assert_eq!(b.push(&retried), None);
        let mut identical = retried.clone();
        if let StreamEntry::Step(s) = &mut identical {
            s.id = id(3);
        }
        assert!(matches!(
            b.push(&identical),
            Some(EntryRejection::StepRepeated { .. })
        ));
        let misplaced = StreamEntry::Barrier {
            id: StreamEntryId { ms: 1, seq: 9 },
            epoch: Epoch(1),
        };
        assert_eq!(
            b.push(&misplaced).map(|r| r.to_string()).as_deref(),
            Some("entry 1-9 is a barrier of epoch 1 at another place than 1-0")
        );
        assert_eq!(
            b.push(&StreamEntry::Barrier {
                id: StreamEntryId { ms: 2, seq: 0 },
                epoch: Epoch(2)
            }),
            None
        );
        let rec = b.finish();
        assert_eq!(rec.redelivered, vec![outcome(1, OutcomeResult::Ok)]);
        assert!(rec.in_flight.is_empty());
        assert_eq!(rec.entries_rejected, 2);
    }
}
