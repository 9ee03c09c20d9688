//! Random schedules of a leader and two followers: stores and loads started at arbitrary
//! steps, shard reports in any order with duplicates, persistence that fails at random,
//! followers that deliver, read and acknowledge at rank-local moments. After every action the
//! group's invariants are checked.

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use tandem_proto::*;

const WORLD: u32 = 3;
const WINDOW: u64 = 3;

#[derive(Clone, Debug)]
enum Action {
    Start { load: bool },
    Report { task: usize, rank: u32, fail: bool },
    Persist { ok: bool },
    Seal,
    Deliver { rank: u32 },
    Read { rank: u32, back: u64 },
    Ack { rank: u32 },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        1 => any::<bool>().prop_map(|load| Action::Start { load }),
        3 => (0usize..16, 0..WORLD, prop::bool::weighted(0.1))
            .prop_map(|(task, rank, fail)| Action::Report { task, rank, fail }),
        1 => prop::bool::weighted(0.7).prop_map(|ok| Action::Persist { ok }),
        2 => Just(Action::Seal),
        2 => (1..WORLD).prop_map(|rank| Action::Deliver { rank }),
        1 => (1..WORLD, 0u64..4).prop_map(|(rank, back)| Action::Read { rank, back }),
        1 => (1..WORLD).prop_map(|rank| Action::Ack { rank }),
    ]
}

struct Sim {
    leader: Leader,
    followers: Vec<Follower>,
    /// Messages in flight to each follower, in order (a TCP stream each).
    links: BTreeMap<Rank, Vec<Message>>,
    tasks: Vec<TaskId>,
    frames: Vec<Frame>,
    revealed: BTreeSet<TaskId>,
    durable: BTreeSet<TaskId>,
    pending_batch: Option<PersistBatch>,
}

impl Sim {
    fn new() -> Sim {
        let config = LeaderConfig {
            epoch: Epoch(5),
            world_size: WORLD,
            window_steps: WINDOW,
            retention_steps: 64,
            heartbeat_timeout_ms: 1_000,
            start_ms: 0,
            max_frame_bytes: 16 << 20,
        };
        Sim {
            leader: Leader::new(config, None).unwrap(),
            followers: (1..WORLD)
                .map(|r| Follower::new(Epoch(5), Rank(r), 64))
                .collect(),
            links: BTreeMap::new(),
            tasks: Vec::new(),
            frames: Vec::new(),
            revealed: BTreeSet::new(),
            durable: BTreeSet::new(),
            pending_batch: None,
        }
    }

    fn apply(&mut self, a: &Action) -> Result<(), TestCaseError> {
        match a {
            Action::Start { load } => {
                let r = RequestId(self.tasks.len() as u64);
                let t = if *load {
                    self.leader
                        .start_load(r, vec![BlockHash(1)], vec![PageId(1)])
                } else {
                    self.leader.start_store(
                        r,
                        vec![BlockHash(2)],
                        vec![PageId(2)],
                        vec![Tier::Host],
                    )
                };
                self.tasks.push(t);
            }
            Action::Report { task, rank, fail } => {
                let Some(&task) = self.tasks.get(*task) else {
                    return Ok(());
                };
                // A rank reports only tasks whose start it has seen in a sealed frame.
                let seen = self
                    .frames
                    .iter()
                    .any(|f| f.started().any(|(_, s)| s.task == task));
                if !seen {
                    return Ok(());
                }
                let result = if *fail {
                    Err("copy failed".to_string())
                } else {
                    Ok(())
                };
                let report = ShardReport {
                    epoch: Epoch(5),
                    task,
                    rank: Rank(*rank),
                    result,
                };
                let out = self.leader.handle_report(&report);
                prop_assert!(out.is_ok(), "report rejected: {:?}", out);
            }
            Action::Persist { ok } => {
                if self.pending_batch.is_none() {
                    self.pending_batch = self.leader.poll_persist();
                }
                if let Some(b) = self.pending_batch.take() {
                    if *ok {
                        self.leader.handle_persisted(b.id).unwrap();
                        self.durable.extend(b.outcomes.iter().map(|o| o.task));
                    } else {
                        self.leader.handle_persist_failed(b.id).unwrap();
                    }
                }
            }
            Action::Seal => {
                let step = self.leader.open_step();
                let unrevealed: BTreeSet<TaskId> = self
                    .leader
                    .durable_unrevealed()
                    .iter()
                    .map(|o| o.task)
                    .collect();
                match self.leader.seal(step, 0) {
                    Ok(frame) => {
                        prop_assert_eq!(frame.step, Step(self.frames.len() as u64));
                        let got: BTreeSet<TaskId> = frame.finished.iter().map(|o| o.task).collect();
                        // Exactly the durable, unrevealed outcomes; each revealed once.
                        prop_assert_eq!(&got, &unrevealed);
                        for o in &frame.finished {
                            prop_assert!(self.durable.contains(&o.task));
                            prop_assert!(self.revealed.insert(o.task), "revealed twice");
                        }
                        while let Some((rank, msg)) = self.leader.poll_transmit() {
                            self.links.entry(rank).or_default().push(msg);
                        }
                        self.frames.push(frame);
                    }
                    Err(LeaderError::WindowFull {
                        step: s,
                        slowest_ack,
                        window,
                        ..
                    }) => {
                        let base = slowest_ack.map_or(0, |a| a.0 + 1);
                        prop_assert!(s.0 >= base + window);
                    }
                    Err(e) => prop_assert!(false, "unexpected seal error {e}"),
                }
            }
            Action::Deliver { rank } => {
                let msgs = std::mem::take(self.links.entry(Rank(*rank)).or_default());
                let f = &mut self.followers[*rank as usize - 1];
                for m in msgs {
                    prop_assert_eq!(f.handle_message(m), Ok(()));
                }
            }
            Action::Read { rank, back } => {
                let f = &self.followers[*rank as usize - 1];
                let Some(last) = f.received_step() else {
                    return Ok(());
                };
                let step = Step(last.0.saturating_sub(*back));
                let a = f.read(step).unwrap().cloned();
                let b = f.read(step).unwrap().cloned();
                prop_assert_eq!(&a, &b);
                prop_assert_eq!(a.as_ref(), self.frames.get(step.0 as usize));
            }
            Action::Ack { rank } => {
                let f = &mut self.followers[*rank as usize - 1];
                if let Some(step) = f.received_step() {
                    let msg = f.ack(step).unwrap();
                    prop_assert_eq!(self.leader.handle_message(Rank(*rank), &msg, 0), Ok(None));
                }
            }
        }
        self.check()
    }

    fn check(&self) -> Result<(), TestCaseError> {
        if let (Some(sealed), slowest) = (self.leader.sealed_step(), self.leader.slowest_ack()) {
            let base = slowest.map_or(0, |a| a.0 + 1);
            prop_assert!(
                sealed.0 < base + WINDOW,
                "sealed {sealed} beyond the window"
            );
        }
        for f in &self.followers {
            if let Some(last) = f.received_step() {
                for s in 0..=last.0 {
                    prop_assert_eq!(f.read(Step(s)).unwrap(), self.frames.get(s as usize));
                }
            }
        }
        // Every started task is either in flight, durable-unrevealed or revealed.
        let in_flight: BTreeSet<TaskId> = self.leader.in_flight().iter().map(|t| t.task).collect();
        let unrevealed: BTreeSet<TaskId> = self
            .leader
            .durable_unrevealed()
            .iter()
            .map(|o| o.task)
            .collect();
        for t in &self.tasks {
            let places = [
                in_flight.contains(t),
                unrevealed.contains(t),
                self.revealed.contains(t),
            ];
            prop_assert_eq!(
                places.iter().filter(|p| **p).count(),
                1,
                "task {} in {:?}",
                t,
                places
            );
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_schedules_keep_the_invariants(actions in prop::collection::vec(action(), 1..120)) {
        let mut sim = Sim::new();
        for a in &actions {
            sim.apply(a)?;
        }
        // Drain: every start made durable and revealed, every task reported by every rank,
        // persisted, sealed and delivered.
        sim.apply(&Action::Persist { ok: true })?;
        sim.apply(&Action::Persist { ok: true })?;
        for _ in 0..2 {
            sim.apply(&Action::Seal)?;
            for r in 1..WORLD {
                sim.apply(&Action::Deliver { rank: r })?;
                sim.apply(&Action::Ack { rank: r })?;
            }
        }
        for i in 0..sim.tasks.len() {
            for rank in 0..WORLD {
                sim.apply(&Action::Report { task: i, rank, fail: false })?;
            }
        }
        sim.apply(&Action::Persist { ok: true })?;
        sim.apply(&Action::Persist { ok: true })?;
        for _ in 0..2 {
            for r in 1..WORLD {
                sim.apply(&Action::Deliver { rank: r })?;
                sim.apply(&Action::Ack { rank: r })?;
            }
            sim.apply(&Action::Seal)?;
        }
        let all: BTreeSet<TaskId> = sim.tasks.iter().copied().collect();
        prop_assert_eq!(&sim.revealed, &all, "every finished task reaches every engine");
    }
}
