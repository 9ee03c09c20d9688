//! The driver glue of the Tandem model: what a production agent does with each input and
//! each `poll_*` output of the `Leader` and `Follower`, one model action at a time.
//!
//! Owns the transitions' bodies. Must never: decide what the protocol decides; which outcomes
//! an engine still needs and what a new epoch reconciles come from `tandem-proto`
//! (`undelivered_outcomes`, `reconcile`).

use tandem_proto::{
    reconcile, Epoch, FollowerError, FollowerEvent, Frame, InFlightTask, LeaderError, Message,
    Rank, ShardReport, Step, TaskId,
};

use super::config::Variant;
use super::model::TandemModel;
use super::state::TandemState;

impl TandemModel {
    pub(super) fn seal(&self, s: &mut TandemState) -> Option<()> {
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
    pub(super) fn apply_at_follower(&self, s: &mut TandemState, rank: u32, frame: &Frame) {
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
    pub(super) fn drain_follower_events(&self, s: &mut TandemState, rank: u32) {
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
    pub(super) fn expect_stale(
        s: &mut TandemState,
        at: &str,
        stale: bool,
        result: Result<(), String>,
    ) {
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
    pub(super) fn report(
        &self,
        s: &mut TandemState,
        rank: u32,
        task: TaskId,
        twice: bool,
    ) -> Option<()> {
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

    pub(super) fn deliver_to_leader(s: &mut TandemState, rank: u32) -> Option<()> {
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
        let (follower, _) = s.follower_mut(rank)?;
        let result = follower.handle_message(msg).map_err(|e| e.to_string());
        Self::expect_stale(s, &format!("rank {rank}"), stale, result);
        self.drain_follower_events(s, rank);
        Some(())
    }

    pub(super) fn read(&self, s: &mut TandemState, rank: u32) -> Option<()> {
        let deadline = s.now_ms.saturating_add(self.config.wait_timeout_ms);
        let (follower, engine) = s.follower_mut(rank)?;
        let id = follower.wait(engine.next_step, deadline);
        engine.wait = Some(id);
        self.drain_follower_events(s, rank);
        Some(())
    }

    pub(super) fn reread(s: &mut TandemState, rank: u32) -> Option<()> {
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

    pub(super) fn timeout(&self, s: &mut TandemState, rank: u32) -> Option<()> {
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
        let reconciliation = reconcile(&durable_unacked, &in_flight);
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
