//! What the supervisor shows: the `/status` and `/readyz` snapshot and the metrics.
//!
//! Owns [`SupervisorView`] (the data the HTTP handlers read) and its computation from the
//! restart machine and the last observation, as a pure function ([`view`]), plus
//! [`Published::publish`], which stores it and sets the metrics. It never decides anything
//! about the group.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tandem_durable::{GroupState, Heartbeat};
use tandem_proto::Rank;

use crate::restart::RestartMachine;

/// One rank as the supervisor sees it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RankView {
    /// The rank.
    pub rank: u32,
    /// Milliseconds since its last heartbeat.
    pub heartbeat_age_ms: Option<u64>,
    /// The epoch its last heartbeat named.
    pub epoch: Option<u64>,
    /// Joined the current epoch.
    pub joined: bool,
}

/// Restart records the status keeps, newest last; older ones are dropped.
pub const RESTART_HISTORY_LEN: usize = 50;

/// One group restart, for the status page's history.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RestartRecord {
    /// When the new epoch began, wall-clock ms since the Unix epoch.
    pub unix_ms: u64,
    /// The epoch that failed.
    pub from_epoch: u64,
    /// The new epoch.
    pub epoch: u64,
    /// The first failure that caused it (as logged).
    pub cause: String,
    /// Backoff waited before the restart, ms.
    pub backoff_ms: u64,
}

/// What `/status` and `/readyz` report.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SupervisorView {
    /// The group.
    pub group: String,
    /// The current epoch.
    pub epoch: u64,
    /// `healthy`, `restarting` or `failed` (`starting` before the first round).
    pub state: String,
    /// Why not healthy.
    pub reason: Option<String>,
    /// Ready: healthy, every rank joined the epoch and is heartbeating.
    pub ready: bool,
    /// Restarts inside the current window.
    pub restarts_in_window: usize,
    /// Restarts since this supervisor process started.
    pub restarts_total: u64,
    /// Milliseconds from the last failure to every rank joined, for the last restart.
    pub last_recovery_ms: Option<u64>,
    /// Every rank.
    pub ranks: Vec<RankView>,
    /// `ok`, or why Redis cannot be used.
    pub redis: String,
    /// When this snapshot was taken, wall-clock ms since the Unix epoch.
    pub unix_ms: u64,
    /// `supervisor.heartbeat_timeout_ms`.
    pub heartbeat_timeout_ms: u64,
    /// `supervisor.max_restarts`: restarts allowed within the window.
    pub max_restarts: u32,
    /// `supervisor.restart_window_s`.
    pub restart_window_s: u64,
    /// The last [`RESTART_HISTORY_LEN`] restarts this supervisor ordered, oldest first.
    pub restart_history: Vec<RestartRecord>,
}

impl SupervisorView {
    /// The view before the supervisor has read anything.
    pub fn starting(group: &str) -> Self {
        SupervisorView {
            group: group.to_string(),
            epoch: 0,
            state: "starting".into(),
            reason: Some("connecting to Redis".into()),
            ready: false,
            restarts_in_window: 0,
            restarts_total: 0,
            last_recovery_ms: None,
            ranks: Vec::new(),
            redis: "connecting".into(),
            unix_ms: 0,
            heartbeat_timeout_ms: 0,
            max_restarts: 0,
            restart_window_s: 0,
            restart_history: Vec::new(),
        }
    }
}

/// Shared, read-only snapshot for the HTTP handlers.
pub type SharedView = Arc<Mutex<SupervisorView>>;

/// What the HTTP handlers read: the snapshot and the metrics.
#[derive(Clone)]
pub struct Published {
    /// The status snapshot.
    pub view: SharedView,
    /// The supervisor's metrics.
    pub metrics: Arc<tandem_metrics::SupervisorMetrics>,
}

/// The last thing the supervisor saw of the group.
#[derive(Clone, Copy, Debug)]
pub struct Sight<'a> {
    /// Every rank's last heartbeat (empty while blind).
    pub beats: &'a [Option<Heartbeat>],
    /// The ranks that joined the current epoch (empty while blind).
    pub members: &'a [Rank],
    /// `ok`, or why Redis could not be read.
    pub redis: &'a str,
    /// The restarts this supervisor ordered, oldest first.
    pub history: &'a [RestartRecord],
}

/// The view of `group` (`world_size` ranks) at `now_ms`: the machine's state and what was
/// last seen. Ready when healthy, every rank joined and beat within `heartbeat_timeout_ms`,
/// and Redis answers.
pub fn view(
    group: &str,
    world_size: u32,
    machine: &RestartMachine,
    seen: Sight<'_>,
    heartbeat_timeout_ms: u64,
    window_ms: u64,
    now_ms: u64,
) -> SupervisorView {
    let state = machine.state();
    let shown = machine.shown_state();
    let ranks: Vec<RankView> = (0..world_size)
        .map(|r| {
            let b = seen.beats.get(r as usize).copied().flatten();
            RankView {
                rank: r,
                heartbeat_age_ms: b.map(|b| now_ms.saturating_sub(b.unix_ms)),
                epoch: b.map(|b| b.epoch.0),
                joined: seen.members.contains(&Rank(r)),
            }
        })
        .collect();
    let healthy = shown == GroupState::Healthy;
    let redis_ok = seen.redis == "ok";
    let all_live = ranks.iter().all(|r| {
        r.joined
            && r.heartbeat_age_ms
                .is_some_and(|a| a <= heartbeat_timeout_ms)
    });
    let ready = healthy && all_live && redis_ok;
    let reason = if ready {
        None
    } else if !healthy {
        Some(shown.to_string())
    } else if !redis_ok {
        Some(format!("Redis unreachable: {}", seen.redis))
    } else {
        let missing: Vec<u32> = ranks.iter().filter(|r| !r.joined).map(|r| r.rank).collect();
        Some(format!(
            "waiting for ranks {missing:?} to join epoch {}",
            state.epoch.0
        ))
    };
    SupervisorView {
        group: group.to_string(),
        epoch: state.epoch.0,
        state: shown.name().to_string(),
        reason,
        ready,
        restarts_in_window: state
            .restarts_ms
            .iter()
            .filter(|t| now_ms.saturating_sub(**t) < window_ms)
            .count(),
        restarts_total: machine.restarts_total(),
        last_recovery_ms: machine.last_recovery_ms(),
        ranks,
        redis: seen.redis.to_string(),
        unix_ms: now_ms,
        heartbeat_timeout_ms,
        max_restarts: machine.config().policy.max_restarts,
        restart_window_s: window_ms / 1_000,
        restart_history: seen.history.to_vec(),
    }
}

impl Published {
    /// Fresh metrics and a `starting` view for `group` of `world_size` ranks.
    pub fn new(group: &str, world_size: u32) -> Self {
        let metrics = Arc::new(tandem_metrics::SupervisorMetrics::new(group));
        metrics.set_ranks_expected(world_size);
        Published {
            view: Arc::new(Mutex::new(SupervisorView::starting(group))),
            metrics,
        }
    }

    /// A copy of the current view.
    pub fn snapshot(&self) -> Option<SupervisorView> {
        self.view.lock().ok().map(|v| v.clone())
    }

    /// Changes the stored view in place (a poisoned lock is left alone: the handlers
    /// report it).
    pub fn update(&self, f: impl FnOnce(&mut SupervisorView)) {
        if let Ok(mut v) = self.view.lock() {
            f(&mut v);
        }
    }

    /// Stores `v` for the handlers and sets the metrics it implies.
    pub fn publish(&self, v: SupervisorView, heartbeat_timeout_ms: u64) {
        let m = &self.metrics;
        m.set_epoch(v.epoch);
        m.set_group_state(match v.state.as_str() {
            "healthy" => tandem_metrics::GroupState::Healthy,
            "failed" => tandem_metrics::GroupState::Failed,
            _ => tandem_metrics::GroupState::Restarting,
        });
        let alive = v
            .ranks
            .iter()
            .filter(|r| {
                r.heartbeat_age_ms
                    .is_some_and(|a| a <= heartbeat_timeout_ms)
            })
            .count();
        m.set_ranks_alive(u32::try_from(alive).unwrap_or(u32::MAX));
        for r in &v.ranks {
            match r.heartbeat_age_ms {
                Some(age) => m.set_heartbeat_age(r.rank, Duration::from_millis(age)),
                // No heartbeat key (expired, or never written): no age to report, rather than
                // the last one frozen.
                None => {
                    m.forget_rank(r.rank);
                }
            }
        }
        m.set_redis_up(v.redis == "ok");
        m.set_restarts_in_window(u32::try_from(v.restarts_in_window).unwrap_or(u32::MAX));
        if let Some(ms) = v.last_recovery_ms {
            m.set_last_recovery(Duration::from_millis(ms));
        }
        self.update(|stored| *stored = v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restart::{fresh_state, MachineConfig};
    use crate::RestartPolicy;
    use tandem_proto::Epoch;

    fn machine() -> RestartMachine {
        let config = MachineConfig {
            policy: RestartPolicy {
                max_restarts: 3,
                window_ms: 60_000,
                backoff_initial_ms: 100,
                backoff_max_ms: 1_000,
            },
            world_size: 2,
            heartbeat_timeout_ms: 500,
            startup_grace_ms: 5_000,
        };
        RestartMachine::new(config, fresh_state(Epoch(3)), 1_000)
    }

    fn beat(unix_ms: u64) -> Option<Heartbeat> {
        Some(Heartbeat {
            epoch: Epoch(3),
            unix_ms,
            incarnation: 1,
        })
    }

    #[test]
    fn ready_only_when_healthy_joined_live_and_redis_answers() {
        let m = machine();
        let beats = [beat(9_900), beat(9_800)];
        let both = [Rank(0), Rank(1)];
        let see = |members, redis| Sight {
            beats: &beats,
            members,
            redis,
            history: &[],
        };
        let v = view("g", 2, &m, see(&both, "ok"), 500, 60_000, 10_000);
        assert!(v.ready, "{v:?}");
        assert_eq!(v.reason, None);
        assert_eq!(v.ranks[1].heartbeat_age_ms, Some(200));
        assert_eq!(v.state, "healthy");

        let v = view("g", 2, &m, see(&both[..1], "ok"), 500, 60_000, 10_000);
        assert_eq!(
            v.reason.as_deref(),
            Some("waiting for ranks [1] to join epoch 3")
        );
        let v = view("g", 2, &m, see(&both, "down"), 500, 60_000, 10_000);
        assert_eq!(v.reason.as_deref(), Some("Redis unreachable: down"));
        let v = view("g", 2, &m, see(&both, "ok"), 500, 60_000, 10_400);
        assert!(!v.ready, "rank 1's heartbeat is 600 ms old");
    }
}
