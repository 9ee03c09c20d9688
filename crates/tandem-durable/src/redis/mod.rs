//! The Redis implementation of the three contracts: [`RedisLog`] implements
//! [`crate::CompletionStream`], [`crate::EpochStore`] and [`crate::LivenessStore`] over one
//! self-reconnecting connection (the key layout is in the crate docs).
//!
//! Owns the connection, the consumer groups' creation and the Redis commands behind every
//! contract method; one file per contract ([`mod@stream`], [`mod@epochs`], [`mod@liveness`]),
//! [`mod@replication`] for the writes that wait for replicas, and `appender` for the task that
//! sends the write-ahead appends in batches.
//! Recovery and trimming fold what they read with the same pure [`crate::RecoveryBuilder`]
//! and [`crate::TrimScan`] as the in-memory twin. It never retries a command itself (see
//! [`crate::conn`]).

mod appender;
pub mod epochs;
pub mod liveness;
pub mod replication;
pub mod stream;

use crate::conn::{Conn, ConnTimeouts};
use crate::endpoint::{RedisEndpoint, ReplicationWait};
use crate::error::{DurableError, Result};
use crate::keys::{consumer_group, Keys};
use redis::Script;
use std::fmt;
use std::sync::Arc;
use tandem_proto::Rank;

/// Where and how a [`RedisLog`] connects.
#[derive(Clone, PartialEq, Eq)]
pub struct DurableConfig {
    /// The deployment: one server, a cluster or a Sentinel-managed primary. Never printed
    /// unmasked.
    pub endpoint: RedisEndpoint,
    /// The group's name (letters, digits, `-`, `_`, `.`; at most 64 bytes).
    pub group: String,
    /// Ranks in the group; one consumer group `rank-{r}` is kept for each.
    pub world_size: u32,
    /// Deadlines and reconnect pacing.
    pub timeouts: ConnTimeouts,
    /// Entries fetched per XRANGE/XPENDING page during recovery and trimming (default 512).
    pub page_entries: usize,
    /// Replicas each append and each epoch change must reach before it counts (default:
    /// none, today's behaviour).
    pub wait: ReplicationWait,
}

impl DurableConfig {
    /// A config for one server at `url` with default timeouts and page size.
    pub fn new(url: impl Into<String>, group: impl Into<String>, world_size: u32) -> Self {
        Self::with_endpoint(RedisEndpoint::standalone(url), group, world_size)
    }

    /// The config the `[redis]` section describes for `group` of `world_size` ranks (its
    /// deployment and replication wait, default timeouts); `None` when it names no Redis.
    pub fn from_config(
        redis: &tandem_config::RedisConfig,
        group: impl Into<String>,
        world_size: u32,
    ) -> Option<Self> {
        let endpoint = RedisEndpoint::from_config(redis)?;
        let mut config = Self::with_endpoint(endpoint, group, world_size);
        config.wait = ReplicationWait {
            replicas: redis.wait_replicas,
            timeout_ms: redis.wait_timeout_ms,
        };
        Some(config)
    }

    /// A config for `endpoint` with default timeouts and page size, waiting for no replica.
    pub fn with_endpoint(
        endpoint: RedisEndpoint,
        group: impl Into<String>,
        world_size: u32,
    ) -> Self {
        DurableConfig {
            endpoint,
            group: group.into(),
            world_size,
            timeouts: ConnTimeouts::default(),
            page_entries: 512,
            wait: ReplicationWait::default(),
        }
    }
}

impl fmt::Debug for DurableConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableConfig")
            .field("endpoint", &self.endpoint)
            .field("group", &self.group)
            .field("world_size", &self.world_size)
            .field("timeouts", &self.timeouts)
            .field("page_entries", &self.page_entries)
            .field("wait", &self.wait)
            .finish()
    }
}

/// A group's durable state in Redis: its completion stream, epoch counter, supervisor
/// state, membership, heartbeats, failure reports and manifests. Cheap to clone; clones
/// share one connection.
#[derive(Clone, Debug)]
pub struct RedisLog {
    pub(crate) conn: Conn,
    pub(crate) keys: Keys,
    pub(crate) world_size: u32,
    pub(crate) page: usize,
    pub(crate) next_epoch_script: Arc<Script>,
    pub(crate) join_script: Arc<Script>,
    pub(crate) wait: ReplicationWait,
    pub(crate) appender: appender::Appender,
}

impl RedisLog {
    /// Connects and creates the consumer groups `rank-0..world_size` (idempotent; a new group
    /// starts before the first entry, so it is handed every retained entry).
    ///
    /// # Errors
    /// [`DurableError::InvalidGroup`], [`DurableError::InvalidUrl`], and the connection
    /// errors of every call ([`DurableError::Unavailable`], [`DurableError::Timeout`]).
    pub async fn connect(config: &DurableConfig) -> Result<RedisLog> {
        let keys = Keys::new(&config.group)?;
        let server_wait = if config.wait.replicas > 0 {
            std::time::Duration::from_millis(config.wait.timeout_ms.max(1))
        } else {
            std::time::Duration::ZERO
        };
        let conn = Conn::connect(&config.endpoint, config.timeouts, server_wait).await?;
        let appender = appender::Appender::start(conn.clone());
        let log = RedisLog {
            appender,
            conn,
            keys,
            world_size: config.world_size,
            page: config.page_entries.max(1),
            next_epoch_script: Arc::new(Script::new(epochs::NEXT_EPOCH_SCRIPT)),
            join_script: Arc::new(Script::new(epochs::JOIN_SCRIPT)),
            wait: config.wait,
        };
        log.ensure_groups().await?;
        Ok(log)
    }

    /// The key names this log uses.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Pipelines of appends sent so far by this log and its clones (each one round trip
    /// carrying every `append_step` queued since the last; see `appender`). Appends without
    /// a replication wait only. For metrics and tests.
    pub fn append_batches(&self) -> u64 {
        self.appender.batches()
    }

    /// The endpoint (server URL, cluster nodes or sentinels), credentials masked.
    pub fn masked_url(&self) -> String {
        self.conn.masked_url()
    }

    /// Creates every rank's consumer group if missing (XGROUP CREATE ... 0; BUSYGROUP
    /// ignored), and the stream with them (MKSTREAM) only for a group that has no epoch yet.
    /// A stream that is missing once the group has epochs was lost (see
    /// [`DurableError::StreamLost`]): it is left missing, so that the running epoch's next
    /// append or read reports the loss instead of writing to an empty stream without its
    /// barrier; the next epoch's barrier creates it and the groups again.
    ///
    /// # Errors
    /// [`DurableError::Unavailable`], [`DurableError::Timeout`], [`DurableError::Rejected`].
    pub async fn ensure_groups(&self) -> Result<()> {
        let mut make_stream = false;
        for r in 0..self.world_size {
            let mut cmd = redis::cmd("XGROUP");
            cmd.arg("CREATE")
                .arg(&self.keys.completions)
                .arg(consumer_group(Rank(r)))
                .arg("0");
            if make_stream {
                cmd.arg("MKSTREAM");
            }
            match self.conn.query::<()>("ensure_groups", &cmd).await {
                Err(DurableError::Rejected { reason, .. }) if reason.contains("BUSYGROUP") => {}
                Err(DurableError::Rejected { reason, .. })
                    if !make_stream && stream::missing_stream_reply(&reason) =>
                {
                    use crate::epochs::EpochStore;
                    if self.current_epoch().await? != tandem_proto::Epoch(0) {
                        return Ok(());
                    }
                    make_stream = true;
                    cmd.arg("MKSTREAM");
                    match self.conn.query::<()>("ensure_groups", &cmd).await {
                        Err(DurableError::Rejected { reason, .. })
                            if reason.contains("BUSYGROUP") => {}
                        other => other?,
                    }
                }
                other => other?,
            }
        }
        Ok(())
    }

    pub(crate) fn check_rank(&self, rank: Rank) -> Result<()> {
        crate::error::check_rank(rank, self.world_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_debug_masks_credentials() {
        let c = DurableConfig::new("redis://u:topsecret@h:1", "g", 2);
        let text = format!("{c:?}");
        assert!(text.contains("redis://***@h:1"), "{text}");
        assert!(!text.contains("topsecret"), "{text}");
    }
}
