//! The leader core (rank 0): the group's one decider (docs/DESIGN.md invariants 1–6).
//!
//! Composes the sans-IO [`Leader`] (frames, quorums, the write-ahead, the window, liveness)
//! with the [`GroupIndex`] (placement, LRU, pins) and owns everything around them that used to
//! sit in the agent: the pins of lookups (per request, until its load or release) and tasks,
//! the binds of the leader engine's own pages ([`crate::binds`]), the `end_step` calls waiting for the
//! window with their deadlines, the durable-vs-volatile persist rule (an [`Append`] before any
//! frame reveals a start or an outcome), the admission of followers and which connection each
//! was admitted on, the rebuild of the index from the ranks' manifests (with its deadline), and
//! readiness. Every decision is recorded in the frame every rank applies.
//!
//! - `tasks.rs`: lookups with their pins, stores and loads started or refused against the
//!   index, and what a finished task gives back to it.
//! - `appends.rs`: the write-ahead pipeline: appends in flight, confirmed in order, and how
//!   long an `end_step` waits for one.
//! - `seal.rs`: `end_step`: the seal, the window waits and their deadlines.
//! - `window.rs`: the window-stall watch: a window full for longer than the heartbeat
//!   timeout names the follower holding it, makes the leader not ready and is counted.
//!
//! It never does IO and never reads a clock: time is the `now_ms` of each input.

mod appends;
mod seal;
mod tasks;
mod window;

use std::collections::BTreeMap;

use tandem_proto::engine::{AgentError, EngineReply, EngineRequest};
use tandem_proto::wire::handshake::{HandshakeError, Nonce};
use tandem_proto::{
    Ack, Hello, Leader, LeaderConfig, LeaderError, LeaderEvent, LeaderStats, Message, Rank,
    RankBlocks, ReportOutcome, RequestId, ShardReport, Step, TaskId, TaskKind, TaskOutcome, Tier,
    TierOp,
};

use crate::binds::PageBinds;
use crate::cadence;
use crate::config::{CoreConfig, EpochStart};
use crate::index::{GroupIndex, IndexConfig, IndexError, Pin};
use crate::output::{CallRef, ConnId, Output, Peer};
use crate::shared::{leader_refusal, Shared};
use crate::status::{NotReady, RankStatus, RoleCounters, TaskCounts};
use appends::{Appends, Flush};
use seal::Early;
use window::WindowWatch;

/// A pin held by the core. Cloning it duplicates the token, which only a copy of the whole
/// core (index included) does; outside this crate a [`Pin`] stays move-only.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Held(Pin);

impl Clone for Held {
    fn clone(&self) -> Held {
        Held(self.0.duplicate())
    }
}

/// The pins a started task holds until its outcome.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TaskPins {
    kind: TaskKind,
    pins: Vec<Held>,
}

/// What one request's lookup holds: its answer and its pins, until the request's load, its
/// release, or the end of the epoch (an answer with no pin lasts only for its step).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LookupHold {
    /// The step of the lookup that made it.
    step: Step,
    /// The answer given (the blocks asked, the prefix matched).
    result: tandem_proto::LookupResult,
    /// One pin per matched block.
    pins: Vec<Held>,
}

/// An `end_step` waiting for the window to open, until its deadline.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EndWait {
    call: CallRef,
    step: Step,
    deadline_ms: u64,
}

/// Where the rebuild of the group index from the ranks' manifests stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Rebuild {
    /// Not needed (no completion log), or done: the index serves.
    Done,
    /// Waiting for every follower to join.
    Waiting,
    /// [`Output::FetchManifests`] issued; incomplete manifests are read again until
    /// `until_ms`, then the missing ones count as empty.
    Fetching { until_ms: u64 },
    /// Read again at `at_ms`.
    Retry { at_ms: u64, until_ms: u64 },
}

/// The leader core. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaderCore {
    leader: Leader,
    index: GroupIndex,
    /// The connection each admitted follower was admitted on.
    conns: BTreeMap<Rank, ConnId>,
    /// Each request's lookup: its answer and pins, waiting for the request's load or release.
    lookups: BTreeMap<RequestId, LookupHold>,
    tasks: BTreeMap<TaskId, TaskPins>,
    /// Tasks started without page ids, waiting for the leader engine's pages.
    binds: PageBinds,
    end_waits: Vec<EndWait>,
    /// The write-ahead appends in flight and the `end_step` waiting for one.
    appends: Appends,
    /// What this rank's store was handed before the open step's seal.
    early: Early,
    /// The previous epoch's in-flight tasks, aborted; appended with the first record.
    aborted_pending: Vec<TaskOutcome>,
    /// Why the completion log refused the last append, while it does.
    log_error: Option<String>,
    rebuild: Rebuild,
    counts: TaskCounts,
    evictions: u64,
    window: WindowWatch,
}

/// Why a core could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// The leader's configuration was refused.
    #[error("invalid leader configuration: {0}")]
    Leader(#[from] LeaderError),
    /// The group index's configuration was refused.
    #[error("invalid group index: {0}")]
    Index(#[from] IndexError),
}

impl LeaderCore {
    /// The leader of `config.epoch` at `now_ms`, with frame 0 settling `start`.
    ///
    /// Errors: [`CoreError::Leader`] (a world size or window of 0, a reconciliation too large
    /// for one frame), [`CoreError::Index`] (a world size of 0).
    pub(crate) fn new(
        config: &CoreConfig,
        start: &mut EpochStart,
        now_ms: u64,
    ) -> Result<LeaderCore, CoreError> {
        let index = GroupIndex::new(IndexConfig {
            world_size: config.world_size,
            host_capacity_blocks: config.host_capacity_blocks,
            disk_capacity_blocks: config.disk_capacity_blocks,
        })?;
        let leader = Leader::new(
            LeaderConfig {
                epoch: config.epoch,
                world_size: config.world_size,
                window_steps: config.window_steps,
                retention_steps: config.retention_steps,
                heartbeat_timeout_ms: config.heartbeat_timeout_ms,
                start_ms: now_ms,
                max_frame_bytes: config.max_frame_bytes,
            },
            start.reconciliation.take(),
        )?;
        let mut leader = leader;
        leader.set_persist_limit(config.max_appends_in_flight.max(1) as usize);
        Ok(LeaderCore {
            leader,
            index,
            conns: BTreeMap::new(),
            lookups: BTreeMap::new(),
            tasks: BTreeMap::new(),
            binds: PageBinds::new(config.bind_timeout_ms),
            end_waits: Vec::new(),
            appends: Appends::default(),
            early: Early::default(),
            aborted_pending: std::mem::take(&mut start.aborted),
            log_error: None,
            rebuild: if config.durable {
                Rebuild::Waiting
            } else {
                Rebuild::Done
            },
            counts: TaskCounts::default(),
            evictions: 0,
            window: WindowWatch::default(),
        })
    }

    /// The sans-IO leader (read only).
    pub fn leader(&self) -> &Leader {
        &self.leader
    }

    /// The group index (read only).
    pub fn index(&self) -> &GroupIndex {
        &self.index
    }

    /// Ready for engine requests: every follower joined and the index serves.
    pub fn ready(&self) -> bool {
        self.leader.all_joined() && self.rebuild == Rebuild::Done
    }

    /// The next step the leader seals.
    pub fn next_step(&self) -> Step {
        self.leader.open_step()
    }

    /// Tasks started (or refused) without a durable outcome yet.
    pub fn tasks_in_flight(&self) -> usize {
        self.leader.in_flight().len()
    }

    /// Whether an `end_step` waits for an append.
    pub(crate) fn appending(&self) -> bool {
        self.appends.waiting()
    }

    /// Write-ahead appends handed to the driver and not answered yet.
    pub fn appends_in_flight(&self) -> usize {
        self.appends.out()
    }

    /// A drain: seal the open step once every start and outcome decided so far is durable
    /// (the append of what is pending, and every append in flight, answered), answering
    /// `call` with the frame.
    pub(crate) fn drain(&mut self, sh: &mut Shared, call: CallRef, now_ms: u64) {
        let step = self.leader.open_step();
        self.end_step(sh, call, (step, now_ms), Flush::All, now_ms);
    }

    /// Admit a follower that answered `nonce` with `hello` on connection `conn` (answering
    /// `Welcome`), or refuse it (answering `Refused`, then closing the connection).
    pub(crate) fn admit(
        &mut self,
        sh: &mut Shared,
        conn: ConnId,
        nonce: &Nonce,
        hello: &Hello,
        now_ms: u64,
    ) -> Result<Rank, HandshakeError> {
        match self
            .leader
            .admit(&sh.config.membership, nonce, hello, now_ms)
        {
            Ok(welcome) => {
                let rank = hello.rank;
                sh.send(Peer::Followers(vec![conn]), welcome);
                self.conns.insert(rank, conn);
                tracing::info!(
                    rank = rank.0,
                    joined = self.leader.joined().len(),
                    "follower admitted"
                );
                self.maybe_rebuild(sh, now_ms);
                Ok(rank)
            }
            Err(reason) => {
                tracing::warn!(rank = hello.rank.0, %reason, "follower refused");
                sh.send(
                    Peer::Followers(vec![conn]),
                    Message::Refused {
                        reason: reason.clone(),
                    },
                );
                sh.push(Output::Close { conn });
                Err(reason)
            }
        }
    }

    /// Once every follower joined (with a completion log): read every rank's manifest.
    fn maybe_rebuild(&mut self, sh: &mut Shared, now_ms: u64) {
        if self.rebuild == Rebuild::Waiting && self.leader.all_joined() {
            self.rebuild = Rebuild::Fetching {
                until_ms: now_ms.saturating_add(cadence::MANIFEST_WAIT_MS),
            };
            sh.push(Output::FetchManifests { epoch: sh.epoch() });
        }
    }

    /// The ranks' manifests of this epoch, as read at `now_ms` (`None`: not published yet;
    /// an empty list: the read failed). Until every rank's is there, they are read again, up
    /// to [`cadence::MANIFEST_WAIT_MS`] after the first read; then a missing or undecodable
    /// one counts as empty, and the rebuild drops its blocks. Returns a failure reason when
    /// the index cannot be rebuilt.
    pub(crate) fn manifests(
        &mut self,
        sh: &mut Shared,
        got: &[Option<Vec<u8>>],
        now_ms: u64,
    ) -> Option<String> {
        let Rebuild::Fetching { until_ms } = self.rebuild else {
            return None;
        };
        let world = sh.config.world_size;
        let complete = got.len() == world as usize && got.iter().all(Option::is_some);
        if !complete && now_ms <= until_ms {
            self.rebuild = Rebuild::Retry {
                at_ms: now_ms.saturating_add(cadence::MANIFEST_READ_RETRY_MS),
                until_ms,
            };
            return None;
        }
        let ranks: Vec<RankBlocks> = (0..world)
            .map(|r| {
                let decoded = got
                    .get(r as usize)
                    .and_then(Option::as_deref)
                    .and_then(RankBlocks::decode)
                    .filter(|b| b.rank == Rank(r));
                decoded.unwrap_or_else(|| {
                    tracing::warn!(
                        rank = r,
                        "no manifest from this rank: the rebuild treats it as empty"
                    );
                    RankBlocks {
                        rank: Rank(r),
                        blocks: Vec::new(),
                    }
                })
            })
            .collect();
        match GroupIndex::rebuild(self.index.config(), &ranks) {
            Ok(r) => {
                tracing::info!(
                    kept = r.kept,
                    dropped = r.dropped.len(),
                    "group index rebuilt from the ranks' manifests"
                );
                self.index = r.index;
                for op in r.moves {
                    self.record(op);
                }
                self.rebuild = Rebuild::Done;
                None
            }
            Err(e) => Some(format!("cannot rebuild the group index: {e}")),
        }
    }

    /// A message on follower connection `conn`, claimed by `rank`; messages of a connection
    /// that is not the rank's admitted one are ignored.
    pub(crate) fn peer_message(
        &mut self,
        sh: &mut Shared,
        conn: ConnId,
        rank: Rank,
        msg: &Message,
        now_ms: u64,
    ) {
        if self.conns.get(&rank) != Some(&conn) {
            return;
        }
        match self.leader.handle_message(rank, msg, now_ms) {
            Ok(Some(ReportOutcome::Finished(outcome))) => self.finished(&outcome),
            Ok(_) => {}
            Err(LeaderError::StaleEpoch { ours, theirs }) => {
                tracing::debug!(rank = rank.0, %ours, %theirs, kind = msg.kind(), "stale-epoch message rejected");
            }
            Err(e) => {
                tracing::warn!(rank = rank.0, error = %e, kind = msg.kind(), "follower message rejected")
            }
        }
        if matches!(msg, Message::Ack(_)) {
            self.retry_end_waits(sh, now_ms);
            self.watch_window(now_ms);
        }
    }

    /// Look at the window after anything that can fill or open it (a seal, an
    /// acknowledgement, a timer).
    fn watch_window(&mut self, now_ms: u64) {
        let grace = self.leader.config().heartbeat_timeout_ms;
        self.window.observe(&self.leader, grace, now_ms);
    }

    /// Follower connection `conn` of `rank` ended: inside an epoch that is a rank failure
    /// (the reason returned), unless it was not the rank's admitted connection.
    pub(crate) fn peer_lost(
        &mut self,
        conn: ConnId,
        rank: Rank,
        reason: &str,
        now_ms: u64,
    ) -> Option<String> {
        if self.conns.get(&rank) != Some(&conn) {
            return None;
        }
        self.conns.remove(&rank);
        self.leader.handle_disconnect(rank, now_ms);
        Some(format!("rank {rank} connection lost: {reason}"))
    }

    /// This rank's own shard of `task` is done.
    pub(crate) fn shard_done(&mut self, task: TaskId, result: Result<(), String>) {
        let report = ShardReport {
            epoch: self.leader.epoch(),
            task,
            rank: Rank(0),
            result,
        };
        match self.leader.handle_report(&report) {
            Ok(ReportOutcome::Finished(outcome)) => self.finished(&outcome),
            Ok(_) => {}
            Err(e) => tracing::warn!(%task, error = %e, "own shard report rejected"),
        }
    }

    /// An engine request on the leader (already fenced by epoch).
    /// Whether engine requests are served (not refused `NotReady`): every follower joined and
    /// the group index is rebuilt.
    pub(crate) fn serves_engine(&self) -> bool {
        self.leader.all_joined() && self.rebuild == Rebuild::Done
    }

    pub(crate) fn engine(
        &mut self,
        sh: &mut Shared,
        call: CallRef,
        req: EngineRequest,
        now_ms: u64,
    ) {
        let epoch = self.leader.epoch();
        if !self.leader.all_joined() {
            let missing: Vec<u32> = (1..sh.config.world_size)
                .filter(|r| !self.leader.joined().contains(&Rank(*r)))
                .collect();
            let reason = format!("waiting for ranks {missing:?} to join epoch {epoch}");
            return sh.refuse(call, AgentError::NotReady { reason });
        }
        if self.rebuild != Rebuild::Done {
            let reason =
                format!("rebuilding the group index of epoch {epoch} from the ranks' manifests");
            return sh.refuse(call, AgentError::NotReady { reason });
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
                .and_then(|()| tasks::check_lists(&block_hashes, &page_ids))
                .and_then(|()| self.store(sh, request, block_hashes, page_ids)),
            EngineRequest::Load {
                step,
                request,
                block_hashes,
                page_ids,
                ..
            } => self
                .check_step(step)
                .and_then(|()| tasks::check_lists(&block_hashes, &page_ids))
                .and_then(|()| self.load(sh, request, block_hashes, page_ids, None)),
            EngineRequest::LoadLayerwise {
                step,
                request,
                block_hashes,
                page_ids,
                layer_timeout_ms,
                ..
            } => {
                let plan = (sh.config.layers_per_rank, layer_timeout_ms);
                let timeout_set = if layer_timeout_ms == 0 {
                    Err(AgentError::BadRequest {
                        reason: "layer_timeout_ms must be at least 1".into(),
                    })
                } else {
                    Ok(())
                };
                timeout_set
                    .and_then(|()| self.check_step(step))
                    .and_then(|()| tasks::check_lists(&block_hashes, &page_ids))
                    .and_then(|()| self.load(sh, request, block_hashes, page_ids, Some(plan)))
            }
            EngineRequest::EndStep {
                step, deadline_ms, ..
            } => {
                if self.appends.waiting() {
                    Err(AgentError::BadRequest {
                        reason: "an end_step is already in progress".into(),
                    })
                } else {
                    match self.check_step(step) {
                        Ok(()) => {
                            let deadline = now_ms.saturating_add(deadline_ms);
                            return self.end_step(sh, call, (step, deadline), Flush::Step, now_ms);
                        }
                        Err(e) => Err(e),
                    }
                }
            }
            EngineRequest::Frame { step, .. } => match self.leader.frame(step) {
                Ok(Some(f)) => Ok(EngineReply::Frame(Box::new(f.clone()))),
                Ok(None) => Err(AgentError::LeaderBehind {
                    rank: 0,
                    epoch,
                    wanted: step,
                    sealed: self.leader.sealed_step(),
                }),
                Err(e) => Err(leader_refusal(e, epoch)),
            },
            EngineRequest::Bind { task, page_ids, .. } => self.bind(sh, task, page_ids),
            EngineRequest::Release { request, .. } => Ok(EngineReply::Released {
                blocks: self.release_lookup(request) as u32,
            }),
            EngineRequest::Ack { step, .. } => {
                let ack = Ack {
                    epoch,
                    rank: Rank(0),
                    step,
                };
                self.leader
                    .handle_ack(&ack)
                    .map(|()| EngineReply::Acked)
                    .map_err(|e| leader_refusal(e, epoch))
            }
            EngineRequest::Hello { .. }
            | EngineRequest::HelloVersioned { .. }
            | EngineRequest::RegisterBuffer { .. }
            | EngineRequest::RegisterDevice { .. }
            | EngineRequest::WaitLayer { .. }
            | EngineRequest::FrameRing => Err(AgentError::BadRequest {
                reason: "routed to the wrong actor".into(),
            }),
        };
        sh.reply(call, answer.unwrap_or_else(EngineReply::Error));
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

    /// Record a tier operation in the open step, counting evictions.
    fn record(&mut self, op: TierOp) {
        if matches!(op, TierOp::Evict(_)) {
            self.evictions += 1;
        }
        self.leader.record_tier_op(op);
    }

    /// When [`Self::timeout`] must next run (ms): a window wait's deadline, a manifest read
    /// again, a bind's deadline, a follower's heartbeat deadline (once every follower joined).
    pub(crate) fn poll_timeout(&self) -> Option<u64> {
        let waits = self
            .end_waits
            .iter()
            .map(|w| w.deadline_ms)
            .chain(self.appends.poll_timeout());
        let rebuild = match self.rebuild {
            Rebuild::Retry { at_ms, .. } => Some(at_ms),
            // A group of one rank has no follower whose join starts the rebuild: at once.
            Rebuild::Waiting if self.leader.all_joined() => Some(0),
            _ => None,
        };
        let liveness = self
            .leader
            .all_joined()
            .then(|| self.leader.poll_timeout())
            .flatten();
        let stall = self
            .window
            .poll_timeout(self.leader.config().heartbeat_timeout_ms);
        waits
            .chain(rebuild)
            .chain(liveness)
            .chain(self.binds.poll_timeout())
            .chain(stall)
            .min()
    }

    /// Timers at `now_ms`: window waits past their deadline are answered `WindowFull`, a
    /// window full past the grace becomes a stall, a manifest read is made again, silent
    /// followers fail the epoch (the reason returned).
    pub(crate) fn timeout(&mut self, sh: &mut Shared, now_ms: u64) -> Option<String> {
        let (expired, keep): (Vec<EndWait>, Vec<EndWait>) = std::mem::take(&mut self.end_waits)
            .into_iter()
            .partition(|w| now_ms >= w.deadline_ms);
        self.end_waits = keep;
        self.append_timeout(sh, now_ms);
        for w in expired {
            let err = AgentError::WindowFull {
                step: w.step,
                rank: self.leader.slowest_rank().map_or(0, |r| r.0),
                slowest_ack: self.leader.slowest_ack(),
                window: self.leader.config().window_steps,
            };
            sh.refuse(w.call, err);
        }
        // No bind by the deadline: the leader's own shard fails (and with it the task).
        for (task, reason) in self.binds.expire(0, now_ms) {
            tracing::warn!(%task, %reason, "shard failed: no bind");
            self.shard_done(task, Err(reason));
        }
        self.watch_window(now_ms);
        self.maybe_rebuild(sh, now_ms);
        if let Rebuild::Retry { at_ms, until_ms } = self.rebuild {
            if now_ms >= at_ms {
                self.rebuild = Rebuild::Fetching { until_ms };
                sh.push(Output::FetchManifests { epoch: sh.epoch() });
            }
        }
        // Silence is judged only once every follower has joined (each counts as heard from
        // at its admission).
        if !self.leader.all_joined() {
            return None;
        }
        if self.leader.poll_timeout().is_some_and(|t| now_ms >= t) {
            self.leader.handle_timeout(now_ms);
        }
        self.take_failure()
    }

    /// The first failure among the leader's events, if any.
    pub(crate) fn take_failure(&mut self) -> Option<String> {
        let mut failure = None;
        while let Some(ev) = self.leader.poll_event() {
            let reason = match ev {
                LeaderEvent::RankSilent {
                    rank,
                    last_seen_ms,
                    now_ms,
                } => format!(
                    "rank {rank} silent for {} ms",
                    now_ms.saturating_sub(last_seen_ms)
                ),
                LeaderEvent::RankLost { rank, .. } => format!("rank {rank} lost"),
            };
            failure.get_or_insert(reason);
        }
        failure
    }

    /// Answer every waiting engine call with `err` (the epoch failed or stops).
    pub(crate) fn fail_waits(&mut self, sh: &mut Shared, err: &AgentError) {
        for w in self.end_waits.drain(..) {
            sh.refuse(w.call, err.clone());
        }
        if let Some(call) = self.appends.take_call() {
            sh.refuse(call, err.clone());
        }
    }

    /// Why this leader is not ready; `None` when ready.
    pub(crate) fn not_ready(&self) -> Option<NotReady> {
        if self.log_error.is_some() {
            Some(NotReady::CompletionLog)
        } else if !self.leader.all_joined() {
            Some(NotReady::Joining)
        } else if self.rebuild != Rebuild::Done {
            Some(NotReady::RebuildingIndex)
        } else if self.window.stall().is_some() {
            Some(NotReady::WindowStalled)
        } else {
            None
        }
    }

    /// Counters of the sans-IO leader.
    pub fn stats(&self) -> &LeaderStats {
        self.leader.stats()
    }

    pub(crate) fn counters(&self) -> RoleCounters {
        let stats = self.leader.stats();
        RoleCounters::Leader {
            frame_limit_refusals: stats.frame_limit_refusals,
            peers_joined: stats.handshakes_admitted,
            evictions: self.evictions,
            tasks: self.counts,
            window_stalls: self.window.stalls(),
            window_stalled_rank: self.window.stall().map(|s| s.rank.0),
        }
    }

    /// What a recovery of this epoch would read from the completion stream, as this core
    /// knows it: tasks without a durable outcome, and outcomes not revealed yet (durable, or
    /// the reconciliation's aborts waiting for their append). For a stream that was lost.
    pub(crate) fn history(&self) -> (Vec<tandem_proto::InFlightTask>, Vec<TaskOutcome>) {
        let mut unrevealed = self.aborted_pending.clone();
        unrevealed.extend(self.appends.aborted_out().cloned());
        unrevealed.extend_from_slice(self.leader.durable_unrevealed());
        (self.leader.in_flight(), unrevealed)
    }

    /// Status for `/status` and `/readyz`.
    pub(crate) fn status(&self, config: &CoreConfig) -> RankStatus {
        let joined: Vec<u32> = self.leader.joined().iter().map(|r| r.0).collect();
        let stall = self.window.stall();
        let ready = self.ready() && self.log_error.is_none() && stall.is_none();
        let stats = self.leader.stats();
        RankStatus {
            group: config.membership.group_id.0.clone(),
            rank: config.rank.0,
            role: "leader",
            epoch: config.epoch.0,
            ready,
            reason: match &self.log_error {
                Some(e) => Some(format!("completion log unavailable: {e}")),
                None if self.rebuild != Rebuild::Done && self.leader.all_joined() => {
                    Some("rebuilding the group index from the ranks' manifests".into())
                }
                None if self.ready() && stall.is_some() => {
                    stall.map(|s| s.reason(self.leader.config().window_steps))
                }
                None => (!ready).then(|| {
                    format!(
                        "waiting for followers: joined {joined:?} of {}",
                        config.world_size - 1
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
            index_blocks: self.index.occupancy(Tier::Host) + self.index.occupancy(Tier::Disk),
        }
    }
}
