//! Which Redis deployment a [`crate::RedisLog`] talks to, and how long an append waits for
//! replicas.
//!
//! Owns [`RedisEndpoint`] (one server, a Redis Cluster, or a primary watched by Sentinel) and
//! [`ReplicationWait`]. It only describes; [`crate::conn`] connects. Every printed form masks
//! credentials ([`crate::mask_url`]).
//!
//! # Choosing one
//!
//! | deployment | what the client does | what survives losing the primary |
//! |---|---|---|
//! | [`RedisEndpoint::Standalone`] | one self-reconnecting connection | what its append-only file holds (`appendfsync everysec`: all but the last second) |
//! | [`RedisEndpoint::Cluster`] | the redis crate's cluster client: slot map from the seed nodes, MOVED and ASK followed during a resharding | per shard, as Sentinel below (the cluster promotes a replica) |
//! | [`RedisEndpoint::Sentinel`] | asks the sentinels for the primary, reconnects through them after a failover | with [`ReplicationWait::replicas`] `= 0`: writes the replica had not received (asynchronous replication); with `≥ 1`: every revealed outcome |
//!
//! Every key of a group shares one hash slot (`tandem:{group}:…`, the braces are the hash
//! tag), so a group lives on one cluster shard and its scripts stay legal; different groups
//! hash to different slots and spread over the masters.

use std::fmt;

use crate::error::{mask_url, DurableError, Result, Target};

/// The Redis deployment behind a [`crate::RedisLog`].
#[derive(Clone, PartialEq, Eq)]
pub enum RedisEndpoint {
    /// One server: `redis://[user:password@]host:port[/db]`.
    Standalone {
        /// The server's URL.
        url: String,
    },
    /// A Redis Cluster, found from its seed nodes (`redis://[user:password@]host:port`, any
    /// number, at least one reachable); the client learns every master from them.
    Cluster {
        /// Seed nodes' URLs.
        nodes: Vec<String>,
        /// Username for every node (`None`: the seed URLs' userinfo, or none).
        username: Option<String>,
        /// Password for every node (`None`: the seed URLs' userinfo, or none).
        password: Option<String>,
    },
    /// A primary (with replicas) watched by Redis Sentinel: the client asks the sentinels for
    /// the primary named `master` and asks again whenever the primary stops answering or
    /// answers as a replica (after a failover).
    Sentinel {
        /// Sentinels' URLs, `redis://[user:password@]host:port` (userinfo authenticates to the
        /// sentinel itself).
        sentinels: Vec<String>,
        /// The master name the sentinels monitor (`sentinel monitor NAME ...`).
        master: String,
        /// Username for the primary (`None`: default user).
        username: Option<String>,
        /// Password for the primary (`None`: none).
        password: Option<String>,
        /// Database number on the primary.
        db: i64,
    },
}

impl RedisEndpoint {
    /// A single server.
    pub fn standalone(url: impl Into<String>) -> Self {
        RedisEndpoint::Standalone { url: url.into() }
    }

    /// A Redis Cluster from its seed nodes, credentials in the URLs.
    pub fn cluster<S: Into<String>>(nodes: impl IntoIterator<Item = S>) -> Self {
        RedisEndpoint::Cluster {
            nodes: nodes.into_iter().map(Into::into).collect(),
            username: None,
            password: None,
        }
    }

    /// A Sentinel-managed primary named `master`, without credentials, database 0.
    pub fn sentinel<S: Into<String>>(
        sentinels: impl IntoIterator<Item = S>,
        master: impl Into<String>,
    ) -> Self {
        RedisEndpoint::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: master.into(),
            username: None,
            password: None,
            db: 0,
        }
    }

    /// The deployment the `[redis]` section names; `None` when it names none (`url` empty,
    /// no cluster, no sentinels). The credentials keys apply to cluster and Sentinel mode.
    pub fn from_config(redis: &tandem_config::RedisConfig) -> Option<RedisEndpoint> {
        let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
        match redis.mode() {
            tandem_config::RedisMode::None => None,
            tandem_config::RedisMode::Standalone => Some(RedisEndpoint::standalone(&redis.url)),
            tandem_config::RedisMode::Cluster => Some(RedisEndpoint::Cluster {
                nodes: redis.cluster_nodes.clone(),
                username: text(&redis.username),
                password: text(&redis.password),
            }),
            tandem_config::RedisMode::Sentinel => Some(RedisEndpoint::Sentinel {
                sentinels: redis.sentinels.clone(),
                master: redis.sentinel_master.clone(),
                username: text(&redis.username),
                password: text(&redis.password),
                db: 0,
            }),
        }
    }

    /// Checks the description is usable.
    ///
    /// # Errors
    /// [`DurableError::InvalidEndpoint`]: a cluster without nodes, Sentinel without
    /// sentinels or master name.
    pub fn check(&self) -> Result<()> {
        let bad = |reason: &str| {
            Err(DurableError::InvalidEndpoint {
                reason: reason.to_string(),
            })
        };
        match self {
            RedisEndpoint::Standalone { .. } => Ok(()),
            RedisEndpoint::Cluster { nodes, .. } if nodes.is_empty() => {
                bad("a cluster needs at least one seed node")
            }
            RedisEndpoint::Sentinel { sentinels, .. } if sentinels.is_empty() => {
                bad("sentinel mode needs at least one sentinel address")
            }
            RedisEndpoint::Sentinel { master, .. } if master.is_empty() => {
                bad("sentinel mode needs the master name the sentinels monitor")
            }
            _ => Ok(()),
        }
    }

    /// The URLs with credentials masked and the secrets to keep out of messages.
    pub(crate) fn target(&self) -> Target {
        match self {
            RedisEndpoint::Standalone { url } => Target::new(mask_url(url), &[url], &[]),
            RedisEndpoint::Cluster {
                nodes, password, ..
            } => Target::new(
                format!("cluster {}", masked_list(nodes)),
                &nodes.iter().map(String::as_str).collect::<Vec<_>>(),
                &[password.as_deref().unwrap_or("")],
            ),
            RedisEndpoint::Sentinel {
                sentinels,
                master,
                password,
                ..
            } => Target::new(
                format!("sentinel master {master:?} via {}", masked_list(sentinels)),
                &sentinels.iter().map(String::as_str).collect::<Vec<_>>(),
                &[password.as_deref().unwrap_or("")],
            ),
        }
    }
}

fn masked_list(urls: &[String]) -> String {
    urls.iter()
        .map(|u| mask_url(u))
        .collect::<Vec<_>>()
        .join(",")
}

impl fmt::Debug for RedisEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.target().masked())
    }
}

impl fmt::Display for RedisEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.target().masked())
    }
}

/// How many replicas must acknowledge a write before the leader may reveal what it holds
/// (Redis `WAIT numreplicas timeout`, sent in the same round trip as the write).
///
/// `replicas = 0` (the default) waits for nothing: a write is acknowledged once the primary
/// applied it, and a failover can lose what the replica had not received yet. With
/// `replicas ≥ 1` an append and an epoch change return only once that many replicas hold
/// them, or fail with [`DurableError::NotReplicated`] after `timeout_ms` (the outcome then
/// stays unrevealed and the leader appends it again). Redis promotes the replica with the
/// most data on failover (Sentinel and Cluster both), so with one replica waited for, every
/// revealed outcome survives the loss of the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicationWait {
    /// Replicas that must acknowledge each append (0: none).
    pub replicas: u32,
    /// How long the primary waits for them, in ms (the call's own deadline grows by this).
    pub timeout_ms: u64,
}

impl Default for ReplicationWait {
    fn default() -> Self {
        ReplicationWait {
            replicas: 0,
            timeout_ms: 500,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_forms_mask_credentials() {
        let c = RedisEndpoint::Cluster {
            nodes: vec!["redis://u:s3cret@a:1".into(), "redis://b:2".into()],
            username: None,
            password: Some("other-secret".into()),
        };
        assert_eq!(c.to_string(), "cluster redis://***@a:1,redis://b:2");
        let s = RedisEndpoint::Sentinel {
            sentinels: vec!["redis://:x@s1:26379".into()],
            master: "mymaster".into(),
            username: None,
            password: Some("pw".into()),
            db: 0,
        };
        assert_eq!(
            format!("{s:?}"),
            "sentinel master \"mymaster\" via redis://***@s1:26379"
        );
        assert_eq!(
            RedisEndpoint::standalone("redis://:p@h:1").to_string(),
            "redis://***@h:1"
        );
    }

    #[test]
    fn the_redis_section_names_the_endpoint() {
        let mut r = tandem_config::RedisConfig::default();
        assert_eq!(
            RedisEndpoint::from_config(&r),
            Some(RedisEndpoint::standalone("redis://127.0.0.1:6379"))
        );
        r.sentinels = vec!["redis://s:26379".into()];
        r.sentinel_master = "m".into();
        r.password = "pw".into();
        assert_eq!(
            RedisEndpoint::from_config(&r),
            Some(RedisEndpoint::Sentinel {
                sentinels: vec!["redis://s:26379".into()],
                master: "m".into(),
                username: None,
                password: Some("pw".into()),
                db: 0
            })
        );
        r.cluster_nodes = vec!["redis://n:7000".into()];
        assert!(matches!(
            RedisEndpoint::from_config(&r),
            Some(RedisEndpoint::Cluster { .. })
        ));
        let none = tandem_config::RedisConfig {
            url: String::new(),
            ..Default::default()
        };
        assert_eq!(RedisEndpoint::from_config(&none), None);
    }

    #[test]
    fn incomplete_descriptions_are_refused() {
        let msg = |e: RedisEndpoint| e.check().unwrap_err().to_string();
        assert_eq!(
            msg(RedisEndpoint::cluster(Vec::<String>::new())),
            "invalid redis endpoint: a cluster needs at least one seed node"
        );
        assert_eq!(
            msg(RedisEndpoint::sentinel(Vec::<String>::new(), "m")),
            "invalid redis endpoint: sentinel mode needs at least one sentinel address"
        );
        assert_eq!(
            msg(RedisEndpoint::sentinel(["redis://s:1"], "")),
            "invalid redis endpoint: sentinel mode needs the master name the sentinels monitor"
        );
        RedisEndpoint::standalone("redis://h:1").check().unwrap();
    }
}
