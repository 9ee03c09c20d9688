//! Every retry, cadence and batch figure of the supervisor, in one place: the configurable
//! ones from `[supervisor]` of the configuration, the fixed ones as named constants.
//!
//! Owns these numbers and nothing else; the restart decisions that use them are
//! [`crate::restart`]'s.

use tandem_config::SupervisorConfig;

use crate::policy::RestartPolicy;
use crate::restart::MachineConfig;

/// How long ranks have to send a first heartbeat when the supervisor starts watching (at its
/// own start, and after each restart of the group), ms: an agent restarted by a restart
/// policy opens its tiers (and reads its manifest) before it beats.
pub const STARTUP_GRACE_MS: u64 = 30_000;

/// Pause between attempts to reach Redis, or to read the stored state, at start-up, ms.
pub const REDIS_RETRY_MS: u64 = 500;

/// Failure reports taken from the log per round.
pub const REPORTS_PER_ROUND: usize = 64;

/// Failure reports drained when the epoch moves: whatever the failing epoch still reported is
/// about it, not about the new one.
pub const REPORTS_DRAINED_AT_RESTART: usize = 1024;

/// How long launched agents get to stop after SIGTERM before they are killed, ms.
pub const AGENT_STOP_GRACE_MS: u64 = 10_000;

/// The supervisor's timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cadence {
    /// One round of observation each, ms (`supervisor.heartbeat_interval_ms`).
    pub round_ms: u64,
    /// A rank silent for longer has failed, ms (`supervisor.heartbeat_timeout_ms`).
    pub heartbeat_timeout_ms: u64,
    /// [`STARTUP_GRACE_MS`].
    pub startup_grace_ms: u64,
    /// [`REDIS_RETRY_MS`].
    pub redis_retry_ms: u64,
    /// [`REPORTS_PER_ROUND`].
    pub reports_per_round: usize,
    /// [`REPORTS_DRAINED_AT_RESTART`].
    pub reports_drained_at_restart: usize,
    /// [`AGENT_STOP_GRACE_MS`].
    pub agent_stop_grace_ms: u64,
}

impl Cadence {
    /// The cadence for `config`, with the fixed figures above.
    pub fn from_config(config: &SupervisorConfig) -> Self {
        Cadence {
            round_ms: config.heartbeat_interval_ms.max(1),
            heartbeat_timeout_ms: config.heartbeat_timeout_ms,
            startup_grace_ms: STARTUP_GRACE_MS,
            redis_retry_ms: REDIS_RETRY_MS,
            reports_per_round: REPORTS_PER_ROUND,
            reports_drained_at_restart: REPORTS_DRAINED_AT_RESTART,
            agent_stop_grace_ms: AGENT_STOP_GRACE_MS,
        }
    }
}

/// The restart intensity and backoff of `config`.
pub fn policy(config: &SupervisorConfig) -> RestartPolicy {
    RestartPolicy {
        max_restarts: config.max_restarts,
        window_ms: config.restart_window_s.saturating_mul(1000),
        backoff_initial_ms: config.backoff_initial_ms,
        backoff_max_ms: config.backoff_max_ms,
    }
}

/// The restart machine's parameters for a group of `world_size` ranks.
pub fn machine_config(config: &SupervisorConfig, world_size: u32) -> MachineConfig {
    let cadence = Cadence::from_config(config);
    MachineConfig {
        policy: policy(config),
        world_size,
        heartbeat_timeout_ms: cadence.heartbeat_timeout_ms,
        startup_grace_ms: cadence.startup_grace_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_come_from_the_config_or_the_named_constants() {
        let c = SupervisorConfig {
            heartbeat_interval_ms: 250,
            heartbeat_timeout_ms: 2_000,
            max_restarts: 4,
            restart_window_s: 30,
            ..SupervisorConfig::default()
        };
        let cadence = Cadence::from_config(&c);
        assert_eq!(cadence.round_ms, 250);
        assert_eq!(cadence.heartbeat_timeout_ms, 2_000);
        assert_eq!(cadence.startup_grace_ms, STARTUP_GRACE_MS);
        let m = machine_config(&c, 8);
        assert_eq!(m.policy.window_ms, 30_000);
        assert_eq!(m.policy.max_restarts, 4);
        assert_eq!(m.world_size, 8);
    }
}
