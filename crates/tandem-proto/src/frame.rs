//! The frame: the leader's record of everything the group decided in one step
//! (docs/DESIGN.md invariants 1, 2 and 5).
//!
//! Owns the frame's shape and the pure helpers that read it. It never decides anything:
//! frames are built only by [`crate::Leader::seal`] and read by followers unchanged.

use crate::ids::{BlockHash, Epoch, PageId, RequestId, Step, TaskId, TaskKind, Tier};
use serde::{Deserialize, Serialize};

/// The leader's prefix-match decision for one request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LookupResult {
    /// The request that asked.
    pub request: RequestId,
    /// The prefix hashes the request asked about, in prefix order.
    pub block_hashes: Vec<BlockHash>,
    /// How many leading blocks of `block_hashes` are cached (blocks, `<= block_hashes.len()`).
    pub matched_blocks: u32,
    /// Whether the matched blocks are pinned (not evictable) until the request's load in the
    /// same step starts (then until it finishes) or the step ends.
    pub pinned: bool,
}

impl LookupResult {
    /// The hashes this lookup pinned: the first `matched_blocks` hashes when `pinned`, none
    /// otherwise (clamped to the list's length).
    pub fn pinned_hashes(&self) -> &[BlockHash] {
        if !self.pinned {
            return &[];
        }
        let n = (self.matched_blocks as usize).min(self.block_hashes.len());
        &self.block_hashes[..n]
    }
}

/// A store or load the leader started in this step; every rank copies its own shard.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskStart {
    /// Group-unique id of the task.
    pub task: TaskId,
    /// The request the task serves.
    pub request: RequestId,
    /// The blocks moved, in prefix order.
    pub block_hashes: Vec<BlockHash>,
    /// The engine pages, one per block, same order as `block_hashes`, the same on every rank.
    /// Empty when the task started without page ids: each rank's engine then binds its own
    /// pages for the task (`EngineRequest::Bind`) before that rank copies.
    pub page_ids: Vec<PageId>,
    /// For a store: the tier every rank writes each block's shard to (one per block, chosen
    /// by the leader's group index). Empty for a load: the shard is read from wherever the
    /// frame's tier operations left it.
    pub tiers: Vec<Tier>,
}

/// How a load started layerwise is copied on every rank: decided once, by the leader, in the
/// frame that starts the load ([`Frame::layerwise`]); no rank picks any part of it locally
/// (docs/LAYERWISE.md).
///
/// Each rank copies its own shard of every block of the task one layer at a time, in
/// `order`, and tells its own engine after each layer (`EngineRequest::WaitLayer`). Layers are
/// the rank's own: under PP a rank holds `layers_per_rank` consecutive layers of the model, and
/// layer `k` here is the `k`-th of them (the engine of stage `s` maps its model layer `g` to
/// `g - s × layers_per_rank`). In a page (one block shard) layer `k`'s bytes are the `k`-th
/// contiguous `1/layers` of the page, K then V (layer-major).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LayerwiseLoad {
    /// The load (one of the frame's `loads`).
    pub task: TaskId,
    /// Layers of one block shard on every rank (`layers_per_rank` of the group's layout); a
    /// rank whose layout says otherwise fails its shard.
    pub layers: u32,
    /// The order every rank copies and signals the layers in: a permutation of
    /// `0..layers`. Layer `order[i]` is ready on a rank once that rank signalled `i + 1` layers.
    pub order: Vec<u32>,
    /// Longest time, milliseconds, a rank may take to copy one layer of every block of the
    /// task: past it the rank fails its shard (and with it the task on every rank).
    pub layer_timeout_ms: u64,
}

impl LayerwiseLoad {
    /// The plan copying `layers` layers in ascending order.
    pub fn ascending(task: TaskId, layers: u32, layer_timeout_ms: u64) -> LayerwiseLoad {
        LayerwiseLoad {
            task,
            layers,
            order: (0..layers).collect(),
            layer_timeout_ms,
        }
    }

    /// How many layers a rank must have signalled before `layer` is ready: its position in
    /// `order` plus one; `None` for a layer not in the order.
    pub fn needed(&self, layer: u32) -> Option<u32> {
        self.order
            .iter()
            .position(|l| *l == layer)
            .map(|i| i as u32 + 1)
    }

    /// Whether `order` is a permutation of `0..layers`.
    pub fn is_valid(&self) -> bool {
        let mut seen = vec![false; self.layers as usize];
        self.order.len() == self.layers as usize
            && self.order.iter().all(|l| {
                seen.get_mut(*l as usize)
                    .is_some_and(|s| !std::mem::replace(s, true))
            })
    }
}

/// One change to the tiers that every rank applies to its own shard of a block, in frame order.
/// Only the leader's group index decides these (docs/DESIGN.md invariant 2); a rank never evicts or
/// moves a block on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TierOp {
    /// The block leaves the group's cache: free its slot.
    Evict(BlockHash),
    /// Move the shard from the host tier to the disk tier.
    Demote(BlockHash),
    /// Move the shard from the disk tier to the host tier.
    Promote(BlockHash),
}

/// The longest failure reason an outcome carries, in bytes of UTF-8: longer reasons are cut
/// (at a character boundary, ending in `…`), so that an outcome's size is bounded before the
/// task finishes (the leader's frame budget reserves it).
pub const MAX_REASON_BYTES: usize = 256;

/// How a task ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OutcomeResult {
    /// Every rank finished its shard.
    Ok,
    /// At least one rank failed; the first reason reported.
    Failed {
        /// The first failure reason a rank reported.
        reason: String,
    },
    /// The epoch ended while the task was in flight; its pages hold no defined data.
    Aborted,
}

impl OutcomeResult {
    /// `Failed` with `reason` cut to at most [`MAX_REASON_BYTES`] bytes.
    pub fn failed(reason: String) -> OutcomeResult {
        OutcomeResult::Failed {
            reason: cut_reason(reason),
        }
    }
}

/// `reason` cut to at most [`MAX_REASON_BYTES`] bytes at a character boundary, ending in `…`
/// when cut.
pub fn cut_reason(mut reason: String) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason;
    }
    let mut end = MAX_REASON_BYTES - '…'.len_utf8();
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason.truncate(end);
    reason.push('…');
    reason
}

/// The group's verdict on one task, revealed to engines exactly once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskOutcome {
    /// The task.
    pub task: TaskId,
    /// Store or load.
    pub kind: TaskKind,
    /// The request the task served.
    pub request: RequestId,
    /// How it ended.
    pub result: OutcomeResult,
}

/// What the first frame of a new epoch settles about the previous epochs (invariant 5).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Reconciliation {
    /// Outcomes that were durable but not acknowledged by every engine: delivered again.
    /// Each rank's agent suppresses those its own engine already acknowledged (by task id).
    pub redelivered: Vec<TaskOutcome>,
    /// Tasks that were in flight when the old epoch ended, each with result `Aborted`.
    ///
    /// No pin is listed: pins are the leader's hold inside one epoch, and a new epoch's group
    /// index is rebuilt from the ranks' manifests with none, so no pin outlives its epoch.
    pub aborted: Vec<TaskOutcome>,
}

/// Everything the group decided in step `step` of epoch `epoch`.
///
/// Only step 0 of an epoch may carry a `reconciliation`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// The epoch the frame belongs to.
    pub epoch: Epoch,
    /// The step, from 0 within the epoch.
    pub step: Step,
    /// Prefix-match decisions made in this step.
    pub lookups: Vec<LookupResult>,
    /// Stores started in this step.
    pub stores: Vec<TaskStart>,
    /// Loads started in this step.
    pub loads: Vec<TaskStart>,
    /// Outcomes revealed in this step (each already durable), in reveal order.
    pub finished: Vec<TaskOutcome>,
    /// Tier operations every rank applies to its own shards, in this order, when the frame
    /// arrives (before any copy the frame starts): evictions and host/disk moves decided by
    /// the leader's group index.
    pub tier_ops: Vec<TierOp>,
    /// Present only on step 0 of an epoch that follows another.
    pub reconciliation: Option<Reconciliation>,
    /// How each load of `loads` that was started layerwise is copied (one entry per such
    /// load; a load not listed is copied whole). Decided by the leader only.
    pub layerwise: Vec<LayerwiseLoad>,
}

impl Frame {
    /// An empty frame for `(epoch, step)`.
    pub fn empty(epoch: Epoch, step: Step) -> Frame {
        Frame {
            epoch,
            step,
            lookups: Vec::new(),
            stores: Vec::new(),
            loads: Vec::new(),
            finished: Vec::new(),
            tier_ops: Vec::new(),
            reconciliation: None,
            layerwise: Vec::new(),
        }
    }

    /// True when the frame decides nothing (no lookups, tasks, outcomes, evictions or
    /// reconciliation).
    pub fn is_empty(&self) -> bool {
        self.lookups.is_empty()
            && self.stores.is_empty()
            && self.loads.is_empty()
            && self.finished.is_empty()
            && self.tier_ops.is_empty()
            && self.reconciliation.is_none()
            && self.layerwise.is_empty()
    }

    /// The layerwise plan of load `task`, if it was started layerwise in this frame.
    pub fn layerwise_plan(&self, task: TaskId) -> Option<&LayerwiseLoad> {
        self.layerwise.iter().find(|p| p.task == task)
    }

    /// Every outcome this frame reveals, in the order an engine applies them: redelivered,
    /// then aborted (both from the reconciliation), then `finished`.
    pub fn outcomes(&self) -> impl Iterator<Item = &TaskOutcome> {
        let (redelivered, aborted) = match &self.reconciliation {
            Some(r) => (r.redelivered.as_slice(), r.aborted.as_slice()),
            None => (&[][..], &[][..]),
        };
        redelivered.iter().chain(aborted).chain(&self.finished)
    }

    /// Every task started in this frame, stores first, with its kind.
    /// The blocks this frame evicts from the group, in order.
    pub fn evictions(&self) -> impl Iterator<Item = BlockHash> + '_ {
        self.tier_ops.iter().filter_map(|op| match op {
            TierOp::Evict(h) => Some(*h),
            _ => None,
        })
    }

    /// Every task this frame starts, stores first, with its kind.
    pub fn started(&self) -> impl Iterator<Item = (TaskKind, &TaskStart)> {
        self.stores
            .iter()
            .map(|t| (TaskKind::Store, t))
            .chain(self.loads.iter().map(|t| (TaskKind::Load, t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(seq: u64, result: OutcomeResult) -> TaskOutcome {
        TaskOutcome {
            task: TaskId { epoch: 1, seq },
            kind: TaskKind::Store,
            request: RequestId(seq),
            result,
        }
    }

    #[test]
    fn layer_orders_are_permutations() {
        let task = TaskId { epoch: 1, seq: 2 };
        let p = LayerwiseLoad::ascending(task, 4, 100);
        assert!(p.is_valid());
        assert_eq!(p.needed(0), Some(1));
        assert_eq!(p.needed(3), Some(4));
        assert_eq!(p.needed(4), None);
        let mut q = p.clone();
        q.order = vec![3, 2, 1, 0];
        assert!(q.is_valid());
        assert_eq!(q.needed(3), Some(1));
        q.order = vec![0, 0, 1, 2];
        assert!(!q.is_valid());
        q.order = vec![0, 1, 2];
        assert!(!q.is_valid());
        q.order = vec![0, 1, 2, 9];
        assert!(!q.is_valid());
    }

    #[test]
    fn empty_frame_is_empty() {
        let f = Frame::empty(Epoch(1), Step(0));
        assert!(f.is_empty());
        assert_eq!(f.outcomes().count(), 0);
    }

    #[test]
    fn outcomes_put_reconciliation_first() {
        let mut f = Frame::empty(Epoch(2), Step(0));
        f.finished.push(outcome(3, OutcomeResult::Ok));
        f.reconciliation = Some(Reconciliation {
            redelivered: vec![outcome(1, OutcomeResult::Ok)],
            aborted: vec![outcome(2, OutcomeResult::Aborted)],
        });
        f.tier_ops = vec![TierOp::Demote(BlockHash(4)), TierOp::Evict(BlockHash(5))];
        assert_eq!(f.evictions().collect::<Vec<_>>(), vec![BlockHash(5)]);
        assert!(!f.is_empty());
        let seqs: Vec<u64> = f.outcomes().map(|o| o.task.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
    }

    #[test]
    fn long_reasons_are_cut_at_a_character_boundary() {
        assert_eq!(cut_reason("short".into()), "short");
        let exact = "a".repeat(MAX_REASON_BYTES);
        assert_eq!(cut_reason(exact.clone()), exact);
        for filler in ["b", "é", "日本"] {
            let cut = cut_reason(filler.repeat(MAX_REASON_BYTES + 1));
            assert!(cut.len() <= MAX_REASON_BYTES, "{}", cut.len());
            assert!(cut.ends_with('…'));
            assert!(cut.len() > MAX_REASON_BYTES - 6);
        }
        assert_eq!(
            OutcomeResult::failed("c".repeat(1000)),
            OutcomeResult::Failed {
                reason: cut_reason("c".repeat(1000))
            }
        );
    }

    #[test]
    fn pinned_hashes_are_the_matched_prefix() {
        let mut l = LookupResult {
            request: RequestId(1),
            block_hashes: vec![BlockHash(1), BlockHash(2), BlockHash(3)],
            matched_blocks: 2,
            pinned: true,
        };
        assert_eq!(l.pinned_hashes(), &[BlockHash(1), BlockHash(2)]);
        l.matched_blocks = 10;
        assert_eq!(l.pinned_hashes().len(), 3);
        l.pinned = false;
        assert!(l.pinned_hashes().is_empty());
    }
}
