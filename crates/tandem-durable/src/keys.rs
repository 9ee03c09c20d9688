//! Redis key and consumer-group names of one group (the layout is listed in the crate docs).
//!
//! Owns naming only. It never talks to Redis. The group name sits inside `{}` so that, under
//! Redis Cluster, every key of a group hashes to one slot and `next_epoch` (a script that
//! increments the epoch counter and writes the stream) stays legal.

use crate::error::{DurableError, Result};
use tandem_proto::{Epoch, Rank};

/// Longest group name accepted, in bytes.
pub const MAX_GROUP_LEN: usize = 64;

/// The key names of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// The group name as given.
    pub group: String,
    /// `tandem:{group}:completions`: the completion stream.
    pub completions: String,
    /// `tandem:{group}:epoch`: the epoch counter.
    pub epoch: String,
    /// `tandem:{group}:supervisor`: the supervisor's state hash.
    pub supervisor: String,
}

impl Keys {
    /// The keys of group `group`.
    ///
    /// # Errors
    /// [`DurableError::InvalidGroup`] when the name is empty, longer than
    /// [`MAX_GROUP_LEN`] bytes, or holds anything but ASCII letters, digits, `-`, `_`, `.`.
    pub fn new(group: &str) -> Result<Keys> {
        let invalid = |reason| DurableError::InvalidGroup {
            group: group.to_string(),
            reason,
        };
        if group.is_empty() {
            return Err(invalid("the name is empty"));
        }
        if group.len() > MAX_GROUP_LEN {
            return Err(invalid("the name is longer than 64 bytes"));
        }
        if !group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            return Err(invalid(
                "only letters, digits, '-', '_' and '.' are allowed",
            ));
        }
        let key = |suffix: &str| format!("tandem:{{{group}}}:{suffix}");
        Ok(Keys {
            group: group.to_string(),
            completions: key("completions"),
            epoch: key("epoch"),
            supervisor: key("supervisor"),
        })
    }

    /// `tandem:{group}:`: the prefix of every key of the group.
    pub fn prefix(&self) -> String {
        format!("tandem:{{{}}}:", self.group)
    }

    /// `tandem:{group}:members:{epoch}`: the set of ranks that joined `epoch`.
    pub fn members(&self, epoch: Epoch) -> String {
        format!("tandem:{{{}}}:members:{}", self.group, epoch.0)
    }
}

/// The consumer group that tracks delivery to `rank`'s engine: `rank-{r}`.
pub fn consumer_group(rank: Rank) -> String {
    format!("rank-{}", rank.0)
}

/// The single consumer inside each rank's consumer group (one agent per rank).
pub(crate) const CONSUMER: &str = "agent";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let k = Keys::new("llama-70b.pp2").unwrap();
        assert_eq!(k.completions, "tandem:{llama-70b.pp2}:completions");
        assert_eq!(k.epoch, "tandem:{llama-70b.pp2}:epoch");
        assert_eq!(k.supervisor, "tandem:{llama-70b.pp2}:supervisor");
        assert_eq!(k.members(Epoch(7)), "tandem:{llama-70b.pp2}:members:7");
        assert_eq!(k.prefix(), "tandem:{llama-70b.pp2}:");
        assert!(k.members(Epoch(7)).starts_with(&k.prefix()));
        assert_eq!(consumer_group(Rank(3)), "rank-3");
    }

    #[test]
    fn rejects_bad_names() {
        let msg = |g: &str| Keys::new(g).unwrap_err().to_string();
        assert_eq!(msg(""), "invalid group name \"\": the name is empty");
        assert_eq!(
            msg(&"x".repeat(65)),
            format!(
                "invalid group name \"{}\": the name is longer than 64 bytes",
                "x".repeat(65)
            )
        );
        for bad in ["a}b", "a:b", "a b", "é"] {
            assert_eq!(
                msg(bad),
                format!(
                    "invalid group name {bad:?}: only letters, digits, '-', '_' and '.' are allowed"
                )
            );
        }
    }
}
