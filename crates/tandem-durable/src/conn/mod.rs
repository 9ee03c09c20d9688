//! One connection to the group's Redis deployment, with a deadline on every call.
//!
//! Owns the client of each [`RedisEndpoint`] and the per-call deadline (docs/DESIGN.md
//! invariant 6):
//! - **standalone**: the redis crate's `ConnectionManager`, one multiplexed connection that
//!   reconnects in the background;
//! - **cluster**: the redis crate's async cluster client (`cluster-async`): it reads the slot
//!   map from the seed nodes, keeps one multiplexed connection per node, follows `MOVED`
//!   (refreshing the map) and `ASK` (with `ASKING`) while slots migrate, and retries
//!   `TRYAGAIN`; none of that routing is written here;
//! - **sentinel**: [`sentinel::SentinelConn`], which asks the sentinels for the primary
//!   (the redis crate's `SentinelClient`) and asks again after the primary failed or answered
//!   as a replica. The redis crate's async sentinel API hands out a client for the current
//!   primary but nothing that follows a failover by itself; that following is all this adds.
//!
//! It never retries a command itself: a failed call returns at once with
//! [`DurableError::Unavailable`] or [`DurableError::Timeout`], and the next call reaches
//! Redis again once it is back. (The cluster client re-sends a command after a redirect or a
//! lost connection within the same deadline; a write re-sent that way may land twice, which
//! the stream tolerates: recovery keeps the first outcome per task.) Addresses never reach a
//! message unmasked.

pub mod sentinel;

use crate::endpoint::RedisEndpoint;
use crate::error::{from_redis, DurableError, Result, Target};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, ScriptInvocation};
use std::fmt;
use std::future::Future;
use std::time::Duration;

/// Deadlines and reconnect pacing of the connection a [`crate::RedisLog`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnTimeouts {
    /// Deadline of every call, in ms (default 1000).
    pub op_timeout_ms: u64,
    /// Deadline of one connection attempt, in ms (default 500).
    pub connect_timeout_ms: u64,
    /// Longest pause between reconnect attempts, in ms (default 200: a process is back within
    /// about 0.2 s of Redis, so that its calls, and a rank's heartbeats behind them, do not
    /// wait out their deadlines on a reconnect; at 1000 every process took 1.7 to 1.9 s after
    /// a restarted Redis answered, docs/RELIABILITY.md). Attempts come about every 0.2 s per
    /// process while Redis is down.
    pub max_reconnect_delay_ms: u64,
}

impl Default for ConnTimeouts {
    fn default() -> Self {
        ConnTimeouts {
            op_timeout_ms: 1000,
            connect_timeout_ms: 500,
            max_reconnect_delay_ms: 200,
        }
    }
}

/// Retries the cluster client makes within one call (redirects are followed without a
/// pause; a lost connection or `TRYAGAIN` waits 10 to 200 ms first). The call's deadline
/// bounds them all.
const CLUSTER_RETRIES: u32 = 6;
/// Shortest and longest pause of the cluster client between retries, ms.
const CLUSTER_RETRY_WAIT_MS: (u64, u64) = (10, 200);

/// A cheap-to-clone handle on one connection to the endpoint.
#[derive(Clone)]
pub(crate) struct Conn {
    inner: Inner,
    target: Target,
    op_timeout: Duration,
}

#[derive(Clone)]
enum Inner {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(sentinel::SentinelConn),
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("target", &self.target)
            .field("op_timeout", &self.op_timeout)
            .finish()
    }
}

impl Conn {
    /// Connects to `endpoint`. `server_wait` is the longest a call may wait on the server on
    /// purpose (`WAIT`'s timeout): the client's own response timeout is the call deadline
    /// plus that, so a waiting reply is not mistaken for a dead connection.
    ///
    /// # Errors
    /// [`DurableError::InvalidEndpoint`] for an incomplete description;
    /// [`DurableError::InvalidUrl`] when a URL does not parse; [`DurableError::Timeout`]
    /// (op `connect`) when no connection is made within `op_timeout_ms`;
    /// [`DurableError::Unavailable`] when the client gives up before that;
    /// [`DurableError::Rejected`] for refused credentials.
    pub(crate) async fn connect(
        endpoint: &RedisEndpoint,
        timeouts: ConnTimeouts,
        server_wait: Duration,
    ) -> Result<Conn> {
        endpoint.check()?;
        let target = endpoint.target();
        let op_timeout = Duration::from_millis(timeouts.op_timeout_ms);
        let response_timeout = op_timeout + server_wait;
        let connect_timeout = Duration::from_millis(timeouts.connect_timeout_ms);
        let invalid = |e: redis::RedisError| DurableError::InvalidUrl {
            url: target.masked().to_string(),
            reason: target.scrub(&e.to_string()),
        };
        let inner = match endpoint {
            RedisEndpoint::Standalone { url } => {
                let client = redis::Client::open(url.as_str()).map_err(invalid)?;
                // One plain attempt first: the manager retries every failure with backoff,
                // which would turn a refused connection or a wrong password into a bare
                // timeout.
                let probe = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(connect_timeout)
                    .set_response_timeout(response_timeout);
                deadline(
                    "connect",
                    op_timeout,
                    &target,
                    client.get_multiplexed_async_connection_with_config(&probe),
                )
                .await?;
                let config = ConnectionManagerConfig::new()
                    .set_factor(2)
                    .set_exponent_base(2)
                    .set_max_delay(timeouts.max_reconnect_delay_ms)
                    .set_number_of_retries(2)
                    .set_connection_timeout(connect_timeout)
                    .set_response_timeout(response_timeout);
                let manager = deadline(
                    "connect",
                    op_timeout,
                    &target,
                    ConnectionManager::new_with_config(client, config),
                )
                .await?;
                Inner::Standalone(manager)
            }
            RedisEndpoint::Cluster {
                nodes,
                username,
                password,
            } => {
                let mut builder = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                    .connection_timeout(connect_timeout)
                    .response_timeout(response_timeout)
                    .retries(CLUSTER_RETRIES)
                    .min_retry_wait(CLUSTER_RETRY_WAIT_MS.0)
                    .max_retry_wait(CLUSTER_RETRY_WAIT_MS.1);
                if let Some(u) = username {
                    builder = builder.username(u.clone());
                }
                if let Some(p) = password {
                    builder = builder.password(p.clone());
                }
                let client = builder.build().map_err(invalid)?;
                let conn = deadline(
                    "connect",
                    op_timeout,
                    &target,
                    client.get_async_connection(),
                )
                .await?;
                Inner::Cluster(conn)
            }
            RedisEndpoint::Sentinel { .. } => {
                let conn = sentinel::SentinelConn::new(endpoint, connect_timeout, response_timeout)
                    .map_err(invalid)?;
                deadline("connect", op_timeout, &target, conn.connection()).await?;
                Inner::Sentinel(conn)
            }
        };
        Ok(Conn {
            inner,
            target,
            op_timeout,
        })
    }

    /// The endpoint with credentials masked, for errors and logs.
    pub(crate) fn masked_url(&self) -> String {
        self.target.masked().to_string()
    }

    /// Whether this is a Redis Cluster connection (whose client may re-send a failed write
    /// on its own, and routes a pipeline as a whole).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.inner, Inner::Cluster(_))
    }

    /// Runs one command as operation `op`.
    pub(crate) async fn query<T: FromRedisValue>(&self, op: &'static str, cmd: &Cmd) -> Result<T> {
        self.run(op, self.op_timeout, move |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await
    }

    /// Runs a pipeline as operation `op` (one round trip), with `extra` added to the
    /// deadline (a pipeline that ends in `WAIT` may take that long on the server).
    pub(crate) async fn pipeline<T: FromRedisValue>(
        &self,
        op: &'static str,
        pipe: &Pipeline,
        extra: Duration,
    ) -> Result<T> {
        self.run(op, self.op_timeout + extra, move |mut c| async move {
            pipe.query_async(&mut c).await
        })
        .await
    }

    /// Runs the commands of `pipe` as operation `op` in one round trip (one message to the
    /// connection, one write, one deadline of `op_timeout_ms` for them all) and returns one
    /// answer per command, in order: an error reply fails only its own command.
    ///
    /// # Errors
    /// The whole call fails ([`DurableError::Timeout`], [`DurableError::Unavailable`]) when
    /// the pipeline gets no complete answer within the deadline or the connection fails; and,
    /// so that a Sentinel deployment asks for the primary again, when any command was
    /// answered `READONLY` or `MASTERDOWN` (the server is no longer, or not yet, a primary:
    /// every command of the pipeline went to it). Per command: [`DurableError::Rejected`]
    /// for an error reply, and the mapping of the client's errors otherwise.
    pub(crate) async fn each<T: FromRedisValue>(
        &self,
        op: &'static str,
        pipe: &Pipeline,
    ) -> Result<Vec<Result<T>>> {
        let count = pipe.len();
        let values = self
            .run(op, self.op_timeout, move |mut c| async move {
                let values = c.req_packed_commands(pipe, 0, count).await?;
                if let Some(e) = values.iter().find_map(not_primary) {
                    return Err(e);
                }
                Ok(values)
            })
            .await?;
        let ms = duration_ms(self.op_timeout);
        if values.len() != count {
            return Err(DurableError::Rejected {
                op,
                reason: format!("{} answers to a pipeline of {count}", values.len()),
            });
        }
        Ok(values
            .into_iter()
            .map(|v| {
                v.extract_error()
                    .and_then(redis::from_owned_redis_value)
                    .map_err(|e| from_redis(&e, op, &self.target, ms))
            })
            .collect())
    }

    /// Runs a script invocation as operation `op` (EVALSHA; after a Redis restart or on a
    /// node that never saw it, the client loads the script again, one more round trip).
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        op: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T> {
        self.run(op, self.op_timeout, move |mut c| async move {
            invocation.invoke_async(&mut c).await
        })
        .await
    }

    /// Runs `call` on the current connection within `limit`.
    async fn run<'a, T, F, Fut>(&'a self, op: &'static str, limit: Duration, call: F) -> Result<T>
    where
        F: FnOnce(AnyConn) -> Fut + 'a,
        Fut: Future<Output = redis::RedisResult<T>> + 'a,
    {
        match &self.inner {
            Inner::Standalone(m) => {
                deadline(
                    op,
                    limit,
                    &self.target,
                    call(AnyConn::Standalone(m.clone())),
                )
                .await
            }
            Inner::Cluster(c) => {
                deadline(op, limit, &self.target, call(AnyConn::Cluster(c.clone()))).await
            }
            Inner::Sentinel(s) => {
                let result = deadline(op, limit, &self.target, async {
                    let (generation, conn) = s.connection_with_generation().await?;
                    let r = call(AnyConn::Sentinel(conn)).await;
                    if let Err(e) = &r {
                        if sentinel::primary_lost(e) {
                            s.forget(generation);
                        }
                    }
                    r
                })
                .await;
                if matches!(result, Err(DurableError::Timeout { .. })) {
                    // A primary that stopped answering (hung or cut off): ask the sentinels
                    // again on the next call.
                    s.forget_current();
                }
                result
            }
        }
    }
}

/// The connection a call runs on; all three implement the client's `ConnectionLike`.
enum AnyConn {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(redis::aio::MultiplexedConnection),
}

impl ConnectionLike for AnyConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            AnyConn::Standalone(c) => c.req_packed_command(cmd),
            AnyConn::Cluster(c) => c.req_packed_command(cmd),
            AnyConn::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            AnyConn::Standalone(c) => c.req_packed_commands(cmd, offset, count),
            AnyConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            AnyConn::Sentinel(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            AnyConn::Standalone(c) => c.get_db(),
            AnyConn::Cluster(c) => c.get_db(),
            AnyConn::Sentinel(c) => c.get_db(),
        }
    }
}

/// The client error of an answer that says its server is not a writable primary
/// (`READONLY`, `MASTERDOWN`), `None` for any other answer.
fn not_primary(v: &redis::Value) -> Option<redis::RedisError> {
    match v {
        redis::Value::ServerError(_) => v.clone().extract_error().err().filter(|e| {
            matches!(
                e.kind(),
                redis::ErrorKind::ReadOnly | redis::ErrorKind::MasterDown
            )
        }),
        _ => None,
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Awaits `fut` for at most `limit`, mapping both the elapsed deadline and client errors.
async fn deadline<T>(
    op: &'static str,
    limit: Duration,
    target: &Target,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    let ms = duration_ms(limit);
    match tokio::time::timeout(limit, fut).await {
        Err(_) => Err(DurableError::Timeout { op, ms }),
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(from_redis(&e, op, target, ms)),
    }
}
