//! [`EpochStore`] on Redis: the counter `tandem:{g}:epoch` (moved together with the stream's
//! barrier by one Lua script), the supervisor hash `tandem:{g}:supervisor` and the membership
//! sets `tandem:{g}:members:{epoch}`.
//!
//! Owns these commands and the scripts. It never decides when to restart or whom to admit.
//! Per-epoch keys stay bounded: the script that moves the epoch deletes the previous epoch's
//! membership set and manifests, and a join of an epoch older than the counter is refused, so
//! no late join re-creates a deleted set (at most one epoch's keys outlive their epoch, and
//! only until the next move).

use super::RedisLog;
use crate::epochs::EpochStore;
use crate::error::{DurableError, Result};
use crate::supervisor::SupervisorState;
use async_trait::async_trait;
use std::collections::HashMap;
use tandem_proto::{Epoch, Rank};

/// Moves the epoch counter forward and writes the barrier `{epoch}-0` that fences every
/// older epoch's appends, atomically. KEYS: stream, counter. ARGV: record version.
/// Should the counter ever be behind the stream (the counter key was lost but the stream
/// kept), it is moved past the stream's last epoch first, so epochs never repeat.
/// ARGV[2] is the group's key prefix `tandem:{g}:` and ARGV[3] its world size: the previous
/// epoch's `members:{e-1}` and `manifest:{e-1}:{r}` are deleted (keys of the same hash slot,
/// named inside the script because the epoch is decided there). Every rank's consumer group
/// `rank-{r}` that is missing is created at `0` (an existing one is left alone): a stream
/// that was deleted and is created again by this barrier has its groups again, and a rank
/// whose group was lost is handed every retained entry, so the recovery redelivers them to it.
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
if ARGV[3] then
  for r = 0, tonumber(ARGV[3]) - 1 do
    redis.pcall('XGROUP', 'CREATE', KEYS[1], 'rank-' .. r, '0')
  end
end
if ARGV[2] and e > 1 then
  local old = e - 1
  redis.call('DEL', ARGV[2] .. 'members:' .. old)
  for r = 0, tonumber(ARGV[3]) - 1 do
    redis.call('DEL', ARGV[2] .. 'manifest:' .. old .. ':' .. r)
  end
end
return e
";

/// Adds a rank to an epoch's membership set unless the epoch is older than the counter.
/// KEYS: counter, members set. ARGV: epoch, rank. Returns 1 (added), 0 (already a member) or
/// minus the current epoch (refused: the epoch is over, and its set may be gone).
pub(crate) const JOIN_SCRIPT: &str = r"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < cur then return -cur end
return redis.call('SADD', KEYS[2], ARGV[2])
";

#[async_trait]
impl EpochStore for RedisLog {
    /// One script: INCR the counter and XADD the barrier `{epoch}-0` (both keys declared, in
    /// one hash slot, so the script is legal under Redis Cluster). With a replication wait
    /// the replicas are checked first (a `WAIT` on its own: an epoch is not moved while the
    /// primary has too few replicas, so a failover's aftermath does not move it again and
    /// again), then the script is sent as EVAL followed by `WAIT` in one round trip (an
    /// epoch change is rare; the script's text costs nothing then): a barrier that a
    /// failover could lose would let a fenced leader append again.
    async fn next_epoch(&self) -> Result<Epoch> {
        if self.wait.replicas > 0 {
            self.replicas_caught_up("next_epoch", &self.keys.epoch)
                .await?;
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(NEXT_EPOCH_SCRIPT)
                .arg(2)
                .arg(&self.keys.completions)
                .arg(&self.keys.epoch)
                .arg(crate::record::RECORD_VERSION)
                .arg(self.keys.prefix())
                .arg(self.world_size);
            return self
                .replicated("next_epoch", cmd, |_: &u64| None)
                .await
                .map(Epoch);
        }
        let mut inv = self.next_epoch_script.prepare_invoke();
        inv.key(&self.keys.completions)
            .key(&self.keys.epoch)
            .arg(crate::record::RECORD_VERSION)
            .arg(self.keys.prefix())
            .arg(self.world_size);
        self.conn.script("next_epoch", &inv).await.map(Epoch)
    }

    /// GET of the counter.
    async fn current_epoch(&self) -> Result<Epoch> {
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

    /// One HSET of every field.
    async fn save_supervisor_state(&self, state: &SupervisorState) -> Result<()> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(&self.keys.supervisor);
        for (field, value) in state.to_fields() {
            cmd.arg(field).arg(value);
        }
        self.conn.query::<()>("save_supervisor_state", &cmd).await
    }

    /// HGETALL.
    async fn load_supervisor_state(&self) -> Result<Option<SupervisorState>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(&self.keys.supervisor);
        let fields: HashMap<String, String> =
            self.conn.query("load_supervisor_state", &cmd).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        SupervisorState::from_fields(&self.keys.supervisor, &fields).map(Some)
    }

    /// One script: SADD unless the counter is past `epoch`.
    async fn join(&self, epoch: Epoch, rank: Rank) -> Result<bool> {
        self.check_rank(rank)?;
        let mut inv = self.join_script.prepare_invoke();
        inv.key(&self.keys.epoch)
            .key(self.keys.members(epoch))
            .arg(epoch.0)
            .arg(rank.0);
        let added: i64 = self.conn.script("join", &inv).await?;
        if added < 0 {
            return Err(DurableError::EpochOver {
                epoch,
                current: Epoch(added.unsigned_abs()),
            });
        }
        Ok(added == 1)
    }

    /// SMEMBERS, sorted.
    async fn members(&self, epoch: Epoch) -> Result<Vec<Rank>> {
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

    /// DEL.
    async fn forget_members(&self, epoch: Epoch) -> Result<()> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.keys.members(epoch));
        self.conn.query::<()>("forget_members", &cmd).await
    }
}
