//! The supervisor's restart state machine, sans IO: what a supervisor does about what it
//! sees of the group, as plain data.
//!
//! Owns the group-level decisions: which observations are failures of the current epoch,
//! the one_for_all decision (a failure of any rank restarts every rank into a new epoch),
//! backoff as a deadline (reset once a restarted group is healthy again: every rank joined),
//! when a restarted group is healthy again, when to give up, and
//! what to save so that a restarted supervisor continues ([`resume`]). Inputs are `handle_*`
//! calls that carry the wall-clock time (ms since the Unix epoch) and, for a decision, a
//! jitter in `[0, 1)`; outputs are [`Effect`]s the driver carries out in order, and
//! [`RestartMachine::poll_timeout`], the next deadline. It never sleeps, reads a clock, draws
//! randomness or talks to Redis: the driver ([`crate::actor::SupervisorActor`]) does, through
//! the `tandem_durable` traits. Restart intensity is [`RestartPolicy`]'s, silence is
//! [`silent_ranks`]'s, a restart inside the epoch (a new incarnation in a rank's heartbeat,
//! however fast) [`changed_incarnations`]'s.
//!
//! # Phases
//!
//! ```text
//! Watching ──failure──▶ Backoff{until} ──deadline──▶ Moving ──epoch moved──▶ Watching
//!    │                      ▲                          │                    (restarting)
//!    │                      └────── move failed ───────┘
//!    └──failure past the limit──▶ Failed
//! ```
//!
//! While a restart is pending (Backoff, Moving) further failures are about the failing
//! epoch and change nothing; agents that exit meanwhile are started again with the others.

use tandem_durable::{FailureReport, GroupState, Heartbeat, SupervisorState};
use tandem_proto::{Epoch, Rank};

use crate::liveness::{changed_incarnations, silent_ranks};
use crate::policy::{Decision, RestartPolicy};

/// The machine's fixed parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MachineConfig {
    /// Restart intensity and backoff.
    pub policy: RestartPolicy,
    /// Ranks in the group.
    pub world_size: u32,
    /// A rank whose last heartbeat is older than this is silent, ms.
    pub heartbeat_timeout_ms: u64,
    /// How long ranks have to send a first heartbeat once watching starts (at start-up and
    /// after each restart), ms.
    pub startup_grace_ms: u64,
}

/// What the driver saw of the group in one round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// Launched agents that exited since the last round, each described.
    pub exited: Vec<String>,
    /// Failure reports taken from the log (of any epoch; only the current one's count).
    pub reports: Vec<FailureReport>,
    /// Every rank's last heartbeat, by rank.
    pub beats: Vec<Option<Heartbeat>>,
    /// The ranks that joined the current epoch.
    pub members: Vec<Rank>,
}

/// What the driver must do or report, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// A failure of the current epoch (for the log).
    Failure(String),
    /// Every rank joined the restarted epoch: the group is healthy again, `recovery_ms`
    /// after the failure that started the restart.
    Recovered {
        /// The epoch.
        epoch: Epoch,
        /// From the first failure to every rank joined, ms.
        recovery_ms: Option<u64>,
    },
    /// The one_for_all decision: every rank restarts into a new epoch after `delay_ms`.
    RestartScheduled {
        /// Backoff before the epoch moves, ms.
        delay_ms: u64,
        /// The failure that decided it.
        reason: String,
    },
    /// Save this state (what a restarted supervisor continues from).
    Save(SupervisorState),
    /// The backoff is over: drain the failed epoch's failure reports, move the epoch
    /// (`EpochStore::next_epoch`), and answer with [`RestartMachine::handle_epoch_moved`]
    /// or [`RestartMachine::handle_move_failed`].
    MoveEpoch,
    /// The group restarted into `epoch`.
    Restarted {
        /// The new epoch.
        epoch: Epoch,
        /// The backoff it waited, ms.
        backoff_ms: u64,
        /// Why.
        reason: String,
    },
    /// Start again every launched agent that is not running.
    RelaunchAgents,
    /// Past the restart limit: the group is marked failed (the state to save came first);
    /// stop, and let the outer supervisor take over.
    GiveUp {
        /// Names the limit and the failure that reached it.
        reason: String,
    },
}

/// Where the machine is between rounds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Watching the current epoch (healthy, or restarting until every rank joined).
    Watching,
    /// A restart is decided; the epoch moves at `until_ms`.
    Backoff {
        until_ms: u64,
        delay_ms: u64,
        reason: String,
    },
    /// [`Effect::MoveEpoch`] was issued and not answered yet.
    Moving { delay_ms: u64, reason: String },
    /// Gave up.
    Failed,
}

/// How a supervisor starts from what is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resume {
    /// Continue from the stored state: it names the counter's epoch.
    Continue(SupervisorState),
    /// The stored state names `stored_epoch`, the counter another: continue at the
    /// counter's epoch, keeping the restart history.
    Adopt {
        /// The state to continue from.
        state: SupervisorState,
        /// The epoch the stored state named.
        stored_epoch: Epoch,
    },
    /// Nothing stored and no epoch yet: move to the first epoch, then start healthy there.
    FirstEpoch,
    /// Nothing stored, the counter at this epoch: start healthy there.
    Fresh(Epoch),
}

/// Decides how to start from the stored state and the epoch counter.
pub fn resume(stored: Option<SupervisorState>, current: Epoch) -> Resume {
    match stored {
        Some(state) if state.epoch == current => Resume::Continue(state),
        Some(state) => Resume::Adopt {
            stored_epoch: state.epoch,
            state: SupervisorState {
                epoch: current,
                ..state
            },
        },
        None if current == Epoch(0) => Resume::FirstEpoch,
        None => Resume::Fresh(current),
    }
}

/// The state a fresh group starts with at `epoch`.
pub fn fresh_state(epoch: Epoch) -> SupervisorState {
    SupervisorState {
        epoch,
        restarts_ms: Vec::new(),
        state: GroupState::Healthy,
    }
}

/// The restart state machine of one group (see the module docs).
#[derive(Clone, Debug)]
pub struct RestartMachine {
    config: MachineConfig,
    state: SupervisorState,
    phase: Phase,
    /// Since when the current epoch is watched (start-up, a restart, Redis back).
    watching_since_ms: u64,
    /// The first failure of the restart under way.
    failed_at_ms: Option<u64>,
    last_recovery_ms: Option<u64>,
    /// When the group last became healthy again after a restart (0: not since this machine
    /// started): restarts before it no longer grow the backoff. Not saved: a restarted
    /// supervisor backs off from its whole history, the cautious side.
    recovered_at_ms: u64,
    restarts_total: u64,
    /// Each rank's incarnation seen in the current epoch's heartbeats (cleared when the epoch
    /// moves).
    incarnations: Vec<Option<u64>>,
}

impl RestartMachine {
    /// A machine continuing from `state` at `now_ms` (a failed state gives up at once: see
    /// [`Self::gave_up`]).
    pub fn new(config: MachineConfig, state: SupervisorState, now_ms: u64) -> Self {
        let phase = match state.state {
            GroupState::Failed { .. } => Phase::Failed,
            _ => Phase::Watching,
        };
        RestartMachine {
            config,
            state,
            phase,
            watching_since_ms: now_ms,
            failed_at_ms: None,
            last_recovery_ms: None,
            recovered_at_ms: 0,
            restarts_total: 0,
            incarnations: Vec::new(),
        }
    }

    /// The configuration the machine decides with.
    pub fn config(&self) -> &MachineConfig {
        &self.config
    }

    /// The state as saved: the epoch the group runs in, the restart history, and healthy,
    /// restarting or failed.
    pub fn state(&self) -> &SupervisorState {
        &self.state
    }

    /// The state to show: as saved, except `restarting` while a restart is pending.
    pub fn shown_state(&self) -> GroupState {
        match &self.phase {
            Phase::Backoff { reason, .. } | Phase::Moving { reason, .. } => {
                GroupState::Restarting {
                    reason: reason.clone(),
                }
            }
            _ => self.state.state.clone(),
        }
    }

    /// The epoch the group runs in (or restarts into): the one whose members count.
    pub fn epoch(&self) -> Epoch {
        self.state.epoch
    }

    /// Restarts this machine carried out.
    pub fn restarts_total(&self) -> u64 {
        self.restarts_total
    }

    /// From the failure to every rank joined, for the last restart, ms.
    pub fn last_recovery_ms(&self) -> Option<u64> {
        self.last_recovery_ms
    }

    /// True once the machine gave up (or started from a failed state).
    pub fn gave_up(&self) -> bool {
        self.phase == Phase::Failed
    }

    /// The next deadline: when the pending restart moves the epoch (wall-clock ms).
    pub fn poll_timeout(&self) -> Option<u64> {
        match self.phase {
            Phase::Backoff { until_ms, .. } => Some(until_ms),
            _ => None,
        }
    }

    /// The time is `now_ms`: moves the epoch once the backoff is over.
    pub fn handle_timeout(&mut self, now_ms: u64) -> Vec<Effect> {
        match &self.phase {
            Phase::Backoff {
                until_ms,
                delay_ms,
                reason,
            } if now_ms >= *until_ms => {
                self.phase = Phase::Moving {
                    delay_ms: *delay_ms,
                    reason: reason.clone(),
                };
                vec![Effect::MoveEpoch]
            }
            _ => Vec::new(),
        }
    }

    /// The log could not be read: nothing is decided, and silence is judged afresh from
    /// `now_ms` once it is back (the gap is the log's, not the ranks').
    pub fn handle_blind(&mut self, now_ms: u64) {
        self.watching_since_ms = now_ms;
    }

    /// What the driver saw at `now_ms`; `jitter` in `[0, 1)` scales a backoff.
    pub fn handle_observation(
        &mut self,
        seen: &Observation,
        now_ms: u64,
        jitter: f64,
    ) -> Vec<Effect> {
        if self.phase != Phase::Watching {
            return Vec::new();
        }
        let mut failures = self.failures(seen, now_ms);
        failures.extend(
            changed_incarnations(&mut self.incarnations, &seen.beats, self.state.epoch)
                .iter()
                .map(|r| r.describe()),
        );
        let mut out = Vec::new();
        let all_joined = (0..self.config.world_size).all(|r| seen.members.contains(&Rank(r)));
        if matches!(self.state.state, GroupState::Restarting { .. })
            && all_joined
            && failures.is_empty()
        {
            self.last_recovery_ms = self.failed_at_ms.take().map(|t| now_ms.saturating_sub(t));
            self.recovered_at_ms = now_ms;
            self.state.state = GroupState::Healthy;
            out.push(Effect::Recovered {
                epoch: self.state.epoch,
                recovery_ms: self.last_recovery_ms,
            });
            out.push(Effect::Save(self.state.clone()));
        }
        let Some(first) = failures.first().cloned() else {
            return out;
        };
        out.extend(failures.into_iter().map(Effect::Failure));
        out.extend(self.one_for_all(first, now_ms, jitter));
        out
    }

    /// The epoch moved to `epoch` at `now_ms`: the group is restarting there.
    pub fn handle_epoch_moved(&mut self, epoch: Epoch, now_ms: u64) -> Vec<Effect> {
        let Phase::Moving { delay_ms, reason } =
            std::mem::replace(&mut self.phase, Phase::Watching)
        else {
            return Vec::new();
        };
        self.state = SupervisorState {
            epoch,
            restarts_ms: self.config.policy.record(&self.state.restarts_ms, now_ms),
            state: GroupState::Restarting {
                reason: reason.clone(),
            },
        };
        self.restarts_total += 1;
        self.watching_since_ms = now_ms;
        self.incarnations.clear();
        vec![
            Effect::Save(self.state.clone()),
            Effect::Restarted {
                epoch,
                backoff_ms: delay_ms,
                reason,
            },
            Effect::RelaunchAgents,
        ]
    }

    /// The epoch could not be moved at `now_ms`: try again at the next round, without a new
    /// decision (the failure is not lost, the history not counted twice).
    pub fn handle_move_failed(&mut self, now_ms: u64) {
        if let Phase::Moving { delay_ms, reason } = &self.phase {
            self.phase = Phase::Backoff {
                until_ms: now_ms,
                delay_ms: *delay_ms,
                reason: reason.clone(),
            };
        }
    }

    /// The failures of the current epoch in `seen`: exited agents, reports of this epoch,
    /// silent ranks.
    fn failures(&self, seen: &Observation, now_ms: u64) -> Vec<String> {
        let mut failures = seen.exited.clone();
        failures.extend(
            seen.reports
                .iter()
                .filter(|r| r.epoch == self.state.epoch)
                .map(|r| format!("rank {} reported: {}", r.rank, r.reason)),
        );
        let timeout = self.config.heartbeat_timeout_ms;
        failures.extend(
            silent_ranks(
                &seen.beats,
                now_ms,
                self.watching_since_ms,
                timeout,
                self.config.startup_grace_ms,
            )
            .iter()
            .map(|s| s.describe(timeout)),
        );
        failures
    }

    /// The one_for_all decision about a failure of any rank: the whole group restarts into a
    /// new epoch after the policy's backoff, or the group is failed past the limit.
    fn one_for_all(&mut self, failure: String, now_ms: u64, jitter: f64) -> Vec<Effect> {
        self.failed_at_ms.get_or_insert(now_ms);
        match self.config.policy.decide(
            &self.state.restarts_ms,
            self.recovered_at_ms,
            now_ms,
            jitter,
            &failure,
        ) {
            Decision::GiveUp { reason } => {
                self.phase = Phase::Failed;
                self.state.state = GroupState::Failed {
                    reason: reason.clone(),
                };
                vec![Effect::Save(self.state.clone()), Effect::GiveUp { reason }]
            }
            Decision::Restart { delay_ms } => {
                self.phase = Phase::Backoff {
                    until_ms: now_ms.saturating_add(delay_ms),
                    delay_ms,
                    reason: failure.clone(),
                };
                let mut out = vec![Effect::RestartScheduled {
                    delay_ms,
                    reason: failure,
                }];
                out.extend(self.handle_timeout(now_ms));
                out
            }
        }
    }
}

#[cfg(test)]
#[path = "restart_tests.rs"]
mod tests;
