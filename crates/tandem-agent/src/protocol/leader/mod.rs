//! The leader's role (rank 0): the group's one decider, wired to the world.
//!
//! Owns the sans-IO `Leader`, the `GroupIndex` (which blocks are complete on every rank, LRU,
//! pins), the pins each task holds, the followers' links and the engine's `end_step` calls that
//! wait for the window. Decisions are made here and only here; everything decided goes into
//! the frame that every rank applies.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::Addr;
use tandem_client::api::{AgentError, EngineReply, EngineRequest};
use tandem_proto::frame::TaskOutcome;
use tandem_proto::ids::{BlockHash, PageId, Rank, RequestId, Step, TaskId, TaskKind};
use tandem_proto::wire::codec::encode_checked;
use tandem_proto::wire::handshake::{HandshakeError, Membership};
use tandem_proto::wire::{Ack, Message as WireMessage, ShardReport};
use tandem_proto::{Frame, Leader, LeaderError, LeaderEvent, ReportOutcome};
use tandem_store::index::{GroupIndex, Pin};
use tokio::sync::oneshot;

use super::status::AgentStatus;
use super::{AdmitPeer, FromPeer, PeerLost};
use crate::peer::link::PeerLink;
use crate::settings::AgentSettings;
use crate::store_actor::{ApplyTierOps, CopyLoads, CopyStores, ShardDone, StoreActor};
use crate::tiers::tier_op;

mod tasks;

/// An `end_step` waiting for the window to open.
struct EndWait {
    step: Step,
    deadline_ms: u64,
    reply: oneshot::Sender<EngineReply>,
}

/// An append the actor must carry out (asynchronously, against Redis) before sealing `step`.
pub struct AppendJob {
    /// The leader's batch of starts and outcomes, if any.
    pub batch: Option<tandem_proto::PersistBatch>,
    /// The previous epoch's in-flight tasks, aborted, logged in the first record of this one.
    pub aborted: Vec<TaskOutcome>,
    /// The step to seal once the append is done.
    pub step: Step,
    /// The engine's deadline for `end_step`, ms on the agent's clock.
    pub deadline_ms: u64,
    /// Where the frame goes.
    pub reply: oneshot::Sender<EngineReply>,
}

/// Task counts by kind, for metrics: started, and finished by result (ok, failed, aborted).
#[derive(Clone, Copy, Debug, Default)]
pub struct TaskCounts {
    /// Started stores and loads.
    pub started: [u64; 2],
    /// Finished `[kind][result]`, result 0 ok, 1 failed, 2 aborted.
    pub finished: [[u64; 3]; 2],
    /// Stores refused by the group index: `[tier full, other]` (also counted as failed).
    pub stores_refused: [u64; 2],
    /// Blocks asked about by lookups: `[matched (hit), not matched (miss)]`.
    pub lookup_blocks: [u64; 2],
}

fn kind_index(kind: TaskKind) -> usize {
    match kind {
        TaskKind::Store => 0,
        TaskKind::Load => 1,
    }
}

/// The pins a started task holds until its outcome.
struct TaskPins {
    kind: TaskKind,
    pins: Vec<Pin>,
}

/// The leader's role. See the module docs.
pub struct LeaderRole {
    leader: Leader,
    membership: Membership,
    index: GroupIndex,
    links: BTreeMap<Rank, (u64, PeerLink)>,
    /// Pins taken by this step's lookups, waiting for the request's load.
    lookup_pins: BTreeMap<RequestId, Vec<Pin>>,
    tasks: BTreeMap<TaskId, TaskPins>,
    end_waits: Vec<EndWait>,
    max_frame_bytes: usize,
    heartbeats_armed: bool,
    /// Whether starts and outcomes go to a completion log before they are revealed.
    durable: bool,
    /// The previous epoch's in-flight tasks, aborted; appended with the first record.
    aborted_pending: Vec<TaskOutcome>,
    /// Why the completion log refused the last append, while it does.
    log_error: Option<String>,
    /// False until the group index is rebuilt from every rank's manifest (a new epoch with
    /// Redis); engine requests wait for it.
    index_ready: bool,
    counts: TaskCounts,
    evictions: u64,
    /// When the engine's pending `end_step` arrived (for the frame latency histogram).
    end_started: Option<std::time::Instant>,
    /// Latencies of sealed steps not yet handed to the metrics, seconds.
    latencies: Vec<std::time::Duration>,
}

impl LeaderRole {
    /// The leader of `settings.epoch` with its group index.
    /// With `durable`, every start and outcome is appended to the completion log (by the
    /// actor, through [`AppendJob`]) before a frame reveals it; `aborted` are the previous
    /// epoch's in-flight tasks, logged with the first record.
    pub fn new(
        leader: Leader,
        index: GroupIndex,
        settings: &AgentSettings,
        durable: bool,
        aborted: Vec<TaskOutcome>,
    ) -> Self {
        Self {
            durable,
            aborted_pending: aborted,
            log_error: None,
            index_ready: !durable,
            counts: TaskCounts::default(),
            evictions: 0,
            end_started: None,
            latencies: Vec::new(),
            leader,
            membership: settings.membership.clone(),
            index,
            links: BTreeMap::new(),
            lookup_pins: BTreeMap::new(),
            tasks: BTreeMap::new(),
            end_waits: Vec::new(),
            max_frame_bytes: settings.max_frame_bytes,
            heartbeats_armed: false,
        }
    }

    /// Every follower joined this epoch.
    pub fn all_joined(&self) -> bool {
        self.leader.all_joined()
    }

    /// Ready for engine requests: every follower joined and the index is rebuilt.
    pub fn ready(&self) -> bool {
        self.leader.all_joined() && self.index_ready
    }

    /// The group index's configuration.
    pub fn index_config(&self) -> tandem_store::index::IndexConfig {
        self.index.config()
    }

    /// Install the index rebuilt from the ranks' manifests; its moves (drops of blocks some
    /// rank lacks, demotions) go into the open step, before any engine request of the epoch.
    pub fn install_index(&mut self, rebuild: tandem_store::rebuild::Rebuild) {
        tracing::info!(
            kept = rebuild.kept,
            dropped = rebuild.dropped.len(),
            "group index rebuilt from the ranks' manifests"
        );
        self.index = rebuild.index;
        for m in rebuild.moves {
            self.record(tier_op(m));
        }
        self.index_ready = true;
    }

    /// The epoch.
    pub fn epoch(&self) -> tandem_proto::ids::Epoch {
        self.leader.epoch()
    }

    /// The next step the leader will seal.
    pub fn next_step(&self) -> Step {
        self.leader.open_step()
    }

    /// Admit a follower (sending `Welcome`) or refuse it (sending `Refused`).
    pub fn admit(
        &mut self,
        msg: AdmitPeer,
        _now: u64,
        _settings: &Arc<AgentSettings>,
    ) -> Result<Rank, HandshakeError> {
        match self.leader.admit(&self.membership, &msg.nonce, &msg.hello) {
            Ok(welcome) => {
                let rank = msg.hello.rank;
                let _ = msg.link.send(&welcome);
                self.links.insert(rank, (msg.conn, msg.link));
                tracing::info!(
                    rank = rank.0,
                    joined = self.leader.joined().len(),
                    "follower admitted"
                );
                Ok(rank)
            }
            Err(reason) => {
                tracing::warn!(rank = msg.hello.rank.0, %reason, "follower refused");
                let _ = msg.link.send(&WireMessage::Refused {
                    reason: reason.clone(),
                });
                Err(reason)
            }
        }
    }

    /// A follower's message; returns a failure reason when the epoch cannot go on.
    pub fn from_peer(
        &mut self,
        msg: FromPeer,
        now: u64,
        store: &Addr<StoreActor>,
    ) -> Option<String> {
        if self.links.get(&msg.rank).map(|(c, _)| *c) != Some(msg.conn) {
            return None;
        }
        match self.leader.handle_message(msg.rank, &msg.msg, now) {
            Ok(Some(ReportOutcome::Finished(outcome))) => self.finished(&outcome),
            Ok(_) => {}
            Err(LeaderError::StaleEpoch { ours, theirs }) => {
                tracing::debug!(rank = msg.rank.0, %ours, %theirs, kind = msg.msg.kind(), "stale-epoch message rejected");
            }
            Err(e) => {
                tracing::warn!(rank = msg.rank.0, error = %e, kind = msg.msg.kind(), "follower message rejected")
            }
        }
        if matches!(msg.msg, WireMessage::Ack(_)) {
            self.retry_end_waits(now, store);
        }
        None
    }

    /// A follower's connection ended.
    pub fn peer_lost(&mut self, msg: PeerLost, now: u64) -> Option<String> {
        if self.links.get(&msg.rank).map(|(c, _)| *c) != Some(msg.conn) {
            return None;
        }
        self.links.remove(&msg.rank);
        self.leader.handle_disconnect(msg.rank, now);
        Some(format!("rank {} connection lost: {}", msg.rank, msg.reason))
    }

    /// The leader's own shard of a task.
    pub fn own_shard(&mut self, msg: ShardDone, _store: &Addr<StoreActor>) -> Option<String> {
        let report = ShardReport {
            epoch: self.leader.epoch(),
            task: msg.task,
            rank: Rank(0),
            result: msg.result,
        };
        match self.leader.handle_report(&report) {
            Ok(ReportOutcome::Finished(outcome)) => self.finished(&outcome),
            Ok(_) => {}
            Err(e) => tracing::warn!(task = %msg.task, error = %e, "own shard report rejected"),
        }
        None
    }

    /// An engine request on the leader.
    /// Returns an append the actor must carry out before the step can be sealed.
    pub fn engine(
        &mut self,
        req: EngineRequest,
        reply: oneshot::Sender<EngineReply>,
        now: u64,
        store: &Addr<StoreActor>,
    ) -> Option<AppendJob> {
        if !self.leader.all_joined() {
            let missing: Vec<u32> = (1..self.leader.config().world_size)
                .filter(|r| !self.leader.joined().contains(&Rank(*r)))
                .collect();
            let _ = reply.send(EngineReply::Error(AgentError::NotReady {
                reason: format!(
                    "waiting for ranks {missing:?} to join epoch {}",
                    self.leader.epoch()
                ),
            }));
            return None;
        }
        if !self.index_ready {
            let _ = reply.send(EngineReply::Error(AgentError::NotReady {
                reason: format!(
                    "rebuilding the group index of epoch {} from the ranks' manifests",
                    self.leader.epoch()
                ),
            }));
            return None;
        }
        let answer = match req {
            EngineRequest::Lookup {
                step,
                request,
                block_hashes,
                ..
            } => self
                .check_step(step)
                .and_then(|()| self.lookup(request, block_hashes)),
            EngineRequest::Store {
                step,
                request,
                block_hashes,
                page_ids,
                ..
            } => self
                .check_step(step)
                .and_then(|()| check_lists(&block_hashes, &page_ids))
                .and_then(|()| self.store(request, block_hashes, page_ids)),
            EngineRequest::Load {
                step,
                request,
                block_hashes,
                page_ids,
                ..
            } => self
                .check_step(step)
                .and_then(|()| check_lists(&block_hashes, &page_ids))
                .and_then(|()| self.load(request, block_hashes, page_ids)),
            EngineRequest::EndStep {
                step, deadline_ms, ..
            } => match self.check_step(step) {
                Ok(()) => {
                    return self.end_step(step, now.saturating_add(deadline_ms), reply, now, store)
                }
                Err(e) => Err(e),
            },
            EngineRequest::Frame { step, .. } => match self.leader.frame(step) {
                Ok(Some(f)) => Ok(EngineReply::Frame(Box::new(f.clone()))),
                Ok(None) => Err(AgentError::LeaderBehind {
                    rank: 0,
                    epoch: self.leader.epoch(),
                    wanted: step,
                    sealed: self.leader.sealed_step(),
                }),
                Err(e) => Err(map_leader_error(e, self.leader.epoch())),
            },
            EngineRequest::Ack { step, .. } => {
                let ack = Ack {
                    epoch: self.leader.epoch(),
                    rank: Rank(0),
                    step,
                };
                self.leader
                    .handle_ack(&ack)
                    .map(|()| EngineReply::Acked)
                    .map_err(|e| map_leader_error(e, self.leader.epoch()))
            }
            EngineRequest::Hello { .. } | EngineRequest::RegisterBuffer { .. } => {
                Err(AgentError::BadRequest {
                    reason: "routed to the wrong actor".into(),
                })
            }
        };
        let _ = reply.send(answer.unwrap_or_else(EngineReply::Error));
        None
    }

    /// Record a tier operation in the open step, counting evictions.
    fn record(&mut self, op: tandem_proto::TierOp) {
        if matches!(op, tandem_proto::TierOp::Evict(_)) {
            self.evictions += 1;
        }
        self.leader.record_tier_op(op);
    }

    fn check_step(&self, step: Step) -> Result<(), AgentError> {
        let expected = self.leader.open_step();
        if step != expected {
            return Err(AgentError::WrongStep {
                expected,
                got: step,
            });
        }
        Ok(())
    }

    /// Without a completion log, starts and outcomes count as durable at once.
    fn persist_volatile(&mut self) {
        while let Some(batch) = self.leader.poll_persist() {
            if let Err(e) = self.leader.handle_persisted(batch.id) {
                tracing::error!(error = %e, "persist batch refused");
            }
        }
    }

    fn end_step(
        &mut self,
        step: Step,
        deadline_ms: u64,
        reply: oneshot::Sender<EngineReply>,
        now: u64,
        store: &Addr<StoreActor>,
    ) -> Option<AppendJob> {
        self.end_started = Some(std::time::Instant::now());
        // Lookup pins last for their step: whatever was not loaded goes back.
        let requests: Vec<RequestId> = self.lookup_pins.keys().copied().collect();
        for r in requests {
            self.release_lookup_pins(r);
        }
        if self.durable {
            let batch = self.leader.poll_persist();
            let aborted = std::mem::take(&mut self.aborted_pending);
            if batch.is_some() || !aborted.is_empty() {
                return Some(AppendJob {
                    batch,
                    aborted,
                    step,
                    deadline_ms,
                    reply,
                });
            }
        } else {
            self.persist_volatile();
        }
        self.seal_or_wait(step, deadline_ms, reply, now, store);
        None
    }

    /// The actor finished an [`AppendJob`]: `result` is the append's outcome.
    pub fn append_done(
        &mut self,
        job: AppendJob,
        result: Result<(), String>,
        now: u64,
        store: &Addr<StoreActor>,
    ) {
        match result {
            Ok(()) => {
                self.log_error = None;
                if let Some(b) = &job.batch {
                    if let Err(e) = self.leader.handle_persisted(b.id) {
                        tracing::error!(error = %e, "persist batch refused");
                    }
                }
            }
            Err(reason) => {
                if self.log_error.is_none() {
                    tracing::warn!(%reason, "completion log unavailable: sealing on, revealing nothing new");
                }
                self.log_error = Some(reason.clone());
                if let Some(b) = &job.batch {
                    let _ = self.leader.handle_persist_failed(b.id);
                }
                if !job.aborted.is_empty() {
                    // The reconciliation cannot be revealed before its aborts are durable.
                    self.aborted_pending = job.aborted;
                    let _ = job.reply.send(EngineReply::Error(AgentError::NotReady {
                        reason: format!("completion log unavailable, the reconciliation of epoch {} is not durable yet: {reason}", self.leader.epoch()),
                    }));
                    return;
                }
            }
        }
        self.seal_or_wait(job.step, job.deadline_ms, job.reply, now, store);
    }

    /// Blocks evicted from the group so far (tier operations `Evict` recorded).
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Tasks started (or refused) without a durable outcome yet.
    pub fn tasks_in_flight(&self) -> usize {
        self.leader.in_flight().len()
    }

    /// Task counts so far, for metrics.
    pub fn task_counts(&self) -> TaskCounts {
        self.counts
    }

    /// Seal latencies measured since the last call (engine's `end_step` → frame sealed).
    pub fn take_latencies(&mut self) -> Vec<std::time::Duration> {
        std::mem::take(&mut self.latencies)
    }

    /// Counters of the sans-IO leader.
    pub fn stats(&self) -> &tandem_proto::LeaderStats {
        self.leader.stats()
    }

    /// Blocks in the group index by tier: (host, disk).
    pub fn index_occupancy(&self) -> (u64, u64) {
        (
            self.index.occupancy(tandem_store::tier::TierKind::Host),
            self.index.occupancy(tandem_store::tier::TierKind::Disk),
        )
    }

    /// Why the completion log refuses appends, while it does.
    pub fn log_error(&self) -> Option<&str> {
        self.log_error.as_deref()
    }

    /// Why this leader is not ready, as a metric label; `None` when ready.
    pub fn not_ready_reason(&self) -> Option<tandem_metrics::NotReadyReason> {
        use tandem_metrics::NotReadyReason as R;
        if self.log_error.is_some() {
            Some(R::CompletionLog)
        } else if !self.leader.all_joined() {
            Some(R::Joining)
        } else if !self.index_ready {
            Some(R::RebuildingIndex)
        } else {
            None
        }
    }

    fn seal_or_wait(
        &mut self,
        step: Step,
        deadline_ms: u64,
        reply: oneshot::Sender<EngineReply>,
        now: u64,
        store: &Addr<StoreActor>,
    ) {
        if step != self.leader.open_step() {
            let _ = reply.send(EngineReply::Error(AgentError::WrongStep {
                expected: self.leader.open_step(),
                got: step,
            }));
            return;
        }
        match self.seal(step, now, store) {
            Ok(frame) => {
                let _ = reply.send(EngineReply::Frame(Box::new(frame)));
            }
            Err(LeaderError::WindowFull { .. }) => self.end_waits.push(EndWait {
                step,
                deadline_ms,
                reply,
            }),
            Err(e) => {
                if matches!(e, LeaderError::FrameTooLarge { .. }) {
                    // Admission keeps requests within the limit; only a reconciliation or the
                    // index rebuild's tier operations can get here. Nothing was sealed or sent.
                    tracing::error!(error = %e, step = step.0, "the open step cannot be sealed within protocol.max_frame_bytes");
                }
                let _ = reply.send(EngineReply::Error(map_leader_error(e, self.leader.epoch())));
            }
        }
    }

    /// Seal `step`, send the frame to every follower and start this rank's copies.
    fn seal(
        &mut self,
        step: Step,
        now: u64,
        store: &Addr<StoreActor>,
    ) -> Result<Frame, LeaderError> {
        let frame = self.leader.seal(step, now)?;
        if let Some(t) = self.end_started.take() {
            self.latencies.push(t.elapsed());
        }
        let mut encoded: Option<Arc<Vec<u8>>> = None;
        while let Some((rank, msg)) = self.leader.poll_transmit() {
            let Some((_, link)) = self.links.get(&rank) else {
                continue;
            };
            if matches!(msg, WireMessage::Frame(_)) {
                // One encoding per frame, shared by every follower.
                if encoded.is_none() {
                    match encode_checked(&msg, self.max_frame_bytes) {
                        Ok(b) => encoded = Some(Arc::new(b)),
                        Err(e) => {
                            tracing::error!(error = %e, step = step.0, "frame exceeds the wire limit");
                            continue;
                        }
                    }
                }
                if let Some(bytes) = &encoded {
                    link.send_encoded(bytes.clone());
                }
            } else if let Err(e) = link.send(&msg) {
                tracing::error!(error = %e, "message exceeds the wire limit");
            }
        }
        apply_own(&frame, store);
        Ok(frame)
    }

    fn retry_end_waits(&mut self, now: u64, store: &Addr<StoreActor>) {
        if self.end_waits.is_empty() {
            return;
        }
        let waits = std::mem::take(&mut self.end_waits);
        for w in waits {
            if w.step != self.leader.open_step() {
                let err = AgentError::WrongStep {
                    expected: self.leader.open_step(),
                    got: w.step,
                };
                let _ = w.reply.send(EngineReply::Error(err));
                continue;
            }
            if !self.durable {
                self.persist_volatile();
            }
            match self.seal(w.step, now, store) {
                Ok(frame) => {
                    let _ = w.reply.send(EngineReply::Frame(Box::new(frame)));
                }
                Err(LeaderError::WindowFull { .. }) => self.end_waits.push(w),
                Err(e) => {
                    let _ = w
                        .reply
                        .send(EngineReply::Error(map_leader_error(e, self.leader.epoch())));
                }
            }
        }
    }

    /// Timers: window waits past their deadline, heartbeat silence.
    pub fn tick(&mut self, now: u64, _store: &Addr<StoreActor>) -> Option<String> {
        let (expired, keep): (Vec<EndWait>, Vec<EndWait>) = std::mem::take(&mut self.end_waits)
            .into_iter()
            .partition(|w| now >= w.deadline_ms);
        self.end_waits = keep;
        for w in expired {
            let err = AgentError::WindowFull {
                step: w.step,
                slowest_ack: self.leader.slowest_ack(),
                window: self.leader.config().window_steps,
            };
            let _ = w.reply.send(EngineReply::Error(err));
        }
        // Silence is judged only once every follower has joined and started its heartbeats.
        if !self.leader.all_joined() {
            return None;
        }
        if !self.heartbeats_armed {
            self.heartbeats_armed = true;
            return None;
        }
        if self.leader.poll_timeout().is_some_and(|t| now >= t) {
            self.leader.handle_timeout(now);
        }
        let mut failure = None;
        while let Some(ev) = self.leader.poll_event() {
            let reason = match ev {
                LeaderEvent::RankSilent {
                    rank,
                    last_seen_ms,
                    now_ms,
                } => {
                    format!(
                        "rank {rank} silent for {} ms",
                        now_ms.saturating_sub(last_seen_ms)
                    )
                }
                LeaderEvent::RankLost { rank, .. } => format!("rank {rank} lost"),
            };
            failure.get_or_insert(reason);
        }
        failure
    }

    /// Answer every waiting engine call with `err`.
    pub fn fail_waits(&mut self, err: &AgentError) {
        for w in self.end_waits.drain(..) {
            let _ = w.reply.send(EngineReply::Error(err.clone()));
        }
    }

    /// Status for `/status` and `/readyz`.
    pub fn status(&self, settings: &AgentSettings) -> AgentStatus {
        let joined: Vec<u32> = self.leader.joined().iter().map(|r| r.0).collect();
        let ready = self.ready() && self.log_error.is_none();
        let stats = self.leader.stats();
        AgentStatus {
            group: settings.membership.group_id.0.clone(),
            rank: settings.rank.0,
            pid: std::process::id(),
            role: "leader",
            epoch: settings.epoch.0,
            ready,
            reason: match &self.log_error {
                Some(e) => Some(format!("completion log unavailable: {e}")),
                None if !self.index_ready && self.leader.all_joined() => {
                    Some("rebuilding the group index from the ranks' manifests".into())
                }
                None => (!ready).then(|| {
                    format!(
                        "waiting for followers: joined {joined:?} of {}",
                        settings.world_size - 1
                    )
                }),
            },
            joined,
            sealed_step: self.leader.sealed_step().map(|s| s.0),
            acked_step: self.leader.slowest_ack().map(|s| s.0),
            tasks_in_flight: self.leader.in_flight().len() as u64,
            steps_sealed: stats.steps_sealed,
            stale_epoch_rejected: stats.stale_epoch_rejected,
            tasks_ok: stats.tasks_ok,
            tasks_failed: stats.tasks_failed,
            index_blocks: self.index.occupancy(tandem_store::tier::TierKind::Host)
                + self.index.occupancy(tandem_store::tier::TierKind::Disk),
        }
    }
}

/// The leader's own copies for a sealed frame: tier operations first, then loads and stores.
/// The leader's engine wrote its store pages before asking, so they are copied at once.
fn apply_own(frame: &Frame, store: &Addr<StoreActor>) {
    if !frame.tier_ops.is_empty() {
        store.do_send(ApplyTierOps(frame.epoch, frame.tier_ops.clone()));
    }
    if !frame.loads.is_empty() {
        store.do_send(CopyLoads(frame.epoch, frame.loads.clone()));
    }
    if !frame.stores.is_empty() {
        store.do_send(CopyStores(frame.epoch, frame.stores.clone()));
    }
}

fn check_lists(hashes: &[BlockHash], pages: &[PageId]) -> Result<(), AgentError> {
    if hashes.len() != pages.len() {
        return Err(AgentError::BadRequest {
            reason: format!("{} block hashes but {} page ids", hashes.len(), pages.len()),
        });
    }
    Ok(())
}

/// The engine's view of a leader refusal.
pub fn map_leader_error(e: LeaderError, epoch: tandem_proto::ids::Epoch) -> AgentError {
    match e {
        LeaderError::WindowFull {
            step,
            slowest_ack,
            window,
        } => AgentError::WindowFull {
            step,
            slowest_ack,
            window,
        },
        LeaderError::WrongStep { expected, got } => AgentError::WrongStep { expected, got },
        LeaderError::FrameExpired {
            wanted,
            oldest_retained,
        } => AgentError::FrameExpired {
            epoch,
            wanted,
            oldest: oldest_retained,
        },
        LeaderError::AckBeyondSealed { .. } => AgentError::BadRequest {
            reason: e.to_string(),
        },
        LeaderError::FrameTooLarge { bytes, limit } => AgentError::FrameTooLarge { bytes, limit },
        other => AgentError::NotReady {
            reason: other.to_string(),
        },
    }
}
