//! [`SupervisorMetrics`]: every Prometheus family the group supervisor exports.
//!
//! Owns the supervisor's [`Registry`] and a handle per series. It never reads a clock:
//! the supervisor passes ages and backoffs it computed from its own time input.
//!
//! Every sample carries the constant label `group`.
//!
//! | family | type | labels | what |
//! |---|---|---|---|
//! | `tandem_supervisor_restarts_total` | counter | | group restarts ordered |
//! | `tandem_supervisor_group_state` | gauge | `state` | 1 for the current state, 0 for the others |
//! | `tandem_supervisor_epoch` | gauge | | the group's current epoch |
//! | `tandem_supervisor_ranks_alive` | gauge | | ranks whose heartbeat is fresh |
//! | `tandem_supervisor_ranks_expected` | gauge | | the group's world size |
//! | `tandem_supervisor_heartbeat_age_seconds` | gauge | `rank` | time since the rank's last heartbeat |
//! | `tandem_supervisor_restart_backoff_seconds` | gauge | | wait before the next restart (0 when none is pending) |
//! | `tandem_supervisor_restarts_in_window` | gauge | | restarts inside the restart window now |
//! | `tandem_supervisor_max_restarts` | gauge | | `supervisor.max_restarts`: restarts allowed in the window |
//! | `tandem_supervisor_restart_window_seconds` | gauge | | `supervisor.restart_window_s` |
//! | `tandem_supervisor_heartbeat_timeout_seconds` | gauge | | `supervisor.heartbeat_timeout_ms`, in seconds |
//! | `tandem_supervisor_redis_up` | gauge | | 1 when the supervisor's last Redis reads succeeded, else 0 |
//! | `tandem_supervisor_last_recovery_seconds` | gauge | | last restart: from the failure to every rank joined |
//!
//! The configured limits are exported so that alert rules compare against the values this
//! group runs with, not copies of them (`deploy/prometheus/rules/`).

use std::borrow::Cow;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::agent::saturating_i64;
use crate::encode::{encode_or_comment, try_encode, Exposition, TextFormat};
use crate::error::MetricsError;
use crate::labels::GroupState;
use crate::total::SyncedCounter;

type SecondsGauge = Gauge<f64, AtomicU64>;

/// The metrics of the group supervisor. Share it behind an `Arc`; every method takes
/// `&self`.
#[derive(Debug)]
pub struct SupervisorMetrics {
    registry: Registry,
    restarts: SyncedCounter,
    group_state: [Gauge; 5],
    epoch: Gauge,
    ranks_alive: Gauge,
    ranks_expected: Gauge,
    heartbeat_age: Family<[(&'static str, u32); 1], SecondsGauge>,
    restart_backoff: SecondsGauge,
    restarts_in_window: Gauge,
    max_restarts: Gauge,
    restart_window: SecondsGauge,
    heartbeat_timeout: SecondsGauge,
    redis_up: Gauge,
    last_recovery: SecondsGauge,
}

impl SupervisorMetrics {
    /// Create every family for group `group` (constant label `group`), in state
    /// [`GroupState::Starting`].
    pub fn new(group: &str) -> Self {
        let labels: [(Cow<'static, str>, Cow<'static, str>); 1] =
            [("group".into(), group.to_owned().into())];
        let mut registry =
            Registry::with_prefix_and_labels("tandem_supervisor", labels.into_iter());

        let restarts = SyncedCounter::default();
        registry.register(
            "restarts",
            "Group restarts ordered by the supervisor",
            restarts.clone(),
        );

        let states = Family::<[(&'static str, &'static str); 1], Gauge>::default();
        let group_state =
            GroupState::ALL.map(|s| states.get_or_create_owned(&[("state", s.as_str())]));
        registry.register(
            "group_state",
            "1 for the group's current state, 0 for the others",
            states,
        );

        let epoch = Gauge::default();
        registry.register("epoch", "The group's current epoch", epoch.clone());

        let ranks_alive = Gauge::default();
        registry.register(
            "ranks_alive",
            "Ranks whose heartbeat is fresh",
            ranks_alive.clone(),
        );

        let ranks_expected = Gauge::default();
        registry.register(
            "ranks_expected",
            "Ranks in the group (world size)",
            ranks_expected.clone(),
        );

        let heartbeat_age = Family::<[(&'static str, u32); 1], SecondsGauge>::default();
        registry.register_with_unit(
            "heartbeat_age",
            "Time since the rank's last heartbeat",
            Unit::Seconds,
            heartbeat_age.clone(),
        );

        let restart_backoff = SecondsGauge::default();
        registry.register_with_unit(
            "restart_backoff",
            "Wait before the next group restart, 0 when none is pending",
            Unit::Seconds,
            restart_backoff.clone(),
        );

        let restarts_in_window = Gauge::default();
        registry.register(
            "restarts_in_window",
            "Group restarts inside the restart window now (the supervisor gives up at max_restarts)",
            restarts_in_window.clone(),
        );
        let max_restarts = Gauge::default();
        registry.register(
            "max_restarts",
            "Restarts allowed within the restart window (supervisor.max_restarts)",
            max_restarts.clone(),
        );
        let restart_window = SecondsGauge::default();
        registry.register_with_unit(
            "restart_window",
            "Window of the restart limit (supervisor.restart_window_s)",
            Unit::Seconds,
            restart_window.clone(),
        );
        let heartbeat_timeout = SecondsGauge::default();
        registry.register_with_unit(
            "heartbeat_timeout",
            "A rank silent for longer than this has failed (supervisor.heartbeat_timeout_ms)",
            Unit::Seconds,
            heartbeat_timeout.clone(),
        );
        let redis_up = Gauge::default();
        registry.register(
            "redis_up",
            "1 when the supervisor's last Redis reads succeeded, else 0 (it decides nothing then)",
            redis_up.clone(),
        );
        let last_recovery = SecondsGauge::default();
        registry.register_with_unit(
            "last_recovery",
            "The last restart: from the failure to every rank joined the new epoch",
            Unit::Seconds,
            last_recovery.clone(),
        );

        let metrics = Self {
            registry,
            restarts,
            group_state,
            epoch,
            ranks_alive,
            ranks_expected,
            heartbeat_age,
            restart_backoff,
            restarts_in_window,
            max_restarts,
            restart_window,
            heartbeat_timeout,
            redis_up,
            last_recovery,
        };
        metrics.set_group_state(GroupState::Starting);
        metrics
    }

    /// `tandem_supervisor_restarts_total`.
    pub fn restarts(&self) -> &SyncedCounter {
        &self.restarts
    }

    /// Set `tandem_supervisor_group_state`: 1 for `state`, 0 for every other state.
    pub fn set_group_state(&self, state: GroupState) {
        for (i, gauge) in self.group_state.iter().enumerate() {
            gauge.set(i64::from(i == state.index()));
        }
    }

    /// The state whose gauge is 1 (the last one set).
    pub fn group_state(&self) -> Option<GroupState> {
        GroupState::ALL
            .into_iter()
            .find(|s| self.group_state[s.index()].get() == 1)
    }

    /// Set `tandem_supervisor_epoch` (saturates at `i64::MAX`).
    pub fn set_epoch(&self, epoch: u64) {
        self.epoch.set(saturating_i64(epoch));
    }

    /// Set `tandem_supervisor_ranks_alive`.
    pub fn set_ranks_alive(&self, ranks: u32) {
        self.ranks_alive.set(i64::from(ranks));
    }

    /// Set `tandem_supervisor_ranks_expected` (the world size).
    pub fn set_ranks_expected(&self, ranks: u32) {
        self.ranks_expected.set(i64::from(ranks));
    }

    /// Set `tandem_supervisor_heartbeat_age_seconds{rank}`.
    pub fn set_heartbeat_age(&self, rank: u32, age: Duration) {
        self.heartbeat_age
            .get_or_create(&[("rank", rank)])
            .set(age.as_secs_f64());
    }

    /// Drop the heartbeat series of `rank` (a rank that is no longer part of the group).
    /// Returns whether it existed.
    pub fn forget_rank(&self, rank: u32) -> bool {
        self.heartbeat_age.remove(&[("rank", rank)])
    }

    /// Set `tandem_supervisor_restart_backoff_seconds` (zero when no restart is pending).
    pub fn set_restart_backoff(&self, backoff: Duration) {
        self.restart_backoff.set(backoff.as_secs_f64());
    }

    /// Set `tandem_supervisor_restarts_in_window`.
    pub fn set_restarts_in_window(&self, restarts: u32) {
        self.restarts_in_window.set(i64::from(restarts));
    }

    /// Set the configured limits: `tandem_supervisor_max_restarts`,
    /// `tandem_supervisor_restart_window_seconds` and
    /// `tandem_supervisor_heartbeat_timeout_seconds`.
    pub fn set_limits(&self, max_restarts: u32, window: Duration, heartbeat_timeout: Duration) {
        self.max_restarts.set(i64::from(max_restarts));
        self.restart_window.set(window.as_secs_f64());
        self.heartbeat_timeout.set(heartbeat_timeout.as_secs_f64());
    }

    /// Set `tandem_supervisor_redis_up`.
    pub fn set_redis_up(&self, up: bool) {
        self.redis_up.set(i64::from(up));
    }

    /// Set `tandem_supervisor_last_recovery_seconds`.
    pub fn set_last_recovery(&self, recovery: Duration) {
        self.last_recovery.set(recovery.as_secs_f64());
    }

    /// The registry, to add process-specific families next to these.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The OpenMetrics text of every family, ending with `# EOF`. Never fails; see
    /// [`crate::encode::encode_or_comment`].
    pub fn encode_text(&self) -> String {
        encode_or_comment(&self.registry, TextFormat::OpenMetrics)
    }

    /// The Prometheus text 0.0.4 of every family (what `promtool check metrics` reads).
    pub fn encode_prometheus_text(&self) -> String {
        encode_or_comment(&self.registry, TextFormat::Prometheus)
    }

    /// The body and content type for a `/metrics` request with this `Accept` header.
    pub fn exposition(&self, accept: Option<&str>) -> Exposition {
        let format = TextFormat::from_accept(accept);
        Exposition {
            content_type: format.content_type(),
            body: encode_or_comment(&self.registry, format),
        }
    }

    /// As [`SupervisorMetrics::encode_text`] in `format`, with the error.
    ///
    /// # Errors
    /// [`MetricsError::Encode`] when the library refuses.
    pub fn try_encode(&self, format: TextFormat) -> Result<String, MetricsError> {
        try_encode(&self.registry, format)
    }
}
