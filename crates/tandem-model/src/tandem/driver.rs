//! The driver glue of the Tandem model: what the agent's actors do with each input and output
//! of the rank cores, one model action at a time. The same `RankCore`s run in the agents.
//!
//! Owns the transitions' bodies: feeding a core an input, and carrying its outputs to the
//! links, the engines and the durable store. Must never: decide what the protocol decides;
//! which outcomes an engine still needs and what a new epoch reconciles come from
//! `tandem-proto` (`undelivered_outcomes`, `reconcile`), everything else from the cores.

use std::collections::BTreeSet;

use tandem_core::{
    CallRef, ConnId, CoreConfig, EpochStart, Event, Output, Peer, RankCore, StoreCommand,
};
use tandem_proto::engine::{EngineReply, EngineRequest};
use tandem_proto::wire::handshake::{GroupSecret, Membership, PROTOCOL_VERSION};
use tandem_proto::{
    BlockHash, ConfigFingerprint, Epoch, Frame, GroupId, InFlightTask, Message, PageId, Rank,
    RankBlocks, RequestId, Step, TaskId,
};

use super::config::Variant;
use super::model::TandemModel;
use super::state::{follower_of, leader_of, TandemState};

/// The calls an engine has in flight: at most one of each kind, so fixed ids keep equal
/// states equal.
const END_STEP: CallRef = CallRef(1);
const STORE: CallRef = CallRef(2);
const FRAME: CallRef = CallRef(3);
const REREAD: CallRef = CallRef(4);
const ACK: CallRef = CallRef(5);
const LOOKUP: CallRef = CallRef(6);
const LOAD: CallRef = CallRef(7);

/// The reason a failed shard copy reports.
pub(super) const SHARD_FAILED: &str = "copy failed: corrupt shard";

/// Rank `r`'s connection to the leader.
fn conn(rank: u32) -> ConnId {
    ConnId(u64::from(rank))
}

fn membership(epoch: Epoch, world_size: u32) -> Membership {
    Membership {
        protocol_version: PROTOCOL_VERSION,
        group_id: GroupId("model".into()),
        fingerprint: ConfigFingerprint::default(),
        secret: GroupSecret::new(b"model".to_vec()),
        epoch,
        world_size,
    }
}

/// Times the model never reaches: heartbeats and their deadlines are left to the cores' own
/// tests (the model's clock moves only when a wait deadline fires).
const NEVER_MS: u64 = u64::MAX / 4;

impl TandemModel {
    fn core_config(&self, epoch: Epoch, rank: u32) -> CoreConfig {
        let world_size = self.config.world_size();
        CoreConfig {
            epoch,
            rank: Rank(rank),
            world_size,
            shard_bytes: 64,
            layers_per_rank: 1,
            window_steps: self.config.window_steps,
            retention_steps: self.config.retention_steps,
            max_frame_bytes: 16 << 20,
            heartbeat_interval_ms: NEVER_MS,
            heartbeat_timeout_ms: NEVER_MS,
            host_capacity_blocks: self.config.host_blocks,
            disk_capacity_blocks: 0,
            bind_timeout_ms: NEVER_MS,
            max_appends_in_flight: 1,
            append_wait_ms: u64::MAX,
            durable: true,
            membership: membership(epoch, world_size),
            leader_addr: "leader".into(),
        }
    }

    /// The cores of `epoch`, every follower admitted and the leader's index rebuilt from
    /// (empty) manifests: the state an epoch's engines start from. The engines' acknowledged
    /// outcomes are their durable delivery record (`acknowledged[rank]`).
    pub(super) fn cores(
        &self,
        epoch: Epoch,
        mut start: EpochStart,
        acknowledged: &[BTreeSet<TaskId>],
    ) -> Option<(RankCore, Vec<RankCore>)> {
        let dedup = self.dedup();
        let ack_of = |r: usize| {
            if dedup {
                acknowledged.get(r).cloned().unwrap_or_default()
            } else {
                BTreeSet::new()
            }
        };
        start.acknowledged = ack_of(0);
        let mut leader = RankCore::new(self.core_config(epoch, 0), start, 0).ok()?;
        let mut followers = Vec::new();
        let m = membership(epoch, self.config.world_size());
        for r in 1..=self.config.followers {
            let start = EpochStart {
                acknowledged: ack_of(r as usize),
                ..EpochStart::default()
            };
            let mut f = RankCore::new(self.core_config(epoch, r), start, 0).ok()?;
            let nonce = [r as u8; 32];
            leader
                .handle_admit(conn(r), &nonce, &m.hello(&nonce, Rank(r)), 0)
                .ok()?;
            f.handle_leader_linked(0);
            // The first heartbeat reaches the leader before anything else happens.
            while let Some(out) = f.poll_output() {
                if let Output::Send { msg, .. } = out {
                    leader.handle_peer_message(conn(r), Rank(r), &msg, 0);
                }
            }
            followers.push(f);
        }
        let empty: Vec<Option<Vec<u8>>> = (0..self.config.world_size())
            .map(|r| {
                let blocks = RankBlocks {
                    rank: Rank(r),
                    blocks: Vec::new(),
                };
                Some(blocks.encode())
            })
            .collect();
        leader.handle_manifests(&empty, 0);
        while leader.poll_output().is_some() {}
        leader.ready().then_some((leader, followers))
    }

    /// Carry out the leader core's outputs.
    pub(super) fn route_leader(&self, s: &mut TandemState) {
        while let Some(out) = s.leader.poll_output() {
            self.carry_leader(s, out);
        }
    }

    /// Carry out one output of the leader core.
    fn carry_leader(&self, s: &mut TandemState, out: Output) {
        {
            match out {
                Output::Reply { call, reply } => self.leader_reply(s, call, reply),
                Output::Send {
                    to: Peer::Followers(conns),
                    msg,
                } => {
                    for c in conns {
                        let link = usize::try_from(c.0).ok().and_then(|r| r.checked_sub(1));
                        match link.and_then(|l| s.to_follower.get_mut(l)) {
                            Some(q) => q.push_back(msg.clone()),
                            None => s.anomalies.push(format!("leader sent on connection {c}")),
                        }
                    }
                }
                Output::Store(
                    StoreCommand::CopyStores { tasks, .. } | StoreCommand::CopyLoads { tasks, .. },
                ) => {
                    if let Some(e) = s.engines.get_mut(0) {
                        for t in tasks {
                            e.shards.entry(t.task).or_insert(0);
                        }
                    }
                }
                Output::Append(a) => s.persisting = Some((a, false)),
                Output::Event(Event::Failed { reason, .. }) => {
                    s.anomalies.push(format!("leader failed: {reason}"))
                }
                _ => {}
            }
        }
    }

    fn leader_reply(&self, s: &mut TandemState, call: CallRef, reply: EngineReply) {
        match (call, reply) {
            (END_STEP, EngineReply::Frame(frame)) => {
                s.sealing = false;
                // The ghost keeps the frame as sealed; rank 0's engine gets it as its core
                // answered (frame 0 without what it already acknowledged).
                let sealed = leader_of(&s.leader)
                    .and_then(|l| l.leader().frame(frame.step).ok().flatten().cloned())
                    .unwrap_or_else(|| (*frame).clone());
                let key = (sealed.epoch, sealed.step);
                if let Some(previous) = s.sealed.insert(key, sealed.clone()) {
                    if previous != sealed {
                        s.anomalies.push(format!(
                            "two frames sealed for ({}, {})",
                            frame.epoch, frame.step
                        ));
                    }
                }
                let dedup = self.dedup();
                if let Some(engine) = s.engines.get_mut(0) {
                    engine.apply(&frame, dedup);
                }
            }
            // A refused store or load is started too: its task fails at once (a full tier of
            // pinned blocks, a load its lookup did not pin), its outcome revealed like any.
            (STORE | LOAD, EngineReply::Started { .. }) | (LOOKUP, EngineReply::Lookup(_)) => {}
            (call, reply) => {
                if call == END_STEP {
                    s.sealing = false;
                }
                s.anomalies.push(format!("leader call {call}: {reply:?}"));
            }
        }
    }

    /// Carry out follower `rank`'s core outputs.
    pub(super) fn route_follower(&self, s: &mut TandemState, rank: u32) -> Option<()> {
        loop {
            let (core, engine) = s.follower_mut(rank)?;
            let Some(out) = core.poll_output() else {
                return Some(());
            };
            match out {
                Output::Reply {
                    call: FRAME,
                    reply: EngineReply::Frame(frame),
                } => {
                    engine.wait = None;
                    if frame.step != engine.next_step {
                        s.anomalies
                            .push(format!("rank {rank}: woken with step {}", frame.step));
                        continue;
                    }
                    self.apply_at_follower(s, rank, &frame);
                }
                Output::Reply {
                    call: FRAME,
                    reply: EngineReply::Error(error),
                } => {
                    engine.wait = None;
                    engine.failed = Some(error);
                }
                Output::Reply {
                    call: ACK,
                    reply: EngineReply::Acked,
                } => {}
                Output::Reply { call, reply } => s
                    .anomalies
                    .push(format!("rank {rank} call {call}: {reply:?}")),
                Output::Send {
                    to: Peer::Leader,
                    msg,
                } => {
                    let link = usize::try_from(rank).ok()?.checked_sub(1)?;
                    s.to_leader.get_mut(link)?.push_back(msg);
                }
                Output::Store(
                    StoreCommand::CopyStores { tasks, .. } | StoreCommand::CopyLoads { tasks, .. },
                ) => {
                    for t in tasks {
                        engine.shards.entry(t.task).or_insert(0);
                    }
                }
                Output::Event(Event::Failed { reason, .. }) => {
                    s.anomalies.push(format!("rank {rank} failed: {reason}"))
                }
                _ => {}
            }
        }
    }

    /// Rank `rank`'s engine applies `frame` and, with acknowledgements on, acks the step.
    pub(super) fn apply_at_follower(&self, s: &mut TandemState, rank: u32, frame: &Frame) {
        let dedup = self.dedup();
        let acks = self.config.acks;
        let now = s.now_ms;
        let Some((core, engine)) = s.follower_mut(rank) else {
            return;
        };
        let step = engine.next_step;
        let epoch = engine.epoch;
        engine.apply(frame, dedup);
        if !acks || self.config.variant == Variant::ApplyByArrival {
            return;
        }
        // Its outputs (the ack to the leader, the copies it releases) are carried by the caller.
        core.handle_engine(ACK, EngineRequest::Ack { epoch, step }, now);
    }

    /// The leader engine starts a store of one new block in the open step.
    pub(super) fn start_store(&self, s: &mut TandemState) {
        let n = u64::from(s.stores_started);
        let req = EngineRequest::Store {
            epoch: s.epoch,
            step: s.open_step(),
            request: RequestId(n),
            block_hashes: vec![BlockHash::from(n)],
            page_ids: vec![PageId(u32::from(s.stores_started))],
        };
        s.leader.handle_engine(STORE, req, s.now_ms);
        s.stores_started += 1;
        self.route_leader(s);
    }

    /// The leader engine looks up the block of the first store and loads it in the open step:
    /// a task when the lookup pinned it (the store finished and the block is held), refused
    /// otherwise.
    pub(super) fn lookup_load(&self, s: &mut TandemState) -> Option<()> {
        let block = vec![BlockHash::from(0u64)];
        let (epoch, step, now) = (s.epoch, s.open_step(), s.now_ms);
        let request = RequestId(100 + u64::from(s.loads_started));
        let lookup = EngineRequest::Lookup {
            epoch,
            step,
            request,
            block_hashes: block.clone(),
        };
        s.leader.handle_engine(LOOKUP, lookup, now);
        self.route_leader(s);
        let load = EngineRequest::Load {
            epoch,
            step,
            request,
            block_hashes: block,
            page_ids: vec![PageId(100)],
        };
        s.leader.handle_engine(LOAD, load, now);
        s.loads_started += 1;
        self.route_leader(s);
        Some(())
    }

    /// The log refuses the append: the core is told, nothing became durable; it seals on
    /// revealing nothing new and appends the batch again later.
    pub(super) fn refuse_append(&self, s: &mut TandemState) -> Option<()> {
        match s.persisting.take()? {
            (_, false) => {
                s.appends_failed += 1;
                let told = if self.config.variant == Variant::ConfirmRefusedAppend {
                    Ok(())
                } else {
                    Err("append refused".into())
                };
                s.leader.handle_appended(told, s.now_ms);
                self.route_leader(s);
                Some(())
            }
            pending => {
                s.persisting = Some(pending);
                None
            }
        }
    }

    /// The leader engine ends the open step (the core appends first when it must). An
    /// `end_step` the full window would only hold, with nothing to append, is not a move: the
    /// state would differ by a pending call alone, and the engine can ask again once an
    /// acknowledgement opened the window (this keeps the state space small).
    pub(super) fn seal(&self, s: &mut TandemState) -> Option<()> {
        let req = EngineRequest::EndStep {
            epoch: s.epoch,
            step: s.open_step(),
            deadline_ms: NEVER_MS,
        };
        let mut probe = s.leader.clone();
        probe.handle_engine(END_STEP, req, s.now_ms);
        let mut outs = std::iter::from_fn(|| probe.poll_output()).collect::<Vec<_>>();
        let moves = outs
            .iter()
            .any(|o| matches!(o, Output::Append(_) | Output::Reply { call: END_STEP, .. }));
        if !moves {
            return None;
        }
        // The probe is the leader now; its outputs are carried as the core gave them.
        s.sealing = true;
        s.leader = probe;
        for out in outs.drain(..) {
            self.carry_leader(s, out);
        }
        self.route_leader(s);
        Some(())
    }

    /// The append lands in the durable stream (not yet confirmed to the core).
    pub(super) fn persist(s: &mut TandemState) -> Option<()> {
        let (append, durable) = s.persisting.as_mut()?;
        if *durable {
            return None;
        }
        *durable = true;
        s.durable
            .started
            .extend(append.started.iter().map(|t| InFlightTask {
                task: t.start.task,
                kind: t.kind,
                request: t.start.request,
            }));
        s.durable.outcomes.extend(append.finished.iter().cloned());
        Some(())
    }

    /// The driver confirms the append to the core: the step is sealed.
    pub(super) fn persist_confirm(&self, s: &mut TandemState) -> Option<()> {
        match s.persisting.take()? {
            (_, true) => {
                s.leader.handle_appended(Ok(()), s.now_ms);
                self.route_leader(s);
                Some(())
            }
            pending => {
                s.persisting = Some(pending);
                None
            }
        }
    }

    /// A message of an older epoch must be refused (its counter moves); a message of this
    /// epoch must be taken (no rejection counter moves).
    fn expect_stale(s: &mut TandemState, at: &str, stale: bool, before: u64, after: u64) {
        match (stale, after > before) {
            (false, false) | (true, true) => {}
            (true, false) => s
                .anomalies
                .push(format!("{at}: a message of an older epoch was taken")),
            (false, true) => s
                .anomalies
                .push(format!("{at}: a message of this epoch was refused")),
        }
    }

    /// Rank `rank` reports its shard of `task` once, or twice back to back (a retransmission,
    /// paid from the run's duplicate budget), or reports it failed (paid from the failure
    /// budget).
    pub(super) fn report(
        &self,
        s: &mut TandemState,
        rank: u32,
        task: TaskId,
        twice: bool,
        failed: bool,
    ) -> Option<()> {
        let engine = s.engines.get_mut(usize::try_from(rank).ok()?)?;
        let sent = engine.shards.get_mut(&task)?;
        if *sent > 0 {
            return None;
        }
        *sent = if twice { 2 } else { 1 };
        let times = *sent;
        if twice {
            if s.duplicates_sent >= self.config.duplicate_reports {
                return None;
            }
            s.duplicates_sent += 1;
        }
        if failed {
            if s.shards_failed >= self.config.failed_shards {
                return None;
            }
            s.shards_failed += 1;
        }
        let result = || {
            if failed {
                Err(SHARD_FAILED.to_string())
            } else {
                Ok(())
            }
        };
        for _ in 0..times {
            if rank == 0 {
                s.leader.handle_shard_done(task, result(), s.now_ms);
                self.route_leader(s);
            } else {
                let (core, _) = s.follower_mut(rank)?;
                core.handle_shard_done(task, result(), 0);
                self.route_follower(s, rank)?;
            }
        }
        Some(())
    }

    fn leader_rejections(s: &TandemState) -> u64 {
        leader_of(&s.leader).map_or(0, |l| {
            let st = l.stats();
            st.stale_epoch_rejected + st.future_epoch_rejected + st.rejected_reports
        })
    }

    pub(super) fn deliver_to_leader(&self, s: &mut TandemState, rank: u32) -> Option<()> {
        let msg = s
            .to_leader
            .get_mut(usize::try_from(rank).ok()? - 1)?
            .pop_front()?;
        let stale = match &msg {
            Message::ShardReport(r) => r.epoch < s.epoch || Epoch(r.task.epoch) < s.epoch,
            other => other.epoch().is_some_and(|e| e < s.epoch),
        };
        let before = Self::leader_rejections(s);
        s.leader
            .handle_peer_message(conn(rank), Rank(rank), &msg, s.now_ms);
        let after = Self::leader_rejections(s);
        Self::expect_stale(s, &format!("leader from rank {rank}"), stale, before, after);
        self.route_leader(s);
        Some(())
    }

    pub(super) fn deliver_to_follower(&self, s: &mut TandemState, rank: u32) -> Option<()> {
        let msg = s
            .to_follower
            .get_mut(usize::try_from(rank).ok()? - 1)?
            .pop_front()?;
        if self.config.variant == Variant::ApplyByArrival {
            // The broken driver: whatever frame arrives is the engine's next step.
            if let Message::Frame(frame) = msg {
                let (_, engine) = s.follower_mut(rank)?;
                if engine.failed.is_none() {
                    self.apply_at_follower(s, rank, &frame);
                }
            }
            return Some(());
        }
        let stale = msg.epoch().is_some_and(|e| e < s.epoch);
        let rejected = |s: &mut TandemState| {
            s.follower_mut(rank)
                .and_then(|(core, _)| follower_of(core).map(|f| f.stats().stale_epoch_rejected))
                .unwrap_or(0)
        };
        let before = rejected(s);
        let now = s.now_ms;
        let (core, _) = s.follower_mut(rank)?;
        core.handle_leader_message(msg, now);
        let after = rejected(s);
        Self::expect_stale(s, &format!("rank {rank}"), stale, before, after);
        self.route_follower(s, rank)
    }

    /// Follower `rank`'s engine asks for its next step, with a deadline.
    pub(super) fn read(&self, s: &mut TandemState, rank: u32) -> Option<()> {
        let timeout = self.config.wait_timeout_ms;
        let now = s.now_ms;
        let (core, engine) = s.follower_mut(rank)?;
        let req = EngineRequest::Frame {
            epoch: engine.epoch,
            step: engine.next_step,
            deadline_ms: timeout,
        };
        engine.wait = Some(FRAME);
        core.handle_engine(FRAME, req, now);
        self.route_follower(s, rank)
    }

    /// Follower `rank`'s engine reads the step it applied last, again: the same frame, or a
    /// typed error once it left the retention. Nothing changes, so the move makes no state
    /// unless the answer is wrong.
    pub(super) fn reread(s: &mut TandemState, rank: u32) -> Option<()> {
        let now = s.now_ms;
        let (core, engine) = s.follower_mut(rank)?;
        let step = Step(engine.next_step.0.checked_sub(1)?);
        let held = engine.applied.get(&(engine.epoch, step))?.clone();
        let mut probe = core.clone();
        let req = EngineRequest::Frame {
            epoch: engine.epoch,
            step,
            deadline_ms: 0,
        };
        probe.handle_engine(REREAD, req, now);
        let answer = std::iter::from_fn(|| probe.poll_output()).find_map(|o| match o {
            Output::Reply {
                call: REREAD,
                reply,
            } => Some(reply),
            _ => None,
        });
        match answer {
            Some(EngineReply::Frame(f)) if *f == held => None,
            // Expired from the retention: the engine gets a typed error, not another frame.
            Some(EngineReply::Error(tandem_proto::engine::AgentError::FrameExpired { .. })) => None,
            other => {
                let text = format!("rank {rank}: reread of step {step} gave {other:?}");
                s.anomalies.push(text);
                Some(())
            }
        }
    }

    /// The model clock reaches follower `rank`'s wait deadline.
    pub(super) fn timeout(&self, s: &mut TandemState, rank: u32) -> Option<()> {
        let now = s.now_ms;
        let (core, engine) = s.follower_mut(rank)?;
        engine.wait?;
        let deadline = core.poll_timeout()?;
        let now = now.max(deadline);
        core.handle_timeout(now);
        s.now_ms = now;
        self.route_follower(s, rank)
    }

    /// The supervisor restarts the group in the next epoch: new cores, the leader's with the
    /// reconciliation built from the durable store (its aborts are appended with the epoch's
    /// first record, before frame 0 reveals them). Messages of the old epoch stay in flight.
    pub(super) fn crash(&self, s: &mut TandemState) -> Option<()> {
        let epoch = Epoch(s.epoch.0 + 1);
        let acked_by_all = |task: &TaskId| s.engines.iter().all(|e| e.acknowledged.contains(task));
        let durable_unacked: Vec<_> = s
            .durable
            .outcomes
            .iter()
            .filter(|o| !acked_by_all(&o.task))
            .cloned()
            .collect();
        let in_flight: Vec<InFlightTask> = s
            .durable
            .started
            .iter()
            .filter(|t| !s.durable.outcomes.iter().any(|o| o.task == t.task))
            .copied()
            .collect();
        let start = EpochStart::leader(&durable_unacked, &in_flight, BTreeSet::new());
        let acknowledged: Vec<BTreeSet<TaskId>> =
            s.engines.iter().map(|e| e.acknowledged.clone()).collect();
        let (leader, followers) = self.cores(epoch, start, &acknowledged)?;
        s.leader = leader;
        s.followers = followers;
        s.persisting = None;
        s.sealing = false;
        for engine in &mut s.engines {
            engine.epoch = epoch;
            engine.next_step = Step(0);
            engine.wait = None;
            engine.failed = None;
            // The agents restart too: copies in progress die with them (their tasks are
            // reported aborted); reports already sent may still be in flight.
            engine.shards.clear();
        }
        s.epoch = epoch;
        // Times are compared only within one epoch's cores, and all of them are new: the
        // model clock restarts with the epoch.
        s.now_ms = 0;
        Some(())
    }
}
