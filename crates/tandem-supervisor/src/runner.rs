//! The supervisor's loop: watch every rank, restart the whole group into a new epoch when any
//! rank fails, give up past the restart limit.
//!
//! Each tick (the heartbeat interval) it reads failure reports and heartbeats from Redis and,
//! when it launched the agents, their exits. On a failure of the current epoch it asks the
//! [`RestartPolicy`], waits the backoff, increments the epoch in Redis (agents watch the
//! counter and restart their actors into it) and waits until every rank has joined. Its state
//! (epoch, restart history, healthy/restarting/failed) lives in Redis, so a restarted
//! supervisor continues where the previous one stopped, without restarting a healthy group.
//! While Redis is unreachable it decides nothing: it cannot see the group.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;
use serde::Serialize;
use tandem_config::TandemConfig;
use tandem_durable::liveness::Heartbeat;
use tandem_durable::{CompletionLog, DurableConfig, GroupState, SupervisorState};
use tandem_proto::{Epoch, Rank};

use crate::launcher::{LaunchSpec, Launcher};
use crate::liveness::silent_ranks;
use crate::policy::{Decision, RestartPolicy};

/// How long ranks have to send a first heartbeat when the supervisor starts watching (at its
/// own start, and after each restart of the group), ms: an agent restarted by a restart policy
/// opens its tiers and verifies every shard before it beats.
const STARTUP_GRACE_MS: u64 = 30_000;

/// Why the supervisor stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    /// SIGTERM or SIGINT.
    Stopped,
    /// The restart limit was reached; the group is marked failed.
    GroupFailed(String),
}

/// Why the supervisor could not run.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// Redis refused or the group name is invalid.
    #[error("completion log: {0}")]
    Durable(#[from] tandem_durable::DurableError),
    /// Agents could not be launched, or a listener could not bind.
    #[error("{what}: {source}")]
    Io {
        /// What failed.
        what: String,
        /// The IO error.
        source: std::io::Error,
    },
}

/// One rank as the supervisor sees it.
#[derive(Clone, Debug, Serialize)]
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
#[derive(Clone, Debug, Serialize)]
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
#[derive(Clone, Debug, Serialize)]
pub struct SupervisorView {
    /// The group.
    pub group: String,
    /// The current epoch.
    pub epoch: u64,
    /// `healthy`, `restarting` or `failed`.
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

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The supervisor of one group.
pub struct Supervisor {
    config: TandemConfig,
    policy: RestartPolicy,
    world_size: u32,
    view: SharedView,
    metrics: Arc<tandem_metrics::SupervisorMetrics>,
    launcher: Option<Launcher>,
    launch: Option<LaunchSpec>,
}

impl Supervisor {
    /// A supervisor for the group in `config`; with `launch` it starts the agents itself.
    pub fn new(config: TandemConfig, launch: Option<LaunchSpec>) -> Self {
        let s = &config.supervisor;
        let policy = RestartPolicy {
            max_restarts: s.max_restarts,
            window_ms: s.restart_window_s.saturating_mul(1000),
            backoff_initial_ms: s.backoff_initial_ms,
            backoff_max_ms: s.backoff_max_ms,
        };
        let world_size = config.group.world_size();
        let view = Arc::new(Mutex::new(SupervisorView {
            group: config.group.id.clone(),
            epoch: 0,
            state: "starting".into(),
            reason: Some("connecting to Redis".into()),
            ready: false,
            restarts_in_window: 0,
            restarts_total: 0,
            last_recovery_ms: None,
            ranks: Vec::new(),
            redis: "connecting".into(),
            unix_ms: unix_ms(),
            heartbeat_timeout_ms: s.heartbeat_timeout_ms,
            max_restarts: s.max_restarts,
            restart_window_s: s.restart_window_s,
            restart_history: Vec::new(),
        }));
        let metrics = Arc::new(tandem_metrics::SupervisorMetrics::new(&config.group.id));
        metrics.set_ranks_expected(world_size);
        metrics.set_limits(
            s.max_restarts,
            Duration::from_secs(s.restart_window_s),
            Duration::from_millis(s.heartbeat_timeout_ms),
        );
        Self {
            config,
            policy,
            world_size,
            view,
            metrics,
            launcher: None,
            launch,
        }
    }

    /// What the HTTP handlers read.
    pub fn published(&self) -> Published {
        Published {
            view: self.view.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// Process ids of launched agents (for `tandem up` and chaos).
    pub fn agent_pids(&self) -> Vec<Option<u32>> {
        self.launcher
            .as_ref()
            .map(Launcher::pids)
            .unwrap_or_default()
    }

    fn set_view(&self, f: impl FnOnce(&mut SupervisorView)) {
        if let Ok(mut v) = self.view.lock() {
            f(&mut v);
        }
    }

    async fn connect(&self) -> CompletionLog {
        let cfg = DurableConfig::new(
            self.config.redis.url.clone(),
            self.config.group.id.clone(),
            self.world_size,
        );
        let mut logged = false;
        loop {
            match CompletionLog::connect(&cfg).await {
                Ok(log) => return log,
                Err(e) => {
                    if !logged {
                        tracing::warn!(error = %e, "Redis unreachable; retrying");
                        logged = true;
                    }
                    self.set_view(|v| v.redis = e.to_string());
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// Load the stored state, or start the group at a new epoch.
    async fn initial_state(&self, log: &CompletionLog) -> Result<SupervisorState, SupervisorError> {
        if let Some(state) = log.load_supervisor_state().await? {
            let current = log.current_epoch().await?;
            if current == state.epoch {
                tracing::info!(epoch = state.epoch.0, state = %state.state, "continuing from the stored supervisor state");
                return Ok(state);
            }
            tracing::warn!(
                stored = state.epoch.0,
                current = current.0,
                "stored state names another epoch; continuing at the counter's"
            );
            return Ok(SupervisorState {
                epoch: current,
                ..state
            });
        }
        let epoch = match log.current_epoch().await? {
            Epoch(0) => log.next_epoch().await?,
            e => e,
        };
        let state = SupervisorState {
            epoch,
            restarts_ms: Vec::new(),
            state: GroupState::Healthy,
        };
        log.save_supervisor_state(&state).await?;
        tracing::info!(epoch = epoch.0, "group starts");
        Ok(state)
    }

    /// Run until SIGTERM/SIGINT or the restart limit.
    ///
    /// # Errors
    /// [`SupervisorError`] when the agents cannot be launched.
    pub async fn run(
        mut self,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Result<Exit, SupervisorError> {
        let log = self.connect().await;
        let mut state = loop {
            match self.initial_state(&log).await {
                Ok(s) => break s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the supervisor state; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        if let GroupState::Failed { reason } = &state.state {
            tracing::error!(%reason, "the group was marked failed by an earlier supervisor; clear it with `tandem supervisor --reset` after fixing the cause");
            self.publish(&state, &[], &[], "ok".into(), 0, None);
            return Ok(Exit::GroupFailed(reason.clone()));
        }
        if let Some(spec) = self.launch.clone() {
            let launcher =
                Launcher::start(spec, self.world_size).map_err(|source| SupervisorError::Io {
                    what: "cannot launch agents".into(),
                    source,
                })?;
            self.launcher = Some(launcher);
        }
        let interval = Duration::from_millis(self.config.supervisor.heartbeat_interval_ms);
        let timeout_ms = self.config.supervisor.heartbeat_timeout_ms;
        let mut watching_since = unix_ms();
        let mut restarts_total = 0u64;
        let mut failed_at: Option<u64> = None;
        let mut last_recovery_ms = None;
        let mut ticker = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.changed() => {
                    if let Some(l) = self.launcher.as_mut() { l.stop(Duration::from_secs(10)).await; }
                    return Ok(Exit::Stopped);
                }
            }
            let now = unix_ms();
            // Gather what failed in the current epoch.
            let mut failures: Vec<String> = Vec::new();
            if let Some(l) = self.launcher.as_mut() {
                failures.extend(l.exited().into_iter().map(|(_, why)| why));
            }
            let reports = log.take_failures(64).await;
            let beats = log.heartbeats().await;
            let members = log.members(state.epoch).await;
            let redis = match (&reports, &beats, &members) {
                (Ok(_), Ok(_), Ok(_)) => "ok".to_string(),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => e.to_string(),
            };
            if redis != "ok" {
                // Blind without Redis: decide nothing, and judge heartbeats afresh once it is back.
                watching_since = now;
                self.publish(&state, &[], &[], redis, restarts_total, last_recovery_ms);
                continue;
            }
            let (reports, bad) = reports.unwrap_or_default();
            for b in bad {
                tracing::warn!(%b, "failure report dropped");
            }
            for r in reports {
                if r.epoch == state.epoch {
                    failures.push(format!("rank {} reported: {}", r.rank, r.reason));
                }
            }
            let beats = beats.unwrap_or_default();
            let members = members.unwrap_or_default();
            for s in silent_ranks(&beats, now, watching_since, timeout_ms, STARTUP_GRACE_MS) {
                failures.push(s.describe(timeout_ms));
            }
            let all_joined = (0..self.world_size).all(|r| members.contains(&Rank(r)));
            if matches!(state.state, GroupState::Restarting { .. })
                && all_joined
                && failures.is_empty()
            {
                last_recovery_ms = failed_at.take().map(|t| now.saturating_sub(t));
                tracing::info!(epoch = state.epoch.0, recovery_ms = ?last_recovery_ms, "every rank joined the new epoch");
                state.state = GroupState::Healthy;
                let _ = log.save_supervisor_state(&state).await;
            }
            if let Some(first) = failures.first().cloned() {
                for f in &failures {
                    tracing::warn!(epoch = state.epoch.0, failure = %f, "rank failure");
                }
                failed_at.get_or_insert(now);
                let jitter: f64 = rand::thread_rng().gen();
                match self.policy.decide(&state.restarts_ms, now, jitter, &first) {
                    Decision::GiveUp { reason } => {
                        tracing::error!(%reason, "restart limit reached: the group is marked failed");
                        state.state = GroupState::Failed {
                            reason: reason.clone(),
                        };
                        let _ = log.save_supervisor_state(&state).await;
                        self.publish(
                            &state,
                            &beats,
                            &members,
                            "ok".into(),
                            restarts_total,
                            last_recovery_ms,
                        );
                        if let Some(l) = self.launcher.as_mut() {
                            l.stop(Duration::from_secs(10)).await;
                        }
                        return Ok(Exit::GroupFailed(reason));
                    }
                    Decision::Restart { delay_ms } => {
                        self.metrics
                            .set_restart_backoff(Duration::from_millis(delay_ms));
                        self.metrics
                            .set_group_state(tandem_metrics::GroupState::Restarting);
                        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                        // Drain reports the failing epoch produced meanwhile: they are about it.
                        let _ = log.take_failures(1024).await;
                        match log.next_epoch().await {
                            Ok(epoch) => {
                                let from_epoch = state.epoch.0;
                                let now = unix_ms();
                                state = SupervisorState {
                                    epoch,
                                    restarts_ms: self.policy.record(&state.restarts_ms, now),
                                    state: GroupState::Restarting {
                                        reason: first.clone(),
                                    },
                                };
                                restarts_total += 1;
                                self.metrics.restarts().inc();
                                let record = RestartRecord {
                                    unix_ms: now,
                                    from_epoch,
                                    epoch: epoch.0,
                                    cause: first.clone(),
                                    backoff_ms: delay_ms,
                                };
                                self.set_view(|v| {
                                    v.restart_history.push(record);
                                    let extra =
                                        v.restart_history.len().saturating_sub(RESTART_HISTORY_LEN);
                                    v.restart_history.drain(..extra);
                                });
                                let _ = log.save_supervisor_state(&state).await;
                                tracing::info!(epoch = epoch.0, backoff_ms = delay_ms, reason = %first, "group restarting into a new epoch");
                                if let Some(l) = self.launcher.as_mut() {
                                    l.relaunch_missing().map_err(|source| SupervisorError::Io {
                                        what: "cannot relaunch agents".into(),
                                        source,
                                    })?;
                                }
                                watching_since = now;
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "cannot increment the epoch; will retry")
                            }
                        }
                    }
                }
            }
            self.publish(
                &state,
                &beats,
                &members,
                "ok".into(),
                restarts_total,
                last_recovery_ms,
            );
        }
    }

    fn publish(
        &self,
        state: &SupervisorState,
        beats: &[Option<Heartbeat>],
        members: &[Rank],
        redis: String,
        restarts_total: u64,
        last_recovery_ms: Option<u64>,
    ) {
        let now = unix_ms();
        let ranks: Vec<RankView> = (0..self.world_size)
            .map(|r| {
                let b = beats.get(r as usize).copied().flatten();
                RankView {
                    rank: r,
                    heartbeat_age_ms: b.map(|b| now.saturating_sub(b.unix_ms)),
                    epoch: b.map(|b| b.epoch.0),
                    joined: members.contains(&Rank(r)),
                }
            })
            .collect();
        let timeout = self.config.supervisor.heartbeat_timeout_ms;
        let healthy = state.state == GroupState::Healthy;
        let all_live = ranks
            .iter()
            .all(|r| r.joined && r.heartbeat_age_ms.is_some_and(|a| a <= timeout));
        let ready = healthy && all_live && redis == "ok";
        let reason = if ready {
            None
        } else if !healthy {
            Some(state.state.to_string())
        } else if redis != "ok" {
            Some(format!("Redis unreachable: {redis}"))
        } else {
            let missing: Vec<u32> = ranks.iter().filter(|r| !r.joined).map(|r| r.rank).collect();
            Some(format!(
                "waiting for ranks {missing:?} to join epoch {}",
                state.epoch.0
            ))
        };
        let restarts_in_window = state
            .restarts_ms
            .iter()
            .filter(|t| now.saturating_sub(**t) < self.policy.window_ms)
            .count();
        let m = &self.metrics;
        m.set_epoch(state.epoch.0);
        m.set_group_state(match &state.state {
            GroupState::Healthy => tandem_metrics::GroupState::Healthy,
            GroupState::Restarting { .. } => tandem_metrics::GroupState::Restarting,
            GroupState::Failed { .. } => tandem_metrics::GroupState::Failed,
        });
        m.set_ranks_alive(
            ranks
                .iter()
                .filter(|r| r.heartbeat_age_ms.is_some_and(|a| a <= timeout))
                .count() as u32,
        );
        for r in &ranks {
            match r.heartbeat_age_ms {
                Some(age) => m.set_heartbeat_age(r.rank, Duration::from_millis(age)),
                // No heartbeat key (expired, or never written): no age to report, rather than
                // the last one frozen.
                None => {
                    m.forget_rank(r.rank);
                }
            }
        }
        m.set_redis_up(redis == "ok");
        m.set_restarts_in_window(restarts_in_window as u32);
        if let Some(ms) = last_recovery_ms {
            m.set_last_recovery(Duration::from_millis(ms));
        }
        self.set_view(|v| {
            v.epoch = state.epoch.0;
            v.state = state.state.name().to_string();
            v.reason = reason;
            v.ready = ready;
            v.restarts_in_window = restarts_in_window;
            v.restarts_total = restarts_total;
            v.last_recovery_ms = last_recovery_ms;
            v.ranks = ranks;
            v.redis = redis;
            v.unix_ms = now;
        });
    }
}
