//! The group-level keys: the epoch counter, the supervisor's saved state and per-epoch
//! membership.
//!
//! Owns how these are stored. It never decides when to restart or whom to admit: the
//! supervisor does, and keeps here only what a restarted supervisor needs to continue.
//!
//! The supervisor hash holds readable fields (`redis-cli HGETALL` shows them as text):
//! `v` (format version, `1`), `epoch`, `restarts_ms` (comma-separated restart times, ms
//! since the Unix epoch, oldest first), `state` (`healthy`, `restarting` or `failed`) and
//! `reason` (empty when healthy).

use crate::error::{DurableError, Result};
use crate::log::CompletionLog;
use std::collections::HashMap;
use std::fmt;
use tandem_proto::{Epoch, Rank};

/// Moves the epoch counter forward and writes the barrier `{epoch}-0` that fences every
/// older epoch's appends, atomically. KEYS: stream, counter. ARGV: record version.
/// Should the counter ever be behind the stream (the counter key was lost but the stream
/// kept), it is moved past the stream's last epoch first, so epochs never repeat.
pub(crate) const NEXT_EPOCH_SCRIPT: &str = r"
local e = redis.call('INCR', KEYS[2])
local r = redis.pcall('XADD', KEYS[1], e .. '-0', 'v', ARGV[1], 'barrier', e)
if type(r) == 'table' and r.err then
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  local last = '0-0'
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then last = info[i + 1] end
  end
  e = tonumber(string.match(last, '^(%d+)-')) + 1
  redis.call('SET', KEYS[2], e)
  redis.call('XADD', KEYS[1], e .. '-0', 'v', ARGV[1], 'barrier', e)
end
return e
";

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
    fn to_fields(&self) -> Vec<(&'static str, String)> {
        let restarts: Vec<String> = self.restarts_ms.iter().map(u64::to_string).collect();
        vec![
            ("v", SUPERVISOR_STATE_VERSION.to_string()),
            ("epoch", self.epoch.0.to_string()),
            ("restarts_ms", restarts.join(",")),
            ("state", self.state.name().to_string()),
            ("reason", self.state.reason().to_string()),
        ]
    }

    fn from_fields(key: &str, f: &HashMap<String, String>) -> Result<SupervisorState> {
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

impl CompletionLog {
    /// Moves the group to a new epoch and returns it, in one atomic script: INCR the counter
    /// and append the barrier entry `{epoch}-0`, after which appends of any older epoch are
    /// refused. Concurrent callers each get a different epoch. The first call returns epoch 1.
    ///
    /// # Errors
    /// [`DurableError::Unavailable`], [`DurableError::Timeout`] (it may have been applied),
    /// [`DurableError::Rejected`] (a key holds something else).
    pub async fn next_epoch(&self) -> Result<Epoch> {
        let mut inv = self.next_epoch_script.prepare_invoke();
        inv.key(&self.keys.completions)
            .key(&self.keys.epoch)
            .arg(crate::record::RECORD_VERSION);
        self.conn.script("next_epoch", &inv).await.map(Epoch)
    }

    /// The group's current epoch; `Epoch(0)` before the first [`Self::next_epoch`].
    ///
    /// # Errors
    /// [`DurableError::Unavailable`], [`DurableError::Timeout`], [`DurableError::Corrupt`].
    pub async fn current_epoch(&self) -> Result<Epoch> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(&self.keys.epoch);
        let text: Option<String> = self.conn.query("current_epoch", &cmd).await?;
        match text {
            None => Ok(Epoch(0)),
            Some(t) => t.parse().map(Epoch).map_err(|_| DurableError::Corrupt {
                id: self.keys.epoch.clone(),
                reason: format!("epoch counter holds {t:?}, not a number"),
            }),
        }
    }

    /// Saves the supervisor's state, replacing the previous one in one command.
    ///
    /// # Errors
    /// [`DurableError::Unavailable`], [`DurableError::Timeout`], [`DurableError::Rejected`].
    pub async fn save_supervisor_state(&self, state: &SupervisorState) -> Result<()> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(&self.keys.supervisor);
        for (field, value) in state.to_fields() {
            cmd.arg(field).arg(value);
        }
        self.conn.query::<()>("save_supervisor_state", &cmd).await
    }

    /// The saved supervisor state, `None` when none was ever saved.
    ///
    /// # Errors
    /// [`DurableError::Corrupt`] naming the key and the bad field; [`DurableError::Unavailable`],
    /// [`DurableError::Timeout`], [`DurableError::Rejected`].
    pub async fn load_supervisor_state(&self) -> Result<Option<SupervisorState>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(&self.keys.supervisor);
        let fields: HashMap<String, String> =
            self.conn.query("load_supervisor_state", &cmd).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        SupervisorState::from_fields(&self.keys.supervisor, &fields).map(Some)
    }

    /// Records that `rank` joined `epoch`. Returns `true` the first time, `false` when it had
    /// already joined (joining twice changes nothing).
    ///
    /// # Errors
    /// [`DurableError::RankOutOfRange`], [`DurableError::Unavailable`],
    /// [`DurableError::Timeout`], [`DurableError::Rejected`].
    pub async fn join(&self, epoch: Epoch, rank: Rank) -> Result<bool> {
        self.check_rank(rank)?;
        let mut cmd = redis::cmd("SADD");
        cmd.arg(self.keys.members(epoch)).arg(rank.0);
        let added: u64 = self.conn.query("join", &cmd).await?;
        Ok(added == 1)
    }

    /// The ranks that joined `epoch`, ascending.
    ///
    /// # Errors
    /// [`DurableError::Corrupt`] for a member that is not a rank number;
    /// [`DurableError::Unavailable`], [`DurableError::Timeout`], [`DurableError::Rejected`].
    pub async fn members(&self, epoch: Epoch) -> Result<Vec<Rank>> {
        let key = self.keys.members(epoch);
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(&key);
        let raw: Vec<String> = self.conn.query("members", &cmd).await?;
        let mut ranks = raw
            .iter()
            .map(|m| {
                m.parse().map(Rank).map_err(|_| DurableError::Corrupt {
                    id: key.clone(),
                    reason: format!("member {m:?} is not a rank"),
                })
            })
            .collect::<Result<Vec<Rank>>>()?;
        ranks.sort();
        Ok(ranks)
    }

    /// Deletes the membership record of `epoch` (the supervisor drops old epochs' records).
    ///
    /// # Errors
    /// [`DurableError::Unavailable`], [`DurableError::Timeout`], [`DurableError::Rejected`].
    pub async fn forget_members(&self, epoch: Epoch) -> Result<()> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.keys.members(epoch));
        self.conn.query::<()>("forget_members", &cmd).await
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
