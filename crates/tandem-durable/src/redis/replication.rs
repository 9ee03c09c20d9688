//! Writes that count only once enough replicas hold them: the write and `WAIT` in one
//! round trip ([`crate::ReplicationWait`]).
//!
//! Owns [`RedisLog::replicated`]. `WAIT n t` blocks the connection until `n` replicas
//! acknowledged every write sent on it before, or `t` ms passed, and answers how many did;
//! sent in the same pipeline as the write, on the same connection, it covers that write
//! (under Redis Cluster the pipeline goes to the write's slot master, `WAIT` having no key).
//! Fewer than `n` is [`DurableError::NotReplicated`]: the write is on the primary and may
//! or may not survive a failover, so its caller must not reveal it. It never retries.

use std::time::Duration;

use redis::{Cmd, FromRedisValue};

use super::RedisLog;
use crate::error::{DurableError, Result};

impl RedisLog {
    /// Runs `write` as operation `op`, then `WAIT` for the configured replicas; the
    /// write's reply once enough replicas hold it.
    ///
    /// # Errors
    /// [`DurableError::NotReplicated`] when fewer replicas acknowledged within the wait's
    /// timeout; the write's own errors (a refused write is reported as the write's error,
    /// not as a replication failure); the connection errors, with a deadline of the call's
    /// plus the wait's.
    pub(crate) async fn replicated<T: FromRedisValue>(
        &self,
        op: &'static str,
        write: Cmd,
    ) -> Result<T> {
        // `WAIT n 0` would block for ever: at least one millisecond.
        let timeout_ms = self.wait.timeout_ms.max(1);
        let mut pipe = redis::pipe();
        pipe.add_command(write);
        pipe.cmd("WAIT").arg(self.wait.replicas).arg(timeout_ms);
        let (reply, acked): (T, u64) = self
            .conn
            .pipeline(op, &pipe, Duration::from_millis(timeout_ms))
            .await?;
        if acked < u64::from(self.wait.replicas) {
            return Err(DurableError::NotReplicated {
                op,
                acked,
                wanted: self.wait.replicas,
                ms: timeout_ms,
            });
        }
        Ok(reply)
    }
}
