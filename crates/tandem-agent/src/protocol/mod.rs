//! The ProtocolActor: this rank's side of the group protocol for one epoch.
//!
//! Wraps the sans-IO `Leader` (rank 0, with the group index) or `Follower` (other ranks) and
//! connects them to the world: engine requests in, frames and shard reports over TCP, shard
//! copies handed to the `StoreActor`, timers from a tick. Every decision is the state machine's
//! (or the group index's, on the leader); this actor only moves inputs and outputs. A new epoch
//! gets a new ProtocolActor: nothing of an old epoch's protocol resumes.
//!
//! - [`leader`]: the leader's role (engine operations, quorum results, sealing, the window).
//! - [`follower`]: a follower's role (positional reads, bounded waits, acks, reports).
//! - [`status`]: what `/status` and `/readyz` report.
//! - `messages`: the messages it takes (re-exported here).

pub mod follower;
pub mod leader;
mod messages;
pub mod status;

pub use messages::*;

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, ActorContext, Addr, AsyncContext, Context, Handler};
use tandem_client::api::{AgentError, EngineReply, EngineRequest};
use tandem_durable::{CompletionStream, LivenessStore};
use tandem_proto::ids::{Epoch, Rank};
use tandem_proto::wire::handshake::HandshakeError;
use tandem_proto::wire::Message as WireMessage;
use tokio::sync::oneshot;

use crate::clock::Clock;
use crate::settings::AgentSettings;
use crate::store_actor::{BeginEpoch, ShardDone, StoreActor};

use follower::FollowerRole;
use leader::LeaderRole;
pub use status::AgentStatus;

/// How often timers (wait deadlines, heartbeat checks) are evaluated.
const TICK: Duration = Duration::from_millis(5);

/// What the agent's runtime hears from the protocol actor of an epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentEvent {
    /// This rank is ready in `epoch` (leader: every follower joined; follower: admitted).
    Ready {
        /// The epoch.
        epoch: Epoch,
    },
    /// `epoch` cannot go on; the supervisor must restart the group.
    Failed {
        /// The epoch.
        epoch: Epoch,
        /// What happened.
        reason: String,
    },
    /// This rank's engine applied every frame of `epoch` up to `step`.
    EngineAcked {
        /// The epoch.
        epoch: Epoch,
        /// The step.
        step: tandem_proto::ids::Step,
    },
}

/// What a protocol actor is wired to besides its store: the runtime's event channel, the
/// completion log (leader appends) and the task ids this rank's engine already acknowledged
/// (removed from the reconciliation's redeliveries before frame 0 reaches the engine).
pub struct Wiring {
    /// Events for the runtime.
    pub events: Option<tokio::sync::mpsc::UnboundedSender<AgentEvent>>,
    /// The completion log, on the leader when Redis is configured.
    pub log: Option<tandem_durable::RedisLog>,
    /// Redelivered outcomes this rank's engine already acknowledged.
    pub acknowledged: std::collections::BTreeSet<tandem_proto::ids::TaskId>,
    /// The agent's metrics.
    pub metrics: Arc<tandem_metrics::AgentMetrics>,
}

/// The role this rank plays in the epoch.
enum Role {
    Leader(Box<LeaderRole>),
    Follower(Box<FollowerRole>),
}

/// The actor. See the module docs.
pub struct ProtocolActor {
    settings: Arc<AgentSettings>,
    clock: Clock,
    store: Addr<StoreActor>,
    role: Role,
    /// Why this epoch can no longer make progress (a lost or silent rank, a protocol error).
    failure: Option<String>,
    wiring: Wiring,
    ready_sent: bool,
    append_in_flight: bool,
    rebuild_started: bool,
    /// Engine requests of another epoch, rejected.
    engine_stale_rejected: u64,
    /// Engine connections that said hello in this epoch and are still open.
    engines_attached: u32,
}

impl ProtocolActor {
    /// A protocol actor for `settings.epoch`; `leader_role` must be given on rank 0.
    pub fn new(
        settings: Arc<AgentSettings>,
        clock: Clock,
        store: Addr<StoreActor>,
        leader_role: Option<LeaderRole>,
        wiring: Wiring,
    ) -> Self {
        let role = match leader_role {
            Some(l) => Role::Leader(Box::new(l)),
            None => Role::Follower(Box::new(FollowerRole::new(&settings))),
        };
        Self {
            settings,
            clock,
            store,
            role,
            failure: None,
            wiring,
            ready_sent: false,
            append_in_flight: false,
            rebuild_started: false,
            engine_stale_rejected: 0,
            engines_attached: 0,
        }
    }

    fn emit(&self, ev: AgentEvent) {
        if let Some(tx) = &self.wiring.events {
            let _ = tx.send(ev);
        }
    }

    /// Leader with a completion log: once every follower joined, rebuild the group index from
    /// the manifests every rank published for this epoch.
    fn maybe_rebuild(&mut self, ctx: &mut Context<Self>) {
        use actix::{ActorFutureExt, WrapFuture};
        let Role::Leader(l) = &self.role else { return };
        if self.rebuild_started || l.ready() || !l.all_joined() {
            return;
        }
        let Some(log) = self.wiring.log.clone() else {
            return;
        };
        self.rebuild_started = true;
        let (epoch, config) = (self.settings.epoch, l.index_config());
        let fut = async move { fetch_manifests(&log, epoch, config.world_size).await };
        ctx.spawn(fut.into_actor(self).map(move |ranks, actor, ctx| {
            let rebuilt = tandem_store::index::GroupIndex::rebuild(config, &ranks);
            match rebuilt {
                Ok(r) => {
                    if let Role::Leader(l) = &mut actor.role {
                        l.install_index(r);
                    }
                    actor.check_ready(ctx);
                }
                Err(e) => actor.fail(format!("cannot rebuild the group index: {e}")),
            }
        }));
    }

    /// Tell the runtime once when this rank becomes ready in the epoch.
    fn check_ready(&mut self, ctx: &mut Context<Self>) {
        self.maybe_rebuild(ctx);
        if self.ready_sent || self.failure.is_some() {
            return;
        }
        let ready = match &self.role {
            Role::Leader(l) => l.ready(),
            Role::Follower(f) => f.is_linked(),
        };
        if ready {
            self.ready_sent = true;
            self.emit(AgentEvent::Ready {
                epoch: self.settings.epoch,
            });
        }
    }

    /// The epoch fails: log it once, answer every waiting engine call, refuse new ones.
    fn fail(&mut self, reason: String) {
        if self.failure.is_some() {
            return;
        }
        tracing::error!(%reason, "epoch failed: the group must restart");
        self.emit(AgentEvent::Failed {
            epoch: self.settings.epoch,
            reason: reason.clone(),
        });
        let err = AgentError::NotReady {
            reason: format!("epoch {} failed: {reason}", self.settings.epoch),
        };
        match &mut self.role {
            Role::Leader(l) => l.fail_waits(&err),
            Role::Follower(f) => f.fail_waits(&err),
        }
        self.failure = Some(reason);
    }

    /// Copy the state machines' counters into the metrics (counters grow by the difference).
    fn sync_metrics(&mut self) {
        use tandem_metrics::{TaskKind as K, TaskResult as R};
        let m = &self.wiring.metrics;
        m.set_epoch(self.settings.epoch.0);
        let not_ready = if self.failure.is_some() {
            Some(tandem_metrics::NotReadyReason::EpochFailed)
        } else {
            match &self.role {
                Role::Leader(l) => l.not_ready_reason(),
                Role::Follower(f) => {
                    (!f.is_linked()).then_some(tandem_metrics::NotReadyReason::Joining)
                }
            }
        };
        m.set_not_ready(not_ready);
        match &mut self.role {
            Role::Leader(l) => {
                let stats = l.stats().clone();
                m.steps_sealed().set_total(stats.steps_sealed);
                m.frame_limit_refusals()
                    .set_total(stats.frame_limit_refusals);
                m.stale_epoch_rejected()
                    .set_total(stats.stale_epoch_rejected + self.engine_stale_rejected);
                m.set_peers_joined(stats.handshakes_admitted);
                m.evictions().set_total(l.evictions());
                let c = l.task_counts();
                m.lookup_blocks(true).set_total(c.lookup_blocks[0]);
                m.lookup_blocks(false).set_total(c.lookup_blocks[1]);
                for (i, reason) in tandem_metrics::RefusalReason::ALL.into_iter().enumerate() {
                    m.stores_refused(reason).set_total(c.stores_refused[i]);
                }
                for (i, kind) in [K::Store, K::Load].into_iter().enumerate() {
                    m.tasks_started(kind).set_total(c.started[i]);
                    for (j, result) in [R::Ok, R::Failed, R::Aborted].into_iter().enumerate() {
                        m.tasks_finished(kind, result).set_total(c.finished[i][j]);
                    }
                }
                for d in l.take_latencies() {
                    m.observe_frame_latency(d);
                }
            }
            Role::Follower(f) => {
                let (stats, frames_read) = f.stats();
                m.steps_sealed().set_total(stats.frames_received);
                m.stale_epoch_rejected()
                    .set_total(stats.stale_epoch_rejected + self.engine_stale_rejected);
                m.wait_timeouts().set_total(stats.waits_timed_out);
                m.engine_frames_read().set_total(frames_read);
            }
        }
    }

    fn tick(&mut self) {
        let now = self.clock.now_ms();
        let failed = match &mut self.role {
            Role::Leader(l) => l.tick(now, &self.store),
            Role::Follower(f) => f.tick(now),
        };
        if let Some(reason) = failed {
            self.fail(reason);
        }
    }
}

impl Actor for ProtocolActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Without a completion log there is no manifest exchange: a new epoch starts empty.
        let wipe = self.wiring.log.is_none();
        self.store.do_send(BeginEpoch {
            epoch: self.settings.epoch,
            report_to: ctx.address().recipient(),
            wipe,
        });
        ctx.run_interval(TICK, |actor, _| actor.tick());
        ctx.run_interval(Duration::from_millis(250), |actor, _| actor.sync_metrics());
        self.check_ready(ctx);
        tracing::info!(
            rank = self.settings.rank.0,
            epoch = self.settings.epoch.0,
            "protocol actor started"
        );
    }
}

impl Handler<EngineCall> for ProtocolActor {
    type Result = ();
    /// Answer an engine request now, or keep its reply until its wait ends.
    fn handle(&mut self, msg: EngineCall, ctx: &mut Self::Context) {
        let settings = self.settings.clone();
        let welcome = |next_step| EngineReply::Welcome {
            epoch: settings.epoch,
            rank: settings.rank.0,
            world_size: settings.world_size,
            shard_bytes: settings.shard_bytes,
            next_step,
        };
        if let EngineRequest::Hello { rank } = &msg.req {
            let answer = if *rank != settings.rank.0 {
                EngineReply::Error(AgentError::BadRequest {
                    reason: format!(
                        "engine says rank {rank}, this agent is rank {}",
                        settings.rank.0
                    ),
                })
            } else {
                let next = match &self.role {
                    Role::Leader(l) => l.next_step(),
                    Role::Follower(f) => f.next_step(),
                };
                welcome(next)
            };
            if matches!(answer, EngineReply::Welcome { .. }) {
                self.engines_attached += 1;
            }
            let _ = msg.reply.send(answer);
            return;
        }
        if let Some(epoch) = request_epoch(&msg.req) {
            if epoch != settings.epoch {
                // Fenced: counted, never applied (docs/DESIGN.md invariant 4).
                self.engine_stale_rejected += 1;
                let _ = msg.reply.send(EngineReply::Error(AgentError::StaleEpoch {
                    ours: settings.epoch,
                    theirs: epoch,
                }));
                return;
            }
        }
        if let Some(reason) = &self.failure {
            let _ = msg.reply.send(EngineReply::Error(AgentError::NotReady {
                reason: format!("epoch {} failed: {reason}", settings.epoch),
            }));
            return;
        }
        let now = self.clock.now_ms();
        if let EngineRequest::Ack { epoch, step } = &msg.req {
            self.emit(AgentEvent::EngineAcked {
                epoch: *epoch,
                step: *step,
            });
        }
        // Frame 0 replies pass through the per-rank redelivery filter on their way out.
        let (tx, rx) = oneshot::channel();
        let reply = msg.reply;
        let step0 = matches!(&msg.req, EngineRequest::Frame { step, .. } | EngineRequest::EndStep { step, .. } if step.0 == 0);
        if self.wiring.acknowledged.is_empty() || !step0 {
            self.dispatch(msg.req, reply, now, ctx);
        } else {
            self.dispatch(msg.req, tx, now, ctx);
            let filter = self.wiring.acknowledged.clone();
            actix_rt::spawn(async move {
                if let Ok(answer) = rx.await {
                    let _ = reply.send(filter_redelivered(answer, &filter));
                }
            });
        }
    }
}

impl ProtocolActor {
    fn dispatch(
        &mut self,
        req: EngineRequest,
        reply: oneshot::Sender<EngineReply>,
        now: u64,
        ctx: &mut Context<Self>,
    ) {
        match &mut self.role {
            Role::Leader(l) => {
                if let EngineRequest::EndStep { .. } = &req {
                    if self.append_in_flight {
                        let _ = reply.send(EngineReply::Error(AgentError::BadRequest {
                            reason: "an end_step is already in progress".into(),
                        }));
                        return;
                    }
                }
                if let Some(job) = l.engine(req, reply, now, &self.store) {
                    self.start_append(job, ctx);
                }
            }
            Role::Follower(f) => f.engine(req, reply, now, &self.store),
        }
    }

    /// Append a step's starts and outcomes to the completion log, then seal.
    fn start_append(&mut self, job: leader::AppendJob, ctx: &mut Context<Self>) {
        use actix::{ActorFutureExt, WrapFuture};
        let Some(log) = self.wiring.log.clone() else {
            if let Role::Leader(l) = &mut self.role {
                let now = self.clock.now_ms();
                l.append_done(job, Ok(()), now, &self.store);
            }
            return;
        };
        self.append_in_flight = true;
        let epoch = self.settings.epoch;
        let started = job
            .batch
            .as_ref()
            .map(|b| b.started.clone())
            .unwrap_or_default();
        let mut finished = job.aborted.clone();
        finished.extend(
            job.batch
                .as_ref()
                .map(|b| b.outcomes.clone())
                .unwrap_or_default(),
        );
        let step = job.step;
        let metrics = self.wiring.metrics.clone();
        let fut = async move {
            let t = std::time::Instant::now();
            let r = log
                .append_step(epoch, step, &started, &finished)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string());
            metrics.observe_redis_append_latency(t.elapsed());
            r
        };
        ctx.spawn(fut.into_actor(self).map(move |result, actor, _| {
            actor.append_in_flight = false;
            let now = actor.clock.now_ms();
            if let Role::Leader(l) = &mut actor.role {
                l.append_done(job, result, now, &actor.store);
            }
        }));
    }
}

/// Every rank's manifest for `epoch`, waiting up to 10 s for ranks that have not published
/// theirs; a missing one counts as empty (its blocks are then dropped by the rebuild).
async fn fetch_manifests(
    log: &tandem_durable::RedisLog,
    epoch: Epoch,
    world_size: u32,
) -> Vec<tandem_store::rebuild::RankBlocks> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let got = log.manifests(epoch).await.unwrap_or_default();
        let complete = got.len() == world_size as usize && got.iter().all(Option::is_some);
        if complete || std::time::Instant::now() > deadline {
            return (0..world_size)
                .map(|r| {
                    let bytes = got.get(r as usize).cloned().flatten();
                    let decoded = bytes.and_then(|b| {
                        postcard::from_bytes::<tandem_store::rebuild::RankBlocks>(&b).ok()
                    });
                    if decoded.is_none() {
                        tracing::warn!(
                            rank = r,
                            "no manifest from this rank: the rebuild treats it as empty"
                        );
                    }
                    decoded.unwrap_or(tandem_store::rebuild::RankBlocks {
                        rank: Rank(r),
                        blocks: Vec::new(),
                    })
                })
                .collect();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Remove redeliveries the engine already acknowledged from a frame reply.
fn filter_redelivered(
    reply: EngineReply,
    acknowledged: &std::collections::BTreeSet<tandem_proto::ids::TaskId>,
) -> EngineReply {
    match reply {
        EngineReply::Frame(mut f) => {
            if let Some(rec) = f.reconciliation.as_mut() {
                rec.redelivered.retain(|o| !acknowledged.contains(&o.task));
            }
            EngineReply::Frame(f)
        }
        other => other,
    }
}

/// The epoch a step-scoped request names.
fn request_epoch(req: &EngineRequest) -> Option<Epoch> {
    match req {
        EngineRequest::Lookup { epoch, .. }
        | EngineRequest::Store { epoch, .. }
        | EngineRequest::Load { epoch, .. }
        | EngineRequest::EndStep { epoch, .. }
        | EngineRequest::Frame { epoch, .. }
        | EngineRequest::Ack { epoch, .. } => Some(*epoch),
        EngineRequest::Hello { .. } | EngineRequest::RegisterBuffer { .. } => None,
    }
}

impl Handler<EngineDisconnected> for ProtocolActor {
    type Result = ();
    /// The engine went away. With tasks in flight its pages and its view of them are gone, so
    /// the group restarts (the new epoch aborts those tasks); with none, it simply detached. A
    /// connection that never said hello is not an engine.
    fn handle(&mut self, msg: EngineDisconnected, _: &mut Self::Context) {
        if !msg.attached || self.engines_attached == 0 {
            tracing::info!(reason = %msg.reason, "engine connection closed");
            return;
        }
        self.engines_attached -= 1;
        let in_flight = match &self.role {
            Role::Leader(l) => l.tasks_in_flight(),
            Role::Follower(f) => f.tasks_in_flight(),
        };
        if in_flight == 0 {
            tracing::info!(reason = %msg.reason, "engine detached with no task in flight");
            return;
        }
        tracing::warn!(reason = %msg.reason, in_flight, "engine disconnected with tasks in flight");
        self.fail(format!(
            "engine of rank {} disconnected with {in_flight} tasks in flight: {}",
            self.settings.rank, msg.reason
        ));
    }
}

impl Handler<AdmitPeer> for ProtocolActor {
    type Result = Result<Rank, HandshakeError>;
    /// Admit or refuse a follower.
    fn handle(&mut self, msg: AdmitPeer, ctx: &mut Self::Context) -> Self::Result {
        let now = self.clock.now_ms();
        let admitted = match &mut self.role {
            Role::Leader(l) => l.admit(msg, now, &self.settings),
            Role::Follower(_) => {
                let reason = HandshakeError::RankOutOfRange {
                    rank: msg.hello.rank,
                    world_size: self.settings.world_size,
                };
                let _ = msg.link.send(&WireMessage::Refused {
                    reason: reason.clone(),
                });
                Err(reason)
            }
        };
        self.check_ready(ctx);
        admitted
    }
}

impl Handler<FromPeer> for ProtocolActor {
    type Result = ();
    /// A follower's report, ack or heartbeat.
    fn handle(&mut self, msg: FromPeer, _: &mut Self::Context) {
        let now = self.clock.now_ms();
        if let Role::Leader(l) = &mut self.role {
            if let Some(reason) = l.from_peer(msg, now, &self.store) {
                self.fail(reason);
            }
        }
    }
}

impl Handler<PeerLost> for ProtocolActor {
    type Result = ();
    /// A follower's connection ended: inside an epoch that is a rank failure.
    fn handle(&mut self, msg: PeerLost, _: &mut Self::Context) {
        let now = self.clock.now_ms();
        if let Role::Leader(l) = &mut self.role {
            if let Some(reason) = l.peer_lost(msg, now) {
                self.fail(reason);
            }
        }
    }
}

impl Handler<LeaderLinked> for ProtocolActor {
    type Result = ();
    /// Admitted: start talking to the leader.
    fn handle(&mut self, msg: LeaderLinked, ctx: &mut Self::Context) {
        let now = self.clock.now_ms();
        if let Role::Follower(f) = &mut self.role {
            f.linked(msg.link, now);
        }
        self.check_ready(ctx);
    }
}

impl Handler<FromLeader> for ProtocolActor {
    type Result = ();
    /// A frame (or another message) from the leader.
    fn handle(&mut self, msg: FromLeader, _: &mut Self::Context) {
        if let Role::Follower(f) = &mut self.role {
            if let Some(reason) = f.from_leader(msg.msg, &self.store) {
                self.fail(reason);
            }
        }
    }
}

impl Handler<LeaderLost> for ProtocolActor {
    type Result = ();
    /// The leader's connection ended: inside an epoch that is a rank failure.
    fn handle(&mut self, msg: LeaderLost, _: &mut Self::Context) {
        self.fail(format!("connection to the leader lost: {}", msg.reason));
    }
}

impl Handler<ShardDone> for ProtocolActor {
    type Result = ();
    /// This rank's shard of a task is done.
    fn handle(&mut self, msg: ShardDone, _: &mut Self::Context) {
        match &mut self.role {
            Role::Leader(l) => {
                if let Some(reason) = l.own_shard(msg, &self.store) {
                    self.fail(reason);
                }
            }
            Role::Follower(f) => f.own_shard(msg),
        }
    }
}

impl Handler<GetStatus> for ProtocolActor {
    type Result = actix::MessageResult<GetStatus>;
    /// Status for `/status` and `/readyz`.
    fn handle(&mut self, _: GetStatus, _: &mut Self::Context) -> Self::Result {
        let mut s = match &self.role {
            Role::Leader(l) => l.status(&self.settings),
            Role::Follower(f) => f.status(&self.settings),
        };
        s.stale_epoch_rejected += self.engine_stale_rejected;
        if let Some(reason) = &self.failure {
            s.ready = false;
            s.reason = Some(format!("epoch {} failed: {reason}", self.settings.epoch));
        }
        actix::MessageResult(s)
    }
}

impl Handler<Drain> for ProtocolActor {
    type Result = actix::ResponseFuture<()>;
    /// Seal the open step (leader) before a shutdown.
    fn handle(&mut self, _: Drain, ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        let step = match &self.role {
            Role::Leader(l) if self.failure.is_none() && l.ready() && !self.append_in_flight => {
                Some(l.next_step())
            }
            _ => None,
        };
        match step {
            Some(step) => {
                let now = self.clock.now_ms();
                let req = EngineRequest::EndStep {
                    epoch: self.settings.epoch,
                    step,
                    deadline_ms: 0,
                };
                self.dispatch(req, tx, now, ctx);
            }
            None => {
                let _ = tx.send(EngineReply::Acked);
            }
        }
        Box::pin(async move {
            match rx.await {
                Ok(EngineReply::Frame(f)) => tracing::info!(
                    step = f.step.0,
                    outcomes = f.finished.len(),
                    "drained: open step sealed"
                ),
                Ok(EngineReply::Error(e)) => {
                    tracing::warn!(error = %e, "drain could not seal the open step")
                }
                _ => {}
            }
        })
    }
}

impl Handler<StopEpoch> for ProtocolActor {
    type Result = ();
    /// End this epoch's protocol.
    fn handle(&mut self, msg: StopEpoch, ctx: &mut Self::Context) {
        let err = AgentError::NotReady {
            reason: msg.reason.clone(),
        };
        self.sync_metrics();
        match &mut self.role {
            Role::Leader(l) => l.fail_waits(&err),
            Role::Follower(f) => f.fail_waits(&err),
        }
        tracing::info!(reason = %msg.reason, "protocol actor stopping");
        ctx.stop();
    }
}
