//! The error every call of this crate returns, and the URL masking that keeps credentials
//! out of it.
//!
//! Owns the mapping from the Redis client's errors to [`DurableError`]. It never logs and
//! never formats a URL that still holds `user:password@`: every URL that reaches an error
//! goes through [`mask_url`] first, and reasons copied from the client are scrubbed of every
//! password the endpoint holds as well (`Target`).

use tandem_proto::{Epoch, Rank};

/// Everything that can go wrong talking to Redis, one variant per expected rejection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurableError {
    /// Redis could not be reached (refused, reset, reconnect in progress or given up). The
    /// call had no effect, or, for a write, may have had one (see [`DurableError::Timeout`]).
    #[error("redis at {url} is unavailable during {op}: {reason}")]
    Unavailable {
        /// The server, credentials masked.
        url: String,
        /// The operation that failed, for example `append_step`.
        op: &'static str,
        /// What the client reported.
        reason: String,
    },
    /// The call did not finish within its deadline. A write that timed out may or may not
    /// have been applied; appending the same outcomes again is safe because recovery
    /// suppresses duplicates by task id.
    #[error("redis {op} timed out after {ms} ms")]
    Timeout {
        /// The operation that timed out.
        op: &'static str,
        /// The deadline, in milliseconds.
        ms: u64,
    },
    /// A stored value could not be decoded (a stream entry, the epoch counter, a hash
    /// field). `id` names the stream entry id or the key.
    #[error("stored value {id} is corrupt: {reason}")]
    Corrupt {
        /// Stream entry id (`ms-seq`) or key name.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Redis answered with an error reply that none of the other variants describes.
    #[error("redis rejected {op}: {reason}")]
    Rejected {
        /// The operation.
        op: &'static str,
        /// The error reply.
        reason: String,
    },
    /// An append carried an epoch that is not the group's current epoch: a leader of an
    /// ended epoch tried to write (docs/DESIGN.md invariant 4). Nothing was appended.
    #[error("append for epoch {epoch} refused: the group is at epoch {current}")]
    StaleEpoch {
        /// The epoch the append carried.
        epoch: Epoch,
        /// The group's epoch in Redis (0 when the counter was never incremented).
        current: Epoch,
    },
    /// The completion stream, or a rank's consumer group on it, is gone from Redis (deleted
    /// by hand, `FLUSHDB`, a restart without persistence): what it held for a later
    /// recovery (starts of tasks in flight, outcomes some rank has not acknowledged) is lost
    /// with it, and an append must not silently create a new, empty stream that a fenced
    /// leader could write to. Nothing was appended. The epoch cannot go on: the group moves
    /// to a new one, whose barrier creates the stream and the consumer groups again.
    #[error(
        "the completion stream {key} is gone (deleted or lost by redis) during {op}: {reason}"
    )]
    StreamLost {
        /// The operation that found it missing.
        op: &'static str,
        /// The stream's key.
        key: String,
        /// What Redis answered.
        reason: String,
    },
    /// A join named an epoch the group has moved past: its membership set may already be
    /// deleted, and a late join must not re-create it. Nothing was written.
    #[error("join of epoch {epoch} refused: the group is at epoch {current}")]
    EpochOver {
        /// The epoch the join named.
        epoch: Epoch,
        /// The group's current epoch.
        current: Epoch,
    },
    /// The Redis URL could not be parsed.
    #[error("invalid redis url {url}: {reason}")]
    InvalidUrl {
        /// The URL, credentials masked.
        url: String,
        /// What the parser reported.
        reason: String,
    },
    /// The group name cannot be used inside a key.
    #[error("invalid group name {group:?}: {reason}")]
    InvalidGroup {
        /// The rejected name.
        group: String,
        /// Why.
        reason: &'static str,
    },
    /// A write reached the primary but fewer replicas than required acknowledged it within
    /// the wait deadline (`WAIT`, [`crate::ReplicationWait`]). The write may survive or may be
    /// lost in a failover: nothing it holds may be revealed. Appending the same outcomes again
    /// is safe (recovery keeps the first copy per task id).
    #[error(
        "redis {op} reached {acked} of the {wanted} replicas required within {ms} ms: not revealed"
    )]
    NotReplicated {
        /// The operation (`append_step`, `next_epoch`).
        op: &'static str,
        /// Replicas that acknowledged the write.
        acked: u64,
        /// Replicas required (`redis.wait_replicas`).
        wanted: u32,
        /// The wait deadline, in milliseconds.
        ms: u64,
    },
    /// The Redis deployment is described inconsistently (no cluster node, no sentinel, no
    /// master name).
    #[error("invalid redis endpoint: {reason}")]
    InvalidEndpoint {
        /// What is wrong.
        reason: String,
    },
    /// A rank outside `0..world_size`.
    #[error("rank {rank} is outside the group of {world_size} ranks")]
    RankOutOfRange {
        /// The rank asked for.
        rank: Rank,
        /// The group's size.
        world_size: u32,
    },
}

/// Result of every call in this crate.
pub type Result<T> = std::result::Result<T, DurableError>;

/// [`DurableError::RankOutOfRange`] unless `rank` is in `0..world_size`.
pub(crate) fn check_rank(rank: Rank, world_size: u32) -> Result<()> {
    if rank.0 < world_size {
        Ok(())
    } else {
        Err(DurableError::RankOutOfRange { rank, world_size })
    }
}

/// `url` with any `user:password@` replaced by `***@`, for errors and logs.
///
/// `redis://alice:s3cret@host:6379/0` becomes `redis://***@host:6379/0`; a URL without
/// credentials is returned unchanged.
pub fn mask_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rfind('@') {
        Some(at) => format!("{scheme}***@{}{tail}", &authority[at + 1..]),
        None => url.to_string(),
    }
}

/// The password part of `url`'s user info, if any (used to scrub client messages).
fn password_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let userinfo = &authority[..authority.rfind('@')?];
    let password = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
    (!password.is_empty()).then_some(password)
}

/// What errors may say about the Redis a connection talks to: its address(es) with
/// credentials masked, and the secrets to scrub from the client's messages.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Target {
    masked: String,
    secrets: Vec<String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.masked)
    }
}

impl Target {
    /// `label` (already masked) and the URLs and extra secrets whose passwords must never
    /// appear in a message.
    pub(crate) fn new(label: String, urls: &[&str], extra: &[&str]) -> Target {
        let mut secrets: Vec<String> = urls
            .iter()
            .filter_map(|u| password_of(u))
            .chain(extra.iter().copied().filter(|s| !s.is_empty()))
            .map(str::to_string)
            .collect();
        secrets.sort();
        secrets.dedup();
        Target {
            masked: label,
            secrets,
        }
    }

    /// The masked address(es).
    pub(crate) fn masked(&self) -> &str {
        &self.masked
    }

    /// `text` with every secret replaced by `***`.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.secrets
            .iter()
            .fold(text.to_string(), |t, s| t.replace(s.as_str(), "***"))
    }
}

/// Maps a client error of `op` against `target` to the matching variant.
/// `timeout_ms` is the deadline the client was given, reported when the client timed out.
pub(crate) fn from_redis(
    err: &redis::RedisError,
    op: &'static str,
    target: &Target,
    timeout_ms: u64,
) -> DurableError {
    let reason = target.scrub(&err.to_string());
    if err.is_timeout() {
        DurableError::Timeout { op, ms: timeout_ms }
    } else if err.kind() == redis::ErrorKind::AuthenticationFailed {
        DurableError::Rejected { op, reason }
    } else if err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_unrecoverable_error()
        || err.kind() == redis::ErrorKind::BusyLoadingError
        || err.kind() == redis::ErrorKind::TryAgain
        || err.kind() == redis::ErrorKind::MasterDown
        || err.kind() == redis::ErrorKind::ReadOnly
        || err.kind() == redis::ErrorKind::ClusterDown
        || err.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || err.kind() == redis::ErrorKind::Moved
        || err.kind() == redis::ErrorKind::Ask
        || err.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel
        || err.kind() == redis::ErrorKind::NoValidReplicasFoundBySentinel
    {
        DurableError::Unavailable {
            url: target.masked().to_string(),
            op,
            reason,
        }
    } else {
        DurableError::Rejected { op, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_user_and_password() {
        assert_eq!(
            mask_url("redis://alice:s3cret@db.local:6379/0"),
            "redis://***@db.local:6379/0"
        );
        assert_eq!(mask_url("redis://:s3cret@db:1"), "redis://***@db:1");
        assert_eq!(mask_url("rediss://u:p@h/2?x=1"), "rediss://***@h/2?x=1");
        assert_eq!(mask_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(mask_url("u:p@h:1"), "***@h:1");
        assert_eq!(mask_url("redis://a:b@c@h:1/"), "redis://***@h:1/");
    }

    #[test]
    fn scrubs_password_from_reasons() {
        let scrub = |text: &str, url: &str| Target::new(mask_url(url), &[url], &[]).scrub(text);
        let url = "redis://alice:s3cret@h:1";
        assert_eq!(scrub("auth s3cret failed", url), "auth *** failed");
        assert_eq!(scrub("auth x failed", "redis://h:1"), "auth x failed");
        assert_eq!(scrub("x", "redis://alice@h:1"), "x");
    }

    #[test]
    fn targets_scrub_every_secret() {
        let t = Target::new(
            "redis://***@a:1,redis://***@b:2".into(),
            &["redis://u:pw1@a:1", "redis://u:pw2@b:2", "redis://c:3"],
            &["sentinel-pw", ""],
        );
        assert_eq!(t.scrub("pw1 pw2 sentinel-pw x"), "*** *** *** x");
        assert_eq!(format!("{t:?}"), "redis://***@a:1,redis://***@b:2");
    }

    #[test]
    fn messages() {
        let cases: Vec<(DurableError, &str)> = vec![
            (
                DurableError::Unavailable {
                    url: mask_url("redis://a:pw@h:1"),
                    op: "append_step",
                    reason: "Connection refused".into(),
                },
                "redis at redis://***@h:1 is unavailable during append_step: Connection refused",
            ),
            (
                DurableError::Timeout { op: "ack", ms: 250 },
                "redis ack timed out after 250 ms",
            ),
            (
                DurableError::Corrupt {
                    id: "17-0".into(),
                    reason: "unknown record version 9".into(),
                },
                "stored value 17-0 is corrupt: unknown record version 9",
            ),
            (
                DurableError::Rejected {
                    op: "trim",
                    reason: "WRONGTYPE".into(),
                },
                "redis rejected trim: WRONGTYPE",
            ),
            (
                DurableError::StaleEpoch {
                    epoch: Epoch(3),
                    current: Epoch(4),
                },
                "append for epoch 3 refused: the group is at epoch 4",
            ),
            (
                DurableError::EpochOver {
                    epoch: Epoch(3),
                    current: Epoch(5),
                },
                "join of epoch 3 refused: the group is at epoch 5",
            ),
            (
                DurableError::InvalidUrl {
                    url: "redis://***@h".into(),
                    reason: "bad port".into(),
                },
                "invalid redis url redis://***@h: bad port",
            ),
            (
                DurableError::InvalidGroup {
                    group: "a b".into(),
                    reason: "only letters, digits, '-', '_' and '.' are allowed",
                },
                "invalid group name \"a b\": only letters, digits, '-', '_' and '.' are allowed",
            ),
            (
                DurableError::NotReplicated {
                    op: "append_step",
                    acked: 0,
                    wanted: 1,
                    ms: 200,
                },
                "redis append_step reached 0 of the 1 replicas required within 200 ms: not revealed",
            ),
            (
                DurableError::InvalidEndpoint {
                    reason: "no cluster node given".into(),
                },
                "invalid redis endpoint: no cluster node given",
            ),
            (
                DurableError::RankOutOfRange {
                    rank: Rank(4),
                    world_size: 4,
                },
                "rank 4 is outside the group of 4 ranks",
            ),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }
}
