//! The follower core (ranks 1..world_size): the leader's frames handed to the engine by
//! position, and this rank's shard copies (docs/DESIGN.md invariants 1, 2, 4 and 6).
//!
//! Composes the sans-IO [`Follower`] (retained frames, positional reads, bounded waits) with
//! what used to sit in the agent: the engine's waiting `frame` calls, the copies held back
//! until the engine acknowledged the step that started them, shard reports and acks to the
//! leader, and the heartbeat cadence. A follower's engine applies frames at its own pace: it
//! computes a store's pages when it applies the frame that starts the store, and it still
//! reads the pages of an earlier load until it applies the frame that reports that load
//! finished. Copying a store earlier could store pages not yet written; copying a load
//! earlier could overwrite pages the engine is still verifying. Tier operations are applied
//! at once, in frame order (they touch no engine page). A task started without page ids is
//! copied only once this rank's engine bound its own pages for it ([`crate::binds`]); no bind
//! by the deadline fails this rank's shard, reported to the leader like a failed copy. It never
//! decides anything for the group.

use std::collections::{BTreeMap, BTreeSet};

use tandem_proto::engine::{AgentError, BindError, EngineReply, EngineRequest};
use tandem_proto::{
    BlockHash, Follower, FollowerError, FollowerEvent, FollowerStats, Message, PageId, Step,
    TaskId, TaskKind, TaskStart, WaitId,
};

use crate::binds::{Due, PageBinds};
use crate::config::CoreConfig;
use crate::output::{CallRef, Peer, StoreCommand};
use crate::shared::{follower_refusal, Shared};
use crate::status::{NotReady, RankStatus, RoleCounters};

/// Copies started by one frame: loads, then stores.
type Copies = (Vec<TaskStart>, Vec<TaskStart>);

/// The follower core. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FollowerCore {
    follower: Follower,
    /// Admitted by the leader.
    linked: bool,
    /// Engine `frame` calls waiting for their frame.
    waits: BTreeMap<WaitId, CallRef>,
    /// Copies started by frames the engine has not acknowledged yet, by step.
    held: BTreeMap<Step, Copies>,
    engine_acked: Option<Step>,
    /// When the next heartbeat goes to the leader, ms (once linked).
    next_heartbeat_ms: Option<u64>,
    /// Frame requests from the engine.
    frames_read: u64,
    /// Tasks started without page ids, waiting for this engine's pages.
    binds: PageBinds,
}

impl FollowerCore {
    /// A follower of `config.epoch`, not yet admitted by the leader.
    pub(crate) fn new(config: &CoreConfig) -> FollowerCore {
        FollowerCore {
            follower: Follower::new(config.epoch, config.rank, config.retention_steps),
            linked: false,
            waits: BTreeMap::new(),
            held: BTreeMap::new(),
            engine_acked: None,
            next_heartbeat_ms: None,
            frames_read: 0,
            binds: PageBinds::new(config.bind_timeout_ms),
        }
    }

    /// The sans-IO follower (read only).
    pub fn follower(&self) -> &Follower {
        &self.follower
    }

    /// Admitted by the leader.
    pub fn ready(&self) -> bool {
        self.linked
    }

    /// The next step this rank expects from the leader.
    pub fn next_step(&self) -> Step {
        self.follower.received_step().map_or(Step(0), Step::next)
    }

    /// Where an engine that says hello resumes reading: the first frame this rank has not
    /// acknowledged (step 0 before any). From there on every frame is retained (the leader
    /// seals at most `window_steps` past this rank's acknowledgement, and the retention is at
    /// least the window) and the window opens as the engine acknowledges them; an engine that
    /// started at [`Self::next_step`] while an earlier engine of this rank left frames
    /// unacknowledged would wait for a frame the leader cannot seal until they are.
    pub fn resume_step(&self) -> Step {
        self.follower.acked_step().map_or(Step(0), Step::next)
    }

    /// Tasks this rank saw started without an outcome yet.
    pub fn tasks_in_flight(&self) -> usize {
        self.follower.open_tasks().len()
    }

    /// Counters of the sans-IO follower.
    pub fn stats(&self) -> &FollowerStats {
        self.follower.stats()
    }

    /// Admitted by the leader at `now_ms`: the first heartbeat goes at once.
    pub(crate) fn linked(&mut self, sh: &mut Shared, now_ms: u64) {
        sh.send(Peer::Leader, self.follower.heartbeat(now_ms));
        self.next_heartbeat_ms = Some(now_ms.saturating_add(sh.config.heartbeat_interval_ms));
        self.linked = true;
        tracing::info!("admitted by the leader");
    }

    fn send(&self, sh: &mut Shared, msg: Message) {
        if self.linked {
            sh.send(Peer::Leader, msg);
        }
    }

    /// An engine request on a follower (already fenced by epoch).
    pub(crate) fn engine(
        &mut self,
        sh: &mut Shared,
        call: CallRef,
        req: EngineRequest,
        now_ms: u64,
    ) {
        let rank = sh.config.rank.0;
        let answer = match req {
            EngineRequest::Frame {
                step, deadline_ms, ..
            } => {
                self.frames_read += 1;
                // One path for every read: a frame already here (or expired) ends the wait at
                // once, otherwise it ends when the frame arrives or at its deadline.
                let deadline = now_ms.saturating_add(deadline_ms);
                let wait = self.follower.wait(step, deadline);
                self.waits.insert(wait, call);
                if deadline <= now_ms {
                    // A read that may not wait (deadline 0) is answered now, `LeaderBehind`
                    // when its frame is not here: not at the driver's next timer tick.
                    self.follower.handle_timeout(now_ms);
                }
                return self.drain_events(sh);
            }
            EngineRequest::Ack { step, .. } => match self.follower.ack(step) {
                Ok(msg) => {
                    self.send(sh, msg);
                    self.engine_acked = Some(self.engine_acked.map_or(step, |a| a.max(step)));
                    self.release_copies(sh);
                    EngineReply::Acked
                }
                // Acknowledging a step this rank never received: it is not (or no longer) in
                // step with the leader; the engine should wait and say hello again.
                Err(e) => EngineReply::Error(AgentError::NotReady {
                    reason: e.to_string(),
                }),
            },
            EngineRequest::Bind { task, page_ids, .. } => self.bind(sh, task, page_ids),
            EngineRequest::Lookup { .. }
            | EngineRequest::Store { .. }
            | EngineRequest::Load { .. }
            | EngineRequest::LoadLayerwise { .. }
            | EngineRequest::Release { .. }
            | EngineRequest::EndStep { .. } => EngineReply::Error(AgentError::NotLeader { rank }),
            EngineRequest::Hello { .. }
            | EngineRequest::HelloVersioned { .. }
            | EngineRequest::RegisterBuffer { .. }
            | EngineRequest::RegisterDevice { .. }
            | EngineRequest::WaitLayer { .. }
            | EngineRequest::FrameRing => EngineReply::Error(AgentError::BadRequest {
                reason: "routed to the wrong actor".into(),
            }),
        };
        sh.reply(call, answer);
    }

    /// This engine's pages for `task`: recorded, and the copy goes out if it only waited for
    /// them.
    fn bind(&mut self, sh: &mut Shared, task: TaskId, pages: Vec<PageId>) -> EngineReply {
        if !self.binds.knows(task) && self.follower.open_tasks().iter().any(|t| t.task == task) {
            // Started with page ids: nothing to bind.
            return EngineReply::Error(AgentError::Bind(BindError::AlreadyBound { task }));
        }
        match self.binds.bind(task, pages, sh.pool_pages) {
            Ok(ready) => {
                if let Some((kind, t)) = ready {
                    let (loads, stores) = match kind {
                        TaskKind::Load => (vec![t], Vec::new()),
                        TaskKind::Store => (Vec::new(), vec![t]),
                    };
                    copy(sh, loads, stores);
                }
                EngineReply::Bound { task }
            }
            Err(e) => EngineReply::Error(AgentError::Bind(e)),
        }
    }

    /// Copy the loads and stores of every step the engine acknowledged (a task started without
    /// page ids once its pages are bound).
    fn release_copies(&mut self, sh: &mut Shared) {
        let Some(acked) = self.engine_acked else {
            return;
        };
        let later = self.held.split_off(&acked.next());
        let (mut loads, mut stores) = (Vec::new(), Vec::new());
        for (l, s) in std::mem::replace(&mut self.held, later).into_values() {
            for t in l {
                if let Due::Copy(t) = self.binds.due(TaskKind::Load, t) {
                    loads.push(t);
                }
            }
            for t in s {
                if let Due::Copy(t) = self.binds.due(TaskKind::Store, t) {
                    stores.push(t);
                }
            }
        }
        copy(sh, loads, stores);
    }

    /// A message from the leader at `now_ms`; returns a failure reason when the epoch cannot
    /// go on.
    pub(crate) fn leader_message(
        &mut self,
        sh: &mut Shared,
        msg: Message,
        now_ms: u64,
    ) -> Option<String> {
        let frame = match &msg {
            Message::Frame(f) => Some(f.clone()),
            _ => None,
        };
        let received = self.follower.stats().frames_received;
        match self.follower.handle_message(msg) {
            // A frame received before (a retransmission) changes nothing: its tier operations
            // and copies were taken the first time.
            Ok(()) if self.follower.stats().frames_received == received => {
                self.drain_events(sh);
                return None;
            }
            Ok(()) => {}
            Err(FollowerError::StaleEpoch { ours, theirs }) => {
                tracing::debug!(%ours, %theirs, "stale-epoch frame rejected");
                return None;
            }
            Err(e) => return Some(format!("frame from the leader refused: {e}")),
        }
        if let Some(f) = frame {
            // Layerwise plans are known before any copy this frame starts is issued.
            sh.layer_frame(&f);
            // A block evicted now must not be written later by a copy still held back (its
            // store failed on some rank and the group dropped it).
            let evicted: BTreeSet<BlockHash> = f.evictions().collect();
            if !evicted.is_empty() {
                for (_, stores) in self.held.values_mut() {
                    for t in stores.iter_mut() {
                        drop_blocks(t, &evicted);
                    }
                }
                self.binds.evicted(&evicted);
            }
            for o in &f.finished {
                self.binds.forget(o.task);
            }
            // A task started without page ids: this rank's deadline for the bind starts now.
            for t in f.loads.iter().chain(&f.stores) {
                self.binds.arrived(t, now_ms);
            }
            if !f.tier_ops.is_empty() {
                sh.store(StoreCommand::ApplyTierOps {
                    epoch: f.epoch,
                    ops: f.tier_ops.clone(),
                });
            }
            if !f.loads.is_empty() || !f.stores.is_empty() {
                let held = self.held.entry(f.step).or_default();
                held.0.extend(f.loads.iter().cloned());
                held.1.extend(f.stores.iter().cloned());
                self.release_copies(sh);
            }
        }
        self.drain_events(sh);
        None
    }

    fn drain_events(&mut self, sh: &mut Shared) {
        let (rank, epoch) = (sh.config.rank.0, sh.epoch());
        while let Some(ev) = self.follower.poll_event() {
            let (wait, answer) = match ev {
                FollowerEvent::FrameReady { wait, frame } => {
                    (wait, EngineReply::Frame(Box::new(frame)))
                }
                FollowerEvent::WaitFailed { wait, error } => (
                    wait,
                    EngineReply::Error(follower_refusal(error, rank, epoch)),
                ),
            };
            if let Some(call) = self.waits.remove(&wait) {
                sh.reply(call, answer);
            }
        }
    }

    /// This rank's shard of `task` is done: report it to the leader.
    pub(crate) fn shard_done(&mut self, sh: &mut Shared, task: TaskId, result: Result<(), String>) {
        let report = self.follower.report(task, result);
        self.send(sh, report);
    }

    /// When [`Self::timeout`] must next run (ms): a wait's deadline, a bind's deadline or the
    /// next heartbeat.
    pub(crate) fn poll_timeout(&self) -> Option<u64> {
        [
            self.follower.poll_timeout(),
            self.next_heartbeat_ms,
            self.binds.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Timers at `now_ms`: waits past their deadline end in `LeaderBehind`; tasks still unbound
    /// past their bind deadline fail this rank's shard; a heartbeat goes out every interval.
    pub(crate) fn timeout(&mut self, sh: &mut Shared, now_ms: u64) {
        if self.follower.poll_timeout().is_some_and(|t| now_ms >= t) {
            self.follower.handle_timeout(now_ms);
            self.drain_events(sh);
        }
        // No bind by the deadline: this rank's shard fails (the leader fails the task).
        for (task, reason) in self.binds.expire(sh.config.rank.0, now_ms) {
            tracing::warn!(%task, %reason, "shard failed: no bind");
            self.shard_done(sh, task, Err(reason));
        }
        if self.next_heartbeat_ms.is_some_and(|t| now_ms >= t) {
            self.send(sh, self.follower.heartbeat(now_ms));
            self.next_heartbeat_ms = Some(now_ms.saturating_add(sh.config.heartbeat_interval_ms));
        }
    }

    /// Answer every waiting engine call with `err`.
    pub(crate) fn fail_waits(&mut self, sh: &mut Shared, err: &AgentError) {
        for (wait, call) in std::mem::take(&mut self.waits) {
            self.follower.cancel(wait);
            sh.refuse(call, err.clone());
        }
    }

    pub(crate) fn not_ready(&self) -> Option<NotReady> {
        (!self.linked).then_some(NotReady::Joining)
    }

    pub(crate) fn counters(&self) -> RoleCounters {
        RoleCounters::Follower {
            wait_timeouts: self.follower.stats().waits_timed_out,
            engine_frames_read: self.frames_read,
        }
    }

    /// Status for `/status` and `/readyz`.
    pub(crate) fn status(&self, config: &CoreConfig) -> RankStatus {
        let stats = self.follower.stats();
        RankStatus {
            group: config.membership.group_id.0.clone(),
            rank: config.rank.0,
            role: "follower",
            epoch: config.epoch.0,
            ready: self.linked,
            reason: (!self.linked)
                .then(|| format!("not yet admitted by the leader at {}", config.leader_addr)),
            joined: Vec::new(),
            sealed_step: self.follower.received_step().map(|s| s.0),
            acked_step: self.follower.acked_step().map(|s| s.0),
            tasks_in_flight: self.follower.open_tasks().len() as u64,
            steps_sealed: stats.frames_received,
            stale_epoch_rejected: stats.stale_epoch_rejected,
            tasks_ok: 0,
            tasks_failed: 0,
            index_blocks: 0,
        }
    }
}

/// Hand `loads` and `stores` to this rank's store (loads first).
fn copy(sh: &mut Shared, loads: Vec<TaskStart>, stores: Vec<TaskStart>) {
    let epoch = sh.epoch();
    if !loads.is_empty() {
        sh.store(StoreCommand::CopyLoads {
            epoch,
            tasks: loads,
        });
    }
    if !stores.is_empty() {
        sh.store(StoreCommand::CopyStores {
            epoch,
            tasks: stores,
        });
    }
}

/// Remove `evicted` blocks from a held store task (with their pages and tiers).
fn drop_blocks(t: &mut TaskStart, evicted: &BTreeSet<BlockHash>) {
    let keep: Vec<bool> = t
        .block_hashes
        .iter()
        .map(|h| !evicted.contains(h))
        .collect();
    if keep.iter().all(|k| *k) {
        return;
    }
    retain_mask(&mut t.block_hashes, &keep);
    retain_mask(&mut t.page_ids, &keep);
    retain_mask(&mut t.tiers, &keep);
}

fn retain_mask<T>(v: &mut Vec<T>, keep: &[bool]) {
    let mut i = 0;
    v.retain(|_| {
        let k = keep.get(i).copied().unwrap_or(true);
        i += 1;
        k
    });
}
