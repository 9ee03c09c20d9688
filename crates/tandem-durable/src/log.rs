//! The completion log of one group: the fenced write-ahead append and per-rank delivery
//! tracking (docs/DESIGN.md invariant 5).
//!
//! Owns the stream and its consumer groups: [`CompletionLog::append_step`] (one XADD per
//! step, fenced by the epoch in the entry id), [`CompletionLog::read_new`], [`CompletionLog::ack`],
//! [`CompletionLog::pending`] and [`CompletionLog::ack_through`]. Recovery, trimming and the
//! group-state keys live in their own modules as further `impl CompletionLog` blocks. It
//! never decides what an outcome is or when a frame is sealed: the leader's driver appends,
//! then seals; each rank's agent reads and acknowledges after its engine did.
//!
//! # The epoch fence
//!
//! An append for epoch `e` is `XADD {stream} {e}-* ...`: the entry id's first part is the
//! epoch, and Redis only accepts ids above the stream's last one. `next_epoch` increments
//! the counter and writes a barrier entry `{e+1}-0` in one script, so from that moment every
//! append of epoch `e` or older fails ([`DurableError::StaleEpoch`]) and every append that
//! succeeded is already in the stream that the new epoch's recovery reads. The fence costs
//! nothing on the hot path: the append is a plain XADD, no script.
//!
//! Reads never use XREADGROUP's BLOCK: the connection is multiplexed, and a blocking read
//! would hold up every other call on it. Agents poll.

use crate::conn::{Conn, ConnTimeouts};
use crate::error::{DurableError, Result};
use crate::id::StreamEntryId;
use crate::keys::{consumer_group, Keys, CONSUMER};
use crate::record::{
    decode, encode, LoggedStep, RawFields, StartedTask, StepRecordRef, StreamEntry, FIELD_BARRIER,
    FIELD_RECORD, FIELD_VERSION, RECORD_VERSION,
};
use redis::streams::{StreamId, StreamInfoGroupsReply, StreamPendingCountReply, StreamRangeReply};
use redis::{Script, Value};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use tandem_proto::{Epoch, Rank, Step, TaskOutcome};

/// What Redis answers an XADD whose id is not above the stream's last one.
const STALE_ID_REPLY: &str = "equal or smaller than the target stream top item";

/// Where and how a [`CompletionLog`] connects.
#[derive(Clone, PartialEq, Eq)]
pub struct DurableConfig {
    /// `redis://[user:password@]host:port[/db]`. Never printed unmasked.
    pub url: String,
    /// The group's name (letters, digits, `-`, `_`, `.`; at most 64 bytes).
    pub group: String,
    /// Ranks in the group; one consumer group `rank-{r}` is kept for each.
    pub world_size: u32,
    /// Deadlines and reconnect pacing.
    pub timeouts: ConnTimeouts,
    /// Entries fetched per XRANGE/XPENDING page during recovery and trimming (default 512).
    pub page_entries: usize,
}

impl DurableConfig {
    /// A config with default timeouts and page size.
    pub fn new(url: impl Into<String>, group: impl Into<String>, world_size: u32) -> Self {
        DurableConfig {
            url: url.into(),
            group: group.into(),
            world_size,
            timeouts: ConnTimeouts::default(),
            page_entries: 512,
        }
    }
}

impl fmt::Debug for DurableConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableConfig")
            .field("url", &crate::error::mask_url(&self.url))
            .field("group", &self.group)
            .field("world_size", &self.world_size)
            .field("timeouts", &self.timeouts)
            .field("page_entries", &self.page_entries)
            .finish()
    }
}

/// A group's durable state in Redis: its completion stream, epoch counter, supervisor state
/// and membership. Cheap to clone; clones share one connection.
#[derive(Clone, Debug)]
pub struct CompletionLog {
    pub(crate) conn: Conn,
    pub(crate) keys: Keys,
    pub(crate) world_size: u32,
    pub(crate) page: usize,
    pub(crate) next_epoch_script: Arc<Script>,
}

/// Delivery position of one rank's consumer group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankCursor {
    /// The last entry handed to this rank (`0-0` when none, or when its group is missing).
    pub last_delivered: StreamEntryId,
    /// Entries handed to this rank and not acknowledged.
    pub pending: BTreeSet<StreamEntryId>,
}

impl RankCursor {
    /// Whether this rank acknowledged entry `id` (delivered and no longer pending).
    pub fn acked(&self, id: StreamEntryId) -> bool {
        id <= self.last_delivered && !self.pending.contains(&id)
    }
}

impl CompletionLog {
    /// Connects and creates the consumer groups `rank-0..world_size` (idempotent; a new group
    /// starts before the first entry, so it is handed every retained entry).
    ///
    /// # Errors
    /// [`DurableError::InvalidGroup`], [`DurableError::InvalidUrl`], and the connection
    /// errors of every call ([`DurableError::Unavailable`], [`DurableError::Timeout`]).
    pub async fn connect(config: &DurableConfig) -> Result<CompletionLog> {
        let keys = Keys::new(&config.group)?;
        let conn = Conn::connect(&config.url, config.timeouts).await?;
        let log = CompletionLog {
            conn,
            keys,
            world_size: config.world_size,
            page: config.page_entries.max(1),
            next_epoch_script: Arc::new(Script::new(crate::supervisor::NEXT_EPOCH_SCRIPT)),
        };
        log.ensure_groups().await?;
        Ok(log)
    }

    /// The key names this log uses.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Ranks in the group.
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// The server URL, credentials masked.
    pub fn masked_url(&self) -> String {
        self.conn.masked_url()
    }

    /// Creates the stream and every rank's consumer group if missing (XGROUP CREATE ... 0
    /// MKSTREAM; BUSYGROUP ignored).
    ///
    /// # Errors
    /// [`DurableError::Unavailable`], [`DurableError::Timeout`], [`DurableError::Rejected`].
    pub async fn ensure_groups(&self) -> Result<()> {
        for r in 0..self.world_size {
            let mut cmd = redis::cmd("XGROUP");
            cmd.arg("CREATE")
                .arg(&self.keys.completions)
                .arg(consumer_group(Rank(r)))
                .arg("0")
                .arg("MKSTREAM");
            match self.conn.query::<()>("ensure_groups", &cmd).await {
                Err(DurableError::Rejected { reason, .. }) if reason.contains("BUSYGROUP") => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// Writes ahead one step: the tasks `started` and the outcomes `finished` in step `step`
    /// of `epoch`, as one stream entry (id `{epoch}-{n}`) in one round trip, whatever the
    /// counts. Call before sealing the frame that reveals them. The first record of a new
    /// epoch carries the previous epoch's in-flight tasks as `Aborted` outcomes.
    ///
    /// Fenced: refused once [`Self::next_epoch`] moved the group past `epoch`. An epoch that
    /// was never issued is not detected here; take epochs only from [`Self::next_epoch`].
    ///
    /// # Errors
    /// [`DurableError::StaleEpoch`] (nothing appended; costs one more round trip to read the
    /// current epoch); [`DurableError::Unavailable`]; [`DurableError::Timeout`] (the entry
    /// may or may not have been appended: appending the same outcomes again is safe,
    /// recovery keeps the first per task id).
    pub async fn append_step(
        &self,
        epoch: Epoch,
        step: Step,
        started: &[StartedTask],
        finished: &[TaskOutcome],
    ) -> Result<StreamEntryId> {
        if epoch.0 == 0 {
            return Err(self.stale(epoch).await);
        }
        let bytes = encode(&StepRecordRef {
            epoch,
            step,
            started,
            finished,
        })?;
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&self.keys.completions)
            .arg(format!("{}-*", epoch.0))
            .arg(FIELD_VERSION)
            .arg(RECORD_VERSION)
            .arg(FIELD_RECORD)
            .arg(bytes);
        match self.conn.query::<String>("append_step", &cmd).await {
            Ok(id) => StreamEntryId::parse(&id),
            Err(DurableError::Rejected { reason, .. }) if reason.contains(STALE_ID_REPLY) => {
                Err(self.stale(epoch).await)
            }
            Err(e) => Err(e),
        }
    }

    /// The error for an append of `epoch` that the fence refused.
    async fn stale(&self, epoch: Epoch) -> DurableError {
        match self.current_epoch().await {
            Ok(current) => DurableError::StaleEpoch { epoch, current },
            Err(e) => e,
        }
    }

    /// Hands `rank` up to `count` entries it has not been handed yet (XREADGROUP `>`), in
    /// stream order; they stay pending until [`Self::ack`]. Never blocks server-side. Epoch
    /// barriers count toward `count` but are acknowledged at once and not returned (one more
    /// round trip, once per epoch), so a call may return fewer than `count` entries while
    /// more are waiting.
    ///
    /// # Errors
    /// [`DurableError::RankOutOfRange`]; [`DurableError::Corrupt`] naming an undecodable
    /// entry (it is pending for `rank` and will be listed by [`Self::pending`]);
    /// [`DurableError::Unavailable`]; [`DurableError::Timeout`]; [`DurableError::Rejected`].
    pub async fn read_new(&self, rank: Rank, count: usize) -> Result<Vec<LoggedStep>> {
        self.check_rank(rank)?;
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(consumer_group(rank))
            .arg(CONSUMER)
            .arg("COUNT")
            .arg(count.max(1))
            .arg("STREAMS")
            .arg(&self.keys.completions)
            .arg(">");
        let reply: Option<redis::streams::StreamReadReply> =
            self.conn.query("read_new", &cmd).await?;
        let mut steps = Vec::new();
        let mut barriers = Vec::new();
        for entry in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
            match decode_entry(&entry)? {
                StreamEntry::Step(s) => steps.push(s),
                StreamEntry::Barrier { id, .. } => barriers.push(id),
            }
        }
        self.ack(rank, &barriers).await?;
        Ok(steps)
    }

    /// Acknowledges entries `ids` for `rank` (XACK) once its engine acknowledged the frames
    /// that revealed them. Returns how many were pending and are now acknowledged; ids not
    /// pending are ignored.
    ///
    /// # Errors
    /// [`DurableError::RankOutOfRange`], [`DurableError::Unavailable`],
    /// [`DurableError::Timeout`], [`DurableError::Rejected`].
    pub async fn ack(&self, rank: Rank, ids: &[StreamEntryId]) -> Result<u64> {
        self.check_rank(rank)?;
        if ids.is_empty() {
            return Ok(0);
        }
        let mut cmd = redis::cmd("XACK");
        cmd.arg(&self.keys.completions).arg(consumer_group(rank));
        for id in ids {
            cmd.arg(id.to_string());
        }
        self.conn.query("ack", &cmd).await
    }

    /// Entries handed to `rank` and not acknowledged, in stream order.
    ///
    /// # Errors
    /// [`DurableError::RankOutOfRange`], [`DurableError::Unavailable`],
    /// [`DurableError::Timeout`], [`DurableError::Rejected`], [`DurableError::Corrupt`].
    pub async fn pending(&self, rank: Rank) -> Result<Vec<StreamEntryId>> {
        self.check_rank(rank)?;
        self.pending_of("pending", &consumer_group(rank)).await
    }

    /// After a reconciliation frame that settled everything up to `through` (see
    /// [`crate::Recovery::last_entry_id`]) was acknowledged by `rank`'s engine: acknowledges
    /// every entry up to and including `through` for `rank`, pending or never handed out.
    /// Returns how many pending entries it acknowledged.
    ///
    /// Moves the rank's delivery position forward only, never back. Call it from the rank's
    /// own agent before it reads on, so no read of the same group runs meanwhile.
    ///
    /// # Errors
    /// As [`Self::ack`], and [`DurableError::Corrupt`] for an unreadable group position.
    pub async fn ack_through(&self, rank: Rank, through: StreamEntryId) -> Result<u64> {
        self.check_rank(rank)?;
        let group = consumer_group(rank);
        let pending: Vec<StreamEntryId> = self
            .pending_of("ack_through", &group)
            .await?
            .into_iter()
            .filter(|id| *id <= through)
            .collect();
        let acked = self.ack(rank, &pending).await?;
        let behind = self
            .group_info("ack_through")
            .await?
            .iter()
            .find(|g| g.rank == rank.0)
            .is_none_or(|g| g.last_delivered < through);
        if behind {
            let mut cmd = redis::cmd("XGROUP");
            cmd.arg("SETID")
                .arg(&self.keys.completions)
                .arg(&group)
                .arg(through.to_string());
            self.conn.query::<()>("ack_through", &cmd).await?;
        }
        Ok(acked)
    }

    /// Entries in the stream now (XLEN).
    ///
    /// # Errors
    /// [`DurableError::Unavailable`], [`DurableError::Timeout`], [`DurableError::Rejected`].
    pub async fn stream_len(&self) -> Result<u64> {
        let mut cmd = redis::cmd("XLEN");
        cmd.arg(&self.keys.completions);
        self.conn.query("stream_len", &cmd).await
    }

    /// Delivery positions of ranks `0..world_size`, indexed by rank (a missing group reads
    /// as nothing delivered), each with its pending entries.
    ///
    /// # Errors
    /// [`DurableError::Unavailable`], [`DurableError::Timeout`], [`DurableError::Rejected`],
    /// [`DurableError::Corrupt`].
    pub async fn cursors(&self) -> Result<Vec<RankCursor>> {
        self.cursors_for("cursors").await
    }

    /// [`Self::cursors`], its errors naming operation `op`.
    pub(crate) async fn cursors_for(&self, op: &'static str) -> Result<Vec<RankCursor>> {
        let mut out = vec![RankCursor::default(); self.world_size as usize];
        for g in self.group_info(op).await? {
            let Some(slot) = out.get_mut(g.rank as usize) else {
                continue;
            };
            slot.last_delivered = g.last_delivered;
            if g.pending > 0 {
                slot.pending = self.pending_of(op, &g.name).await?.into_iter().collect();
            }
        }
        Ok(out)
    }

    /// XINFO GROUPS, reduced to the `rank-{r}` groups.
    pub(crate) async fn group_info(&self, op: &'static str) -> Result<Vec<GroupInfo>> {
        let mut cmd = redis::cmd("XINFO");
        cmd.arg("GROUPS").arg(&self.keys.completions);
        let info: StreamInfoGroupsReply = self.conn.query(op, &cmd).await?;
        info.groups
            .into_iter()
            .filter_map(|g| {
                let rank = rank_of_group(&g.name)?;
                Some((rank, g))
            })
            .map(|(rank, g)| {
                Ok(GroupInfo {
                    rank,
                    last_delivered: StreamEntryId::parse(&g.last_delivered_id)?,
                    pending: g.pending,
                    name: g.name,
                })
            })
            .collect()
    }

    /// One page of entries after `after` (from the start when `None`), in stream order.
    pub(crate) async fn scan_page(
        &self,
        op: &'static str,
        after: Option<StreamEntryId>,
    ) -> Result<Vec<StreamEntry>> {
        let start = after.map_or_else(|| "-".to_string(), |id| format!("({id}"));
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(&self.keys.completions)
            .arg(start)
            .arg("+")
            .arg("COUNT")
            .arg(self.page);
        let reply: StreamRangeReply = self.conn.query(op, &cmd).await?;
        reply.ids.iter().map(decode_entry).collect()
    }

    /// Every pending id of consumer group `group`, paged.
    async fn pending_of(&self, op: &'static str, group: &str) -> Result<Vec<StreamEntryId>> {
        let mut out = Vec::new();
        let mut start = "-".to_string();
        loop {
            let mut cmd = redis::cmd("XPENDING");
            cmd.arg(&self.keys.completions)
                .arg(group)
                .arg(&start)
                .arg("+")
                .arg(self.page);
            let reply: StreamPendingCountReply = self.conn.query(op, &cmd).await?;
            let n = reply.ids.len();
            for p in reply.ids {
                out.push(StreamEntryId::parse(&p.id)?);
            }
            match out.last() {
                Some(last) if n == self.page => start = format!("({last}"),
                _ => return Ok(out),
            }
        }
    }

    pub(crate) fn check_rank(&self, rank: Rank) -> Result<()> {
        if rank.0 < self.world_size {
            Ok(())
        } else {
            Err(DurableError::RankOutOfRange {
                rank,
                world_size: self.world_size,
            })
        }
    }
}

/// One rank's consumer group as XINFO GROUPS reports it.
#[derive(Clone, Debug)]
pub(crate) struct GroupInfo {
    pub name: String,
    pub rank: u32,
    pub last_delivered: StreamEntryId,
    pub pending: usize,
}

/// The rank a consumer group named `rank-{r}` belongs to.
fn rank_of_group(name: &str) -> Option<u32> {
    name.strip_prefix("rank-")?.parse().ok()
}

/// Decodes one stream entry.
fn decode_entry(entry: &StreamId) -> Result<StreamEntry> {
    let id = StreamEntryId::parse(&entry.id)?;
    let field = |name: &str| match entry.map.get(name) {
        Some(Value::BulkString(b)) => Some(b.as_slice()),
        Some(Value::SimpleString(s)) => Some(s.as_bytes()),
        _ => None,
    };
    let fields = RawFields {
        version: field(FIELD_VERSION),
        record: field(FIELD_RECORD),
        barrier: field(FIELD_BARRIER),
    };
    decode(id, fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_acked_means_delivered_and_not_pending() {
        let id = |ms| StreamEntryId { ms, seq: 0 };
        let c = RankCursor {
            last_delivered: id(5),
            pending: [id(3)].into(),
        };
        assert!(c.acked(id(2)));
        assert!(!c.acked(id(3)));
        assert!(c.acked(id(5)));
        assert!(!c.acked(id(6)));
    }

    #[test]
    fn group_names_map_to_ranks() {
        assert_eq!(rank_of_group("rank-12"), Some(12));
        assert_eq!(rank_of_group("rank-x"), None);
        assert_eq!(rank_of_group("other"), None);
    }

    #[test]
    fn config_debug_masks_credentials() {
        let c = DurableConfig::new("redis://u:topsecret@h:1", "g", 2);
        let text = format!("{c:?}");
        assert!(text.contains("redis://***@h:1"), "{text}");
        assert!(!text.contains("topsecret"), "{text}");
    }
}
