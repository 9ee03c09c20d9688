//! Liveness, failure reports and shard manifests between the agents, their leader and the
//! supervisor, through Redis.
//!
//! Every agent writes a heartbeat key `tandem:{g}:heartbeat:{rank}` (value `epoch:unix_ms`,
//! expiring after a TTL) each interval, and pushes a [`FailureReport`] onto the list
//! `tandem:{g}:failures` when it sees its epoch fail (a lost peer, a silent rank, a refused
//! frame). The supervisor reads both. Owns the key names and encodings of those two; it never
//! decides whether a rank failed: that is the supervisor's.
//!
//! Heartbeats carry wall-clock milliseconds, so the supervisor and agents need clocks within
//! a fraction of the heartbeat timeout of each other (one host, or NTP).

use serde::{Deserialize, Serialize};
use tandem_proto::{Epoch, Rank};

use crate::error::{DurableError, Result};
use crate::log::CompletionLog;

/// Longest failure list kept; older reports beyond it are dropped by the writer (LTRIM).
pub const MAX_FAILURE_REPORTS: isize = 1024;

/// An agent's report that its epoch failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureReport {
    /// The epoch that failed.
    pub epoch: Epoch,
    /// The reporting rank.
    pub rank: Rank,
    /// What the agent saw (never contains secrets).
    pub reason: String,
}

/// A rank's last heartbeat: the epoch it was in and when, in ms since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// The epoch the agent was running.
    pub epoch: Epoch,
    /// Wall-clock time of the heartbeat, ms since the Unix epoch.
    pub unix_ms: u64,
}

impl CompletionLog {
    fn heartbeat_key(&self, rank: Rank) -> String {
        format!("tandem:{{{}}}:heartbeat:{}", self.keys.group, rank.0)
    }

    fn failures_key(&self) -> String {
        format!("tandem:{{{}}}:failures", self.keys.group)
    }

    fn manifest_key(&self, epoch: Epoch, rank: Rank) -> String {
        format!(
            "tandem:{{{}}}:manifest:{}:{}",
            self.keys.group, epoch.0, rank.0
        )
    }

    /// Publish the shard manifest (opaque bytes) `rank` holds at the start of `epoch`; the
    /// leader of `epoch` rebuilds the group index from every rank's. Expires after `ttl_ms`.
    ///
    /// # Errors
    /// As [`Self::heartbeat`].
    pub async fn put_manifest(
        &self,
        epoch: Epoch,
        rank: Rank,
        bytes: &[u8],
        ttl_ms: u64,
    ) -> Result<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.manifest_key(epoch, rank))
            .arg(bytes)
            .arg("PX")
            .arg(ttl_ms.max(1));
        self.conn.query::<()>("put_manifest", &cmd).await
    }

    /// The manifests of every rank `0..world_size` published for `epoch` (`None`: not yet).
    ///
    /// # Errors
    /// As [`Self::heartbeat`].
    pub async fn manifests(&self, epoch: Epoch) -> Result<Vec<Option<Vec<u8>>>> {
        let mut cmd = redis::cmd("MGET");
        for r in 0..self.world_size {
            cmd.arg(self.manifest_key(epoch, Rank(r)));
        }
        self.conn.query("manifests", &cmd).await
    }

    /// Write `rank`'s heartbeat; the key expires after `ttl_ms` milliseconds.
    ///
    /// # Errors
    /// [`DurableError::Unavailable`], [`DurableError::Timeout`], [`DurableError::Rejected`].
    pub async fn heartbeat(&self, rank: Rank, beat: Heartbeat, ttl_ms: u64) -> Result<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.heartbeat_key(rank))
            .arg(format!("{}:{}", beat.epoch.0, beat.unix_ms))
            .arg("PX")
            .arg(ttl_ms.max(1));
        self.conn.query::<()>("heartbeat", &cmd).await
    }

    /// The last heartbeat of every rank `0..world_size` (`None`: none, or expired).
    ///
    /// # Errors
    /// As [`Self::heartbeat`], and [`DurableError::Corrupt`] for an unreadable value.
    pub async fn heartbeats(&self) -> Result<Vec<Option<Heartbeat>>> {
        let mut cmd = redis::cmd("MGET");
        for r in 0..self.world_size {
            cmd.arg(self.heartbeat_key(Rank(r)));
        }
        let values: Vec<Option<String>> = self.conn.query("heartbeats", &cmd).await?;
        values
            .into_iter()
            .enumerate()
            .map(|(r, v)| {
                v.map(|text| parse_heartbeat(&self.heartbeat_key(Rank(r as u32)), &text))
                    .transpose()
            })
            .collect()
    }

    /// Push a failure report for the supervisor.
    ///
    /// # Errors
    /// As [`Self::heartbeat`].
    pub async fn report_failure(&self, report: &FailureReport) -> Result<()> {
        let text = serde_json::to_string(report).map_err(|e| DurableError::Corrupt {
            id: self.failures_key(),
            reason: e.to_string(),
        })?;
        let mut pipe = redis::pipe();
        pipe.cmd("RPUSH")
            .arg(self.failures_key())
            .arg(text)
            .ignore();
        pipe.cmd("LTRIM")
            .arg(self.failures_key())
            .arg(-MAX_FAILURE_REPORTS)
            .arg(-1)
            .ignore();
        self.conn.pipeline::<()>("report_failure", &pipe).await
    }

    /// Take (and remove) up to `max` failure reports, oldest first. Undecodable reports are
    /// dropped and returned as errors in the second list.
    ///
    /// # Errors
    /// As [`Self::heartbeat`].
    pub async fn take_failures(&self, max: usize) -> Result<(Vec<FailureReport>, Vec<String>)> {
        let mut cmd = redis::cmd("LPOP");
        cmd.arg(self.failures_key()).arg(max.max(1));
        let items: Option<Vec<String>> = self.conn.query("take_failures", &cmd).await?;
        let (mut ok, mut bad) = (Vec::new(), Vec::new());
        for text in items.unwrap_or_default() {
            match serde_json::from_str(&text) {
                Ok(r) => ok.push(r),
                Err(e) => bad.push(format!("undecodable failure report {text:?}: {e}")),
            }
        }
        Ok((ok, bad))
    }
}

fn parse_heartbeat(key: &str, text: &str) -> Result<Heartbeat> {
    let corrupt = || DurableError::Corrupt {
        id: key.to_string(),
        reason: format!("heartbeat {text:?} is not epoch:unix_ms"),
    };
    let (e, ms) = text.split_once(':').ok_or_else(corrupt)?;
    Ok(Heartbeat {
        epoch: Epoch(e.parse().map_err(|_| corrupt())?),
        unix_ms: ms.parse().map_err(|_| corrupt())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_values_parse_or_name_the_key() {
        assert_eq!(
            parse_heartbeat("k", "3:1700").unwrap(),
            Heartbeat {
                epoch: Epoch(3),
                unix_ms: 1700
            }
        );
        let e = parse_heartbeat("tandem:{g}:heartbeat:1", "x").unwrap_err();
        assert!(e.to_string().contains("tandem:{g}:heartbeat:1"), "{e}");
    }
}
