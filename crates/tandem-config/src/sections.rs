//! The typed configuration: one struct per TOML section.
//!
//! Every key has a default (so an empty file is a valid single-machine configuration) and a doc
//! line with its unit. `config/tandem.toml` at the repository root repeats every key with the
//! same defaults; a test keeps the two in step.

use serde::{Deserialize, Serialize};
use tandem_proto::{ConfigFingerprint, LayoutFingerprint};

use crate::layout::{LayoutError, ShardLayout};

/// The whole configuration of one Tandem process (agent, supervisor, or a local cluster).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TandemConfig {
    /// Group identity and parallel layout.
    pub group: GroupConfig,
    /// The model's KV geometry, from which the block-shard size follows.
    pub model: ModelConfig,
    /// Group protocol timing and limits.
    pub protocol: ProtocolConfig,
    /// Storage tiers of each rank.
    pub store: StoreConfig,
    /// Addresses agents listen on and connect to.
    pub network: NetworkConfig,
    /// The Redis server holding the epoch counter and the completion streams.
    pub redis: RedisConfig,
    /// Failure detection and restart policy.
    pub supervisor: SupervisorConfig,
    /// Logging.
    pub log: LogConfig,
    /// The leader's KV cache event stream.
    pub events: crate::events::EventsConfig,
}

/// `[group]`: who the ranks are and how the model is split between them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GroupConfig {
    /// Name of the group (one model instance); part of Redis keys and the handshake.
    pub id: String,
    /// Shared secret peers prove in the handshake (HMAC); at least 16 bytes. Prefer setting it
    /// with `TANDEM__GROUP__SECRET` rather than in a file.
    pub secret: String,
    /// Pipeline-parallel degree (ranks that split the layers).
    pub pp_size: u32,
    /// Tensor-parallel degree (ranks that split the KV heads).
    pub tp_size: u32,
    /// Tokens per KV block (Mooncake traces use 512).
    pub tokens_per_block: u32,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            id: "tandem-local".into(),
            secret: String::new(),
            pp_size: 1,
            tp_size: 2,
            tokens_per_block: 512,
        }
    }
}

impl GroupConfig {
    /// Ranks in the group: `pp_size × tp_size`.
    pub fn world_size(&self) -> u32 {
        self.pp_size.saturating_mul(self.tp_size)
    }
}

/// `[model]`: KV geometry of the whole model (before PP/TP splitting).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// The model's name (optional): part of the layout persisted shards are keyed by, so a
    /// restart with another model of the same shape never loads the old model's KV.
    pub id: String,
    /// Transformer layers.
    pub num_layers: u32,
    /// KV heads (grouped-query attention heads that carry K and V).
    pub num_kv_heads: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// Bytes per KV element (2 for fp16/bf16, 1 for fp8).
    pub dtype_bytes: u32,
}

impl Default for ModelConfig {
    /// A deliberately small model (512 KiB shards at TP 2) so that a local cluster and the
    /// tests fit a laptop; set real values (e.g. 32/8/128/2 for Llama-3-8B) in production.
    fn default() -> Self {
        Self {
            id: String::new(),
            num_layers: 4,
            num_kv_heads: 2,
            head_dim: 64,
            dtype_bytes: 2,
        }
    }
}

/// The default of `protocol.max_appends_in_flight`: write-ahead appends the leader keeps in
/// flight to the completion log at once.
///
/// Why 32 and not 8: the answers to a window of appends come back together, so a window of
/// `N` moves at most `N` appends per round trip plus Redis's time for them. At one outcome
/// per step, 8 in flight moved 0.33–0.38× the events per second of pipelined plain XADDs on a
/// quiet machine, 32 in flight 0.44–0.53× (target 0.5); with the leaner appends that came
/// with this default, 0.55–0.58× and 0.67–0.80× at load 1 (docs/BENCHMARKS.md, "Write-ahead
/// cost (redis)"). While Redis answers within `append_wait_ms` the depth changes nothing a frame
/// reveals; when it is slower, a frame may reveal an append's content up to 31 steps after the
/// step that made it, instead of 7, and up to 32 fenced appends fail, each with its own typed
/// error, after an epoch change.
pub const DEFAULT_MAX_APPENDS_IN_FLIGHT: u32 = 32;

/// `[protocol]`: limits and deadlines of the group protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProtocolConfig {
    /// Steps the leader may seal ahead of the slowest follower's acknowledgement (W).
    pub window_steps: u64,
    /// Deadline of a follower's wait for a frame, in milliseconds.
    pub frame_deadline_ms: u64,
    /// Sealed frames each rank keeps for positional re-reads, in steps.
    pub frame_retention_steps: u64,
    /// Largest wire message accepted, in bytes; a longer header is refused before reading.
    pub max_frame_bytes: u32,
    /// Deadline of a peer handshake, in milliseconds.
    pub handshake_timeout_ms: u64,
    /// On SIGTERM, how long an agent may take to seal its open step and flush its outcomes to
    /// Redis before it exits, in milliseconds.
    pub drain_timeout_ms: u64,
    /// How long a rank waits for its engine to bind its own pages for a store or load started
    /// without page ids, from when the task reached the rank, in milliseconds; then the rank's
    /// shard fails and with it the task on every rank. A rank's own deadline (not in the
    /// configuration fingerprint): the outcome is the quorum's whatever each rank waits.
    pub bind_timeout_ms: u64,
    /// Leader: write-ahead appends (one step record each) that may be in flight to the
    /// completion log at once, 1 to 1024. They go out in step order on one connection and are
    /// answered in that order; a frame reveals only what confirmed appends hold, at most
    /// `max_appends_in_flight - 1` steps after the step that made them (1: every step waits for
    /// its own append). With a Redis Cluster (`redis.cluster_nodes`) the leader keeps 1
    /// whatever is set: the cluster client may re-send a failed write after a later one
    /// landed, which would put a confirmed step's record after a later step's. The leader's own
    /// setting (not in the configuration fingerprint). Default
    /// [`DEFAULT_MAX_APPENDS_IN_FLIGHT`] (32; why not 8 is said there).
    pub max_appends_in_flight: u32,
    /// Leader: how long an `end_step` waits for its own append before it seals without it,
    /// in milliseconds (0 to 60 000): what that append holds is revealed by a later frame
    /// once confirmed. 0 waits only for the appends made `max_appends_in_flight - 1` steps
    /// before (most steps per second, each start and outcome revealed a step or more later);
    /// frame 0 always waits for the previous epoch's aborts. The leader's own setting (not in
    /// the configuration fingerprint).
    pub append_wait_ms: u64,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        Self {
            window_steps: 8,
            frame_deadline_ms: 5_000,
            frame_retention_steps: 1_024,
            max_frame_bytes: 16 * 1024 * 1024,
            handshake_timeout_ms: 2_000,
            drain_timeout_ms: 5_000,
            bind_timeout_ms: 5_000,
            max_appends_in_flight: DEFAULT_MAX_APPENDS_IN_FLIGHT,
            append_wait_ms: 1,
        }
    }
}

/// `[store]`: the tiers of each rank, in blocks (one block shard per slot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Host-memory tier capacity, in blocks (0 disables the host tier: stores go to disk).
    pub host_capacity_blocks: u64,
    /// Disk tier capacity, in blocks (0 disables the disk tier).
    pub disk_capacity_blocks: u64,
    /// Directory of the file-backed host tier (a tmpfs such as /dev/shm keeps it in memory and
    /// lets a restarted agent find its blocks again). `{group}` and `{rank}` are substituted.
    pub host_dir: String,
    /// Directory of the disk tier's preallocated file. `{group}` and `{rank}` are substituted.
    pub disk_dir: String,
    /// Deadline of one disk-tier transfer (one block shard read or written), in ms: a transfer
    /// not done by then fails its task with a typed deadline error, and the disk tier refuses
    /// work at once until that transfer ends (a frozen disk never hangs the rank). 1 to
    /// 3 600 000.
    pub disk_op_deadline_ms: u64,
    /// Threads that copy a task's shards side by side on each rank (the agent's store thread
    /// included); 0 picks one per CPU core, at most 4. Batches under 1 MiB are copied by one
    /// thread whatever this says. A rank's own setting (not in the configuration fingerprint).
    pub copy_workers: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            host_capacity_blocks: 1_024,
            disk_capacity_blocks: 4_096,
            host_dir: "/dev/shm/tandem/{group}/rank{rank}".into(),
            disk_dir: "/var/tmp/tandem/{group}/rank{rank}".into(),
            disk_op_deadline_ms: 5_000,
            copy_workers: 0,
        }
    }
}

/// `[network]`: listen and connect addresses. Loopback by default; binding elsewhere is an
/// explicit choice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// Address the leader (rank 0) listens on for followers, and followers connect to.
    pub leader_addr: String,
    /// Host the HTTP endpoints bind to (`/healthz`, `/readyz`, `/metrics`, `/status`).
    pub http_host: String,
    /// HTTP port of rank 0; rank `r` listens on `http_base_port + r`.
    pub http_base_port: u16,
    /// Directory of the engine endpoints: rank `r` listens on `{engine_socket_dir}/rank{r}.sock`.
    pub engine_socket_dir: String,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            leader_addr: "127.0.0.1:7400".into(),
            http_host: "127.0.0.1".into(),
            http_base_port: 7500,
            engine_socket_dir: "/tmp/tandem".into(),
        }
    }
}

/// `[redis]`: the one run-time dependency. One of three deployments: a single server
/// (`url`), a Redis Cluster (`cluster_nodes`), or a primary with replicas watched by Sentinel
/// (`sentinels` and `sentinel_master`). Every key of a group lives in one hash slot, so any
/// number of groups share one deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// Connection URL of a single server (`redis://[user:password@]host:port[/db]`);
    /// credentials may be in it or in `REDIS_URL`, and are never logged. Not used when
    /// `cluster_nodes` or `sentinels` is set. Empty (and no cluster or sentinels): no Redis.
    pub url: String,
    /// Redis Cluster seed nodes, `redis://[user:password@]host:port` each (any subset of the
    /// cluster; the client learns the rest). Empty: not a cluster.
    pub cluster_nodes: Vec<String>,
    /// Sentinel addresses, `redis://[user:password@]host:port` each (the userinfo
    /// authenticates to the sentinel). Empty: no Sentinel.
    pub sentinels: Vec<String>,
    /// The master name the sentinels monitor (`sentinel monitor NAME ...`); required with
    /// `sentinels`.
    pub sentinel_master: String,
    /// Username for the data nodes in cluster and Sentinel mode (empty: the default user, or
    /// the one in the seed URLs). A single server takes it from `url`.
    pub username: String,
    /// Password for the data nodes in cluster and Sentinel mode (empty: none, or the one in
    /// the seed URLs); prefer `TANDEM__REDIS__PASSWORD`. Never logged.
    pub password: String,
    /// Entries kept in a completion stream once every consumer group has acknowledged them
    /// (the trim never removes what a rank still needs, whatever this says). Each trim reads
    /// them all: keep it low (1,000 to 10,000) for many groups on one Redis.
    pub stream_max_len: u64,
    /// Replicas that must acknowledge each completion append (and each epoch change) before
    /// the leader reveals what it holds (Redis `WAIT`). 0: reveal once the primary has it,
    /// as before (a failover may lose the last appends).
    pub wait_replicas: u32,
    /// How long an append waits for those replicas, in milliseconds; past it the append
    /// fails, its outcomes stay unrevealed and the leader appends them again.
    pub wait_timeout_ms: u64,
    /// Least time between two acknowledgements of a rank's completion-stream entries, in
    /// milliseconds (0 to 60 000): an engine's acknowledgement of a step is recorded at once
    /// and reaches Redis (a read and an `XACK`) at most this often, covering every step
    /// acknowledged by then; never a step the engine has not acknowledged. 0: one per engine
    /// acknowledgement (a Redis round trip per rank per step). A crash loses at most this
    /// long's acknowledgements: the next epoch delivers those outcomes again and the engine
    /// client drops the ones it already has. A rank's own setting (not in the configuration
    /// fingerprint).
    pub ack_interval_ms: u64,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            cluster_nodes: Vec::new(),
            sentinels: Vec::new(),
            sentinel_master: String::new(),
            username: String::new(),
            password: String::new(),
            stream_max_len: 100_000,
            wait_replicas: 0,
            wait_timeout_ms: 500,
            ack_interval_ms: 10,
        }
    }
}

/// Which Redis deployment a [`RedisConfig`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisMode {
    /// No Redis (`url` empty, no cluster, no sentinels): one epoch, nothing durable.
    None,
    /// One server at `url`.
    Standalone,
    /// A Redis Cluster from `cluster_nodes`.
    Cluster,
    /// A Sentinel-managed primary.
    Sentinel,
}

impl RedisConfig {
    /// The deployment these keys name (cluster and sentinels take precedence over `url`).
    pub fn mode(&self) -> RedisMode {
        if !self.cluster_nodes.is_empty() {
            RedisMode::Cluster
        } else if !self.sentinels.is_empty() {
            RedisMode::Sentinel
        } else if !self.url.is_empty() {
            RedisMode::Standalone
        } else {
            RedisMode::None
        }
    }

    /// Whether any Redis is configured.
    pub fn enabled(&self) -> bool {
        self.mode() != RedisMode::None
    }

    /// A one-line description for logs and status pages, credentials masked.
    pub fn describe(&self) -> String {
        let list = |urls: &[String]| {
            urls.iter()
                .map(|u| redact_url(u))
                .collect::<Vec<_>>()
                .join(",")
        };
        match self.mode() {
            RedisMode::None => "none".into(),
            RedisMode::Standalone => redact_url(&self.url),
            RedisMode::Cluster => format!("cluster {}", list(&self.cluster_nodes)),
            RedisMode::Sentinel => format!(
                "sentinel master {} via {}",
                self.sentinel_master,
                list(&self.sentinels)
            ),
        }
    }
}

/// `[supervisor]`: failure detection and OTP-style one-for-all restart intensity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SupervisorConfig {
    /// Interval between agent heartbeats, in milliseconds.
    pub heartbeat_interval_ms: u64,
    /// A rank whose last heartbeat is older than this has failed, in milliseconds.
    pub heartbeat_timeout_ms: u64,
    /// Restarts allowed within `restart_window_s` before the group is marked failed.
    pub max_restarts: u32,
    /// Window of the restart limit, in seconds.
    pub restart_window_s: u64,
    /// First backoff between restarts, in milliseconds (doubles with each restart until a
    /// restart reaches a healthy group, then starts over; with jitter).
    pub backoff_initial_ms: u64,
    /// Largest backoff between restarts, in milliseconds.
    pub backoff_max_ms: u64,
    /// Address of the supervisor's HTTP endpoints.
    pub http_addr: String,
    /// Where the supervisor reads rank r's `/status` and `/metrics` for its status page:
    /// `host:port` with `{rank}` and `{port}` (`network.http_base_port + r`) substituted.
    /// Empty: `network.http_host` (loopback when it binds every interface) and `{port}`.
    pub agent_http_addr: String,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: 100,
            heartbeat_timeout_ms: 500,
            max_restarts: 3,
            restart_window_s: 60,
            backoff_initial_ms: 50,
            backoff_max_ms: 5_000,
            http_addr: "127.0.0.1:7490".into(),
            agent_http_addr: String::new(),
        }
    }
}

/// `[log]`: tracing output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` (human-readable) or `json` (one object per line).
    pub format: LogFormat,
    /// A tracing filter, e.g. `info` or `tandem=debug,info`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl TandemConfig {
    /// The block-shard layout of this group.
    ///
    /// # Errors
    /// A [`LayoutError`] naming the numbers when the model does not split evenly.
    pub fn shard_layout(&self) -> Result<ShardLayout, LayoutError> {
        ShardLayout::new(
            self.model.num_layers,
            self.model.num_kv_heads,
            self.model.head_dim,
            self.model.dtype_bytes,
            self.group.tokens_per_block,
            self.group.pp_size,
            self.group.tp_size,
        )
    }

    /// The fingerprint every rank presents in the handshake: the model layout and every
    /// setting the leader decides for all ranks with (see [`ConfigFingerprint`]).
    ///
    /// # Errors
    /// As [`TandemConfig::shard_layout`].
    pub fn fingerprint(&self) -> Result<ConfigFingerprint, LayoutError> {
        // The model's part is the layout persisted shards are keyed by: derived once.
        let layout = self.layout_fingerprint()?;
        Ok(ConfigFingerprint {
            world_size: self.group.world_size(),
            pp_size: layout.pp_size,
            tp_size: layout.tp_size,
            tokens_per_block: layout.tokens_per_block,
            num_layers: layout.num_layers,
            num_kv_heads: layout.num_kv_heads,
            head_dim: layout.head_dim,
            dtype_bytes: layout.dtype_bytes,
            shard_bytes: layout.shard_bytes,
            host_capacity_blocks: self.store.host_capacity_blocks,
            disk_capacity_blocks: self.store.disk_capacity_blocks,
            max_frame_bytes: self.protocol.max_frame_bytes,
            window_steps: self.protocol.window_steps,
            frame_retention_steps: self.protocol.frame_retention_steps,
            heartbeat_interval_ms: self.supervisor.heartbeat_interval_ms,
            heartbeat_timeout_ms: self.supervisor.heartbeat_timeout_ms,
        })
    }

    /// The layout this rank's persisted shards are keyed by: the model id and every field
    /// that fixes what the bytes of a shard mean (see [`LayoutFingerprint`]).
    ///
    /// # Errors
    /// As [`TandemConfig::shard_layout`].
    pub fn layout_fingerprint(&self) -> Result<LayoutFingerprint, LayoutError> {
        let layout = self.shard_layout()?;
        Ok(LayoutFingerprint {
            model_id: self.model.id.clone(),
            pp_size: self.group.pp_size,
            tp_size: self.group.tp_size,
            tokens_per_block: self.group.tokens_per_block,
            num_layers: self.model.num_layers,
            num_kv_heads: self.model.num_kv_heads,
            head_dim: self.model.head_dim,
            dtype_bytes: self.model.dtype_bytes,
            shard_bytes: layout.shard_bytes,
        })
    }

    /// A copy safe to print or serve: the group secret and any Redis password are masked.
    pub fn redacted(&self) -> TandemConfig {
        let mut c = self.clone();
        if !c.group.secret.is_empty() {
            c.group.secret = "<redacted>".into();
        }
        c.redis.url = redact_url(&c.redis.url);
        for u in c
            .redis
            .cluster_nodes
            .iter_mut()
            .chain(c.redis.sentinels.iter_mut())
        {
            *u = redact_url(u);
        }
        if !c.redis.password.is_empty() {
            c.redis.password = "<redacted>".into();
        }
        c
    }
}

/// Mask the userinfo part (`user:password@`) of a URL.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://<redacted>@{}", &url[..scheme_end], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_is_small_and_even() {
        let c = TandemConfig::default();
        assert_eq!(c.group.world_size(), 2);
        assert_eq!(
            c.shard_layout().unwrap().shard_bytes,
            (4 * 2) * 64 * 2 * 512
        );
        assert_eq!(c.fingerprint().unwrap().world_size, 2);
    }

    #[test]
    fn redaction_masks_secrets() {
        let mut c = TandemConfig::default();
        c.group.secret = "s3cret-s3cret-s3cret".into();
        c.redis.url = "redis://user:pw@10.0.0.1:6379/0".into();
        let r = c.redacted();
        assert_eq!(r.group.secret, "<redacted>");
        assert_eq!(r.redis.url, "redis://<redacted>@10.0.0.1:6379/0");
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        c.redis.cluster_nodes = vec!["redis://:pw1@a:1".into(), "redis://b:2".into()];
        c.redis.sentinels = vec!["redis://:pw2@s:26379".into()];
        c.redis.password = "pw3".into();
        let text = format!("{:?}", c.redacted());
        for secret in ["pw1", "pw2", "pw3"] {
            assert!(!text.contains(secret), "{text}");
        }
    }

    #[test]
    fn redis_mode_follows_the_keys() {
        let mut r = RedisConfig::default();
        assert_eq!(r.mode(), RedisMode::Standalone);
        assert_eq!(r.describe(), "redis://127.0.0.1:6379");
        r.sentinels = vec!["redis://s1:26379".into()];
        r.sentinel_master = "mymaster".into();
        assert_eq!(r.mode(), RedisMode::Sentinel);
        assert_eq!(
            r.describe(),
            "sentinel master mymaster via redis://s1:26379"
        );
        r.cluster_nodes = vec!["redis://:pw@n1:7000".into()];
        assert_eq!(r.mode(), RedisMode::Cluster);
        assert_eq!(r.describe(), "cluster redis://<redacted>@n1:7000");
        let none = RedisConfig {
            url: String::new(),
            ..RedisConfig::default()
        };
        assert!(!none.enabled());
    }
}
