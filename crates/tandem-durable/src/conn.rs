//! One reconnecting Redis connection with a deadline on every call.
//!
//! Owns the client, its reconnect policy and the per-call deadline (docs/DESIGN.md invariant 6).
//! It never retries a command itself: a failed call returns at once with
//! [`DurableError::Unavailable`] or [`DurableError::Timeout`], and the client reconnects in
//! the background, so the next call succeeds once Redis is back. The URL it keeps is never
//! printed unmasked (its `Debug` shows the masked form).

use crate::error::{from_redis, mask_url, scrub, DurableError, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, FromRedisValue, Pipeline, ScriptInvocation};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Deadlines and reconnect pacing of the connection a [`crate::RedisLog`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnTimeouts {
    /// Deadline of every call, in ms (default 1000).
    pub op_timeout_ms: u64,
    /// Deadline of one connection attempt, in ms (default 500).
    pub connect_timeout_ms: u64,
    /// Longest pause between reconnect attempts, in ms (default 1000). The client's backoff
    /// starts near one second, so attempts come every one to two seconds while Redis is down.
    pub max_reconnect_delay_ms: u64,
}

impl Default for ConnTimeouts {
    fn default() -> Self {
        ConnTimeouts {
            op_timeout_ms: 1000,
            connect_timeout_ms: 500,
            max_reconnect_delay_ms: 1000,
        }
    }
}

/// A cheap-to-clone handle on one multiplexed, self-reconnecting connection.
#[derive(Clone)]
pub(crate) struct Conn {
    manager: ConnectionManager,
    url: Arc<str>,
    op_timeout: Duration,
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("url", &mask_url(&self.url))
            .field("op_timeout", &self.op_timeout)
            .finish()
    }
}

impl Conn {
    /// Connects to `url` (`redis://[user:password@]host:port[/db]`).
    ///
    /// # Errors
    /// [`DurableError::InvalidUrl`] when the URL does not parse; [`DurableError::Timeout`]
    /// (op `connect`) when no connection is made within `op_timeout_ms`;
    /// [`DurableError::Unavailable`] when the client gives up before that.
    pub(crate) async fn connect(url: &str, timeouts: ConnTimeouts) -> Result<Conn> {
        let client = redis::Client::open(url).map_err(|e| DurableError::InvalidUrl {
            url: mask_url(url),
            reason: scrub(&e.to_string(), url),
        })?;
        let config = ConnectionManagerConfig::new()
            .set_factor(2)
            .set_exponent_base(2)
            .set_max_delay(timeouts.max_reconnect_delay_ms)
            .set_number_of_retries(2)
            .set_connection_timeout(Duration::from_millis(timeouts.connect_timeout_ms))
            .set_response_timeout(Duration::from_millis(timeouts.op_timeout_ms));
        let op_timeout = Duration::from_millis(timeouts.op_timeout_ms);
        // One plain attempt first: the manager retries every failure with backoff, which
        // would turn a refused connection or a wrong password into a bare timeout.
        let probe = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Duration::from_millis(timeouts.connect_timeout_ms))
            .set_response_timeout(op_timeout);
        deadline(
            "connect",
            op_timeout,
            url,
            client.get_multiplexed_async_connection_with_config(&probe),
        )
        .await?;
        let manager = deadline(
            "connect",
            op_timeout,
            url,
            ConnectionManager::new_with_config(client, config),
        )
        .await?;
        Ok(Conn {
            manager,
            url: url.into(),
            op_timeout,
        })
    }

    /// The server URL with credentials masked, for errors and logs.
    pub(crate) fn masked_url(&self) -> String {
        mask_url(&self.url)
    }

    /// Runs one command as operation `op`.
    pub(crate) async fn query<T: FromRedisValue>(&self, op: &'static str, cmd: &Cmd) -> Result<T> {
        let mut c = self.manager.clone();
        deadline(op, self.op_timeout, &self.url, cmd.query_async(&mut c)).await
    }

    /// Runs a pipeline as operation `op` (one round trip).
    pub(crate) async fn pipeline<T: FromRedisValue>(
        &self,
        op: &'static str,
        pipe: &Pipeline,
    ) -> Result<T> {
        let mut c = self.manager.clone();
        deadline(op, self.op_timeout, &self.url, pipe.query_async(&mut c)).await
    }

    /// Runs a script invocation as operation `op` (EVALSHA; after a Redis restart the client
    /// loads the script again, one more round trip).
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        op: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T> {
        let mut c = self.manager.clone();
        deadline(
            op,
            self.op_timeout,
            &self.url,
            invocation.invoke_async(&mut c),
        )
        .await
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Awaits `fut` for at most `limit`, mapping both the elapsed deadline and client errors.
async fn deadline<T>(
    op: &'static str,
    limit: Duration,
    url: &str,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    let ms = duration_ms(limit);
    match tokio::time::timeout(limit, fut).await {
        Err(_) => Err(DurableError::Timeout { op, ms }),
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(from_redis(&e, op, url, ms)),
    }
}
