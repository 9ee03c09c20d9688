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

use crate::id::StreamEntryId;
use crate::record::StreamEntry;
use crate::stream::RankCursor;
use std::collections::{BTreeMap, BTreeSet};
use tandem_proto::{InFlightTask, Rank, TaskId, TaskOutcome};

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
        }
    }

    /// Adds the next entry (entries must come in stream order).
    pub fn push(&mut self, entry: &StreamEntry) {
        self.entries += 1;
        self.last = Some(entry.id());
        let StreamEntry::Step(entry) = entry else {
            return;
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
    use crate::record::{LoggedStep, StartedTask, StepRecord};
    use tandem_proto::{Epoch, OutcomeResult, RequestId, Step, TaskKind, TaskStart};

    fn id(ms: u64) -> StreamEntryId {
        StreamEntryId { ms, seq: 0 }
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
}
