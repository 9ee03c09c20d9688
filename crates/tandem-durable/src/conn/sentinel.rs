//! A connection to the primary that the sentinels name, followed across failovers.
//!
//! Owns [`SentinelConn`]: the redis crate's `SentinelClient` (which asks the sentinels, in
//! order, for the primary of a master name and checks that the server it names answers
//! `ROLE` as a primary) and the multiplexed connection to the current primary. After a call
//! fails in a way that means the primary is gone or demoted (connection refused or dropped,
//! `READONLY`, a deadline passed), the connection is forgotten and the next call asks the
//! sentinels again, so the group's clients move to the promoted replica within one call of
//! the sentinels' failover. It never re-sends a failed command.

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{AsyncConnectionConfig, RedisConnectionInfo, RedisResult};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::endpoint::RedisEndpoint;

/// The current primary's connection, numbered so that a late failure of an old connection
/// never forgets a newer one.
type Current = Option<(u64, MultiplexedConnection)>;

/// A cheap-to-clone handle on the connection to the current primary.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    /// Asks the sentinels; one resolution at a time (the others wait for its result).
    client: Arc<tokio::sync::Mutex<SentinelClient>>,
    current: Arc<Mutex<Current>>,
    generation: Arc<std::sync::atomic::AtomicU64>,
    config: AsyncConnectionConfig,
}

impl SentinelConn {
    /// A handle for `endpoint` (which must be [`RedisEndpoint::Sentinel`]); connects lazily.
    ///
    /// # Errors
    /// The client's error for a sentinel URL that does not parse.
    pub(crate) fn new(
        endpoint: &RedisEndpoint,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> RedisResult<SentinelConn> {
        let RedisEndpoint::Sentinel {
            sentinels,
            master,
            username,
            password,
            db,
        } = endpoint
        else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "not a sentinel endpoint",
            )));
        };
        let node = SentinelNodeConnectionInfo {
            tls_mode: None,
            redis_connection_info: Some(RedisConnectionInfo {
                db: *db,
                username: username.clone(),
                password: password.clone(),
                ..RedisConnectionInfo::default()
            }),
        };
        let client = SentinelClient::build(
            sentinels.iter().map(String::as_str).collect(),
            master.clone(),
            Some(node),
            SentinelServerType::Master,
        )?;
        Ok(SentinelConn {
            client: Arc::new(tokio::sync::Mutex::new(client)),
            current: Arc::new(Mutex::new(None)),
            generation: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(connect_timeout)
                .set_response_timeout(response_timeout),
        })
    }

    /// The connection to the current primary, asking the sentinels when there is none.
    pub(crate) async fn connection(&self) -> RedisResult<MultiplexedConnection> {
        self.connection_with_generation().await.map(|(_, c)| c)
    }

    /// As [`Self::connection`], with its number for [`Self::forget`].
    pub(crate) async fn connection_with_generation(
        &self,
    ) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        let mut client = self.client.lock().await;
        // Another call may have resolved the primary while this one waited for the lock.
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        let primary = client.async_get_client().await?;
        let conn = primary
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        *self.lock_current() = Some((generation, conn.clone()));
        Ok((generation, conn))
    }

    /// Forgets connection `generation` (if still current): the next call asks the sentinels.
    pub(crate) fn forget(&self, generation: u64) {
        let mut current = self.lock_current();
        if current.as_ref().is_some_and(|(g, _)| *g == generation) {
            *current = None;
        }
    }

    /// Forgets whatever connection is current.
    pub(crate) fn forget_current(&self) {
        *self.lock_current() = None;
    }

    fn cached(&self) -> Option<(u64, MultiplexedConnection)> {
        self.lock_current().clone()
    }

    fn lock_current(&self) -> std::sync::MutexGuard<'_, Current> {
        // The guarded value is a plain Option: a panic elsewhere cannot leave it torn.
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether `err` means the connection no longer leads to a writable primary: it dropped or
/// was refused, or the server now answers as a replica (`READONLY`) or has lost its master.
pub(crate) fn primary_lost(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_unrecoverable_error()
        || err.is_timeout()
        || matches!(
            err.kind(),
            redis::ErrorKind::ReadOnly | redis::ErrorKind::MasterDown
        )
}
