//! The leader state machine (rank 0): the group's one decider (docs/DESIGN.md invariants 1–5).
//!
//! Inputs are `record_*`/`start_*` calls for the open step, `handle_*` calls for peer
//! messages, persistence results and timeouts; outputs come from `poll_*` calls: frames and
//! other messages to send ([`Leader::poll_transmit`]), outcome batches to make durable
//! ([`Leader::poll_persist`]), events for the supervisor ([`Leader::poll_event`]) and the
//! next timer ([`Leader::poll_timeout`]). Time is the caller's `now_ms`.
//!
//! Owns step sealing, the acknowledgement window, quorums, the reveal of durable outcomes and
//! liveness verdicts. It never does IO, never reads a clock, and never reveals an outcome that
//! the driver has not confirmed durable.

pub mod budget;
mod config;
mod peers;

pub use budget::FrameBudget;
pub use config::{LeaderConfig, LeaderEvent, LeaderStats};

use crate::error::{LeaderError, QuorumError};
use crate::frame::{
    Frame, LayerwiseLoad, LookupResult, OutcomeResult, Reconciliation, TaskOutcome, TaskStart,
    TierOp,
};
use crate::ids::{BlockHash, Epoch, PageId, Rank, RequestId, Step, TaskId, TaskKind, Tier};
use crate::liveness::Liveness;
use crate::persist::{BatchId, PersistBatch, PersistQueue, StartedTask};
use crate::quorum::{Quorum, ReportOutcome};
use crate::reconcile::InFlightTask;
use crate::retention::{FrameStore, Lookup};
use crate::wire::{Ack, Heartbeat, Message, ShardReport};
use budget::{encoded_len, max_outcome_bytes, Delta, StartRef};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The largest group a leader accepts (ranks).
pub const MAX_WORLD_SIZE: u32 = 65_536;

/// A request the open step may take, checked by [`Leader::check_request`] before the driver decides
/// anything for it. Tier operations are counted at their largest ([`budget::MAX_TIER_OP_BYTES`]).
#[derive(Clone, Copy, Debug)]
pub enum StepRequest<'a> {
    /// A lookup whose result is at most `lookup` (its `matched_blocks` at least the prefix the
    /// lookup can match), recording at most `tier_ops` tier operations (promotions and the room
    /// they make).
    Lookup {
        /// The largest result the lookup can record.
        lookup: &'a LookupResult,
        /// The most tier operations it can record now.
        tier_ops: u64,
    },
    /// A store or load of `block_hashes` into or from `page_ids`, recording at most `tier_ops`
    /// tier operations now (the room a store makes, and what a refusal gives back). Its end
    /// may record one more per block (see [`budget`]).
    Start {
        /// Store or load.
        kind: TaskKind,
        /// The engine's request.
        request: RequestId,
        /// Its blocks.
        block_hashes: &'a [BlockHash],
        /// Its pages.
        page_ids: &'a [PageId],
        /// The most tier operations it can record now.
        tier_ops: u64,
    },
    /// A load started layerwise ([`Leader::start_load_layerwise`]): a load's start with its
    /// plan of `layers` layers.
    LoadLayerwise {
        /// The engine's request.
        request: RequestId,
        /// Its blocks.
        block_hashes: &'a [BlockHash],
        /// Its pages.
        page_ids: &'a [PageId],
        /// Layers of the plan.
        layers: u32,
        /// The plan's per-layer deadline, milliseconds.
        layer_timeout_ms: u64,
    },
}

/// The leader of one epoch. See the module docs for the input/output contract.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Leader {
    config: LeaderConfig,
    /// The frame of the open step, filled by `record_*` and `start_*`.
    open: Frame,
    next_seq: u64,
    quorum: Quorum,
    persist: PersistQueue,
    sealed: FrameStore,
    /// Highest step each follower acknowledged (`None`: none yet). Rank 0 may ack too.
    acks: BTreeMap<Rank, Option<Step>>,
    /// Follower ranks admitted by the handshake in this epoch.
    joined: BTreeSet<Rank>,
    /// Admitted ranks whose connection was lost; they stay in `joined`, so they cannot
    /// rejoin this epoch.
    lost: BTreeSet<Rank>,
    liveness: Liveness,
    transmit: VecDeque<(Rank, Message)>,
    events: VecDeque<LeaderEvent>,
    stats: LeaderStats,
    /// The last step whose seal the window refused (counted once in `stats.window_full`).
    window_refused: Option<Step>,
    budget: FrameBudget,
    /// Layerwise plans of loads started and not yet revealed, by task.
    plans: BTreeMap<TaskId, LayerwiseLoad>,
}

impl Leader {
    /// A leader for `config.epoch`. `reconciliation` goes into the frame of step 0 (pass
    /// `None` for the first epoch of a group).
    ///
    /// Errors: [`LeaderError::InvalidConfig`] when `world_size` or `window_steps` is 0, or
    /// `world_size` exceeds [`MAX_WORLD_SIZE`]; [`LeaderError::FrameTooLarge`] when
    /// `max_frame_bytes` cannot hold step 0 with its reconciliation.
    pub fn new(
        config: LeaderConfig,
        reconciliation: Option<Reconciliation>,
    ) -> Result<Leader, LeaderError> {
        if config.world_size == 0 {
            return Err(LeaderError::InvalidConfig {
                reason: "world_size is 0".into(),
            });
        }
        if config.world_size > MAX_WORLD_SIZE {
            return Err(LeaderError::InvalidConfig {
                reason: format!(
                    "world_size {} exceeds the maximum of {MAX_WORLD_SIZE}",
                    config.world_size
                ),
            });
        }
        if config.window_steps == 0 {
            return Err(LeaderError::InvalidConfig {
                reason: "window_steps is 0".into(),
            });
        }
        let followers = (1..config.world_size).map(Rank);
        let budget = FrameBudget::new(
            config.max_frame_bytes,
            config.epoch,
            reconciliation.as_ref(),
        );
        if budget.bound() > config.max_frame_bytes {
            return Err(LeaderError::FrameTooLarge {
                bytes: budget.bound(),
                limit: config.max_frame_bytes,
            });
        }
        let mut open = Frame::empty(config.epoch, Step(0));
        open.reconciliation = reconciliation;
        Ok(Leader {
            open,
            next_seq: 0,
            quorum: Quorum::new(config.world_size),
            persist: PersistQueue::new(config.epoch),
            sealed: FrameStore::new(usize::try_from(config.retention_steps).unwrap_or(usize::MAX)),
            acks: (0..config.world_size).map(|r| (Rank(r), None)).collect(),
            joined: BTreeSet::new(),
            lost: BTreeSet::new(),
            liveness: Liveness::new(followers, config.start_ms, config.heartbeat_timeout_ms),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            stats: LeaderStats::default(),
            window_refused: None,
            budget,
            plans: BTreeMap::new(),
            config,
        })
    }

    /// The leader's epoch.
    pub fn epoch(&self) -> Epoch {
        self.config.epoch
    }

    /// The configuration.
    pub fn config(&self) -> &LeaderConfig {
        &self.config
    }

    /// The open step: the one `record_*`/`start_*` calls go into and `seal` must name next.
    pub fn open_step(&self) -> Step {
        self.open.step
    }

    /// The last sealed step, if any.
    pub fn sealed_step(&self) -> Option<Step> {
        self.sealed.last_step()
    }

    /// The oldest sealed step still retained (readable), if any.
    pub fn oldest_retained_step(&self) -> Option<Step> {
        self.sealed.oldest_step()
    }

    /// The largest frame the leader could still have to seal, in bytes (see [`budget`]).
    pub fn frame_bound(&self) -> u64 {
        self.budget.bound()
    }

    /// Check that the open step can take `request`: every frame the leader could then have to
    /// seal stays within `max_frame_bytes`. Call before deciding anything for the request, then
    /// record what was decided (`record_lookup`, `start_*`, `reject_task`, `record_tier_op`)
    /// within what was admitted.
    ///
    /// Errors: [`LeaderError::FrameTooLarge`] naming the bytes and the limit (counted); nothing
    /// is recorded.
    pub fn check_request(&mut self, request: StepRequest<'_>) -> Result<(), LeaderError> {
        let delta = match request {
            StepRequest::Lookup { lookup, tier_ops } => Delta {
                lookup_bytes: encoded_len(lookup),
                tier_ops,
                ..Delta::default()
            },
            StepRequest::LoadLayerwise {
                request,
                block_hashes,
                page_ids,
                layers,
                layer_timeout_ms,
            } => {
                let task = TaskId::new(self.config.epoch, self.next_seq);
                let start = StartRef {
                    task,
                    request,
                    block_hashes,
                    page_ids,
                    tiers: &[],
                };
                let plan = LayerwiseLoad::ascending(task, layers, layer_timeout_ms);
                Delta {
                    start_bytes: encoded_len(&start),
                    kind: Some(TaskKind::Load),
                    outcome_bytes: max_outcome_bytes(task, TaskKind::Load, request),
                    end_tier_ops: block_hashes.len() as u64,
                    layerwise_bytes: encoded_len(&plan),
                    ..Delta::default()
                }
            }
            StepRequest::Start {
                kind,
                request,
                block_hashes,
                page_ids,
                tier_ops,
            } => {
                let task = TaskId::new(self.config.epoch, self.next_seq);
                let tiers = match kind {
                    TaskKind::Store => vec![Tier::Host; block_hashes.len()],
                    TaskKind::Load => Vec::new(),
                };
                let start = StartRef {
                    task,
                    request,
                    block_hashes,
                    page_ids,
                    tiers: &tiers,
                };
                Delta {
                    start_bytes: encoded_len(&start),
                    kind: Some(kind),
                    outcome_bytes: max_outcome_bytes(task, kind, request),
                    tier_ops,
                    end_tier_ops: block_hashes.len() as u64,
                    ..Delta::default()
                }
            }
        };
        let bytes = self.budget.bound_with(&delta);
        if bytes > self.config.max_frame_bytes {
            self.stats.frame_limit_refusals += 1;
            return Err(LeaderError::FrameTooLarge {
                bytes,
                limit: self.config.max_frame_bytes,
            });
        }
        Ok(())
    }

    /// Record a prefix-match decision in the open step. The pins a lookup takes are the group
    /// index's (`tandem-core`), not the leader's: this only records what the frame shows.
    pub fn record_lookup(&mut self, lookup: LookupResult) {
        self.budget.lookup(&lookup);
        self.open.lookups.push(lookup);
    }

    /// Start a store of `block_hashes` from engine pages `page_ids` into `tiers` (one per
    /// block, from the group index) in the open step; every rank copies its shard and reports
    /// it. The start is revealed in the first frame sealed after it is durable (see
    /// [`Self::poll_persist`]). Returns the new task id.
    pub fn start_store(
        &mut self,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
        page_ids: Vec<PageId>,
        tiers: Vec<Tier>,
    ) -> TaskId {
        self.start(TaskKind::Store, request, block_hashes, page_ids, tiers)
    }

    /// Start a load of `block_hashes` into engine pages `page_ids` in the open step; revealed
    /// like a store. Returns the new task id.
    pub fn start_load(
        &mut self,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
        page_ids: Vec<PageId>,
    ) -> TaskId {
        self.start(TaskKind::Load, request, block_hashes, page_ids, Vec::new())
    }

    /// Start a load like [`Self::start_load`], copied layer by layer on every rank: `layers`
    /// layers per rank in ascending order, each within `layer_timeout_ms` milliseconds. The
    /// plan is the leader's decision and the frame that reveals the start carries it
    /// ([`Frame::layerwise`]). Returns the new task id.
    pub fn start_load_layerwise(
        &mut self,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
        page_ids: Vec<PageId>,
        layers: u32,
        layer_timeout_ms: u64,
    ) -> TaskId {
        let task = self.start(TaskKind::Load, request, block_hashes, page_ids, Vec::new());
        let plan = LayerwiseLoad::ascending(task, layers, layer_timeout_ms);
        self.budget.layerwise(&plan);
        self.plans.insert(task, plan);
        task
    }

    fn start(
        &mut self,
        kind: TaskKind,
        request: RequestId,
        block_hashes: Vec<BlockHash>,
        page_ids: Vec<PageId>,
        tiers: Vec<Tier>,
    ) -> TaskId {
        let task = self.next_task();
        self.quorum.start(task, kind, request);
        let start = TaskStart {
            task,
            request,
            block_hashes,
            page_ids,
            tiers,
        };
        self.budget.start(kind, &start);
        self.persist.push_started(StartedTask { kind, start });
        task
    }

    fn next_task(&mut self) -> TaskId {
        let task = TaskId::new(self.config.epoch, self.next_seq);
        self.next_seq += 1;
        task
    }

    /// Refuse a store or load without starting it (for example: the tier is full and every
    /// block in it is pinned). The task gets an id and a `Failed { reason }` outcome that is
    /// logged and revealed like any other, so the engine hears of it exactly once; no rank
    /// copies anything. The reason is cut to [`crate::frame::MAX_REASON_BYTES`].
    pub fn reject_task(&mut self, kind: TaskKind, request: RequestId, reason: String) -> TaskId {
        let task = self.next_task();
        self.stats.tasks_failed += 1;
        let outcome = TaskOutcome {
            task,
            kind,
            request,
            result: OutcomeResult::failed(reason),
        };
        self.budget.outcome(&outcome);
        self.persist.push_finished(outcome);
        task
    }

    /// Record a tier operation (eviction, demotion, promotion) in the open step; every rank
    /// applies the step's operations in order when the frame arrives.
    pub fn record_tier_op(&mut self, op: TierOp) {
        self.budget.tier_op(&op);
        self.open.tier_ops.push(op);
    }

    /// The tier operations recorded in the open step so far, in order (the frame sealing it
    /// carries them; the leader's own store may apply them earlier, in the same order).
    pub fn open_tier_ops(&self) -> &[TierOp] {
        &self.open.tier_ops
    }

    /// Fence a message's epoch, counting rejections.
    fn fence(&mut self, theirs: Epoch) -> Result<(), LeaderError> {
        let ours = self.config.epoch;
        if theirs < ours {
            self.stats.stale_epoch_rejected += 1;
            return Err(LeaderError::StaleEpoch { ours, theirs });
        }
        if theirs > ours {
            self.stats.future_epoch_rejected += 1;
            return Err(LeaderError::FutureEpoch { ours, theirs });
        }
        Ok(())
    }

    /// Take one rank's shard report (the leader's own rank 0 included).
    ///
    /// Errors: [`LeaderError::StaleEpoch`]/[`LeaderError::FutureEpoch`] when the report or its
    /// task belongs to another epoch (counted, never applied); [`LeaderError::Quorum`] for an
    /// unknown task or rank. A duplicate returns `Ok(ReportOutcome::Duplicate)` and changes
    /// nothing but a counter.
    pub fn handle_report(&mut self, report: &ShardReport) -> Result<ReportOutcome, LeaderError> {
        self.fence(report.epoch)?;
        self.fence(Epoch(report.task.epoch))?;
        let out = self
            .quorum
            .record(report.task, report.rank, report.result.clone());
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                self.stats.rejected_reports += 1;
                return Err(e.into());
            }
        };
        match &out {
            ReportOutcome::Duplicate => self.stats.duplicate_reports += 1,
            ReportOutcome::Recorded { .. } => self.stats.reports_accepted += 1,
            ReportOutcome::Finished(outcome) => {
                self.stats.reports_accepted += 1;
                match outcome.result {
                    OutcomeResult::Ok => self.stats.tasks_ok += 1,
                    _ => self.stats.tasks_failed += 1,
                }
                self.budget.outcome(outcome);
                self.persist.push_finished(outcome.clone());
            }
        }
        Ok(out)
    }

    /// The next batch of starts and outcomes to append to the durable stream; `None` while the
    /// limit of batches is in flight (one unless [`Self::set_persist_limit`] raised it) or
    /// nothing waits. Confirm each, in the order handed out, with [`Self::handle_persisted`].
    pub fn poll_persist(&mut self) -> Option<PersistBatch> {
        self.persist.poll()
    }

    /// Let up to `limit` persist batches be in flight at once (at least 1): the driver appends
    /// them in order and confirms them in that order.
    pub fn set_persist_limit(&mut self, limit: usize) {
        self.persist.set_limit(limit);
    }

    /// Persist batches handed out and not yet confirmed or failed.
    pub fn persist_in_flight(&self) -> usize {
        self.persist.in_flight()
    }

    /// Batch `batch` is durable: its outcomes will be revealed by the next sealed frame.
    ///
    /// Errors: [`LeaderError::UnknownBatch`] when `batch` is not the oldest batch in flight.
    pub fn handle_persisted(&mut self, batch: BatchId) -> Result<(), LeaderError> {
        let n = self
            .persist
            .persisted(batch)
            .ok_or(LeaderError::UnknownBatch { batch })?;
        self.stats.outcomes_persisted += n as u64;
        Ok(())
    }

    /// Appending `batch`, the oldest in flight, failed (Redis unreachable): its starts and
    /// outcomes are queued again, first, and come back from the next [`Self::poll_persist`];
    /// later batches in flight are confirmed or fail on their own. Sealing goes on without
    /// revealing them.
    ///
    /// Errors: [`LeaderError::UnknownBatch`] when `batch` is not the oldest batch in flight.
    pub fn handle_persist_failed(&mut self, batch: BatchId) -> Result<(), LeaderError> {
        if !self.persist.failed(batch) {
            return Err(LeaderError::UnknownBatch { batch });
        }
        self.stats.persist_failures += 1;
        Ok(())
    }

    /// The slowest follower's acknowledged step (`None` if some follower has acked nothing).
    /// With no followers, the leader's own last sealed step.
    pub fn slowest_ack(&self) -> Option<Step> {
        if self.config.world_size <= 1 {
            return self.sealed_step();
        }
        self.acks
            .iter()
            .filter(|(r, _)| r.0 != 0)
            .map(|(_, a)| *a)
            .min()
            .flatten()
    }

    /// The follower holding the window back: the one with the lowest acknowledgement (one
    /// that acknowledged nothing first), the lowest rank among equals; `None` in a group of
    /// one rank.
    pub fn slowest_rank(&self) -> Option<Rank> {
        self.acks
            .iter()
            .filter(|(r, _)| r.0 != 0)
            .min_by_key(|(r, a)| (**a, **r))
            .map(|(r, _)| *r)
    }

    /// The lowest step acknowledged by every rank, rank 0's engine included.
    pub fn acked_by_all(&self) -> Option<Step> {
        self.acks.values().copied().min().flatten()
    }

    /// Seal the open step: returns its frame (for the leader's own engine) and queues it for
    /// every follower. The frame reveals every outcome confirmed durable so far, and only
    /// those.
    ///
    /// Errors: [`LeaderError::WrongStep`] unless `step` is [`Self::open_step`];
    /// [`LeaderError::WindowFull`] when `step` is more than `window_steps` ahead of the
    /// slowest follower's acknowledgement (the open step keeps its records; retry later);
    /// [`LeaderError::FrameTooLarge`] when the frame would exceed `max_frame_bytes`, which
    /// admission makes impossible for what engines ask (only a reconciliation or tier
    /// operations recorded beyond what was admitted can): nothing is sealed.
    pub fn seal(&mut self, step: Step, now_ms: u64) -> Result<Frame, LeaderError> {
        let _ = now_ms; // Sealing depends on acknowledgements, not on time.
        if step != self.open.step {
            return Err(LeaderError::WrongStep {
                expected: self.open.step,
                got: step,
            });
        }
        let slowest_ack = self.slowest_ack();
        if self.config.world_size > 1 {
            let base = slowest_ack.map_or(0, |a| a.0.saturating_add(1));
            if step.0 >= base.saturating_add(self.config.window_steps) {
                if self.window_refused != Some(step) {
                    self.window_refused = Some(step);
                    self.stats.window_full += 1;
                }
                return Err(LeaderError::WindowFull {
                    step,
                    rank: self.slowest_rank().unwrap_or(Rank(0)),
                    slowest_ack,
                    window: self.config.window_steps,
                });
            }
        }
        let bytes = self.sealed_len();
        if bytes > self.config.max_frame_bytes {
            return Err(LeaderError::FrameTooLarge {
                bytes,
                limit: self.config.max_frame_bytes,
            });
        }
        let mut frame =
            std::mem::replace(&mut self.open, Frame::empty(self.config.epoch, step.next()));
        frame.finished = self.persist.take_durable();
        for StartedTask { kind, start } in self.persist.take_durable_started() {
            match kind {
                TaskKind::Store => frame.stores.push(start),
                TaskKind::Load => {
                    if let Some(plan) = self.plans.remove(&start.task) {
                        frame.layerwise.push(plan);
                    }
                    frame.loads.push(start)
                }
            }
        }
        self.budget.sealed(
            &frame.stores,
            &frame.loads,
            &frame.finished,
            &frame.layerwise,
        );
        self.stats.outcomes_revealed += frame.finished.len() as u64;
        self.stats.steps_sealed += 1;
        for r in 1..self.config.world_size {
            self.transmit
                .push_back((Rank(r), Message::Frame(frame.clone())));
        }
        self.sealed.push(frame.clone());
        Ok(frame)
    }

    /// The exact `Message::Frame` payload size of the frame sealing the open step now, bytes.
    fn sealed_len(&self) -> u64 {
        let o = &self.open;
        let started = self.persist.durable_started();
        let of = |kind: TaskKind| -> Vec<&TaskStart> {
            started
                .iter()
                .filter(|s| s.kind == kind)
                .map(|s| &s.start)
                .collect()
        };
        // `Message::Frame`'s variant index is one byte; the fields follow in order.
        1 + encoded_len(&o.epoch)
            + encoded_len(&o.step)
            + encoded_len(&o.lookups)
            + encoded_len(&of(TaskKind::Store))
            + encoded_len(&of(TaskKind::Load))
            + encoded_len(self.persist.durable_unrevealed())
            + encoded_len(&o.tier_ops)
            + encoded_len(&o.reconciliation)
            + encoded_len(
                &of(TaskKind::Load)
                    .iter()
                    .filter_map(|s| self.plans.get(&s.task))
                    .collect::<Vec<_>>(),
            )
    }

    /// A retained sealed frame: `Ok(Some)` if retained, `Ok(None)` if not sealed yet.
    ///
    /// Errors: [`LeaderError::FrameExpired`] when the frame is older than the retention.
    pub fn frame(&self, step: Step) -> Result<Option<&Frame>, LeaderError> {
        match self.sealed.lookup(step) {
            Lookup::Retained(f) => Ok(Some(f)),
            Lookup::Expired { oldest } => Err(LeaderError::FrameExpired {
                wanted: step,
                oldest_retained: oldest,
            }),
            Lookup::NotYet => Ok(None),
        }
    }

    /// The next message to send and its destination rank.
    pub fn poll_transmit(&mut self) -> Option<(Rank, Message)> {
        self.transmit.pop_front()
    }

    /// A rank's engine applied frames up to `ack.step`. Acks never move backwards.
    ///
    /// Errors: epoch fencing as in [`Self::handle_report`];
    /// [`LeaderError::Quorum`] with `RankOutOfRange` for a rank outside the group;
    /// [`LeaderError::AckBeyondSealed`] for a step not sealed yet.
    pub fn handle_ack(&mut self, ack: &Ack) -> Result<(), LeaderError> {
        self.fence(ack.epoch)?;
        let world_size = self.config.world_size;
        let sealed = self.sealed_step();
        let Some(slot) = self.acks.get_mut(&ack.rank) else {
            return Err(QuorumError::RankOutOfRange {
                rank: ack.rank,
                world_size,
            }
            .into());
        };
        if sealed.is_none_or(|s| ack.step > s) {
            return Err(LeaderError::AckBeyondSealed {
                rank: ack.rank,
                step: ack.step,
                sealed,
            });
        }
        *slot = Some(slot.map_or(ack.step, |a| a.max(ack.step)));
        self.stats.acks += 1;
        Ok(())
    }

    /// A heartbeat arrived at `now_ms` on the leader's clock.
    ///
    /// Errors: epoch fencing as in [`Self::handle_report`].
    pub fn handle_heartbeat(&mut self, hb: &Heartbeat, now_ms: u64) -> Result<(), LeaderError> {
        self.fence(hb.epoch)?;
        if hb.rank.0 >= self.config.world_size {
            return Err(QuorumError::RankOutOfRange {
                rank: hb.rank,
                world_size: self.config.world_size,
            }
            .into());
        }
        self.liveness.touch(hb.rank, now_ms);
        self.stats.heartbeats += 1;
        Ok(())
    }

    /// When [`Self::handle_timeout`] should next be called (ms), if ever.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.liveness.next_deadline()
    }

    /// Check heartbeat deadlines at `now_ms`; every newly silent rank becomes a
    /// [`LeaderEvent::RankSilent`].
    pub fn handle_timeout(&mut self, now_ms: u64) {
        for (rank, last_seen_ms) in self.liveness.expire(now_ms) {
            self.stats.ranks_silent += 1;
            self.events.push_back(LeaderEvent::RankSilent {
                rank,
                last_seen_ms,
                now_ms,
            });
        }
    }

    /// The next event for the supervisor.
    pub fn poll_event(&mut self) -> Option<LeaderEvent> {
        self.events.pop_front()
    }

    /// Counters for metrics.
    pub fn stats(&self) -> &LeaderStats {
        &self.stats
    }

    /// Tasks without a durable outcome (awaiting reports, or finished but not yet durable),
    /// in task id order: what a new epoch reports aborted if this one ends now.
    pub fn in_flight(&self) -> Vec<InFlightTask> {
        let mut v: Vec<InFlightTask> = self.quorum.in_flight().collect();
        v.extend(self.persist.not_durable().map(|o| InFlightTask {
            task: o.task,
            kind: o.kind,
            request: o.request,
        }));
        v.sort();
        v
    }

    /// Outcomes durable but not yet revealed in a sealed frame.
    pub fn durable_unrevealed(&self) -> &[TaskOutcome] {
        self.persist.durable_unrevealed()
    }
}
