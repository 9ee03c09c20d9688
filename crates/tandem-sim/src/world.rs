//! The simulated world and its one loop: a virtual clock, a queue of scheduled events, the
//! timers of every core, epoch loop and the supervisor, all driven from one thread.
//!
//! Owns [`World`] (every rank's agent, engine and store, the network, the log, the supervisor,
//! the checker), the event queue and [`World::run`]. Each turn takes the earliest of the due
//! timers and the queued events, carries it out (the handlers live in `agent.rs`, `engine.rs`,
//! `net.rs`, `faults.rs` and `supervisor.rs`), then checks the invariants that hold after every
//! event. It never reads a real clock or draws randomness other than from the seeded
//! generator, so a seed replays exactly.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tandem_core::ConnId;
use tandem_durable::{ManualClock, MemoryLog};
use tandem_proto::{Epoch, Message};

use crate::agent::Agent;
use crate::check::{Checker, Violation};
use crate::config::{SimConfig, PAGES, WALL_BASE_MS};
use crate::engine::Engine;
use crate::faults::Faults;
use crate::net::Conn;
use crate::report::SeedReport;
use crate::store::{Copy, RankStore};
use crate::supervisor::Sup;

/// Something scheduled to happen at a virtual time.
#[derive(Debug)]
pub(crate) enum Ev {
    /// Rank `r`'s engine acts.
    EngineTick(u32),
    /// A peer message arrives on `conn`; `to_leader`: from the follower to the leader.
    Deliver {
        conn: ConnId,
        to_leader: bool,
        msg: Message,
    },
    /// One side of `conn` notices it is gone.
    ConnLost { conn: ConnId, leader_side: bool },
    /// A copy of rank `rank`'s store (started by agent `inc`) finishes.
    CopyDone { rank: u32, inc: u64, copy: Copy },
    /// A slow answer of the log to rank `rank`'s agent `inc`.
    LogAnswer {
        rank: u32,
        inc: u64,
        answer: crate::agent::LogAnswer,
    },
    /// Follower `rank` (agent `inc`) tries to join its leader in `epoch`.
    Join { rank: u32, inc: u64, epoch: Epoch },
    /// Rank `rank`'s agent process starts.
    Launch(u32),
    /// The supervisor process starts.
    LaunchSupervisor,
    /// Draw and inject the next fault.
    Fault,
    /// A timed fault ends.
    Heal(crate::faults::Heal),
}

/// The whole simulated group.
pub(crate) struct World {
    pub(crate) cfg: SimConfig,
    pub(crate) rng: ChaCha8Rng,
    pub(crate) now: u64,
    pub(crate) world: u32,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Ev>,
    seq: u64,
    pub(crate) clock: ManualClock,
    pub(crate) log: MemoryLog,
    pub(crate) agents: Vec<Option<Agent>>,
    pub(crate) engines: Vec<Engine>,
    pub(crate) stores: Vec<RankStore>,
    pub(crate) conns: BTreeMap<ConnId, Conn>,
    pub(crate) next_conn: u64,
    pub(crate) next_inc: u64,
    pub(crate) sup: Sup,
    pub(crate) faults: Faults,
    pub(crate) check: Checker,
    pub(crate) report: SeedReport,
    pub(crate) trace: Vec<String>,
}

impl World {
    /// A group drawn from `seed`: 1 to 4 ranks, every agent and the supervisor launching at 0.
    pub(crate) fn new(seed: u64, cfg: SimConfig) -> World {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let world = match rng.gen_range(0..10) {
            0 => 1,
            1..=4 => 2,
            5..=7 => 3,
            _ => 4,
        };
        let clock = ManualClock::new(WALL_BASE_MS);
        let log = MemoryLog::with_clock(world, Arc::new(clock.clone()));
        let mut w = World {
            cfg,
            rng,
            now: 0,
            world,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            seq: 0,
            clock,
            log,
            agents: (0..world).map(|_| None).collect(),
            engines: (0..world).map(|r| Engine::new(r, PAGES)).collect(),
            stores: (0..world).map(|_| RankStore::default()).collect(),
            conns: BTreeMap::new(),
            next_conn: 1,
            next_inc: 1,
            sup: Sup::default(),
            faults: Faults {
                slow_link_until: vec![0; world as usize],
                partitioned_until: vec![0; world as usize],
                duplicate: vec![0; world as usize],
                ..Faults::default()
            },
            check: Checker::default(),
            report: SeedReport {
                seed,
                world,
                ..SeedReport::default()
            },
            trace: Vec::new(),
        };
        w.schedule(0, Ev::LaunchSupervisor);
        for r in 0..world {
            w.schedule(0, Ev::Launch(r));
            w.schedule(1, Ev::EngineTick(r));
        }
        if w.cfg.faults_per_s > 0.0 {
            let first = w.fault_gap();
            w.schedule(first, Ev::Fault);
        }
        w
    }

    /// Schedules `ev` at `at` (virtual ms); events at one time run in the order scheduled.
    pub(crate) fn schedule(&mut self, at: u64, ev: Ev) {
        let id = self.seq;
        self.seq += 1;
        self.queue.push(Reverse((at.max(self.now), id)));
        self.events.insert(id, ev);
    }

    /// A line for the trace (kept only with `SimConfig::trace`).
    pub(crate) fn note(&mut self, line: impl FnOnce() -> String) {
        if self.cfg.trace {
            let l = line();
            self.trace.push(format!("{:>6} ms  {l}", self.now));
        }
    }

    /// When the active phase (faults, new tasks) ends.
    pub(crate) fn active(&self) -> bool {
        self.now < self.cfg.active_ms
    }

    /// The earliest timer of every core, epoch loop and the supervisor.
    fn next_timer(&self) -> Option<u64> {
        let mut t: Option<u64> = None;
        let mut take = |x: Option<u64>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        for a in self.agents.iter().flatten() {
            take(a.lp.poll_timeout());
            take(a.core.as_ref().and_then(|c| c.poll_timeout()));
        }
        take(self.sup.next_timer());
        t
    }

    /// Runs to the end of the settle time, or to the first violation.
    pub(crate) fn run(mut self) -> (SeedReport, Option<Violation>, Vec<String>) {
        let end = self.cfg.active_ms + self.cfg.settle_ms;
        let mut same_time = 0u64;
        loop {
            let next_ev = self.queue.peek().map(|Reverse((t, _))| *t);
            let next_timer = self.next_timer();
            let t = match (next_ev, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            if t > end {
                break;
            }
            if t <= self.now {
                same_time += 1;
            } else {
                same_time = 0;
            }
            if same_time > 100_000 {
                let what = "more than 100000 events at one instant: a livelock".to_string();
                self.check.fail(4, self.now, what);
                break;
            }
            self.now = self.now.max(t);
            self.clock.set(WALL_BASE_MS + self.now);
            if next_timer.is_some_and(|x| x <= self.now) {
                self.fire_timers();
            } else if let Some(Reverse((_, id))) = self.queue.pop() {
                if let Some(ev) = self.events.remove(&id) {
                    self.handle(ev);
                }
            }
            self.report.events += 1;
            self.after_event();
            if self.check.violation.is_some() {
                break;
            }
        }
        self.now = self.now.max(end);
        if self.check.violation.is_none() {
            self.end_checks();
        }
        self.report.epochs = self.sup.epoch().0;
        self.report.frames_sealed = self.check.frames_sealed() as u64;
        self.report.outcomes = self.check.outcomes_seen() as u64;
        for e in &self.engines {
            let t = e.book.tally();
            self.report.duplicates += t.duplicates;
            self.report.redelivered += t.redelivered_unacked;
            self.report.not_started += t.not_started;
        }
        (self.report, self.check.violation, self.trace)
    }

    fn fire_timers(&mut self) {
        let now = self.now;
        for r in 0..self.world {
            let due = |t: Option<u64>| t.is_some_and(|t| t <= now);
            let Some(a) = self.agents[r as usize].as_ref() else {
                continue;
            };
            if due(a.core.as_ref().and_then(|c| c.poll_timeout())) {
                if let Some(c) = self.agents[r as usize]
                    .as_mut()
                    .and_then(|a| a.core.as_mut())
                {
                    c.handle_timeout(now);
                }
                self.pump(r);
            }
            let Some(a) = self.agents[r as usize].as_mut() else {
                continue;
            };
            if due(a.lp.poll_timeout()) {
                a.lp.handle_timeout(now);
                self.pump(r);
            }
        }
        if self.sup.next_timer().is_some_and(|t| t <= now) {
            self.supervisor_timer();
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::EngineTick(r) => self.engine_tick(r),
            Ev::Deliver {
                conn,
                to_leader,
                msg,
            } => self.deliver(conn, to_leader, msg),
            Ev::ConnLost { conn, leader_side } => self.conn_lost(conn, leader_side),
            Ev::CopyDone { rank, inc, copy } => self.copy_done(rank, inc, copy),
            Ev::LogAnswer { rank, inc, answer } => self.log_answer(rank, inc, answer),
            Ev::Join { rank, inc, epoch } => self.join(rank, inc, epoch),
            Ev::Launch(r) => self.launch(r),
            Ev::LaunchSupervisor => self.launch_supervisor(),
            Ev::Fault => {
                if self.active() {
                    self.inject_fault();
                    let gap = self.fault_gap();
                    self.schedule(self.now + gap, Ev::Fault);
                }
            }
            Ev::Heal(h) => self.heal(h),
        }
    }

    /// The time to the next fault, ms: exponential around the configured rate.
    fn fault_gap(&mut self) -> u64 {
        let mean_ms = 1_000.0 / self.cfg.faults_per_s;
        let u: f64 = self.rng.gen_range(1e-6..1.0);
        ((-u.ln()) * mean_ms).ceil() as u64
    }
}
