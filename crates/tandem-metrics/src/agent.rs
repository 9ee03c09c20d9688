//! [`AgentMetrics`]: every Prometheus family one rank's agent exports.
//!
//! Owns the agent's [`Registry`] and a typed handle per series. Every series of the fixed
//! label sets (kind, result, tier, direction) is created here, so the hot path is one
//! relaxed atomic operation on a handle and every series is visible at 0 from the first
//! scrape. It never reads a clock or a state machine: the agent's actors push values in
//! (durations they measured, counters they keep).
//!
//! Every sample carries the constant labels `group` and `rank`.
//!
//! | family | type | labels | what |
//! |---|---|---|---|
//! | `tandem_steps_sealed_total` | counter | | frames sealed (leader) or received (follower) |
//! | `tandem_frame_latency_seconds` | histogram | | leader seal → frame readable by this rank's engine |
//! | `tandem_tasks_started_total` | counter | `kind` | tasks started |
//! | `tandem_tasks_finished_total` | counter | `kind`, `result` | tasks finished: `ok`, `failed`, `aborted` |
//! | `tandem_tier_moved_bytes_total` | counter | `tier`, `direction` | bytes copied between engine pages and a tier |
//! | `tandem_tier_occupancy_blocks` | gauge | `tier` | block shards held in a tier |
//! | `tandem_tier_capacity_blocks` | gauge | `tier` | block shard slots of a tier |
//! | `tandem_evictions_total` | counter | | blocks evicted |
//! | `tandem_stream_trimmed_entries_total` | counter | | completion-stream entries trimmed (leader) |
//! | `tandem_stream_length_entries` | gauge | | entries in the completion stream (leader) |
//! | `tandem_stale_epoch_rejected_total` | counter | | messages from another epoch rejected |
//! | `tandem_restarts_total` | counter | | group restarts this agent took part in |
//! | `tandem_epoch` | gauge | | current epoch |
//! | `tandem_ready` | gauge | | 1 when ready in the current epoch, else 0 |
//! | `tandem_redis_append_latency_seconds` | histogram | | one write-ahead append to the completion stream |
//! | `tandem_engine_frames_read_total` | counter | | frames read by this rank's engine |
//! | `tandem_wait_timeouts_total` | counter | | bounded waits that ended at their deadline |
//! | `tandem_peers_joined` | gauge | | peers admitted in the current epoch |
//! | `tandem_not_ready` | gauge | `reason` | 1 for the reason this rank is not ready, 0 for the others (all 0 when ready) |
//! | `tandem_redis_up` | gauge | | 1 when this agent's last Redis call (heartbeat) succeeded, else 0 |
//! | `tandem_stream_max_length_entries` | gauge | | `redis.stream_max_len`: entries kept once acknowledged (leader) |
//! | `tandem_stores_refused_total` | counter | `reason` | store tasks the leader refused: `tier_full`, `other` |
//! | `tandem_checksum_failures_total` | counter | | shards dropped because their checksum did not match |
//! | `tandem_copy_failures_total` | counter | | shard copies between engine pages and a tier that failed |
//! | `tandem_lookup_blocks_total` | counter | `result` | blocks asked about by prefix lookups: `hit` (matched) or `miss` (leader) |
//! | `tandem_frame_limit_refusals` | counter | | engine requests refused because a frame could exceed `protocol.max_frame_bytes` (leader) |
//! | `tandem_stream_entries_rejected` | counter | | completion-stream entries ignored as duplicates or inconsistent with their entry id (recovery and delivery) |
//! | `tandem_window_stalls` | counter | | window stalls declared: the window full for longer than the heartbeat timeout (leader) |
//! | `tandem_window_stalled_follower` | gauge | | the follower rank holding a stalled window, 0 while none is (leader) |
//! | `tandem_tier_degraded` | gauge | `tier` | 1 while a transfer of the tier that missed its deadline has not ended (the tier takes nothing), else 0 |
//! | `tandem_tier_deadline_misses_total` | counter | `tier` | tier transfers that missed their deadline (`store.disk_op_deadline_ms`) |

use std::borrow::Cow;
use std::time::Duration;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::encode::{encode_or_comment, try_encode, Exposition, TextFormat};
use crate::error::MetricsError;
use crate::labels::{
    tier_index, Direction, NotReadyReason, RefusalReason, TaskKind, TaskResult, Tier,
};
use crate::total::SyncedCounter;

/// Histogram bucket upper bounds for latencies, in seconds: 50 µs to 5 s, 1-2.5-5 steps.
pub const LATENCY_BUCKETS_SECONDS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
];

type Labels1 = [(&'static str, &'static str); 1];
type Labels2 = [(&'static str, &'static str); 2];

/// The metrics of one rank's agent. Share it behind an `Arc`; every method takes `&self`.
#[derive(Debug)]
pub struct AgentMetrics {
    registry: Registry,
    steps_sealed: SyncedCounter,
    frame_latency: Histogram,
    tasks_started: [SyncedCounter; 2],
    tasks_finished: [[SyncedCounter; 3]; 2],
    moved_bytes: [[SyncedCounter; 2]; 2],
    tier_occupancy: [Gauge; 2],
    tier_capacity: [Gauge; 2],
    evictions: SyncedCounter,
    stream_trimmed: SyncedCounter,
    stream_length: Gauge,
    stale_epoch_rejected: SyncedCounter,
    restarts: SyncedCounter,
    epoch: Gauge,
    ready: Gauge,
    redis_append_latency: Histogram,
    engine_frames_read: SyncedCounter,
    wait_timeouts: SyncedCounter,
    peers_joined: Gauge,
    not_ready: [Gauge; 6],
    redis_up: Gauge,
    stream_max_length: Gauge,
    stores_refused: [SyncedCounter; 2],
    checksum_failures: SyncedCounter,
    copy_failures: SyncedCounter,
    lookup_blocks: [SyncedCounter; 2],
    frame_limit_refusals: SyncedCounter,
    stream_entries_rejected: SyncedCounter,
    window_stalls: SyncedCounter,
    window_stalled_follower: Gauge,
    tier_degraded: [Gauge; 2],
    tier_deadline_misses: [SyncedCounter; 2],
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS_SECONDS)
}

pub(crate) fn saturating_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl AgentMetrics {
    /// Create every family for rank `rank` of group `group` (constant labels `group` and
    /// `rank`). The group id is escaped in the exposition, so any string is safe.
    pub fn new(group: &str, rank: u32) -> Self {
        let labels: [(Cow<'static, str>, Cow<'static, str>); 2] = [
            ("group".into(), group.to_owned().into()),
            ("rank".into(), rank.to_string().into()),
        ];
        let mut registry = Registry::with_prefix_and_labels("tandem", labels.into_iter());

        let steps_sealed = SyncedCounter::default();
        registry.register(
            "steps_sealed",
            "Frames sealed (leader) or received (follower)",
            steps_sealed.clone(),
        );

        let frame_latency = latency_histogram();
        registry.register_with_unit(
            "frame_latency",
            "From the leader sealing a frame to the frame being readable by this rank's engine",
            Unit::Seconds,
            frame_latency.clone(),
        );

        let started = Family::<Labels1, SyncedCounter>::default();
        let tasks_started =
            TaskKind::ALL.map(|k| started.get_or_create_owned(&[("kind", k.as_str())]));
        registry.register("tasks_started", "Tasks started, by kind", started);

        let finished = Family::<Labels2, SyncedCounter>::default();
        let tasks_finished = TaskKind::ALL.map(|k| {
            TaskResult::ALL.map(|r| {
                finished.get_or_create_owned(&[("kind", k.as_str()), ("result", r.as_str())])
            })
        });
        registry.register(
            "tasks_finished",
            "Tasks finished, by kind and result (ok, failed, aborted)",
            finished,
        );

        let moved = Family::<Labels2, SyncedCounter>::default();
        let moved_bytes = Tier::PLACED.map(|t| {
            Direction::ALL.map(|d| {
                moved.get_or_create_owned(&[("tier", t.name()), ("direction", d.as_str())])
            })
        });
        registry.register_with_unit(
            "tier_moved",
            "Bytes copied between engine pages and a tier, by tier and direction",
            Unit::Bytes,
            moved,
        );

        let occupancy = Family::<Labels1, Gauge>::default();
        let tier_occupancy =
            Tier::PLACED.map(|t| occupancy.get_or_create_owned(&[("tier", t.name())]));
        registry.register_with_unit(
            "tier_occupancy",
            "Block shards held in a tier",
            Unit::Other("blocks".into()),
            occupancy,
        );

        let capacity = Family::<Labels1, Gauge>::default();
        let tier_capacity =
            Tier::PLACED.map(|t| capacity.get_or_create_owned(&[("tier", t.name())]));
        registry.register_with_unit(
            "tier_capacity",
            "Block shard slots of a tier",
            Unit::Other("blocks".into()),
            capacity,
        );

        let evictions = SyncedCounter::default();
        registry.register("evictions", "Blocks evicted", evictions.clone());

        let stream_trimmed = SyncedCounter::default();
        registry.register(
            "stream_trimmed_entries",
            "Completion-stream entries trimmed after every rank's consumer group acknowledged them (leader)",
            stream_trimmed.clone(),
        );
        let stream_length = Gauge::default();
        registry.register(
            "stream_length_entries",
            "Entries in the completion stream (leader)",
            stream_length.clone(),
        );

        let stale_epoch_rejected = SyncedCounter::default();
        registry.register(
            "stale_epoch_rejected",
            "Messages from another epoch rejected and never applied",
            stale_epoch_rejected.clone(),
        );

        let restarts = SyncedCounter::default();
        registry.register(
            "restarts",
            "Group restarts (new epochs) this agent took part in",
            restarts.clone(),
        );

        let epoch = Gauge::default();
        registry.register("epoch", "The current epoch", epoch.clone());

        let ready = Gauge::default();
        registry.register(
            "ready",
            "1 when this rank is ready in the current epoch, else 0",
            ready.clone(),
        );

        let redis_append_latency = latency_histogram();
        registry.register_with_unit(
            "redis_append_latency",
            "One write-ahead append of a step record to the Redis completion stream",
            Unit::Seconds,
            redis_append_latency.clone(),
        );

        let engine_frames_read = SyncedCounter::default();
        registry.register(
            "engine_frames_read",
            "Frames read by this rank's engine",
            engine_frames_read.clone(),
        );

        let wait_timeouts = SyncedCounter::default();
        registry.register(
            "wait_timeouts",
            "Bounded waits that ended at their deadline",
            wait_timeouts.clone(),
        );

        let peers_joined = Gauge::default();
        registry.register(
            "peers_joined",
            "Peers admitted in the current epoch",
            peers_joined.clone(),
        );

        let reasons = Family::<Labels1, Gauge>::default();
        let not_ready =
            NotReadyReason::ALL.map(|r| reasons.get_or_create_owned(&[("reason", r.as_str())]));
        registry.register(
            "not_ready",
            "1 for the reason this rank is not ready, 0 for the others; every series is 0 while it is ready",
            reasons,
        );

        let redis_up = Gauge::default();
        registry.register(
            "redis_up",
            "1 when this agent's last Redis call (its heartbeat) succeeded, else 0; 1 without Redis configured",
            redis_up.clone(),
        );
        redis_up.set(1);

        let stream_max_length = Gauge::default();
        registry.register(
            "stream_max_length_entries",
            "Entries a completion stream keeps once every rank acknowledged them (redis.stream_max_len; leader)",
            stream_max_length.clone(),
        );

        let refused = Family::<Labels1, SyncedCounter>::default();
        let stores_refused =
            RefusalReason::ALL.map(|r| refused.get_or_create_owned(&[("reason", r.as_str())]));
        registry.register(
            "stores_refused",
            "Store tasks the leader refused: tier_full (the target tier is full and every block in it is pinned) or other",
            refused,
        );

        let checksum_failures = SyncedCounter::default();
        registry.register(
            "checksum_failures",
            "Block shards dropped because their checksum did not match (a tier corrupted them)",
            checksum_failures.clone(),
        );

        let copy_failures = SyncedCounter::default();
        registry.register(
            "copy_failures",
            "Shard copies between engine pages and a tier that failed, either direction",
            copy_failures.clone(),
        );

        let lookups = Family::<Labels1, SyncedCounter>::default();
        let lookup_blocks = ["hit", "miss"].map(|r| lookups.get_or_create_owned(&[("result", r)]));
        registry.register(
            "lookup_blocks",
            "Blocks asked about by prefix lookups: hit (matched and pinned) or miss (leader)",
            lookups,
        );

        let frame_limit_refusals = SyncedCounter::default();
        registry.register(
            "frame_limit_refusals",
            "Engine requests refused because a frame could have exceeded protocol.max_frame_bytes (leader)",
            frame_limit_refusals.clone(),
        );

        let stream_entries_rejected = SyncedCounter::default();
        registry.register(
            "stream_entries_rejected",
            "Completion-stream entries ignored: duplicates of an earlier (epoch, step), or records whose epoch differs from their entry id's",
            stream_entries_rejected.clone(),
        );

        let window_stalls = SyncedCounter::default();
        registry.register(
            "window_stalls",
            "Window stalls declared: the leader's window full for longer than the heartbeat timeout because a follower stopped acknowledging (leader)",
            window_stalls.clone(),
        );

        let window_stalled_follower = Gauge::default();
        registry.register(
            "window_stalled_follower",
            "The follower rank holding a stalled window, 0 while none is (leader; rank 0 is never a follower)",
            window_stalled_follower.clone(),
        );

        let degraded = Family::<Labels1, Gauge>::default();
        let tier_degraded =
            Tier::PLACED.map(|t| degraded.get_or_create_owned(&[("tier", t.name())]));
        registry.register(
            "tier_degraded",
            "1 while a transfer of the tier that missed its deadline has not ended (the tier refuses work meanwhile), else 0",
            degraded,
        );

        let misses = Family::<Labels1, SyncedCounter>::default();
        let tier_deadline_misses =
            Tier::PLACED.map(|t| misses.get_or_create_owned(&[("tier", t.name())]));
        registry.register(
            "tier_deadline_misses",
            "Tier transfers that missed their deadline (store.disk_op_deadline_ms)",
            misses,
        );

        Self {
            registry,
            steps_sealed,
            frame_latency,
            tasks_started,
            tasks_finished,
            moved_bytes,
            tier_occupancy,
            tier_capacity,
            evictions,
            stream_trimmed,
            stream_length,
            stale_epoch_rejected,
            restarts,
            epoch,
            ready,
            redis_append_latency,
            engine_frames_read,
            wait_timeouts,
            peers_joined,
            not_ready,
            redis_up,
            stream_max_length,
            stores_refused,
            checksum_failures,
            copy_failures,
            lookup_blocks,
            frame_limit_refusals,
            stream_entries_rejected,
            window_stalls,
            window_stalled_follower,
            tier_degraded,
            tier_deadline_misses,
        }
    }

    /// Set `tandem_tier_degraded{tier}`; a tier outside [`Tier::PLACED`] has no series.
    pub fn set_tier_degraded(&self, tier: Tier, degraded: bool) {
        if let Some(i) = tier_index(tier) {
            self.tier_degraded[i].set(i64::from(degraded));
        }
    }

    /// `tandem_tier_deadline_misses_total{tier}`, in transfers; `None` for a tier outside
    /// [`Tier::PLACED`].
    pub fn tier_deadline_misses(&self, tier: Tier) -> Option<&SyncedCounter> {
        tier_index(tier).map(|i| &self.tier_deadline_misses[i])
    }

    /// `tandem_lookup_blocks_total{result}`: `hit` when `hit`, else `miss`; in blocks.
    pub fn lookup_blocks(&self, hit: bool) -> &SyncedCounter {
        &self.lookup_blocks[usize::from(!hit)]
    }

    /// Set `tandem_not_ready{reason}`: 1 for `reason`, 0 for the others; `None` (ready) sets
    /// every series to 0. Also sets `tandem_ready`.
    pub fn set_not_ready(&self, reason: Option<NotReadyReason>) {
        for (i, gauge) in self.not_ready.iter().enumerate() {
            gauge.set(i64::from(reason.is_some_and(|r| r.index() == i)));
        }
        self.ready.set(i64::from(reason.is_none()));
    }

    /// The reason whose `tandem_not_ready` series is 1, `None` when ready.
    pub fn not_ready(&self) -> Option<NotReadyReason> {
        NotReadyReason::ALL
            .into_iter()
            .find(|r| self.not_ready[r.index()].get() == 1)
    }

    /// Set `tandem_redis_up`: whether the agent's last Redis call succeeded.
    pub fn set_redis_up(&self, up: bool) {
        self.redis_up.set(i64::from(up));
    }

    /// Set `tandem_stream_max_length_entries` (the configured `redis.stream_max_len`).
    pub fn set_stream_max_length(&self, entries: u64) {
        self.stream_max_length.set(saturating_i64(entries));
    }

    /// `tandem_stores_refused_total{reason}`, in store tasks.
    pub fn stores_refused(&self, reason: RefusalReason) -> &SyncedCounter {
        &self.stores_refused[reason.index()]
    }

    /// `tandem_checksum_failures_total`, in block shards.
    pub fn checksum_failures(&self) -> &SyncedCounter {
        &self.checksum_failures
    }

    /// `tandem_copy_failures_total`, in shard copies.
    pub fn copy_failures(&self) -> &SyncedCounter {
        &self.copy_failures
    }

    /// `tandem_frame_limit_refusals_total`: requests the leader refused for the frame limit.
    pub fn frame_limit_refusals(&self) -> &SyncedCounter {
        &self.frame_limit_refusals
    }

    /// `tandem_stream_entries_rejected_total`: completion-stream entries ignored as
    /// duplicates or as inconsistent with their entry id.
    pub fn stream_entries_rejected(&self) -> &SyncedCounter {
        &self.stream_entries_rejected
    }

    /// `tandem_window_stalls_total`: window stalls declared (leader).
    pub fn window_stalls(&self) -> &SyncedCounter {
        &self.window_stalls
    }

    /// Set `tandem_window_stalled_follower`: the follower rank holding a stalled window,
    /// `None` (0) while none is.
    pub fn set_window_stalled_follower(&self, rank: Option<u32>) {
        self.window_stalled_follower
            .set(i64::from(rank.unwrap_or(0)));
    }

    /// `tandem_steps_sealed_total`: frames sealed (leader) or received (follower).
    pub fn steps_sealed(&self) -> &SyncedCounter {
        &self.steps_sealed
    }

    /// `tandem_tasks_started_total{kind}`.
    pub fn tasks_started(&self, kind: TaskKind) -> &SyncedCounter {
        &self.tasks_started[kind.index()]
    }

    /// `tandem_tasks_finished_total{kind,result}`.
    pub fn tasks_finished(&self, kind: TaskKind, result: TaskResult) -> &SyncedCounter {
        &self.tasks_finished[kind.index()][result.index()]
    }

    /// `tandem_tier_moved_bytes_total{tier,direction}`, in bytes; `None` for a tier outside
    /// [`Tier::PLACED`] (it has no series).
    pub fn moved_bytes(&self, tier: Tier, direction: Direction) -> Option<&SyncedCounter> {
        Some(&self.moved_bytes[tier_index(tier)?][direction.index()])
    }

    /// `tandem_stream_trimmed_entries_total`: completion-stream entries trimmed.
    pub fn stream_trimmed(&self) -> &SyncedCounter {
        &self.stream_trimmed
    }

    /// `tandem_stream_length_entries`: entries in the completion stream.
    pub fn set_stream_length(&self, entries: u64) {
        self.stream_length.set(entries as i64);
    }

    /// `tandem_evictions_total`, in blocks.
    pub fn evictions(&self) -> &SyncedCounter {
        &self.evictions
    }

    /// `tandem_stale_epoch_rejected_total`, in messages.
    pub fn stale_epoch_rejected(&self) -> &SyncedCounter {
        &self.stale_epoch_rejected
    }

    /// `tandem_restarts_total`: new epochs this agent joined after its first.
    pub fn restarts(&self) -> &SyncedCounter {
        &self.restarts
    }

    /// `tandem_engine_frames_read_total`, in frames.
    pub fn engine_frames_read(&self) -> &SyncedCounter {
        &self.engine_frames_read
    }

    /// `tandem_wait_timeouts_total`, in waits.
    pub fn wait_timeouts(&self) -> &SyncedCounter {
        &self.wait_timeouts
    }

    /// Record one frame's latency in `tandem_frame_latency_seconds`.
    pub fn observe_frame_latency(&self, latency: Duration) {
        self.frame_latency.observe(latency.as_secs_f64());
    }

    /// Record one append's latency in `tandem_redis_append_latency_seconds`.
    pub fn observe_redis_append_latency(&self, latency: Duration) {
        self.redis_append_latency.observe(latency.as_secs_f64());
    }

    /// Set `tandem_tier_occupancy_blocks{tier}` to `blocks` (saturates at `i64::MAX`); a tier
    /// outside [`Tier::PLACED`] has no series and is left out.
    pub fn set_tier_occupancy(&self, tier: Tier, blocks: u64) {
        if let Some(i) = tier_index(tier) {
            self.tier_occupancy[i].set(saturating_i64(blocks));
        }
    }

    /// Set `tandem_tier_capacity_blocks{tier}` to `blocks` (saturates at `i64::MAX`); a tier
    /// outside [`Tier::PLACED`] has no series and is left out.
    pub fn set_tier_capacity(&self, tier: Tier, blocks: u64) {
        if let Some(i) = tier_index(tier) {
            self.tier_capacity[i].set(saturating_i64(blocks));
        }
    }

    /// Set `tandem_epoch` (saturates at `i64::MAX`).
    pub fn set_epoch(&self, epoch: u64) {
        self.epoch.set(saturating_i64(epoch));
    }

    /// Set `tandem_ready` to 1 or 0 (prefer [`AgentMetrics::set_not_ready`], which also names
    /// the reason).
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// Set `tandem_peers_joined`.
    pub fn set_peers_joined(&self, peers: u64) {
        self.peers_joined.set(saturating_i64(peers));
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

    /// As [`AgentMetrics::encode_text`] in `format`, with the error.
    ///
    /// # Errors
    /// [`MetricsError::Encode`] when the library refuses.
    pub fn try_encode(&self, format: TextFormat) -> Result<String, MetricsError> {
        try_encode(&self.registry, format)
    }
}
