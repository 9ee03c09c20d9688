//! A whole group of rank cores on a virtual clock, in one thread: what the agents' actors do
//! with the cores' outputs, done in memory. Messages between leader and followers are
//! delivered in order per link; store commands are carried out by a per-rank store twin that
//! records the blocks each rank holds and reports every copy; appends go to an in-memory
//! stream that can be made to refuse; manifest reads answer from what each rank published.
//! Nothing sleeps: `drive` runs until no output is left, `advance` moves the clock and fires
//! the deadlines that are due.

#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tandem_core::{
    Append, CallRef, ConnId, CoreConfig, EpochStart, Event, Output, Peer, RankCore, StoreCommand,
};
use tandem_proto::engine::{AgentError, EngineReply, EngineRequest};
use tandem_proto::wire::handshake::{GroupSecret, Membership, PROTOCOL_VERSION};
use tandem_proto::{
    BlockHash, ConfigFingerprint, Epoch, Frame, GroupId, Message, PageId, Rank, RankBlocks,
    RequestId, Step, TaskId, Tier, TierOp,
};

/// The group's settings; change them before [`Group::start`].
#[derive(Clone, Debug)]
pub struct Spec {
    pub epoch: Epoch,
    pub world: u32,
    pub window: u64,
    pub retention: u64,
    pub host: u64,
    pub disk: u64,
    pub durable: bool,
    pub heartbeat_interval_ms: u64,
    pub heartbeat_timeout_ms: u64,
    pub max_frame_bytes: u64,
    pub bind_timeout_ms: u64,
    /// The leader's appends in flight at once.
    pub max_appends_in_flight: u32,
    /// How long the leader's `end_step` waits for its own append, ms.
    pub append_wait_ms: u64,
    /// Layers of one block shard on every rank.
    pub layers: u32,
}

impl Spec {
    pub fn new(world: u32) -> Spec {
        Spec {
            epoch: Epoch(1),
            world,
            window: 4,
            retention: 64,
            host: 8,
            disk: 8,
            durable: false,
            heartbeat_interval_ms: 100,
            heartbeat_timeout_ms: 1_000,
            max_frame_bytes: 1 << 20,
            bind_timeout_ms: 500,
            max_appends_in_flight: 1,
            append_wait_ms: u64::MAX,
            layers: 1,
        }
    }
}

pub fn membership(spec: &Spec) -> Membership {
    Membership {
        protocol_version: PROTOCOL_VERSION,
        group_id: GroupId("g".into()),
        fingerprint: ConfigFingerprint::default(),
        secret: GroupSecret::new(b"group secret".to_vec()),
        epoch: spec.epoch,
        world_size: spec.world,
    }
}

pub fn config(spec: &Spec, rank: u32) -> CoreConfig {
    CoreConfig {
        epoch: spec.epoch,
        rank: Rank(rank),
        world_size: spec.world,
        shard_bytes: 64,
        layers_per_rank: spec.layers,
        window_steps: spec.window,
        retention_steps: spec.retention,
        max_frame_bytes: spec.max_frame_bytes,
        heartbeat_interval_ms: spec.heartbeat_interval_ms,
        heartbeat_timeout_ms: spec.heartbeat_timeout_ms,
        host_capacity_blocks: spec.host,
        disk_capacity_blocks: spec.disk,
        bind_timeout_ms: spec.bind_timeout_ms,
        max_appends_in_flight: spec.max_appends_in_flight,
        append_wait_ms: spec.append_wait_ms,
        durable: spec.durable,
        membership: membership(spec),
        leader_addr: "leader:1".into(),
    }
}

/// One rank's store twin: the blocks it holds (by tier), the commands it got, and the copies
/// waiting to be reported.
#[derive(Default, Debug)]
pub struct StoreTwin {
    pub epoch: Epoch,
    pub blocks: BTreeMap<BlockHash, Tier>,
    pub commands: Vec<StoreCommand>,
    /// Copies carried out and not yet reported: (task, result).
    pub done: VecDeque<(TaskId, Result<(), String>)>,
    /// Blocks whose load fails on this rank (a corrupt shard).
    pub corrupt: BTreeSet<BlockHash>,
    /// Whether copies report by themselves in `drive` (else the test releases them).
    pub hold_reports: bool,
}

impl StoreTwin {
    fn carry(&mut self, cmd: StoreCommand) {
        self.commands.push(cmd.clone());
        match cmd {
            StoreCommand::BeginEpoch { epoch, wipe } => {
                self.epoch = epoch;
                if wipe {
                    self.blocks.clear();
                }
            }
            StoreCommand::ApplyTierOps { ops, .. } => {
                for op in ops {
                    match op {
                        TierOp::Evict(h) => {
                            self.blocks.remove(&h);
                        }
                        TierOp::Demote(h) => {
                            if let Some(t) = self.blocks.get_mut(&h) {
                                *t = Tier::Disk;
                            }
                        }
                        TierOp::Promote(h) => {
                            if let Some(t) = self.blocks.get_mut(&h) {
                                *t = Tier::Host;
                            }
                        }
                    }
                }
            }
            StoreCommand::CopyStores { tasks, .. } => {
                for t in tasks {
                    for (h, tier) in t.block_hashes.iter().zip(&t.tiers) {
                        self.blocks.insert(*h, *tier);
                    }
                    self.done.push_back((t.task, Ok(())));
                }
            }
            // A layerwise copy's progress and result are the test's to report.
            StoreCommand::CopyLayers { .. } => {}
            StoreCommand::CopyLoads { tasks, .. } => {
                for t in tasks {
                    let missing = t
                        .block_hashes
                        .iter()
                        .find(|h| !self.blocks.contains_key(h) || self.corrupt.contains(h));
                    let result = match missing {
                        Some(h) => Err(format!("block {h}: not held or corrupt")),
                        None => Ok(()),
                    };
                    self.done.push_back((t.task, result));
                }
            }
        }
    }
}

/// The in-memory completion stream: every append, and whether it refuses.
#[derive(Default, Debug)]
pub struct LogTwin {
    pub appends: Vec<Append>,
    pub refuse: Option<String>,
    /// Manifests each rank published (None: not yet).
    pub manifests: Vec<Option<Vec<u8>>>,
}

/// One rank: its core, its store twin, the replies its engine got, the events it emitted.
pub struct Node {
    pub core: RankCore,
    pub store: StoreTwin,
    pub replies: BTreeMap<CallRef, EngineReply>,
    pub events: Vec<Event>,
    next_call: u64,
}

/// A whole group.
pub struct Group {
    pub spec: Spec,
    pub now_ms: u64,
    pub nodes: Vec<Node>,
    pub log: LogTwin,
    /// Leader → follower links by connection, and each follower's connection.
    pub conns: Vec<ConnId>,
    /// Messages in flight, leader → rank r (index r), and rank r → leader.
    pub to_follower: Vec<VecDeque<Message>>,
    pub to_leader: Vec<VecDeque<Message>>,
    /// Connections the leader closed.
    pub closed: Vec<ConnId>,
    /// Whether an append is waiting for `answer_append` (else appends are answered in
    /// `drive`).
    pub hold_appends: bool,
    /// Appends out, oldest first (answered in that order).
    pub pending_appends: VecDeque<Append>,
    /// Whether manifest reads are answered in `drive`.
    pub answer_manifests: bool,
    pending_manifests: bool,
}

impl Group {
    /// Cores for every rank of `spec`, not joined yet.
    pub fn new(spec: Spec, start: EpochStart) -> Group {
        let nodes = (0..spec.world)
            .map(|r| {
                let start = if r == 0 {
                    start.clone()
                } else {
                    EpochStart {
                        acknowledged: start.acknowledged.clone(),
                        ..EpochStart::default()
                    }
                };
                Node {
                    core: RankCore::new(config(&spec, r), start, 0).expect("core"),
                    store: StoreTwin::default(),
                    replies: BTreeMap::new(),
                    events: Vec::new(),
                    next_call: 1,
                }
            })
            .collect();
        let world = spec.world as usize;
        Group {
            now_ms: 0,
            nodes,
            log: LogTwin {
                manifests: vec![None; world],
                ..LogTwin::default()
            },
            conns: (0..spec.world)
                .map(|r| ConnId(100 + u64::from(r)))
                .collect(),
            to_follower: vec![VecDeque::new(); world],
            to_leader: vec![VecDeque::new(); world],
            closed: Vec::new(),
            hold_appends: false,
            pending_appends: VecDeque::new(),
            answer_manifests: true,
            pending_manifests: false,
            spec,
        }
    }

    /// Cores for every rank, every follower admitted, driven until idle.
    pub fn start(spec: Spec) -> Group {
        let mut g = Group::new(spec, EpochStart::default());
        g.join_all();
        g
    }

    /// Admit every follower.
    pub fn join_all(&mut self) {
        for r in 1..self.spec.world {
            self.join(r);
        }
        self.drive();
    }

    /// Follower `r` says hello and, admitted, is linked.
    pub fn join(&mut self, r: u32) {
        let m = membership(&self.spec);
        let nonce = [r as u8; 32];
        let conn = self.conns[r as usize];
        let now = self.now_ms;
        let admitted =
            self.nodes[0]
                .core
                .handle_admit(conn, &nonce, &m.hello(&nonce, Rank(r)), now);
        assert_eq!(admitted, Ok(Rank(r)), "rank {r} admitted");
        self.nodes[r as usize].core.handle_leader_linked(now);
    }

    /// Rank `r`'s engine asks `req`; returns the call.
    pub fn ask(&mut self, r: u32, req: EngineRequest) -> CallRef {
        let node = &mut self.nodes[r as usize];
        let call = CallRef(node.next_call);
        node.next_call += 1;
        node.core.handle_engine(call, req, self.now_ms);
        call
    }

    /// Rank `r`'s engine asks `req`, the group is driven until idle, and the reply comes back.
    pub fn call(&mut self, r: u32, req: EngineRequest) -> EngineReply {
        let call = self.ask(r, req);
        self.drive();
        self.reply(r, call)
            .expect("an answer once the group is idle")
    }

    /// The reply to `call` of rank `r`, if it came.
    pub fn reply(&mut self, r: u32, call: CallRef) -> Option<EngineReply> {
        self.nodes[r as usize].replies.remove(&call)
    }

    pub fn epoch(&self) -> Epoch {
        self.spec.epoch
    }

    /// Leader: the open step.
    pub fn open_step(&self) -> Step {
        match self.nodes[0].core.role() {
            tandem_core::Role::Leader(l) => l.next_step(),
            tandem_core::Role::Follower(_) => unreachable!("rank 0 leads"),
        }
    }

    pub fn store(&mut self, request: u64, blocks: &[u64]) -> EngineReply {
        let req = EngineRequest::Store {
            epoch: self.epoch(),
            step: self.open_step(),
            request: RequestId(request),
            block_hashes: blocks.iter().map(|b| BlockHash::from(*b)).collect(),
            page_ids: (0..blocks.len() as u32).map(PageId).collect(),
        };
        self.call(0, req)
    }

    pub fn lookup(&mut self, request: u64, blocks: &[u64]) -> EngineReply {
        let req = EngineRequest::Lookup {
            epoch: self.epoch(),
            step: self.open_step(),
            request: RequestId(request),
            block_hashes: blocks.iter().map(|b| BlockHash::from(*b)).collect(),
        };
        self.call(0, req)
    }

    pub fn load(&mut self, request: u64, blocks: &[u64]) -> EngineReply {
        let req = EngineRequest::Load {
            epoch: self.epoch(),
            step: self.open_step(),
            request: RequestId(request),
            block_hashes: blocks.iter().map(|b| BlockHash::from(*b)).collect(),
            page_ids: (0..blocks.len() as u32).map(PageId).collect(),
        };
        self.call(0, req)
    }

    /// Leader: `end_step` of the open step with `deadline_ms`; the call (answered or not).
    pub fn end_step_call(&mut self, deadline_ms: u64) -> CallRef {
        let req = EngineRequest::EndStep {
            epoch: self.epoch(),
            step: self.open_step(),
            deadline_ms,
        };
        let call = self.ask(0, req);
        self.drive();
        call
    }

    /// Leader: `end_step` of the open step; the sealed frame.
    pub fn end_step(&mut self) -> Frame {
        let call = self.end_step_call(1_000);
        match self.reply(0, call) {
            Some(EngineReply::Frame(f)) => *f,
            other => panic!("end_step answered {other:?}"),
        }
    }

    /// Rank `r`'s engine reads `step` (waiting up to `deadline_ms`).
    pub fn frame_call(&mut self, r: u32, step: u64, deadline_ms: u64) -> CallRef {
        let req = EngineRequest::Frame {
            epoch: self.epoch(),
            step: Step(step),
            deadline_ms,
        };
        let call = self.ask(r, req);
        self.drive();
        call
    }

    /// Rank `r`'s engine acknowledges `step`.
    pub fn ack(&mut self, r: u32, step: u64) -> EngineReply {
        let req = EngineRequest::Ack {
            epoch: self.epoch(),
            step: Step(step),
        };
        self.call(r, req)
    }

    /// Every follower's engine reads and acknowledges every frame up to the leader's last.
    pub fn followers_catch_up(&mut self) {
        let sealed = self.open_step().0;
        for r in 1..self.spec.world {
            for s in 0..sealed {
                let call = self.frame_call(r, s, 1_000);
                assert!(
                    matches!(self.reply(r, call), Some(EngineReply::Frame(_))),
                    "rank {r} reads step {s}"
                );
                assert_eq!(self.ack(r, s), EngineReply::Acked);
            }
        }
    }

    /// One step on every rank: the leader ends it, every follower reads and acknowledges it,
    /// and the leader's engine acknowledges it too. Returns the frame.
    pub fn step(&mut self) -> Frame {
        let frame = self.end_step();
        let s = frame.step.0;
        for r in 1..self.spec.world {
            let call = self.frame_call(r, s, 1_000);
            match self.reply(r, call) {
                Some(EngineReply::Frame(f)) => assert_eq!(*f, frame, "rank {r} step {s}"),
                other => panic!("rank {r} read of step {s}: {other:?}"),
            }
            assert_eq!(self.ack(r, s), EngineReply::Acked);
        }
        assert_eq!(self.ack(0, s), EngineReply::Acked);
        frame
    }

    /// Carry out every output of every rank, deliver every message and report every copy,
    /// until nothing is left.
    pub fn drive(&mut self) {
        loop {
            let mut moved = false;
            for r in 0..self.nodes.len() {
                while let Some(out) = self.nodes[r].core.poll_output() {
                    moved = true;
                    self.carry(r, out);
                }
            }
            for r in 1..self.nodes.len() {
                while let Some(msg) = self.to_follower[r].pop_front() {
                    moved = true;
                    self.nodes[r].core.handle_leader_message(msg, self.now_ms);
                }
                while let Some(msg) = self.to_leader[r].pop_front() {
                    moved = true;
                    let conn = self.conns[r];
                    self.nodes[0]
                        .core
                        .handle_peer_message(conn, Rank(r as u32), &msg, self.now_ms);
                }
            }
            for r in 0..self.nodes.len() {
                if self.nodes[r].store.hold_reports {
                    continue;
                }
                while let Some((task, result)) = self.nodes[r].store.done.pop_front() {
                    moved = true;
                    self.nodes[r]
                        .core
                        .handle_shard_done(task, result, self.now_ms);
                }
            }
            if !self.hold_appends {
                while let Some(a) = self.pending_appends.pop_front() {
                    moved = true;
                    self.finish_append(a, None);
                }
            }
            if self.answer_manifests && self.pending_manifests {
                moved = true;
                self.pending_manifests = false;
                let got = self.log.manifests.clone();
                self.nodes[0].core.handle_manifests(&got, self.now_ms);
            }
            if !moved {
                return;
            }
        }
    }

    /// Answer the oldest append out (with `hold_appends`).
    pub fn answer_append(&mut self) {
        let a = self.pending_appends.pop_front().expect("an append waits");
        self.finish_append(a, None);
        self.drive();
    }

    /// Answer the oldest append out with `refused` (the log's reason), whatever the log says.
    pub fn refuse_append(&mut self, refused: &str) {
        let a = self.pending_appends.pop_front().expect("an append waits");
        self.finish_append(a, Some(refused.to_string()));
        self.drive();
    }

    fn finish_append(&mut self, a: Append, refused: Option<String>) {
        let result = match refused.as_ref().or(self.log.refuse.as_ref()) {
            Some(reason) => Err(reason.clone()),
            None => {
                self.log.appends.push(a);
                Ok(())
            }
        };
        self.nodes[0].core.handle_appended(result, self.now_ms);
    }

    /// Answer the manifest read waiting (with `answer_manifests` off).
    pub fn answer_manifests_now(&mut self) {
        assert!(self.pending_manifests, "a manifest read waits");
        self.pending_manifests = false;
        let got = self.log.manifests.clone();
        self.nodes[0].core.handle_manifests(&got, self.now_ms);
        self.drive();
    }

    /// Rank `r` publishes its blocks.
    pub fn publish(&mut self, r: u32, blocks: &[(u64, Tier)]) {
        let rb = RankBlocks {
            rank: Rank(r),
            blocks: blocks
                .iter()
                .map(|(b, t)| (BlockHash::from(*b), *t))
                .collect(),
        };
        self.log.manifests[r as usize] = Some(rb.encode());
    }

    fn carry(&mut self, r: usize, out: Output) {
        match out {
            Output::Reply { call, reply } => {
                let old = self.nodes[r].replies.insert(call, reply);
                assert!(old.is_none(), "rank {r} call {call} answered twice");
            }
            Output::Store(cmd) => self.nodes[r].store.carry(cmd),
            Output::Send { to, msg } => match to {
                Peer::Leader => self.to_leader[r].push_back(msg),
                Peer::Followers(conns) => {
                    for c in conns {
                        let f = self.conns.iter().position(|x| *x == c).expect("a conn");
                        // Handshake answers stay with the handshake (the driver reads them).
                        if matches!(msg, Message::Frame(_)) {
                            self.to_follower[f].push_back(msg.clone());
                        }
                    }
                }
            },
            Output::Close { conn } => self.closed.push(conn),
            Output::Append(a) => {
                let most = self.spec.max_appends_in_flight.max(1) as usize;
                assert!(
                    self.pending_appends.len() < most,
                    "at most {most} appends out"
                );
                self.pending_appends.push_back(a);
            }
            Output::FetchManifests { epoch } => {
                assert_eq!(epoch, self.spec.epoch);
                self.pending_manifests = true;
            }
            Output::Event(e) => self.nodes[r].events.push(e),
        }
    }

    /// Move the clock by `ms` and fire every rank's due deadlines (in steps, so that a
    /// heartbeat interval shorter than `ms` fires as often as it would).
    pub fn advance(&mut self, ms: u64) {
        let until = self.now_ms + ms;
        loop {
            let next = self
                .nodes
                .iter()
                .filter_map(|n| n.core.poll_timeout())
                .filter(|t| *t <= until)
                .min();
            let Some(t) = next else { break };
            self.now_ms = self.now_ms.max(t);
            for r in 0..self.nodes.len() {
                if self.nodes[r]
                    .core
                    .poll_timeout()
                    .is_some_and(|d| d <= self.now_ms)
                {
                    self.nodes[r].core.handle_timeout(self.now_ms);
                }
            }
            self.drive();
        }
        self.now_ms = until;
        self.drive();
    }

    /// Events of rank `r` of a kind.
    pub fn failed(&self, r: u32) -> Option<String> {
        self.nodes[r as usize].events.iter().find_map(|e| match e {
            Event::Failed { reason, .. } => Some(reason.clone()),
            _ => None,
        })
    }

    pub fn ready(&self, r: u32) -> bool {
        self.nodes[r as usize]
            .events
            .iter()
            .any(|e| matches!(e, Event::Ready { .. }))
    }
}

/// The task a `Started` reply names.
pub fn started(reply: EngineReply) -> TaskId {
    match reply {
        EngineReply::Started { task } => task,
        other => panic!("expected Started, got {other:?}"),
    }
}

/// The error a reply carries.
pub fn error(reply: EngineReply) -> AgentError {
    match reply {
        EngineReply::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}
