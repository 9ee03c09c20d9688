//! [`LivenessStore`] on Redis: heartbeat keys `tandem:{g}:heartbeat:{rank}` (value
//! `epoch:unix_ms:incarnation`, the older `epoch:unix_ms` still read with incarnation 0;
//! `PX` expiry), the failure list `tandem:{g}:failures` (JSON reports,
//! trimmed to [`MAX_FAILURE_REPORTS`]) and manifest keys `tandem:{g}:manifest:{epoch}:{rank}`.
//!
//! Owns these key names and encodings. Expiry is Redis's own (on the server's clock).

use async_trait::async_trait;
use tandem_proto::{Epoch, Rank};

use super::RedisLog;
use crate::error::{DurableError, Result};
use crate::liveness::{FailureReport, Heartbeat, LivenessStore, MAX_FAILURE_REPORTS};

impl RedisLog {
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
}

#[async_trait]
impl LivenessStore for RedisLog {
    async fn heartbeat(&self, rank: Rank, beat: Heartbeat, ttl_ms: u64) -> Result<()> {
        self.check_rank(rank)?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.heartbeat_key(rank))
            .arg(format!(
                "{}:{}:{}",
                beat.epoch.0, beat.unix_ms, beat.incarnation
            ))
            .arg("PX")
            .arg(ttl_ms.max(1));
        self.conn.query::<()>("heartbeat", &cmd).await
    }

    async fn heartbeats(&self) -> Result<Vec<Option<Heartbeat>>> {
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

    async fn report_failure(&self, report: &FailureReport) -> Result<()> {
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
        self.conn
            .pipeline::<()>("report_failure", &pipe, std::time::Duration::ZERO)
            .await
    }

    async fn take_failures(&self, max: usize) -> Result<(Vec<FailureReport>, Vec<String>)> {
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

    async fn put_manifest(
        &self,
        epoch: Epoch,
        rank: Rank,
        bytes: &[u8],
        ttl_ms: u64,
    ) -> Result<()> {
        self.check_rank(rank)?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.manifest_key(epoch, rank))
            .arg(bytes)
            .arg("PX")
            .arg(ttl_ms.max(1));
        self.conn.query::<()>("put_manifest", &cmd).await
    }

    async fn manifests(&self, epoch: Epoch) -> Result<Vec<Option<Vec<u8>>>> {
        let mut cmd = redis::cmd("MGET");
        for r in 0..self.world_size {
            cmd.arg(self.manifest_key(epoch, Rank(r)));
        }
        self.conn.query("manifests", &cmd).await
    }

    async fn reserve_event_seqs(&self, n: u64) -> Result<u64> {
        let mut cmd = redis::cmd("INCRBY");
        cmd.arg(format!("tandem:{{{}}}:events:seq", self.keys.group))
            .arg(n);
        let last: u64 = self.conn.query("reserve_event_seqs", &cmd).await?;
        Ok(last - n)
    }
}

/// Parses `epoch:unix_ms:incarnation` or the older `epoch:unix_ms` (incarnation 0).
fn parse_heartbeat(key: &str, text: &str) -> Result<Heartbeat> {
    let corrupt = || DurableError::Corrupt {
        id: key.to_string(),
        reason: format!("heartbeat {text:?} is not epoch:unix_ms[:incarnation]"),
    };
    let mut parts = text.split(':');
    let mut next = || -> Result<Option<u64>> {
        parts
            .next()
            .map(|p| p.parse::<u64>().map_err(|_| corrupt()))
            .transpose()
    };
    let epoch = next()?.ok_or_else(corrupt)?;
    let unix_ms = next()?.ok_or_else(corrupt)?;
    let incarnation = next()?.unwrap_or(0);
    if next()?.is_some() {
        return Err(corrupt());
    }
    Ok(Heartbeat {
        epoch: Epoch(epoch),
        unix_ms,
        incarnation,
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
                unix_ms: 1700,
                incarnation: 0
            }
        );
        assert_eq!(
            parse_heartbeat("k", "3:1700:42").unwrap(),
            Heartbeat {
                epoch: Epoch(3),
                unix_ms: 1700,
                incarnation: 42
            }
        );
        for bad in ["3", "3:x", "3:1700:y", "3:1700:42:1", ""] {
            assert!(parse_heartbeat("k", bad).is_err(), "{bad:?}");
        }
        let e = parse_heartbeat("tandem:{g}:heartbeat:1", "x").unwrap_err();
        assert!(e.to_string().contains("tandem:{g}:heartbeat:1"), "{e}");
    }
}
