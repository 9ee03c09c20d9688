//! Writes that count only once enough replicas hold them: the write and `WAIT` in one
//! round trip ([`crate::ReplicationWait`]).
//!
//! Owns [`RedisLog::replicated`] and [`RedisLog::replicas_caught_up`]. `WAIT n t` blocks the
//! connection until `n` replicas acknowledged every write sent on it before, or `t` ms
//! passed, and answers how many did; sent in the same pipeline as the write, on the same
//! connection, it covers that write (under Redis Cluster the pipeline goes to the write's
//! slot master, `WAIT` having no key). Fewer than `n` is [`DurableError::NotReplicated`]:
//! the write is on the primary only, so nothing it holds may be revealed.
//!
//! A write that did not replicate must also not be *read* as if it counted: a stream entry
//! left behind would be handed to every rank's agent, acknowledged with the frame of its
//! step (which did not reveal it), and then count as delivered in the next recovery. So the
//! caller passes the command that takes the write back (`XDEL` of the entry), run at once,
//! best effort: if it fails too (the primary is gone), the entry goes with the primary, or,
//! should that primary survive, stays behind as after an append that timed out (the
//! follow-up named in docs/SCALE.md). It never retries.

use std::time::Duration;

use redis::{Cmd, FromRedisValue};

use super::RedisLog;
use crate::error::{DurableError, Result};

impl RedisLog {
    /// Runs `write` as operation `op`, then `WAIT` for the configured replicas; the
    /// write's reply once enough replicas hold it. On a shortfall, runs `undo(reply)` (if
    /// it gives a command) before returning the error.
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
        undo: impl FnOnce(&T) -> Option<Cmd>,
    ) -> Result<T> {
        let timeout_ms = self.wait_ms();
        let mut pipe = redis::pipe();
        pipe.add_command(write);
        pipe.cmd("WAIT").arg(self.wait.replicas).arg(timeout_ms);
        let (reply, acked): (T, u64) = self
            .conn
            .pipeline(op, &pipe, Duration::from_millis(timeout_ms))
            .await?;
        if acked < u64::from(self.wait.replicas) {
            if let Some(cmd) = undo(&reply) {
                let _ = self.conn.query::<redis::Value>(op, &cmd).await;
            }
            return Err(self.not_replicated(op, acked));
        }
        Ok(reply)
    }

    /// Whether the configured replicas are connected and have every write this connection
    /// sent (a `WAIT` after a read of `key`, so that under Redis Cluster it runs on `key`'s
    /// master). Called before a write that cannot be taken back.
    ///
    /// # Errors
    /// [`DurableError::NotReplicated`] naming how many are; the connection errors.
    pub(crate) async fn replicas_caught_up(&self, op: &'static str, key: &str) -> Result<()> {
        let timeout_ms = self.wait_ms();
        let mut pipe = redis::pipe();
        pipe.cmd("EXISTS").arg(key).ignore();
        pipe.cmd("WAIT").arg(self.wait.replicas).arg(timeout_ms);
        let (acked,): (u64,) = self
            .conn
            .pipeline(op, &pipe, Duration::from_millis(timeout_ms))
            .await?;
        if acked < u64::from(self.wait.replicas) {
            return Err(self.not_replicated(op, acked));
        }
        Ok(())
    }

    /// The wait's timeout, at least 1 ms (`WAIT n 0` would block for ever).
    fn wait_ms(&self) -> u64 {
        self.wait.timeout_ms.max(1)
    }

    fn not_replicated(&self, op: &'static str, acked: u64) -> DurableError {
        DurableError::NotReplicated {
            op,
            acked,
            wanted: self.wait.replicas,
            ms: self.wait_ms(),
        }
    }
}
