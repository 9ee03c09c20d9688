//! The leader's task decisions (docs/DESIGN.md invariants 2 and 3): prefix lookups with their
//! pins, stores and loads started or refused against the group index, and what a finished
//! task gives back to the index.
//!
//! Every request is first checked against the frame limit (`Leader::check_request`) before
//! the index changes: a request that could make a frame the leader cannot send is refused
//! with `AgentError::FrameTooLarge` and leaves nothing behind. Every decision is recorded in
//! the open step of the sans-IO `Leader`. One pin mechanism: the index's move-only pins, held
//! here per request's lookup (one set per request: until its load, its release or the end of
//! the epoch) and per task (until its outcome). A lookup asked again for the same request and
//! blocks returns the answer it gave and takes no second pin set. A store or load started
//! without page ids waits for the leader engine's bind before the leader copies
//! ([`crate::binds`]).

use tandem_proto::engine::{AgentError, BindError, EngineReply};
use tandem_proto::{
    BlockHash, LookupResult, OutcomeResult, PageId, RequestId, StepRequest, TaskId, TaskKind,
    TaskOutcome, TaskStart,
};

use super::{Held, LeaderCore, LookupHold, TaskPins};
use crate::cadence::TIER_OPS_PER_BLOCK;
use crate::index::IndexError;
use crate::shared::leader_refusal;
use crate::shared::Shared;

/// Block and page lists of one request have the same length (or no page list: every rank
/// binds its own pages).
pub(super) fn check_lists(hashes: &[BlockHash], pages: &[PageId]) -> Result<(), AgentError> {
    if !pages.is_empty() && hashes.len() != pages.len() {
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
        self.binds.forget(outcome.task);
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

    /// The longest cached prefix, pinned for the request's load (where its blocks are). The same
    /// request and blocks again: the answer already given, on the pins already held.
    pub(super) fn lookup(
        &mut self,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
    ) -> Result<EngineReply, AgentError> {
        let step = self.leader.open_step();
        if let Some(hold) = self.lookups.get(&request) {
            // Pins keep the answer true; without one it holds only in its own step.
            let current = !hold.pins.is_empty() || hold.step == step;
            if current && hold.result.block_hashes == block_hashes {
                return Ok(EngineReply::Lookup(hold.result.clone()));
            }
        }
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
        self.release_lookup(request);
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
                // Not loadable after all (never for a complete block): the prefix ends here.
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
        self.lookups.insert(
            request,
            LookupHold {
                step,
                result: result.clone(),
                pins,
            },
        );
        self.leader.record_lookup(result.clone());
        Ok(EngineReply::Lookup(result))
    }

    /// Start a store of the blocks not already cached; a full tier refuses the task.
    pub(super) fn store(
        &mut self,
        sh: &mut Shared,
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
        let unbound = page_ids.is_empty();
        let mut page_ids = page_ids.into_iter();
        for hash in block_hashes {
            let page = page_ids.next();
            match self.index.begin_store(hash) {
                Ok(plan) => {
                    for op in plan.moves {
                        self.record(op);
                    }
                    hashes.push(hash);
                    pages.extend(page);
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
        // Without page ids every rank binds its own pages, the leader's engine too; with them,
        // this rank copies now.
        let early =
            (!unbound && self.alone(sh)).then(|| (hashes.clone(), pages.clone(), tiers.clone()));
        let unbound = unbound.then(|| hashes.clone());
        let task = self.leader.start_store(request, hashes, pages, tiers);
        if let Some(blocks) = unbound {
            self.binds.expect(task, blocks);
        }
        if let Some((block_hashes, page_ids, tiers)) = early {
            let start = TaskStart {
                task,
                request,
                block_hashes,
                page_ids,
                tiers,
            };
            self.copy_at_start(sh, TaskKind::Store, start);
        }
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

    /// Start a load of blocks this request's lookup pinned; a load of anything else is refused
    /// (its task fails, nothing is copied). Either way the lookup's pins are spent. With
    /// `layerwise` (`(layers, layer_timeout_ms)`) the load is copied layer by layer on every
    /// rank, as the plan the frame carries says.
    pub(super) fn load(
        &mut self,
        sh: &mut Shared,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
        page_ids: Vec<PageId>,
        layerwise: Option<(u32, u64)>,
    ) -> Result<EngineReply, AgentError> {
        self.check(match layerwise {
            None => StepRequest::Start {
                kind: TaskKind::Load,
                request,
                block_hashes: &block_hashes,
                page_ids: &page_ids,
                tier_ops: 0,
            },
            Some((layers, layer_timeout_ms)) => StepRequest::LoadLayerwise {
                request,
                block_hashes: &block_hashes,
                page_ids: &page_ids,
                layers,
                layer_timeout_ms,
            },
        })?;
        let mut pinned = self
            .lookups
            .remove(&request)
            .map(|h| h.pins)
            .unwrap_or_default();
        let covered = block_hashes.len() <= pinned.len()
            && block_hashes
                .iter()
                .zip(&pinned)
                .all(|(h, p)| *h == p.0.hash());
        if !covered {
            self.give_back_load_pins(pinned);
            let reason = format!(
                "request {request}: load of blocks that its lookup did not pin (load {} blocks)",
                block_hashes.len()
            );
            let task = self.leader.reject_task(TaskKind::Load, request, reason);
            self.counts.finished[1][1] += 1;
            return Ok(EngineReply::Started { task });
        }
        // Pins beyond what is loaded go back now.
        let extra = pinned.split_off(block_hashes.len());
        self.give_back_load_pins(extra);
        let unbound = page_ids.is_empty().then(|| block_hashes.clone());
        // With page ids this rank copies now; a layerwise load once its plan is in the frame.
        let early = (unbound.is_none() && layerwise.is_none() && self.alone(sh))
            .then(|| (block_hashes.clone(), page_ids.clone()));
        let task = match layerwise {
            None => self.leader.start_load(request, block_hashes, page_ids),
            Some((layers, timeout)) => {
                self.leader
                    .start_load_layerwise(request, block_hashes, page_ids, layers, timeout)
            }
        };
        if let Some(blocks) = unbound {
            self.binds.expect(task, blocks);
        }
        self.counts.started[1] += 1;
        self.tasks.insert(
            task,
            TaskPins {
                kind: TaskKind::Load,
                pins: pinned,
            },
        );
        if let Some((block_hashes, page_ids)) = early {
            let start = TaskStart {
                task,
                request,
                block_hashes,
                page_ids,
                tiers: Vec::new(),
            };
            self.copy_at_start(sh, TaskKind::Load, start);
        }
        Ok(EngineReply::Started { task })
    }

    /// Whether this leader is the group's only rank: its shard is the whole task, so copying
    /// it when the task starts can finish the task in the frame that starts it. With followers
    /// the task waits for their shards, which they copy from the frame: the leader copies at
    /// the seal, off the start's path (measured: copying at the request only added CPU to the
    /// start's path on a shared machine).
    fn alone(&self, sh: &Shared) -> bool {
        sh.config.world_size == 1
    }

    fn give_back_load_pins(&mut self, pins: Vec<Held>) {
        for Held(pin) in pins {
            if let Err(e) = self.index.finish_load(pin) {
                tracing::warn!(error = %e, "group index refused a pin");
            }
        }
    }

    /// The request is done with its lookup: its pins go back; returns how many.
    pub(super) fn release_lookup(&mut self, request: RequestId) -> usize {
        let Some(hold) = self.lookups.remove(&request) else {
            return 0;
        };
        let n = hold.pins.len();
        self.give_back_load_pins(hold.pins);
        n
    }

    /// The step ends: answers that pinned nothing are forgotten (the next lookup looks again).
    pub(super) fn forget_unpinned_lookups(&mut self) {
        self.lookups.retain(|_, h| !h.pins.is_empty());
    }

    /// The leader engine's pages for `task` (started without page ids): recorded, and the copy
    /// goes out if it only waited for them.
    pub(super) fn bind(
        &mut self,
        sh: &mut Shared,
        task: TaskId,
        pages: Vec<PageId>,
    ) -> Result<EngineReply, AgentError> {
        if !self.binds.knows(task) && self.tasks.contains_key(&task) {
            // Started with page ids: nothing to bind.
            return Err(AgentError::Bind(BindError::AlreadyBound { task }));
        }
        let ready = self
            .binds
            .bind(task, pages, sh.pool_pages)
            .map_err(AgentError::Bind)?;
        if let Some((kind, t)) = ready {
            let epoch = sh.epoch();
            let tasks = vec![t];
            sh.store(match kind {
                TaskKind::Load => crate::output::StoreCommand::CopyLoads { epoch, tasks },
                TaskKind::Store => crate::output::StoreCommand::CopyStores { epoch, tasks },
            });
        }
        Ok(EngineReply::Bound { task })
    }
}
