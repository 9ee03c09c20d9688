//! The supervisor's entry point: connect to the log, continue from the stored state, launch
//! the agents when asked, and run the [`SupervisorActor`] until it stops.
//!
//! Owns start-up and the [`Exit`]. The start-up waits (Redis unreachable, the stored state
//! unreadable) retry every [`crate::cadence::REDIS_RETRY_MS`] and end as soon as the
//! [`CancellationToken`] is cancelled. How to start from the stored state is
//! [`crate::restart::resume`]'s decision; the restart loop is the actor's. Its state lives in
//! the log, so a restarted supervisor continues where the previous one stopped, without
//! restarting a healthy group. While Redis is unreachable it decides nothing: it cannot see
//! the group.

use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use rand::Rng;
use tandem_config::TandemConfig;
use tandem_durable::{
    DurableConfig, DurableError, EpochStore, GroupState, RedisLog, SupervisorState, SystemClock,
    WallClock,
};
use tokio_util::sync::CancellationToken;

use crate::actor::{Backends, SupervisorActor, SupervisorWiring};
use crate::cadence::{machine_config, policy, Cadence};
use crate::launcher::{LaunchSpec, Launcher};
use crate::restart::{fresh_state, resume, RestartMachine, Resume};
use crate::view::{view, Sight};

pub use crate::view::{
    Published, RankView, RestartRecord, SharedView, SupervisorView, RESTART_HISTORY_LEN,
};

/// Why the supervisor stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    /// Its shutdown token was cancelled (SIGTERM or SIGINT at the binary).
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

/// The supervisor of one group.
pub struct Supervisor {
    config: TandemConfig,
    world_size: u32,
    published: Published,
    launch: Option<LaunchSpec>,
}

impl Supervisor {
    /// A supervisor for the group in `config`; with `launch` it starts the agents itself.
    pub fn new(config: TandemConfig, launch: Option<LaunchSpec>) -> Self {
        let world_size = config.group.world_size();
        let published = Published::new(&config.group.id, world_size);
        let s = &config.supervisor;
        published.metrics.set_limits(
            s.max_restarts,
            Duration::from_secs(s.restart_window_s),
            Duration::from_millis(s.heartbeat_timeout_ms),
        );
        Supervisor {
            config,
            world_size,
            published,
            launch,
        }
    }

    /// What the HTTP handlers read.
    pub fn published(&self) -> Published {
        self.published.clone()
    }

    /// Runs against Redis (the `[redis]` section) until `shutdown` is cancelled or the restart limit
    /// is reached. Must run inside an actix system.
    ///
    /// # Errors
    /// [`SupervisorError::Durable`] for a URL or group name Redis can never accept;
    /// [`SupervisorError::Io`] when the agents cannot be launched.
    pub async fn run(self, shutdown: CancellationToken) -> Result<Exit, SupervisorError> {
        let Some(log) = self.connect(&shutdown).await? else {
            return Ok(Exit::Stopped);
        };
        let backends = Backends {
            epochs: Arc::new(log.clone()),
            liveness: Arc::new(log),
        };
        self.run_with(backends, Arc::new(SystemClock), shutdown)
            .await
    }

    /// Runs against `backends` on `clock` (what [`Self::run`] does once connected; tests pass
    /// `tandem_durable::MemoryLog`). Must run inside an actix system.
    ///
    /// # Errors
    /// As [`Self::run`].
    pub async fn run_with(
        self,
        backends: Backends,
        clock: Arc<dyn WallClock>,
        shutdown: CancellationToken,
    ) -> Result<Exit, SupervisorError> {
        let cadence = Cadence::from_config(&self.config.supervisor);
        let machine_config = machine_config(&self.config.supervisor, self.world_size);
        let Some(state) = self
            .load_state(&*backends.epochs, &cadence, &shutdown)
            .await
        else {
            return Ok(Exit::Stopped);
        };
        if let GroupState::Failed { reason } = &state.state {
            tracing::error!(%reason, "the group was marked failed by an earlier supervisor; clear it with `tandem supervisor --reset` after fixing the cause");
            let machine = RestartMachine::new(machine_config, state.clone(), clock.now_ms());
            let v = view(
                &self.config.group.id,
                self.world_size,
                &machine,
                Sight {
                    beats: &[],
                    members: &[],
                    redis: "ok",
                    history: &[],
                },
                cadence.heartbeat_timeout_ms,
                machine_config.policy.window_ms,
                clock.now_ms(),
            );
            self.published.publish(v, cadence.heartbeat_timeout_ms);
            return Ok(Exit::GroupFailed(reason.clone()));
        }
        let launcher = match self.launch.clone() {
            Some(spec) => Some(Launcher::start(spec, self.world_size).map_err(|source| {
                SupervisorError::Io {
                    what: "cannot launch agents".into(),
                    source,
                }
            })?),
            None => None,
        };
        let (done, exit) = tokio::sync::oneshot::channel();
        SupervisorActor::new(SupervisorWiring {
            group: self.config.group.id.clone(),
            world_size: self.world_size,
            machine: RestartMachine::new(machine_config, state, clock.now_ms()),
            backends,
            clock,
            launcher,
            published: self.published.clone(),
            cadence,
            window_ms: policy(&self.config.supervisor).window_ms,
            jitter: Box::new(|| rand::thread_rng().gen()),
            shutdown,
            autonomous: true,
            done,
        })
        .start();
        exit.await.unwrap_or(Ok(Exit::Stopped))
    }

    /// Connects to Redis, retrying while it is unreachable; `None` once `shutdown` is
    /// cancelled.
    async fn connect(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<RedisLog>, SupervisorError> {
        let Some(cfg) = DurableConfig::from_config(
            &self.config.redis,
            self.config.group.id.clone(),
            self.world_size,
        ) else {
            return Err(DurableError::InvalidEndpoint {
                reason: "no Redis configured (redis.url, redis.cluster_nodes or redis.sentinels)"
                    .into(),
            }
            .into());
        };
        let retry =
            Duration::from_millis(Cadence::from_config(&self.config.supervisor).redis_retry_ms);
        let mut logged = false;
        loop {
            let attempt = tokio::select! {
                r = RedisLog::connect(&cfg) => r,
                _ = shutdown.cancelled() => return Ok(None),
            };
            match attempt {
                Ok(log) => return Ok(Some(log)),
                Err(
                    e @ (DurableError::InvalidGroup { .. }
                    | DurableError::InvalidUrl { .. }
                    | DurableError::InvalidEndpoint { .. }),
                ) => return Err(e.into()),
                Err(e) => {
                    if !logged {
                        tracing::warn!(error = %e, "Redis unreachable; retrying");
                        logged = true;
                    }
                    self.published.update(|v| v.redis = e.to_string());
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = shutdown.cancelled() => return Ok(None),
            }
        }
    }

    /// The state to continue from, retrying while the log cannot be read; `None` once
    /// `shutdown` is cancelled.
    async fn load_state(
        &self,
        epochs: &dyn EpochStore,
        cadence: &Cadence,
        shutdown: &CancellationToken,
    ) -> Option<SupervisorState> {
        loop {
            let attempt = tokio::select! {
                r = start_state(epochs) => r,
                _ = shutdown.cancelled() => return None,
            };
            match attempt {
                Ok(state) => return Some(state),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the supervisor state; retrying");
                    self.published.update(|v| v.redis = e.to_string());
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(cadence.redis_retry_ms)) => {}
                _ = shutdown.cancelled() => return None,
            }
        }
    }
}

/// Reads the stored state and the epoch counter and acts on [`resume`]'s decision.
///
/// # Errors
/// The log's, for any of its calls.
pub async fn start_state(epochs: &dyn EpochStore) -> Result<SupervisorState, DurableError> {
    let stored = epochs.load_supervisor_state().await?;
    let current = epochs.current_epoch().await?;
    let epoch = match resume(stored, current) {
        Resume::Continue(state) => {
            tracing::info!(epoch = state.epoch.0, state = %state.state, "continuing from the stored supervisor state");
            return Ok(state);
        }
        Resume::Adopt {
            state,
            stored_epoch,
        } => {
            tracing::warn!(
                stored = stored_epoch.0,
                current = state.epoch.0,
                "stored state names another epoch; continuing at the counter's"
            );
            return Ok(state);
        }
        Resume::FirstEpoch => epochs.next_epoch().await?,
        Resume::Fresh(epoch) => epoch,
    };
    let state = fresh_state(epoch);
    epochs.save_supervisor_state(&state).await?;
    tracing::info!(epoch = epoch.0, "group starts");
    Ok(state)
}
