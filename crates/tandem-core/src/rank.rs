//! One rank's core for one epoch: the leader's or a follower's, behind the rules every rank
//! applies to its engine's requests (docs/DESIGN.md invariants 4 to 6).
//!
//! Owns [`RankCore`]: the engine's `hello`, the fencing of requests of another epoch (refused
//! and counted, never applied), the failure of the epoch (once, with its reason; every waiting
//! call answered, every later one refused), readiness (told to the runtime once), the engines
//! attached and what their disconnect means (with tasks in flight the group must restart), the
//! engine protocol version checked at hello, the size of the engine's registered pool (what
//! binds are checked against), the layerwise loads of this rank (`crate::layers`: the
//! leader's plans from the frames, `wait_layer`, the per-layer deadline), readiness while the
//! completion log does not answer this rank and the failure of an epoch whose completion
//! stream is gone, and the drain before a shutdown. Inputs are `handle_*` calls carrying the
//! driver's `now_ms`;
//! outputs come from [`RankCore::poll_output`] in order, and [`RankCore::poll_timeout`] is the
//! one deadline the driver arms. It never does IO, reads a clock or draws randomness, so the
//! same inputs always give the same outputs.

use tandem_proto::engine::{
    version_text, AgentError, EngineReply, EngineRequest, ENGINE_PROTOCOL_VERSION,
    UNVERSIONED_ENGINE_PROTOCOL,
};
use tandem_proto::wire::handshake::{HandshakeError, Nonce};
use tandem_proto::{Epoch, Frame, Hello, Message, Rank, Step, TaskId};

use crate::config::{CoreConfig, EpochStart};
use crate::follower::FollowerCore;
use crate::leader::{CoreError, LeaderCore};
use crate::output::{CallRef, ConnId, Event, Output, Peer, StoreCommand};
use crate::shared::Shared;
use crate::status::{CoreCounters, LogHealth, NotReady, RankStatus};

/// The role this rank plays in the epoch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Rank 0.
    Leader(Box<LeaderCore>),
    /// Ranks 1.. .
    Follower(Box<FollowerCore>),
}

/// One rank's core for one epoch. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RankCore {
    sh: Shared,
    role: Role,
    /// Why this epoch can no longer make progress (a lost or silent rank, a refused frame, an
    /// engine gone with tasks in flight).
    failure: Option<String>,
    /// Why this rank's own calls of the completion log fail ([`LogHealth::Unavailable`]):
    /// not ready while set.
    log_error: Option<String>,
    ready_sent: bool,
    /// Engine connections that said hello in this epoch and are still open.
    engines_attached: u32,
    /// Engine requests of another epoch, refused.
    engine_stale_rejected: u64,
}

impl RankCore {
    /// The core of `config.rank` in `config.epoch` at `now_ms`; `start` is what the previous
    /// epochs left (the leader's reconciliation and aborts, this rank's acknowledged
    /// redeliveries). Its first output starts the store's epoch.
    ///
    /// Errors: [`CoreError`] for a configuration the leader or the index refuses.
    pub fn new(
        config: CoreConfig,
        mut start: EpochStart,
        now_ms: u64,
    ) -> Result<RankCore, CoreError> {
        let role = if config.is_leader() {
            Role::Leader(Box::new(LeaderCore::new(&config, &mut start, now_ms)?))
        } else {
            Role::Follower(Box::new(FollowerCore::new(&config)))
        };
        let mut sh = Shared::new(config, start.acknowledged);
        sh.store(StoreCommand::BeginEpoch {
            epoch: sh.epoch(),
            wipe: !sh.config.durable,
        });
        let mut core = RankCore {
            sh,
            role,
            failure: None,
            log_error: None,
            ready_sent: false,
            engines_attached: 0,
            engine_stale_rejected: 0,
        };
        core.check_ready();
        Ok(core)
    }

    /// The settings.
    pub fn config(&self) -> &CoreConfig {
        &self.sh.config
    }

    /// The role, read only (for tests, the model checker and the simulator).
    pub fn role(&self) -> &Role {
        &self.role
    }

    /// Why the epoch failed, once it did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The next thing to do, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.sh.poll()
    }

    /// When [`Self::handle_timeout`] must next be called (ms), if ever: the earliest of the
    /// waits' deadlines, the next heartbeat, the next manifest read, a follower's heartbeat
    /// deadline.
    pub fn poll_timeout(&self) -> Option<u64> {
        let role = match &self.role {
            Role::Leader(l) => l.poll_timeout(),
            Role::Follower(f) => f.poll_timeout(),
        };
        [role, self.sh.layers.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// The time is `now_ms`: every deadline at or before it fires (a layerwise copy that did
    /// not move within its plan's `layer_timeout_ms` fails this rank's shard).
    pub fn handle_timeout(&mut self, now_ms: u64) {
        let (answers, failed_shards) = self.sh.layers.timeout(self.sh.config.rank.0, now_ms);
        for (call, reply) in answers {
            self.sh.reply(call, reply);
        }
        for (task, reason) in failed_shards {
            tracing::warn!(%task, %reason, "layerwise shard failed: no progress");
            self.report_shard(task, Err(reason));
        }
        let failed = match &mut self.role {
            Role::Leader(l) => l.timeout(&mut self.sh, now_ms),
            Role::Follower(f) => {
                f.timeout(&mut self.sh, now_ms);
                None
            }
        };
        self.settle(failed);
    }

    /// This rank's store has copied `layers_ready` layers of layerwise load `task` (0: it began
    /// the copy) at `now_ms`: `wait_layer` calls for those layers are answered and the
    /// per-layer deadline restarts.
    pub fn handle_layers_copied(&mut self, task: TaskId, layers_ready: u32, now_ms: u64) {
        for (call, reply) in self.sh.layers.copied(task, layers_ready, now_ms) {
            self.sh.reply(call, reply);
        }
    }

    /// Engine call `call` asks `req` at `now_ms`; answered now or, for a request that waits,
    /// later (always exactly once).
    pub fn handle_engine(&mut self, call: CallRef, req: EngineRequest, now_ms: u64) {
        let epoch = self.sh.epoch();
        let hello = match &req {
            EngineRequest::Hello { rank } => Some((*rank, UNVERSIONED_ENGINE_PROTOCOL)),
            EngineRequest::HelloVersioned {
                rank,
                protocol_version,
            } => Some((*rank, *protocol_version)),
            _ => None,
        };
        if let Some((rank, version)) = hello {
            let ours = self.sh.config.rank.0;
            let answer = if version == UNVERSIONED_ENGINE_PROTOCOL {
                // The one refusal an engine of version 1 can decode.
                EngineReply::Error(AgentError::BadRequest {
                    reason: version_text(ENGINE_PROTOCOL_VERSION, version),
                })
            } else if version != ENGINE_PROTOCOL_VERSION {
                EngineReply::Error(AgentError::ProtocolVersion {
                    agent: ENGINE_PROTOCOL_VERSION,
                    engine: version,
                })
            } else if rank != ours {
                EngineReply::Error(AgentError::BadRequest {
                    reason: format!("engine says rank {rank}, this agent is rank {ours}"),
                })
            } else {
                self.engines_attached += 1;
                EngineReply::Welcome {
                    epoch,
                    rank: ours,
                    world_size: self.sh.config.world_size,
                    shard_bytes: self.sh.config.shard_bytes,
                    next_step: match &self.role {
                        Role::Leader(l) => l.next_step(),
                        Role::Follower(f) => f.resume_step(),
                    },
                }
            };
            return self.sh.reply(call, answer);
        }
        if let Some(theirs) = request_epoch(&req) {
            if theirs != epoch {
                // Fenced: counted, never applied (docs/DESIGN.md invariant 4).
                self.engine_stale_rejected += 1;
                let err = AgentError::StaleEpoch {
                    ours: epoch,
                    theirs,
                };
                return self.sh.refuse(call, err);
            }
        }
        if let Some(reason) = &self.failure {
            let reason = format!("epoch {epoch} failed: {reason}");
            return self.sh.refuse(call, AgentError::NotReady { reason });
        }
        if let EngineRequest::Ack { epoch, step } = &req {
            self.sh.emit(Event::EngineAcked {
                epoch: *epoch,
                step: *step,
            });
        }
        if let EngineRequest::WaitLayer {
            task,
            layer,
            deadline_ms,
            ..
        } = req
        {
            if let Some((call, reply)) = self.sh.layers.wait(call, task, layer, deadline_ms, now_ms)
            {
                self.sh.reply(call, reply);
            }
            return;
        }
        match &mut self.role {
            Role::Leader(l) => l.engine(&mut self.sh, call, req, now_ms),
            Role::Follower(f) => f.engine(&mut self.sh, call, req, now_ms),
        }
        self.report_layer_failures();
        self.check_ready();
    }

    /// Shards of layerwise loads this rank cannot copy as planned fail (reported like any
    /// copy failure).
    fn report_layer_failures(&mut self) {
        for (task, reason) in std::mem::take(&mut self.sh.layer_failures) {
            tracing::warn!(%task, %reason, "layerwise shard failed");
            self.report_shard(task, Err(reason));
        }
    }

    /// Report this rank's shard of `task` (a layerwise load's waits hear of a failure first).
    fn report_shard(&mut self, task: TaskId, result: Result<(), String>) {
        let (report, answers) = self.sh.layers.shard_done(task, &result);
        for (call, reply) in answers {
            self.sh.reply(call, reply);
        }
        if !report {
            return;
        }
        match &mut self.role {
            Role::Leader(l) => l.shard_done(task, result),
            Role::Follower(f) => f.shard_done(&mut self.sh, task, result),
        }
    }

    /// The engine's registered pool has `pages` pages (`None`: none registered): binds are
    /// checked against it. The driver tells every core of the rank, at its start and at every
    /// registration.
    pub fn handle_pool(&mut self, pages: Option<u64>) {
        self.sh.pool_pages = pages;
    }

    /// An engine connection closed at `now_ms`; `attached`: it had said hello. With tasks in
    /// flight the engine's pages and its view of them are gone, so the group restarts (the new
    /// epoch aborts those tasks); with none, the engine simply detached. A connection that
    /// never said hello is not an engine.
    pub fn handle_engine_disconnect(&mut self, attached: bool, reason: &str, now_ms: u64) {
        let _ = now_ms;
        if !attached || self.engines_attached == 0 {
            tracing::info!(%reason, "engine connection closed");
            return;
        }
        self.engines_attached -= 1;
        let in_flight = match &self.role {
            Role::Leader(l) => l.tasks_in_flight(),
            Role::Follower(f) => f.tasks_in_flight(),
        };
        if in_flight == 0 {
            tracing::info!(%reason, "engine detached with no task in flight");
            return;
        }
        tracing::warn!(%reason, in_flight, "engine disconnected with tasks in flight");
        let rank = self.sh.config.rank;
        self.fail(format!(
            "engine of rank {rank} disconnected with {in_flight} tasks in flight: {reason}"
        ));
    }

    /// Leader: a follower answered `nonce` with `hello` on connection `conn` at `now_ms`.
    /// Admitted: `Welcome` goes back on `conn`; refused: `Refused` (naming the differing
    /// field), then the connection closes. A follower refuses every hello.
    ///
    /// Errors: the [`HandshakeError`] the follower was refused with.
    pub fn handle_admit(
        &mut self,
        conn: ConnId,
        nonce: &Nonce,
        hello: &Hello,
        now_ms: u64,
    ) -> Result<Rank, HandshakeError> {
        let admitted = match &mut self.role {
            Role::Leader(l) => l.admit(&mut self.sh, conn, nonce, hello, now_ms),
            Role::Follower(_) => {
                let reason = HandshakeError::RankOutOfRange {
                    rank: hello.rank,
                    world_size: self.sh.config.world_size,
                };
                let msg = Message::Refused {
                    reason: reason.clone(),
                };
                self.sh.send(Peer::Followers(vec![conn]), msg);
                self.sh.push(Output::Close { conn });
                Err(reason)
            }
        };
        self.check_ready();
        admitted
    }

    /// Leader: `msg` arrived on follower connection `conn`, admitted as `rank`.
    pub fn handle_peer_message(&mut self, conn: ConnId, rank: Rank, msg: &Message, now_ms: u64) {
        if let Role::Leader(l) = &mut self.role {
            l.peer_message(&mut self.sh, conn, rank, msg, now_ms);
        }
        self.report_layer_failures();
        self.check_ready();
    }

    /// Leader: follower connection `conn` (claimed by `rank`) ended: inside an epoch that is a
    /// rank failure, unless it was not the rank's admitted connection.
    pub fn handle_peer_lost(&mut self, conn: ConnId, rank: Rank, reason: &str, now_ms: u64) {
        let failed = match &mut self.role {
            Role::Leader(l) => l.peer_lost(conn, rank, reason, now_ms),
            Role::Follower(_) => None,
        };
        if let Role::Leader(l) = &mut self.role {
            // The loss is also the leader's event; its reason is the one above.
            let _ = l.take_failure();
        }
        self.settle(failed);
    }

    /// Follower: admitted by the leader at `now_ms`.
    pub fn handle_leader_linked(&mut self, now_ms: u64) {
        if let Role::Follower(f) = &mut self.role {
            f.linked(&mut self.sh, now_ms);
        }
        self.check_ready();
    }

    /// Follower: `msg` arrived from the leader.
    pub fn handle_leader_message(&mut self, msg: Message, now_ms: u64) {
        let failed = match &mut self.role {
            Role::Follower(f) => f.leader_message(&mut self.sh, msg, now_ms),
            Role::Leader(_) => None,
        };
        self.settle(failed);
    }

    /// Follower: the connection to the leader ended (or could not be made): inside an epoch
    /// that is a rank failure.
    pub fn handle_leader_lost(&mut self, reason: &str, now_ms: u64) {
        let _ = now_ms;
        self.fail(format!("connection to the leader lost: {reason}"));
    }

    /// This rank's shard of `task` is done (`Ok`) or failed (`Err(reason)`).
    /// A layerwise load's shard that its per-layer deadline already failed is not reported
    /// again.
    pub fn handle_shard_done(&mut self, task: TaskId, result: Result<(), String>, now_ms: u64) {
        let _ = now_ms;
        self.report_shard(task, result);
    }

    /// Leader: the oldest [`Output::Append`] not answered yet is durable (`Ok`) or was refused
    /// (the log's reason). Answer every append once, in the order they were output. An
    /// `end_step` waiting for it seals now, or, for frame 0 whose aborts are not durable, is
    /// refused `NotReady`; a refused append fails every later one not answered yet (their own
    /// answers are then ignored and what they hold is appended again).
    pub fn handle_appended(&mut self, result: Result<(), String>, now_ms: u64) {
        if let Role::Leader(l) = &mut self.role {
            l.appended(&mut self.sh, result, now_ms);
        }
        self.report_layer_failures();
    }

    /// Leader: the ranks' manifests asked for by [`Output::FetchManifests`], by rank (`None`:
    /// not published yet; empty: the read failed).
    pub fn handle_manifests(&mut self, manifests: &[Option<Vec<u8>>], now_ms: u64) {
        let failed = match &mut self.role {
            Role::Leader(l) => l.manifests(&mut self.sh, manifests, now_ms),
            Role::Follower(_) => None,
        };
        self.settle(failed);
    }

    /// A shutdown: the leader seals its open step (every start and outcome made durable
    /// first) so that followers hold everything decided, and answers `call` with the frame;
    /// otherwise (a follower, a failed or unready epoch, an `end_step` under way) `call` is
    /// answered `Acked` at once.
    pub fn handle_drain(&mut self, call: CallRef, now_ms: u64) {
        let step = match &self.role {
            Role::Leader(l) if self.failure.is_none() && l.ready() && !l.appending() => {
                Some(l.next_step())
            }
            _ => None,
        };
        match (step, &mut self.role) {
            (Some(_), Role::Leader(l)) => l.drain(&mut self.sh, call, now_ms),
            _ => self.sh.reply(call, EngineReply::Acked),
        }
        self.report_layer_failures();
    }

    /// The epoch ends (a restart or a shutdown): every waiting engine call is answered
    /// `NotReady` with `reason`.
    pub fn handle_stop(&mut self, reason: &str) {
        let err = AgentError::NotReady {
            reason: reason.to_string(),
        };
        self.fail_waits(&err);
    }

    /// How the completion log answered this rank's epoch loop: while it does not, the rank
    /// is not ready (reason "completion log unavailable: ..."). A stream that is gone makes a
    /// follower not ready and fails the leader's epoch: the leader first emits
    /// [`Event::HistoryLost`] with what it knows of the lost history (its tasks in flight and
    /// unrevealed outcomes), then `Failed`.
    pub fn handle_log_health(&mut self, health: LogHealth, now_ms: u64) {
        let _ = now_ms;
        match health {
            LogHealth::Up => self.log_error = None,
            LogHealth::Unavailable(reason) => self.log_error = Some(reason),
            // The leader ends the epoch, handing on what it knows of the lost history; a
            // follower only says so (its leader's own read or append finds the loss within
            // one interval, and a follower's report could move the group before the leader
            // saved what it knows).
            LogHealth::StreamLost(reason) => match &self.role {
                Role::Leader(l) if self.failure.is_none() => {
                    let (in_flight, unrevealed) = l.history();
                    let epoch = self.sh.epoch();
                    self.sh.emit(Event::HistoryLost {
                        epoch,
                        in_flight,
                        unrevealed,
                    });
                    self.fail(format!("the completion stream is lost: {reason}"));
                }
                Role::Leader(_) => {}
                Role::Follower(_) => {
                    self.log_error = Some(format!("the completion stream is lost: {reason}"));
                }
            },
        }
    }

    /// Status for `/status` and `/readyz`.
    pub fn status(&self) -> RankStatus {
        let mut s = match &self.role {
            Role::Leader(l) => l.status(&self.sh.config),
            Role::Follower(f) => f.status(&self.sh.config),
        };
        s.stale_epoch_rejected += self.engine_stale_rejected;
        if let Some(reason) = &self.failure {
            s.ready = false;
            s.reason = Some(format!("epoch {} failed: {reason}", self.sh.epoch()));
        } else if let Some(e) = &self.log_error {
            s.ready = false;
            if !s
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("completion log unavailable"))
            {
                s.reason = Some(format!("completion log unavailable: {e}"));
            }
        }
        s
    }

    /// The counters, for the metrics.
    pub fn counters(&self) -> CoreCounters {
        let not_ready = if self.failure.is_some() {
            Some(NotReady::EpochFailed)
        } else if self.log_error.is_some() {
            Some(NotReady::CompletionLog)
        } else {
            match &self.role {
                Role::Leader(l) => l.not_ready(),
                Role::Follower(f) => f.not_ready(),
            }
        };
        let (steps_sealed, stale, role) = match &self.role {
            Role::Leader(l) => (
                l.stats().steps_sealed,
                l.stats().stale_epoch_rejected,
                l.counters(),
            ),
            Role::Follower(f) => (
                f.stats().frames_received,
                f.stats().stale_epoch_rejected,
                f.counters(),
            ),
        };
        CoreCounters {
            not_ready,
            steps_sealed,
            stale_epoch_rejected: stale + self.engine_stale_rejected,
            role,
        }
    }

    /// Shards of layerwise loads the role's copies could not plan are reported; a failure
    /// reason from the role, if any, fails the epoch; then readiness.
    fn settle(&mut self, failed: Option<String>) {
        self.report_layer_failures();
        if let Some(reason) = failed {
            self.fail(reason);
        }
        self.check_ready();
    }

    /// Tell the runtime once when this rank becomes ready in the epoch.
    fn check_ready(&mut self) {
        if self.ready_sent || self.failure.is_some() {
            return;
        }
        let ready = match &self.role {
            Role::Leader(l) => l.ready(),
            Role::Follower(f) => f.ready(),
        };
        if ready {
            self.ready_sent = true;
            let epoch = self.sh.epoch();
            self.sh.emit(Event::Ready { epoch });
        }
    }

    /// The epoch fails: once, with its first reason; every waiting call is answered, every
    /// later one refused.
    fn fail(&mut self, reason: String) {
        if self.failure.is_some() {
            return;
        }
        tracing::error!(%reason, "epoch failed: the group must restart");
        let epoch = self.sh.epoch();
        self.sh.emit(Event::Failed {
            epoch,
            reason: reason.clone(),
        });
        let err = AgentError::NotReady {
            reason: format!("epoch {epoch} failed: {reason}"),
        };
        self.fail_waits(&err);
        self.failure = Some(reason);
    }

    fn fail_waits(&mut self, err: &AgentError) {
        for call in self.sh.layers.take_waits() {
            self.sh.refuse(call, err.clone());
        }
        match &mut self.role {
            Role::Leader(l) => l.fail_waits(&mut self.sh, err),
            Role::Follower(f) => f.fail_waits(&mut self.sh, err),
        }
    }
}

/// How engine `Frame` reads are answered now ([`RankCore::frame_reads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameReads {
    /// Refused at once (`NotReady`: the epoch failed, or the leader does not serve engines
    /// yet).
    Refused,
    /// By position: the steps `readable` (oldest, latest; `None`: none yet) are answered at
    /// once with [`RankCore::readable_frame`], later ones wait for their frame or their
    /// deadline, earlier ones are `FrameExpired`.
    Served {
        /// The oldest and latest step answered at once.
        readable: Option<(Step, Step)>,
    },
}

/// The epoch a step-scoped request names.
fn request_epoch(req: &EngineRequest) -> Option<Epoch> {
    match req {
        EngineRequest::Lookup { epoch, .. }
        | EngineRequest::Store { epoch, .. }
        | EngineRequest::Load { epoch, .. }
        | EngineRequest::EndStep { epoch, .. }
        | EngineRequest::Frame { epoch, .. }
        | EngineRequest::Ack { epoch, .. }
        | EngineRequest::Bind { epoch, .. }
        | EngineRequest::Release { epoch, .. }
        | EngineRequest::LoadLayerwise { epoch, .. }
        | EngineRequest::WaitLayer { epoch, .. } => Some(*epoch),
        EngineRequest::Hello { .. }
        | EngineRequest::HelloVersioned { .. }
        | EngineRequest::RegisterBuffer { .. }
        | EngineRequest::RegisterDevice { .. }
        | EngineRequest::FrameRing => None,
    }
}

impl RankCore {
    /// How an engine `Frame` read of this epoch is answered now, for a transport that hands
    /// frames out before they are asked for (the agent's frame ring, `tandem_client::ring`).
    pub fn frame_reads(&self) -> FrameReads {
        if self.failure.is_some() {
            return FrameReads::Refused;
        }
        let (oldest, latest) = match &self.role {
            Role::Leader(l) if !l.serves_engine() => return FrameReads::Refused,
            Role::Leader(l) => (l.leader().oldest_retained_step(), l.leader().sealed_step()),
            Role::Follower(f) => (
                f.follower().oldest_retained_step(),
                f.follower().received_step(),
            ),
        };
        FrameReads::Served {
            readable: oldest.zip(latest),
        }
    }

    /// The frame an engine `Frame` read of `step` in this epoch is answered with at once, as
    /// that reply carries it (frame 0 filtered for this rank's engine); `None` when that read
    /// would wait or be refused (not sealed or received yet, expired, the epoch failed).
    pub fn readable_frame(&self, step: Step) -> Option<Frame> {
        if self.failure.is_some() {
            return None;
        }
        let mut frame = match &self.role {
            Role::Leader(l) if !l.serves_engine() => None,
            Role::Leader(l) => l.leader().frame(step).ok().flatten(),
            Role::Follower(f) => f.follower().read(step).ok().flatten(),
        }?
        .clone();
        self.sh.engine_view(&mut frame);
        Some(frame)
    }

    /// Whether the rank is ready (see [`crate::RankStatus::ready`] for what that means).
    pub fn ready(&self) -> bool {
        self.counters().not_ready.is_none()
    }
}
