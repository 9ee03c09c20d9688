//! The leader's task decisions (docs/DESIGN.md invariants 2 and 3): prefix lookups with their
//! pins, stores and loads started or refused against the group index, and what a finished
//! task gives back to the index.
//!
//! Every request is first checked against the frame limit (`Leader::check_request`) before
//! the index changes: a request that could make a frame the leader cannot send is refused
//! with `AgentError::FrameTooLarge` and leaves nothing behind. Every decision is recorded in
//! the open step of the sans-IO `Leader`. One pin mechanism: the index's move-only pins, held
//! here per lookup (until the request's load in the same step, or the step's end) and per task
//! (until its outcome).

use tandem_proto::engine::{AgentError, EngineReply};
use tandem_proto::{
    BlockHash, LookupResult, OutcomeResult, PageId, RequestId, StepRequest, TaskKind, TaskOutcome,
};

use super::{Held, LeaderCore, TaskPins};
use crate::cadence::TIER_OPS_PER_BLOCK;
use crate::index::IndexError;
use crate::shared::leader_refusal;

/// Block and page lists of one request have the same length.
pub(super) fn check_lists(hashes: &[BlockHash], pages: &[PageId]) -> Result<(), AgentError> {
    if hashes.len() != pages.len() {
        return Err(AgentError::BadRequest {
            reason: format!("{} block hashes but {} page ids", hashes.len(), pages.len()),
        });
    }
    Ok(())
}

fn kind_index(kind: TaskKind) -> usize {
    match kind {
        TaskKind::Store => 0,
        TaskKind::Load => 1,
    }
}

impl LeaderCore {
    /// A task reached quorum: its pins go back to the index; a failed store's blocks and a
    /// failed load's blocks leave the group.
    pub(super) fn finished(&mut self, outcome: &TaskOutcome) {
        let result = match outcome.result {
            OutcomeResult::Ok => 0,
            OutcomeResult::Failed { .. } => 1,
            OutcomeResult::Aborted => 2,
        };
        self.counts.finished[kind_index(outcome.kind)][result] += 1;
        let Some(t) = self.tasks.remove(&outcome.task) else {
            return;
        };
        let ok = outcome.result == OutcomeResult::Ok;
        for Held(pin) in t.pins {
            let hash = pin.hash();
            let result = match (t.kind, ok) {
                (TaskKind::Store, true) => self.index.finish_store(pin),
                (TaskKind::Store, false) => self.index.abort_store(pin).map(|ops| {
                    for op in ops {
                        self.record(op);
                    }
                }),
                (TaskKind::Load, ok) => {
                    let r = self.index.finish_load(pin);
                    // A failed load may mean a corrupt or missing shard on some rank: the
                    // block is no longer complete everywhere, so it leaves the group.
                    if !ok {
                        if let Some(op) = self.index.drop_block(hash) {
                            self.record(op);
                        }
                    }
                    r
                }
            };
            if let Err(e) = result {
                tracing::warn!(%hash, error = %e, "group index refused a pin");
            }
        }
    }

    /// Check a request against the frame limit before anything is decided for it.
    fn check(&mut self, request: StepRequest<'_>) -> Result<(), AgentError> {
        let epoch = self.leader.epoch();
        self.leader
            .check_request(request)
            .map_err(|e| leader_refusal(e, epoch))
    }

    /// The longest cached prefix, pinned for a load in this step (promotions planned).
    pub(super) fn lookup(
        &mut self,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
    ) -> Result<EngineReply, AgentError> {
        let prefix = self.index.lookup_prefix(&block_hashes);
        let mut result = LookupResult {
            request,
            block_hashes,
            matched_blocks: prefix as u32,
            pinned: prefix > 0,
        };
        self.check(StepRequest::Lookup {
            lookup: &result,
            tier_ops: TIER_OPS_PER_BLOCK * prefix as u64,
        })?;
        self.release_lookup_pins(request);
        let block_hashes = std::mem::take(&mut result.block_hashes);
        let mut pins = Vec::with_capacity(prefix);
        for hash in &block_hashes[..prefix] {
            match self.index.begin_load(*hash) {
                Ok(plan) => {
                    for op in plan.moves {
                        self.record(op);
                    }
                    pins.push(Held(plan.pin));
                }
                // Promotion impossible (host full of pins): the prefix ends here.
                Err(_) => break,
            }
        }
        self.counts.lookup_blocks[0] += pins.len() as u64;
        self.counts.lookup_blocks[1] += (block_hashes.len() - pins.len()) as u64;
        let result = LookupResult {
            request,
            block_hashes,
            matched_blocks: pins.len() as u32,
            pinned: !pins.is_empty(),
        };
        if !pins.is_empty() {
            self.lookup_pins.insert(request, pins);
        }
        self.leader.record_lookup(result.clone());
        Ok(EngineReply::Lookup(result))
    }

    /// Start a store of the blocks not already cached; a full tier refuses the task.
    pub(super) fn store(
        &mut self,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
        page_ids: Vec<PageId>,
    ) -> Result<EngineReply, AgentError> {
        self.check(StepRequest::Start {
            kind: TaskKind::Store,
            request,
            block_hashes: &block_hashes,
            page_ids: &page_ids,
            tier_ops: TIER_OPS_PER_BLOCK * block_hashes.len() as u64,
        })?;
        let (mut hashes, mut pages, mut tiers, mut pins) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (hash, page) in block_hashes.into_iter().zip(page_ids) {
            match self.index.begin_store(hash) {
                Ok(plan) => {
                    for op in plan.moves {
                        self.record(op);
                    }
                    hashes.push(hash);
                    pages.push(page);
                    tiers.push(plan.tier);
                    pins.push(Held(plan.pin));
                }
                // Cached already, or being stored by another task: nothing to copy.
                Err(IndexError::AlreadyPresent { .. }) => {}
                Err(e) => {
                    let full = matches!(e, IndexError::TierFull { .. });
                    self.counts.stores_refused[usize::from(!full)] += 1;
                    return Ok(self.refuse_store(request, pins, e.to_string()));
                }
            }
        }
        let task = self.leader.start_store(request, hashes, pages, tiers);
        self.counts.started[0] += 1;
        self.tasks.insert(
            task,
            TaskPins {
                kind: TaskKind::Store,
                pins,
            },
        );
        Ok(EngineReply::Started { task })
    }

    /// Refuse a store: the blocks it reserved leave the index, and the task gets a `Failed`
    /// outcome that reaches the engine once, like any other.
    fn refuse_store(&mut self, request: RequestId, pins: Vec<Held>, reason: String) -> EngineReply {
        for Held(pin) in pins {
            match self.index.abort_store(pin) {
                Ok(ops) => ops.into_iter().for_each(|op| self.record(op)),
                Err(e) => tracing::warn!(error = %e, "group index refused a pin"),
            }
        }
        let task = self.leader.reject_task(TaskKind::Store, request, reason);
        self.counts.finished[0][1] += 1;
        EngineReply::Started { task }
    }

    /// Start a load of blocks this request's lookup pinned in this step; a load of anything
    /// else is refused (its task fails, nothing is copied).
    pub(super) fn load(
        &mut self,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
        page_ids: Vec<PageId>,
    ) -> Result<EngineReply, AgentError> {
        self.check(StepRequest::Start {
            kind: TaskKind::Load,
            request,
            block_hashes: &block_hashes,
            page_ids: &page_ids,
            tier_ops: 0,
        })?;
        let mut pinned = self.lookup_pins.remove(&request).unwrap_or_default();
        let covered = block_hashes.len() <= pinned.len()
            && block_hashes
                .iter()
                .zip(&pinned)
                .all(|(h, p)| *h == p.0.hash());
        if !covered {
            self.give_back_load_pins(pinned);
            let reason = format!(
                "request {request}: load of blocks that its lookup in this step did not match (load {} blocks)",
                block_hashes.len()
            );
            let task = self.leader.reject_task(TaskKind::Load, request, reason);
            self.counts.finished[1][1] += 1;
            return Ok(EngineReply::Started { task });
        }
        // Pins beyond what is loaded go back now.
        let extra = pinned.split_off(block_hashes.len());
        self.give_back_load_pins(extra);
        let task = self.leader.start_load(request, block_hashes, page_ids);
        self.counts.started[1] += 1;
        self.tasks.insert(
            task,
            TaskPins {
                kind: TaskKind::Load,
                pins: pinned,
            },
        );
        Ok(EngineReply::Started { task })
    }

    fn give_back_load_pins(&mut self, pins: Vec<Held>) {
        for Held(pin) in pins {
            if let Err(e) = self.index.finish_load(pin) {
                tracing::warn!(error = %e, "group index refused a pin");
            }
        }
    }

    pub(super) fn release_lookup_pins(&mut self, request: RequestId) {
        if let Some(pins) = self.lookup_pins.remove(&request) {
            self.give_back_load_pins(pins);
        }
    }
}
