//! The supervisor, simulated as its driver: rounds that read the log (failure reports,
//! heartbeats, members of the current epoch) into an observation for the real
//! `tandem_supervisor::RestartMachine`, and its effects carried out (the epoch moved with
//! `EpochStore::next_epoch`, the state saved, dead agents relaunched).
//!
//! Owns [`Sup`] and the world's supervisor handlers. A crashed supervisor resumes from the
//! state it saved, as `tandem_supervisor::restart::resume` decides. It decides nothing itself.

use rand::Rng;
use tandem_durable::{EpochStore, LivenessStore};
use tandem_proto::Epoch;
use tandem_supervisor::restart::{fresh_state, resume, Resume};
use tandem_supervisor::{Effect, MachineConfig, Observation, RestartMachine, RestartPolicy};

use crate::agent::ready;
use crate::config::{
    HEARTBEAT_TIMEOUT_MS, LAUNCH_MS, STARTUP_GRACE_MS, SUPERVISOR_ROUND_MS, WALL_BASE_MS,
};
use crate::world::{Ev, World};

/// The supervisor process.
#[derive(Debug, Default)]
pub(crate) struct Sup {
    /// Its restart machine, while it runs.
    machine: Option<RestartMachine>,
    /// Its next round, ms.
    next_round: u64,
    /// Agents that exited since the last round (kept across a supervisor crash: the launcher
    /// sees them gone).
    pub exited: Vec<String>,
    /// The end of a backoff, as its driver wakes for it: only a deadline still ahead when a
    /// round ended (one already due waits for the next round, as the actor's does), ms.
    wake_at: Option<u64>,
    /// The last epoch it knew.
    last_epoch: Epoch,
    /// It gave up (past the restart limit).
    pub gave_up: bool,
}

impl Sup {
    /// Its next timer (a round or the end of a backoff), ms.
    pub(crate) fn next_timer(&self) -> Option<u64> {
        self.machine.as_ref()?;
        let t = self.next_round;
        Some(self.wake_at.map_or(t, |b| b.min(t)))
    }

    /// The epoch the group runs in, as the supervisor last knew it.
    pub(crate) fn epoch(&self) -> Epoch {
        self.machine.as_ref().map_or(self.last_epoch, |m| m.epoch())
    }

    /// Whether the supervisor runs.
    pub(crate) fn running(&self) -> bool {
        self.machine.is_some()
    }
}

fn machine_config(world: u32) -> MachineConfig {
    MachineConfig {
        policy: RestartPolicy {
            max_restarts: 1_000,
            window_ms: 60_000,
            backoff_initial_ms: 10,
            backoff_max_ms: 200,
        },
        world_size: world,
        heartbeat_timeout_ms: HEARTBEAT_TIMEOUT_MS,
        startup_grace_ms: STARTUP_GRACE_MS,
    }
}

impl World {
    fn wall(&self) -> u64 {
        WALL_BASE_MS + self.now
    }

    /// The supervisor process starts: it resumes from what the log holds (retried at its
    /// next round while the log is unreachable).
    pub(crate) fn launch_supervisor(&mut self) {
        if self.sup.running() || self.sup.gave_up {
            return;
        }
        let stored = ready(self.log.load_supervisor_state());
        let current = ready(self.log.current_epoch());
        let (Ok(stored), Ok(current)) = (stored, current) else {
            self.schedule(self.now + SUPERVISOR_ROUND_MS, Ev::LaunchSupervisor);
            return;
        };
        let state = match resume(stored, current) {
            Resume::Continue(s) => s,
            Resume::Adopt { state, .. } => state,
            Resume::Fresh(e) => fresh_state(e),
            Resume::FirstEpoch => match ready(self.log.next_epoch()) {
                Ok(e) => fresh_state(e),
                Err(_) => {
                    self.schedule(self.now + SUPERVISOR_ROUND_MS, Ev::LaunchSupervisor);
                    return;
                }
            },
        };
        self.note(|| format!("supervisor starts at epoch {}", state.epoch));
        // A save the log refuses now is made again with the machine's next `Save`.
        let _ = ready(self.log.save_supervisor_state(&state));
        let m = RestartMachine::new(machine_config(self.world), state, self.wall());
        self.sup.gave_up = m.gave_up();
        self.sup.machine = Some(m);
        self.sup.next_round = self.now + SUPERVISOR_ROUND_MS;
    }

    /// The supervisor process dies.
    pub(crate) fn crash_supervisor(&mut self) {
        if let Some(m) = self.sup.machine.take() {
            self.sup.last_epoch = m.epoch();
        }
    }

    /// A round or the end of a backoff.
    pub(crate) fn supervisor_timer(&mut self) {
        let wall = self.wall();
        let Some(m) = self.sup.machine.as_mut() else {
            return;
        };
        self.sup.wake_at = None;
        let mut effects = m.handle_timeout(wall);
        if self.now >= self.sup.next_round {
            self.sup.next_round = self.now + SUPERVISOR_ROUND_MS;
            effects.extend(self.round());
        }
        self.carry(effects);
        let now = self.now;
        self.sup.wake_at = self
            .sup
            .machine
            .as_ref()
            .and_then(RestartMachine::poll_timeout)
            .map(|w| w.saturating_sub(WALL_BASE_MS))
            .filter(|t| *t > now);
    }

    fn round(&mut self) -> Vec<Effect> {
        let wall = self.wall();
        let epoch = self.sup.epoch();
        let reports = ready(self.log.take_failures(64));
        let beats = ready(self.log.heartbeats());
        let members = ready(self.log.members(epoch));
        let (Ok((reports, _)), Ok(beats), Ok(members)) = (reports, beats, members) else {
            if let Some(m) = self.sup.machine.as_mut() {
                m.handle_blind(wall);
            }
            return Vec::new();
        };
        let seen = Observation {
            exited: std::mem::take(&mut self.sup.exited),
            reports,
            beats,
            members,
        };
        let jitter: f64 = self.rng.gen_range(0.0..1.0);
        match self.sup.machine.as_mut() {
            Some(m) => m.handle_observation(&seen, wall, jitter),
            None => Vec::new(),
        }
    }

    fn carry(&mut self, effects: Vec<Effect>) {
        let mut queue: std::collections::VecDeque<Effect> = effects.into();
        while let Some(e) = queue.pop_front() {
            let wall = self.wall();
            match e {
                Effect::MoveEpoch => {
                    // The failed epoch's reports are drained before it moves (as the actor
                    // does); a refused read leaves them, and they name an old epoch.
                    let _ = ready(self.log.take_failures(1_024));
                    let moved = ready(self.log.next_epoch());
                    if let Ok(epoch) = moved {
                        self.note(|| format!("supervisor moves the group to epoch {epoch}"));
                    }
                    let Some(m) = self.sup.machine.as_mut() else {
                        return;
                    };
                    match moved {
                        Ok(epoch) => queue.extend(m.handle_epoch_moved(epoch, wall)),
                        Err(_) => m.handle_move_failed(wall),
                    }
                }
                Effect::Save(state) => {
                    let _ = ready(self.log.save_supervisor_state(&state));
                }
                Effect::RelaunchAgents => {
                    for r in 0..self.world {
                        if self.agents[r as usize].is_none() {
                            self.schedule(self.now + LAUNCH_MS, Ev::Launch(r));
                        }
                    }
                }
                Effect::GiveUp { reason } => {
                    self.note(|| format!("supervisor gives up: {reason}"));
                    self.sup.gave_up = true;
                }
                Effect::Failure(f) => self.note(|| format!("supervisor sees: {f}")),
                Effect::Recovered { .. } | Effect::RestartScheduled { .. } => {}
                Effect::Restarted { .. } => self.report.group_restarts += 1,
            }
        }
    }
}
