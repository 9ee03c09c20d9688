//! The frame budget: the largest frame the leader could still have to seal, in encoded bytes,
//! so that a request is admitted only while every frame stays within `max_frame_bytes`
//! (issue 19: a frame the leader cannot send is never sealed).
//!
//! Owns the exact accounting. A frame holds the open step's lookups and tier operations, the
//! starts and outcomes revealed in it, and on step 0 the reconciliation. Starts and outcomes
//! are revealed once durable, possibly several steps after the decision, so the budget counts
//! every start and outcome not yet revealed, and for every task in flight its outcome at its
//! largest ([`max_result_bytes`]: a failure reason is at most [`MAX_REASON_BYTES`]) and one
//! tier operation per block for what its end may record (dropping a block of a failed store or
//! load). The bound is the exact postcard size of `Message::Frame` holding all of that at once,
//! with the step number at its widest encoding (10 bytes): every frame sealed later reveals a
//! part of it, and lists' length prefixes only shrink with their lengths, so no frame is larger.
//! It never decides what to admit; [`crate::Leader::check_request`] does, with it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::frame::{
    LayerwiseLoad, LookupResult, OutcomeResult, Reconciliation, TaskOutcome, TaskStart, TierOp,
    MAX_REASON_BYTES,
};
use crate::ids::{BlockHash, Epoch, PageId, RequestId, TaskId, TaskKind, Tier};

/// Bytes of the widest varint (a `u64` in postcard).
const WIDEST_VARINT: u64 = 10;

/// Bytes of the largest tier operation: its variant and a block hash (always
/// [`BlockHash::BYTES`] on the wire).
pub const MAX_TIER_OP_BYTES: u64 = 1 + BlockHash::BYTES as u64;

/// The postcard size of `value`, in bytes.
pub fn encoded_len<T: Serialize + ?Sized>(value: &T) -> u64 {
    // Serialising plain data into a size counter cannot fail.
    postcard::serialize_with_flavor::<T, _, usize>(value, postcard::ser_flavors::Size::default())
        .map_or(u64::MAX, |n| n as u64)
}

/// Bytes of the varint that encodes `n` (a list length).
pub fn varint_len(n: u64) -> u64 {
    u64::from((64 - n.max(1).leading_zeros()).div_ceil(7))
}

/// Bytes of the largest [`OutcomeResult`]: `Failed` with a reason of [`MAX_REASON_BYTES`].
pub fn max_result_bytes() -> u64 {
    encoded_len(&OutcomeResult::Failed {
        reason: "x".repeat(MAX_REASON_BYTES),
    })
}

/// Bytes of the largest outcome `task` can have.
pub fn max_outcome_bytes(task: TaskId, kind: TaskKind, request: RequestId) -> u64 {
    let ok = TaskOutcome {
        task,
        kind,
        request,
        result: OutcomeResult::Ok,
    };
    encoded_len(&ok) - encoded_len(&OutcomeResult::Ok) + max_result_bytes()
}

/// A [`TaskStart`] by reference, encoded exactly like one (serde writes slices as it writes
/// vectors): the size of a start before it is built.
#[derive(Serialize)]
pub struct StartRef<'a> {
    /// The task.
    pub task: TaskId,
    /// The request.
    pub request: RequestId,
    /// Its blocks.
    pub block_hashes: &'a [BlockHash],
    /// Its pages.
    pub page_ids: &'a [PageId],
    /// One tier per block for a store, none for a load.
    pub tiers: &'a [Tier],
}

/// A count of list items and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Part {
    count: u64,
    bytes: u64,
}

impl Part {
    fn add(&mut self, bytes: u64) {
        self.count += 1;
        self.bytes += bytes;
    }
    fn remove(&mut self, bytes: u64) {
        self.count = self.count.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
    }
}

/// What one task in flight holds of the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Reserve {
    outcome_bytes: u64,
    end_tier_ops: u64,
}

/// What a request would add, for [`FrameBudget::bound_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Bytes of a lookup result (0: none).
    pub lookup_bytes: u64,
    /// Bytes of a start of the given kind (0: none).
    pub start_bytes: u64,
    /// The start's kind.
    pub kind: Option<TaskKind>,
    /// Bytes of the outcome reserved for the started task.
    pub outcome_bytes: u64,
    /// Tier operations the request may record now (each counted at its largest).
    pub tier_ops: u64,
    /// Tier operations reserved for the task's end.
    pub end_tier_ops: u64,
    /// Bytes of the start's layerwise plan (0: none).
    pub layerwise_bytes: u64,
}

/// The accounting (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FrameBudget {
    limit: u64,
    epoch: Epoch,
    lookups: Part,
    tier_ops: Part,
    stores: Part,
    loads: Part,
    outcomes: Part,
    layerwise: Part,
    reserved: BTreeMap<TaskId, Reserve>,
    reserved_outcome_bytes: u64,
    reserved_tier_ops: u64,
    /// Bytes of the frame's `reconciliation` field (1 for `None`).
    reconciliation: u64,
}

impl FrameBudget {
    /// The budget of `epoch` for frames of at most `limit` bytes (`Message::Frame` payload),
    /// with `reconciliation` on step 0.
    pub fn new(limit: u64, epoch: Epoch, reconciliation: Option<&Reconciliation>) -> Self {
        FrameBudget {
            limit,
            epoch,
            lookups: Part::default(),
            tier_ops: Part::default(),
            stores: Part::default(),
            loads: Part::default(),
            outcomes: Part::default(),
            layerwise: Part::default(),
            reserved: BTreeMap::new(),
            reserved_outcome_bytes: 0,
            reserved_tier_ops: 0,
            reconciliation: encoded_len(&reconciliation),
        }
    }

    /// The limit, bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The bound now: no frame sealed from here on is larger, in bytes.
    pub fn bound(&self) -> u64 {
        self.bound_with(&Delta::default())
    }

    /// The bound once a request adding `d` is admitted, in bytes.
    pub fn bound_with(&self, d: &Delta) -> u64 {
        let list = |p: Part, extra_count: u64, extra_bytes: u64| {
            varint_len(p.count + extra_count) + p.bytes + extra_bytes
        };
        let (store, load) = match d.kind {
            Some(TaskKind::Store) => (d.start_bytes, 0),
            Some(TaskKind::Load) => (0, d.start_bytes),
            None => (0, 0),
        };
        let started = u64::from(d.kind.is_some());
        // `Message::Frame`'s variant index is one byte.
        1 + encoded_len(&self.epoch)
            + WIDEST_VARINT
            + list(self.lookups, u64::from(d.lookup_bytes > 0), d.lookup_bytes)
            + list(self.stores, u64::from(store > 0), store)
            + list(self.loads, u64::from(load > 0), load)
            + list(
                self.outcomes,
                self.reserved.len() as u64 + started,
                self.reserved_outcome_bytes + d.outcome_bytes,
            )
            + list(
                self.tier_ops,
                self.reserved_tier_ops + d.tier_ops + d.end_tier_ops,
                (self.reserved_tier_ops + d.tier_ops + d.end_tier_ops) * MAX_TIER_OP_BYTES,
            )
            + self.reconciliation
            + list(
                self.layerwise,
                u64::from(d.layerwise_bytes > 0),
                d.layerwise_bytes,
            )
    }

    /// A load started layerwise: its plan waits for the frame that starts the load.
    pub fn layerwise(&mut self, plan: &LayerwiseLoad) {
        self.layerwise.add(encoded_len(plan));
    }

    /// A lookup was recorded in the open step.
    pub fn lookup(&mut self, lookup: &LookupResult) {
        self.lookups.add(encoded_len(lookup));
    }

    /// A tier operation was recorded in the open step.
    pub fn tier_op(&mut self, op: &TierOp) {
        self.tier_ops.add(encoded_len(op));
    }

    /// A task started: its start waits for a frame, its outcome and end are reserved.
    pub fn start(&mut self, kind: TaskKind, start: &TaskStart) {
        let bytes = encoded_len(start);
        match kind {
            TaskKind::Store => self.stores.add(bytes),
            TaskKind::Load => self.loads.add(bytes),
        }
        let r = Reserve {
            outcome_bytes: max_outcome_bytes(start.task, kind, start.request),
            end_tier_ops: start.block_hashes.len() as u64,
        };
        self.reserved_outcome_bytes += r.outcome_bytes;
        self.reserved_tier_ops += r.end_tier_ops;
        self.reserved.insert(start.task, r);
    }

    /// A task's outcome is known (finished, or refused without starting): it replaces the
    /// task's reservation until a frame reveals it.
    pub fn outcome(&mut self, outcome: &TaskOutcome) {
        if let Some(r) = self.reserved.remove(&outcome.task) {
            self.reserved_outcome_bytes -= r.outcome_bytes;
            self.reserved_tier_ops -= r.end_tier_ops;
        }
        self.outcomes.add(encoded_len(outcome));
    }

    /// A frame was sealed with these starts and outcomes: they leave the budget, and the next
    /// open step starts with no lookups, tier operations or reconciliation.
    pub fn sealed<'a>(
        &mut self,
        stores: impl IntoIterator<Item = &'a TaskStart>,
        loads: impl IntoIterator<Item = &'a TaskStart>,
        outcomes: impl IntoIterator<Item = &'a TaskOutcome>,
        layerwise: impl IntoIterator<Item = &'a LayerwiseLoad>,
    ) {
        for p in layerwise {
            self.layerwise.remove(encoded_len(p));
        }
        for s in stores {
            self.stores.remove(encoded_len(s));
        }
        for s in loads {
            self.loads.remove(encoded_len(s));
        }
        for o in outcomes {
            self.outcomes.remove(encoded_len(o));
        }
        self.lookups = Part::default();
        self.tier_ops = Part::default();
        self.reconciliation = encoded_len(&None::<Reconciliation>);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Frame;
    use crate::ids::Step;
    use crate::wire::Message;

    fn frame_len(f: Frame) -> u64 {
        encoded_len(&Message::Frame(f))
    }

    #[test]
    fn varints_and_sizes_are_postcards() {
        for n in [0u64, 1, 127, 128, 16_383, 16_384, u64::MAX] {
            assert_eq!(varint_len(n), encoded_len(&n), "{n}");
        }
        assert_eq!(
            encoded_len(&TierOp::Evict(BlockHash(u128::MAX))),
            MAX_TIER_OP_BYTES
        );
        let start = TaskStart {
            task: TaskId::new(Epoch(3), 300),
            request: RequestId(9),
            block_hashes: vec![BlockHash(1), BlockHash(u128::MAX)],
            page_ids: vec![PageId(0), PageId(70_000)],
            tiers: vec![Tier::Host, Tier::Disk],
        };
        let by_ref = StartRef {
            task: start.task,
            request: start.request,
            block_hashes: &start.block_hashes,
            page_ids: &start.page_ids,
            tiers: &start.tiers,
        };
        assert_eq!(encoded_len(&by_ref), encoded_len(&start));
        let failed = TaskOutcome {
            task: start.task,
            kind: TaskKind::Load,
            request: start.request,
            result: OutcomeResult::failed("y".repeat(10 * MAX_REASON_BYTES)),
        };
        assert_eq!(
            encoded_len(&failed),
            max_outcome_bytes(start.task, TaskKind::Load, start.request)
        );
    }

    #[test]
    fn the_bound_is_the_frame_holding_everything_at_its_widest() {
        let epoch = Epoch(2);
        let mut b = FrameBudget::new(1 << 20, epoch, None);
        let mut widest = Frame::empty(epoch, Step(u64::MAX));
        assert_eq!(b.bound(), frame_len(widest.clone()));
        let lookup = LookupResult {
            request: RequestId(1),
            block_hashes: vec![BlockHash(5); 3],
            matched_blocks: 2,
            pinned: true,
        };
        b.lookup(&lookup);
        widest.lookups.push(lookup);
        let op = TierOp::Demote(BlockHash(7));
        b.tier_op(&op);
        widest.tier_ops.push(op);
        let outcome = TaskOutcome {
            task: TaskId::new(epoch, 0),
            kind: TaskKind::Store,
            request: RequestId(4),
            result: OutcomeResult::Ok,
        };
        b.outcome(&outcome);
        widest.finished.push(outcome);
        assert_eq!(b.bound(), frame_len(widest.clone()));
        // A started task: its start, its largest outcome and one eviction per block.
        let start = TaskStart {
            task: TaskId::new(epoch, 1),
            request: RequestId(5),
            block_hashes: vec![BlockHash(8), BlockHash(9)],
            page_ids: vec![PageId(1), PageId(2)],
            tiers: vec![Tier::Host, Tier::Host],
        };
        b.start(TaskKind::Store, &start);
        widest.stores.push(start.clone());
        widest.finished.push(TaskOutcome {
            task: start.task,
            kind: TaskKind::Store,
            request: start.request,
            result: OutcomeResult::failed("z".repeat(MAX_REASON_BYTES)),
        });
        widest
            .tier_ops
            .extend([TierOp::Evict(BlockHash(u128::MAX)); 2]);
        assert_eq!(b.bound(), frame_len(widest.clone()));
        // Its outcome replaces the reservation; sealing takes what the frame revealed.
        let done = TaskOutcome {
            task: start.task,
            kind: TaskKind::Store,
            request: start.request,
            result: OutcomeResult::Ok,
        };
        b.outcome(&done);
        assert!(b.bound() < frame_len(widest));
        b.sealed([&start], [], [&done], []);
        let mut rest = Frame::empty(epoch, Step(u64::MAX));
        rest.finished.push(TaskOutcome {
            task: TaskId::new(epoch, 0),
            kind: TaskKind::Store,
            request: RequestId(4),
            result: OutcomeResult::Ok,
        });
        assert_eq!(b.bound(), frame_len(rest));
    }
}
