//! The Tandem model: the stateright `Model` whose transitions drive the real `tandem-proto`
//! `Leader` and `Follower` through every interleaving of engine operations, shard reports,
//! message deliveries, engine reads, wait deadlines, persistence and crashes.
//!
//! Owns the actions and the driver glue (what a production agent does with each `poll_*`
//! output). Must never: re-implement a protocol decision; when the driver needs one (which
//! outcomes a rank's engine still needs, what a new epoch reconciles) it calls `tandem-proto`.

use std::collections::{BTreeMap, VecDeque};

use stateright::{Model, Property};
use tandem_proto::{
    reconcile, BlockHash, Epoch, Follower, FollowerError, FollowerEvent, InFlightTask, Leader,
    LeaderConfig, LeaderError, Message, PageId, Rank, RequestId, ShardReport, Step, TaskId, Tier,
};

use super::config::{ConfigError, TandemConfig, Variant};
use super::properties;
use super::state::{DurableLog, EngineState, TandemState};

/// One atomic move of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TandemAction {
    /// The leader's engine starts a store in the open step.
    StartStore,
    /// The leader seals the open step; rank 0's engine applies the frame at once.
    Seal,
    /// The driver takes the leader's next persist batch and appends it to the durable log.
    Persist,
    /// The driver confirms the append to the leader (`handle_persisted`).
    PersistConfirm,
    /// `rank` finished its shard of `task` and reports it; `twice`: the report is sent twice
    /// back to back (a retransmission, a duplicate the leader must ignore).
    Report {
        /// The reporting rank.
        rank: u32,
        /// The task.
        task: TaskId,
        /// Whether a duplicate follows the report.
        twice: bool,
    },
    /// The oldest message on the leader → `rank` link arrives.
    DeliverToFollower {
        /// The receiving follower rank.
        rank: u32,
    },
    /// The oldest message on the `rank` → leader link arrives.
    DeliverToLeader {
        /// The sending follower rank.
        rank: u32,
    },
    /// Follower `rank`'s engine asks for the frame of its next step with a deadline: it
    /// applies the frame at once if it is there, otherwise it blocks in a bounded wait that
    /// ends when the frame arrives or the deadline passes.
    Read {
        /// The follower rank.
        rank: u32,
    },
    /// Follower `rank`'s engine reads the frame of the step it applied last, again.
    Reread {
        /// The follower rank.
        rank: u32,
    },
    /// The model clock reaches follower `rank`'s earliest wait deadline.
    Timeout {
        /// The follower rank.
        rank: u32,
    },
    /// A rank fails; the supervisor restarts the whole group in the next epoch.
    Crash,
}

/// The Tandem model for one configuration.
#[derive(Clone, Debug)]
pub struct TandemModel {
    /// The bounds and variant.
    pub config: TandemConfig,
}

/// The epoch every run starts in.
pub const FIRST_EPOCH: Epoch = Epoch(1);

impl TandemModel {
    /// A model for `config`.
    ///
    /// Errors: [`ConfigError::Zero`] when a bound that must be at least 1 is 0.
    pub fn new(config: TandemConfig) -> Result<TandemModel, ConfigError> {
        config.validate()?;
        Ok(TandemModel { config })
    }

    fn leader(
        &self,
        epoch: Epoch,
        reconciliation: Option<tandem_proto::Reconciliation>,
    ) -> Option<Leader> {
        let config = LeaderConfig {
            epoch,
            world_size: self.config.world_size(),
            window_steps: self.config.window_steps,
            retention_steps: self.config.retention_steps,
            heartbeat_timeout_ms: u64::MAX / 4,
            start_ms: 0,
        };
        Leader::new(config, reconciliation).ok()
    }

    fn followers(&self, epoch: Epoch) -> Vec<Follower> {
        (1..=self.config.followers)
            .map(|r| Follower::new(epoch, Rank(r), self.config.retention_steps))
            .collect()
    }

    fn dedup(&self) -> bool {
        self.config.variant != Variant::NoEngineDedup
    }

    fn seal(&self, s: &mut TandemState) -> Option<()> {
        let step = s.leader.open_step();
        let frame = match s.leader.seal(step, s.now_ms) {
            Ok(frame) => frame,
            // The window is full: nothing is sealed (the leader only bumps a counter).
            Err(LeaderError::WindowFull { .. }) => return None,
            Err(e) => {
                s.anomalies.push(format!("seal: {e}"));
                return Some(());
            }
        };
        if let Some(previous) = s.sealed.insert((frame.epoch, frame.step), frame.clone()) {
            if previous != frame {
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
        while let Some((rank, msg)) = s.leader.poll_transmit() {
            let link = usize::try_from(rank.0).ok().and_then(|r| r.checked_sub(1));
            match link.and_then(|l| s.to_follower.get_mut(l)) {
                Some(queue) => queue.push_back(msg),
                None => s
                    .anomalies
                    .push(format!("leader sent to rank {rank}, outside the group")),
            }
        }
        Some(())
    }

    /// Rank `rank`'s engine applies `frame` and, with acknowledgements on, acks the step.
    fn apply_at_follower(&self, s: &mut TandemState, rank: u32, frame: &tandem_proto::Frame) {
        let dedup = self.dedup();
        let acks = self.config.acks;
        let Some((follower, engine)) = s.follower_mut(rank) else {
            return;
        };
        let step = engine.next_step;
        engine.apply(frame, dedup);
        if !acks || self.config.variant == Variant::ApplyByArrival {
            return;
        }
        let msg = follower.ack(step);
        let link = usize::try_from(rank).ok().and_then(|r| r.checked_sub(1));
        match msg {
            Ok(msg) => {
                if let Some(queue) = link.and_then(|l| s.to_leader.get_mut(l)) {
                    queue.push_back(msg);
                }
            }
            Err(e) => s.anomalies.push(format!("rank {rank} ack: {e}")),
        }
    }

    /// Hand every event of follower `rank` to its engine: a ready frame is applied, a failed
    /// wait takes the rank down with its typed error.
    fn drain_follower_events(&self, s: &mut TandemState, rank: u32) {
        loop {
            let Some((follower, engine)) = s.follower_mut(rank) else {
                return;
            };
            let Some(event) = follower.poll_event() else {
                return;
            };
            match event {
                FollowerEvent::FrameReady { wait, frame } => {
                    if engine.wait != Some(wait) {
                        s.anomalies
                            .push(format!("rank {rank}: frame for a wait nobody holds"));
                        continue;
                    }
                    engine.wait = None;
                    if frame.step != engine.next_step {
                        s.anomalies
                            .push(format!("rank {rank}: woken with step {}", frame.step));
                        continue;
                    }
                    self.apply_at_follower(s, rank, &frame);
                }
                FollowerEvent::WaitFailed { wait, error } => {
                    if engine.wait == Some(wait) {
                        engine.wait = None;
                    }
                    engine.failed = Some(error);
                }
            }
        }
    }

    /// A message from an older epoch must be rejected as stale; anything else is an anomaly.
    fn expect_stale(s: &mut TandemState, at: &str, stale: bool, result: Result<(), String>) {
        match (stale, result) {
            (false, Ok(())) => {}
            (true, Err(_)) => {}
            (true, Ok(())) => s
                .anomalies
                .push(format!("{at}: a message of an older epoch was taken")),
            (false, Err(e)) => s.anomalies.push(format!("{at}: {e}")),
        }
    }

    /// Rank `rank` reports its shard of `task` once, or twice back to back (a retransmission,
    /// paid from the run's duplicate budget).
    fn report(&self, s: &mut TandemState, rank: u32, task: TaskId, twice: bool) -> Option<()> {
        let engine = s.engines.get_mut(usize::try_from(rank).ok()?)?;
        let sent = engine.shards.get_mut(&task)?;
        if *sent > 0 {
            return None;
        }
        *sent = if twice { 2 } else { 1 };
        if twice {
            if s.duplicates_sent >= self.config.duplicate_reports {
                return None;
            }
            s.duplicates_sent += 1;
        }
        for _ in 0..*sent {
            if rank == 0 {
                let report = ShardReport {
                    epoch: s.epoch,
                    task,
                    rank: Rank(0),
                    result: Ok(()),
                };
                let stale = Epoch(task.epoch) < s.epoch;
                let result = s
                    .leader
                    .handle_report(&report)
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                Self::expect_stale(s, "leader report from rank 0", stale, result);
            } else {
                let (follower, _) = s.follower_mut(rank)?;
                let msg = follower.report(task, Ok(()));
                s.to_leader
                    .get_mut(usize::try_from(rank).ok()? - 1)?
                    .push_back(msg);
            }
        }
        Some(())
    }

    fn deliver_to_leader(s: &mut TandemState, rank: u32) -> Option<()> {
        let msg = s
            .to_leader
            .get_mut(usize::try_from(rank).ok()? - 1)?
            .pop_front()?;
        let stale = match &msg {
            Message::ShardReport(r) => r.epoch < s.epoch || Epoch(r.task.epoch) < s.epoch,
            other => other.epoch().is_some_and(|e| e < s.epoch),
        };
        let now = s.now_ms;
        let result = s
            .leader
            .handle_message(Rank(rank), &msg, now)
            .map(|_| ())
            .map_err(|e| e.to_string());
        Self::expect_stale(s, &format!("leader from rank {rank}"), stale, result);
        Some(())
    }

    fn deliver_to_follower(&self, s: &mut TandemState, rank: u32) -> Option<()> {
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
        let (follower, _) = s.follower_mut(rank)?;
        let result = follower.handle_message(msg).map_err(|e| e.to_string());
        Self::expect_stale(s, &format!("rank {rank}"), stale, result);
        self.drain_follower_events(s, rank);
        Some(())
    }

    fn read(&self, s: &mut TandemState, rank: u32) -> Option<()> {
        let deadline = s.now_ms.saturating_add(self.config.wait_timeout_ms);
        let (follower, engine) = s.follower_mut(rank)?;
        let id = follower.wait(engine.next_step, deadline);
        engine.wait = Some(id);
        self.drain_follower_events(s, rank);
        Some(())
    }

    fn reread(s: &mut TandemState, rank: u32) -> Option<()> {
        let (follower, engine) = s.follower_mut(rank)?;
        let step = Step(engine.next_step.0.checked_sub(1)?);
        let held = engine.applied.get(&(engine.epoch, step))?;
        match follower.read(step) {
            Ok(Some(frame)) if frame == held => None,
            // Expired from the retention: the engine gets a typed error, not another frame.
            Err(FollowerError::FrameExpired { .. }) => None,
            other => {
                let text = format!("rank {rank}: reread of step {step} gave {other:?}");
                s.anomalies.push(text);
                Some(())
            }
        }
    }

    fn timeout(&self, s: &mut TandemState, rank: u32) -> Option<()> {
        let now = s.now_ms;
        let (follower, _) = s.follower_mut(rank)?;
        let deadline = follower.poll_timeout()?;
        let now = now.max(deadline);
        follower.handle_timeout(now);
        s.now_ms = now;
        self.drain_follower_events(s, rank);
        Some(())
    }

    /// The supervisor restarts the group in the next epoch. The driver of the new leader
    /// builds the reconciliation from the durable store and appends its aborted outcomes to
    /// the stream before anything is sealed. Messages of the old epoch stay in flight.
    fn crash(&self, s: &mut TandemState) -> Option<()> {
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
        let reconciliation = reconcile(&durable_unacked, &in_flight, &[]);
        s.durable
            .outcomes
            .extend(reconciliation.aborted.iter().cloned());
        s.leader = self.leader(epoch, Some(reconciliation))?;
        s.followers = self.followers(epoch);
        s.persisting = None;
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
        // Times are compared only within one epoch's state machines, and all of them are new:
        // the model clock restarts with the epoch.
        s.now_ms = 0;
        Some(())
    }
}

impl Model for TandemModel {
    type State = TandemState;
    type Action = TandemAction;

    fn init_states(&self) -> Vec<TandemState> {
        let Some(leader) = self.leader(FIRST_EPOCH, None) else {
            return Vec::new();
        };
        let links = usize::try_from(self.config.followers).unwrap_or(0);
        vec![TandemState {
            epoch: FIRST_EPOCH,
            leader,
            followers: self.followers(FIRST_EPOCH),
            to_follower: vec![VecDeque::new(); links],
            to_leader: vec![VecDeque::new(); links],
            persisting: None,
            durable: DurableLog::default(),
            engines: (0..=links).map(|_| EngineState::new(FIRST_EPOCH)).collect(),
            sealed: BTreeMap::new(),
            stores_started: 0,
            duplicates_sent: 0,
            now_ms: 0,
            anomalies: Vec::new(),
        }]
    }

    fn actions(&self, s: &TandemState, actions: &mut Vec<TandemAction>) {
        if s.engines.iter().any(|e| e.failed.is_some()) {
            // A rank is down: the supervisor's restart is the only thing left to happen.
            if s.epoch.0 < self.config.epochs {
                actions.push(TandemAction::Crash);
            }
            return;
        }
        let open = s.leader.open_step();
        if open.0 < self.config.steps_per_epoch {
            if s.stores_started < self.config.stores {
                actions.push(TandemAction::StartStore);
            }
            actions.push(TandemAction::Seal);
        }
        match s.persisting {
            None => actions.push(TandemAction::Persist),
            Some(_) => actions.push(TandemAction::PersistConfirm),
        }
        for (rank, engine) in s.engines.iter().enumerate() {
            let rank = rank as u32;
            if engine.failed.is_some() {
                continue;
            }
            let duplicates_left = s.duplicates_sent < self.config.duplicate_reports;
            for (task, sent) in &engine.shards {
                if *sent == 0 {
                    actions.push(TandemAction::Report {
                        rank,
                        task: *task,
                        twice: false,
                    });
                    if duplicates_left {
                        actions.push(TandemAction::Report {
                            rank,
                            task: *task,
                            twice: true,
                        });
                    }
                }
            }
        }
        for rank in 1..=self.config.followers {
            let i = rank as usize;
            if s.to_follower.get(i - 1).is_some_and(|q| !q.is_empty()) {
                actions.push(TandemAction::DeliverToFollower { rank });
            }
            if s.to_leader.get(i - 1).is_some_and(|q| !q.is_empty()) {
                actions.push(TandemAction::DeliverToLeader { rank });
            }
            let Some(engine) = s.engines.get(i) else {
                continue;
            };
            if self.config.variant == Variant::ApplyByArrival || engine.failed.is_some() {
                continue;
            }
            if engine.wait.is_none() {
                actions.push(TandemAction::Read { rank });
                actions.push(TandemAction::Reread { rank });
            }
            if s.followers
                .get(i - 1)
                .is_some_and(|f| f.poll_timeout().is_some())
            {
                actions.push(TandemAction::Timeout { rank });
            }
        }
        if s.epoch.0 < self.config.epochs {
            actions.push(TandemAction::Crash);
        }
    }

    fn next_state(&self, last: &TandemState, action: TandemAction) -> Option<TandemState> {
        let mut s = last.clone();
        match action {
            TandemAction::StartStore => {
                let n = u64::from(s.stores_started);
                let page = PageId(u32::from(s.stores_started));
                s.leader.start_store(
                    RequestId(n),
                    vec![BlockHash(n)],
                    vec![page],
                    vec![Tier::Host],
                );
                s.stores_started += 1;
            }
            TandemAction::Seal => self.seal(&mut s)?,
            TandemAction::Persist => {
                let batch = s.leader.poll_persist()?;
                s.durable
                    .started
                    .extend(batch.started.iter().map(|t| InFlightTask {
                        task: t.start.task,
                        kind: t.kind,
                        request: t.start.request,
                    }));
                s.durable.outcomes.extend(batch.outcomes.iter().cloned());
                s.persisting = Some(batch.id);
            }
            TandemAction::PersistConfirm => {
                let id = s.persisting.take()?;
                if let Err(e) = s.leader.handle_persisted(id) {
                    s.anomalies.push(format!("persist confirm: {e}"));
                }
            }
            TandemAction::Report { rank, task, twice } => self.report(&mut s, rank, task, twice)?,
            TandemAction::DeliverToFollower { rank } => self.deliver_to_follower(&mut s, rank)?,
            TandemAction::DeliverToLeader { rank } => Self::deliver_to_leader(&mut s, rank)?,
            TandemAction::Read { rank } => self.read(&mut s, rank)?,
            TandemAction::Reread { rank } => Self::reread(&mut s, rank)?,
            TandemAction::Timeout { rank } => self.timeout(&mut s, rank)?,
            TandemAction::Crash => self.crash(&mut s)?,
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}
