//! The supervisor's saved state ([`SupervisorState`], [`GroupState`]) and its encoding as a
//! Redis hash.
//!
//! Owns the value types and their encoding; [`crate::EpochStore`] saves and loads them. It
//! never decides when to restart: the supervisor does, and keeps here only what a restarted
//! supervisor needs to continue.
//!
//! The supervisor hash holds readable fields (`redis-cli HGETALL` shows them as text):
//! `v` (format version, `1`), `epoch`, `restarts_ms` (comma-separated restart times, ms
//! since the Unix epoch, oldest first), `state` (`healthy`, `restarting` or `failed`) and
//! `reason` (empty when healthy).

use crate::error::{DurableError, Result};
use std::collections::HashMap;
use std::fmt;
use tandem_proto::Epoch;

/// The supervisor-state format version this build writes and reads.
pub const SUPERVISOR_STATE_VERSION: u32 = 1;

/// How the group stands, as the supervisor last decided.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// Every rank is up in the current epoch.
    Healthy,
    /// A restart into a new epoch is under way.
    Restarting {
        /// Why (for example `rank 2 missed heartbeats for 3000 ms`).
        reason: String,
    },
    /// The restart limit was exceeded; the outer supervisor takes over.
    Failed {
        /// Why.
        reason: String,
    },
}

impl GroupState {
    /// `healthy`, `restarting` or `failed`.
    pub fn name(&self) -> &'static str {
        match self {
            GroupState::Healthy => "healthy",
            GroupState::Restarting { .. } => "restarting",
            GroupState::Failed { .. } => "failed",
        }
    }

    /// The reason, empty when healthy.
    pub fn reason(&self) -> &str {
        match self {
            GroupState::Healthy => "",
            GroupState::Restarting { reason } | GroupState::Failed { reason } => reason,
        }
    }
}

impl fmt::Display for GroupState {
    /// `healthy`, `restarting: <reason>` or `failed: <reason>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupState::Healthy => f.write_str("healthy"),
            other => write!(f, "{}: {}", other.name(), other.reason()),
        }
    }
}

/// What a restarted supervisor continues from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SupervisorState {
    /// The epoch the group runs in (or is restarting into).
    pub epoch: Epoch,
    /// Restart times, ms since the Unix epoch, oldest first (the restart-intensity window).
    pub restarts_ms: Vec<u64>,
    /// Healthy, restarting or failed, with the reason.
    pub state: GroupState,
}

impl SupervisorState {
    /// The hash fields Redis stores, in order (`v`, `epoch`, `restarts_ms`, `state`, `reason`).
    pub(crate) fn to_fields(&self) -> Vec<(&'static str, String)> {
        let restarts: Vec<String> = self.restarts_ms.iter().map(u64::to_string).collect();
        vec![
            ("v", SUPERVISOR_STATE_VERSION.to_string()),
            ("epoch", self.epoch.0.to_string()),
            ("restarts_ms", restarts.join(",")),
            ("state", self.state.name().to_string()),
            ("reason", self.state.reason().to_string()),
        ]
    }

    /// Reads the hash fields back; `key` names the hash in errors.
    pub(crate) fn from_fields(key: &str, f: &HashMap<String, String>) -> Result<SupervisorState> {
        let corrupt = |reason: String| DurableError::Corrupt {
            id: key.to_string(),
            reason,
        };
        let get = |name: &str| {
            f.get(name)
                .map(String::as_str)
                .ok_or_else(|| corrupt(format!("missing field {name}")))
        };
        let version = get("v")?;
        if version != SUPERVISOR_STATE_VERSION.to_string() {
            return Err(corrupt(format!(
                "unknown supervisor state version {version}"
            )));
        }
        let epoch = get("epoch")?
            .parse()
            .map_err(|_| corrupt("field epoch is not a number".into()))?;
        let restarts_ms = get("restarts_ms")?
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<u64>())
            .collect::<std::result::Result<Vec<u64>, _>>()
            .map_err(|_| corrupt("field restarts_ms is not a list of numbers".into()))?;
        let reason = get("reason")?.to_string();
        let state = match get("state")? {
            "healthy" => GroupState::Healthy,
            "restarting" => GroupState::Restarting { reason },
            "failed" => GroupState::Failed { reason },
            other => return Err(corrupt(format!("unknown group state {other:?}"))),
        };
        Ok(SupervisorState {
            epoch: Epoch(epoch),
            restarts_ms,
            state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn state_round_trips_through_fields() {
        for state in [
            GroupState::Healthy,
            GroupState::Restarting {
                reason: "rank 2 missed heartbeats".into(),
            },
            GroupState::Failed {
                reason: "4 restarts in 60 s".into(),
            },
        ] {
            let s = SupervisorState {
                epoch: Epoch(7),
                restarts_ms: vec![1000, 2500],
                state,
            };
            let f: HashMap<String, String> = s
                .to_fields()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            assert_eq!(SupervisorState::from_fields("k", &f).unwrap(), s);
        }
        let empty = SupervisorState {
            epoch: Epoch(1),
            restarts_ms: vec![],
            state: GroupState::Healthy,
        };
        let f = fields(&[
            ("v", "1"),
            ("epoch", "1"),
            ("restarts_ms", ""),
            ("state", "healthy"),
            ("reason", ""),
        ]);
        assert_eq!(SupervisorState::from_fields("k", &f).unwrap(), empty);
    }

    #[test]
    fn corrupt_fields_are_named() {
        let ok = [
            ("v", "1"),
            ("epoch", "3"),
            ("restarts_ms", "1,2"),
            ("state", "healthy"),
            ("reason", ""),
        ];
        let msg = |changes: &[(&str, &str)]| {
            let mut f = fields(&ok);
            for (k, v) in changes {
                f.insert(k.to_string(), v.to_string());
            }
            SupervisorState::from_fields("tandem:{g}:supervisor", &f)
                .unwrap_err()
                .to_string()
        };
        let p = "stored value tandem:{g}:supervisor is corrupt:";
        assert_eq!(
            msg(&[("v", "2")]),
            format!("{p} unknown supervisor state version 2")
        );
        assert_eq!(
            msg(&[("epoch", "x")]),
            format!("{p} field epoch is not a number")
        );
        assert_eq!(
            msg(&[("restarts_ms", "1,x")]),
            format!("{p} field restarts_ms is not a list of numbers")
        );
        assert_eq!(
            msg(&[("state", "odd")]),
            format!("{p} unknown group state \"odd\"")
        );
        let mut missing = fields(&ok);
        missing.remove("reason");
        assert_eq!(
            SupervisorState::from_fields("k", &missing)
                .unwrap_err()
                .to_string(),
            "stored value k is corrupt: missing field reason"
        );
    }

    #[test]
    fn group_state_text() {
        assert_eq!(GroupState::Healthy.to_string(), "healthy");
        assert_eq!(
            GroupState::Failed {
                reason: "too many restarts".into()
            }
            .to_string(),
            "failed: too many restarts"
        );
        assert_eq!(
            GroupState::Restarting { reason: "r".into() }.name(),
            "restarting"
        );
    }
}
