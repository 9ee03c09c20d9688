//! [`CompletionStream`] on Redis: the stream `tandem:{g}:completions` and its consumer groups
//! `rank-{r}`.
//!
//! Owns the stream commands: the fenced append (one XADD per step), XREADGROUP, XACK,
//! XPENDING, XGROUP SETID, and the paged XRANGE scans that recovery and trimming fold with
//! the shared pure [`crate::RecoveryBuilder`] and [`crate::TrimScan`].
//!
//! # The epoch fence
//!
//! An append for epoch `e` is `XADD {stream} {e}-* ...`: the entry id's first part is the
//! epoch, and Redis only accepts ids above the stream's last one. `next_epoch` increments
//! the counter and writes a barrier entry `{e+1}-0` in one script, so from that moment every
//! append of epoch `e` or older fails ([`DurableError::StaleEpoch`]) and every append that
//! succeeded is already in the stream that the new epoch's recovery reads. The fence costs
//! nothing on the hot path: the append is a plain XADD, no script (Redis spends about 1.2 µs
//! on one, `INFO commandstats`, the same as on an XADD with id `*`).
//!
//! # A stream that is gone
//!
//! The append is `XADD ... NOMKSTREAM`: on a stream deleted behind the group's back (`DEL`,
//! `FLUSHDB`, a restart without persistence) it appends nothing and fails with
//! [`DurableError::StreamLost`], instead of creating a new stream without the barrier (which
//! would let a fenced leader append again) and without the consumer groups. Reads, pending
//! lists and group positions that Redis answers with `NOGROUP` or "no such key" fail the same
//! way. The epoch's barrier script creates the stream and every missing consumer group again.
//!
//! Reads never use XREADGROUP's BLOCK: the connection is multiplexed, and a blocking read
//! would hold up every other call on it. Agents poll.

use super::RedisLog;
use crate::epochs::EpochStore;
use crate::error::{DurableError, Result};
use crate::id::StreamEntryId;
use crate::keys::{consumer_group, CONSUMER};
use crate::record::{
    decode, encode_with, record_bytes_hint, LoggedStep, RawFields, StartedTask, StepRecordRef,
    StreamEntry, FIELD_BARRIER, FIELD_RECORD, FIELD_VERSION, RECORD_VERSION,
};
use crate::recovery::{Recovery, RecoveryBuilder};
use crate::stream::{CompletionStream, RankCursor};
use crate::trim::{GroupFloor, TrimScan};
use async_trait::async_trait;
use redis::streams::{
    StreamId, StreamInfoGroupsReply, StreamPendingCountReply, StreamPendingReply, StreamRangeReply,
};
use redis::{Cmd, Value};
use tandem_proto::{Epoch, Rank, Step, TaskOutcome};

/// What Redis answers an XADD whose id is not above the stream's last one.
const STALE_ID_REPLY: &str = "equal or smaller than the target stream top item";

/// Arguments of the append's XADD: the command, key, `NOMKSTREAM`, id, and two fields.
const XADD_ARGS: usize = 8;
/// Bytes of the append's XADD besides the key and the record: the command, `NOMKSTREAM`,
/// an id of up to 20 digits and `-*`, the field names and the version.
const XADD_FIXED_BYTES: usize = 48;

/// The id of an append of `epoch`, `{epoch}-*` (Redis picks the sequence), written without
/// a `String` per append.
fn fenced_id(epoch: Epoch) -> FencedId {
    let mut id = FencedId {
        buf: [0; 22],
        start: 20,
    };
    id.buf[20] = b'-';
    id.buf[21] = b'*';
    let mut e = epoch.0;
    loop {
        id.start -= 1;
        id.buf[id.start] = b'0' + (e % 10) as u8;
        e /= 10;
        if e == 0 {
            return id;
        }
    }
}

/// The bytes of [`fenced_id`]: up to 20 digits, then `-*`.
struct FencedId {
    buf: [u8; 22],
    start: usize,
}

impl FencedId {
    fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

#[async_trait]
impl CompletionStream for RedisLog {
    fn world_size(&self) -> u32 {
        self.world_size
    }

    /// One XADD with id `{epoch}-*` (NOMKSTREAM: a stream that is gone is not created again
    /// here) in one round trip; a refused one costs one more round trip to read the current
    /// epoch for the error. Without a replication wait and on a single primary (standalone or
    /// Sentinel) the XADD goes through the log's appender (`appender`): appends queued
    /// together go out as one pipeline, in call order, each with its own answer, under one
    /// deadline per pipeline.
    async fn append_step(
        &self,
        epoch: Epoch,
        step: Step,
        started: &[StartedTask],
        finished: &[TaskOutcome],
    ) -> Result<StreamEntryId> {
        if epoch.0 == 0 {
            return Err(self.stale(epoch).await);
        }
        // One buffer sized up front, the id and the record encoded on the stack and copied
        // in once: a String, a Vec and the command's regrowth per append measured about a
        // third of append_step's own instructions (docs/BENCHMARKS.md).
        let record = StepRecordRef {
            epoch,
            step,
            started,
            finished,
        };
        let mut cmd = Cmd::with_capacity(
            XADD_ARGS,
            self.keys.completions.len() + XADD_FIXED_BYTES + record_bytes_hint(&record),
        );
        cmd.arg("XADD")
            .arg(&self.keys.completions)
            .arg("NOMKSTREAM")
            .arg(fenced_id(epoch).as_slice())
            .arg(FIELD_VERSION)
            .arg(RECORD_VERSION)
            .arg(FIELD_RECORD);
        encode_with(&record, |bytes| {
            cmd.arg(bytes);
        })?;
        let appended = if self.wait.replicas > 0 {
            let stream = self.keys.completions.clone();
            self.replicated("append_step", cmd, move |id: &Option<String>| {
                let mut undo = redis::cmd("XDEL");
                undo.arg(&stream).arg(id.as_ref()?);
                Some(undo)
            })
            .await
        } else if self.conn.is_cluster() {
            self.conn.query::<Option<String>>("append_step", &cmd).await
        } else {
            self.appender.append(cmd).await
        };
        match appended {
            Ok(Some(id)) => StreamEntryId::parse(&id),
            Ok(None) => Err(DurableError::StreamLost {
                op: "append_step",
                key: self.keys.completions.clone(),
                reason: "XADD NOMKSTREAM found no stream".into(),
            }),
            Err(DurableError::Rejected { reason, .. }) if reason.contains(STALE_ID_REPLY) => {
                Err(self.stale(epoch).await)
            }
            Err(e) => Err(e),
        }
    }

    /// XREADGROUP `>` (never BLOCK); the barriers read are XACKed in one more round trip,
    /// once per epoch.
    async fn read_new(&self, rank: Rank, count: usize) -> Result<Vec<LoggedStep>> {
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
        let reply: Option<redis::streams::StreamReadReply> = self
            .conn
            .query("read_new", &cmd)
            .await
            .map_err(|e| self.lost(e))?;
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

    /// XACK.
    async fn ack(&self, rank: Rank, ids: &[StreamEntryId]) -> Result<u64> {
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

    /// XPENDING, paged.
    async fn pending(&self, rank: Rank) -> Result<Vec<StreamEntryId>> {
        self.check_rank(rank)?;
        self.pending_of("pending", &consumer_group(rank)).await
    }

    /// XPENDING and XACK of the pending ids up to `through`, then XGROUP SETID when the
    /// group's last delivered id is behind `through`.
    async fn ack_through(&self, rank: Rank, through: StreamEntryId) -> Result<u64> {
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
            self.conn
                .query::<()>("ack_through", &cmd)
                .await
                .map_err(|e| self.lost(e))?;
        }
        Ok(acked)
    }

    /// XLEN.
    async fn stream_len(&self) -> Result<u64> {
        let mut cmd = redis::cmd("XLEN");
        cmd.arg(&self.keys.completions);
        self.conn.query("stream_len", &cmd).await
    }

    /// XINFO GROUPS, then XPENDING of each group with pending entries (a missing group reads
    /// as nothing delivered).
    async fn cursors(&self) -> Result<Vec<RankCursor>> {
        self.cursors_for("cursors").await
    }

    /// Every rank's position, then the whole retained stream in XRANGE pages of
    /// [`super::DurableConfig::page_entries`], folded by [`RecoveryBuilder`].
    async fn recover(&self) -> Result<Recovery> {
        let mut builder = RecoveryBuilder::new(self.cursors_for("recover").await?);
        let mut after = None;
        loop {
            let page = self.scan_page("recover", after).await?;
            for entry in &page {
                builder.push(entry);
            }
            match page.last() {
                Some(last) if page.len() == self.page => after = Some(last.id()),
                _ => return Ok(builder.finish()),
            }
        }
    }

    /// Redis 7.0 has no "trim only acknowledged entries" option: the trim point is computed
    /// by [`TrimScan`] from the groups' floors and the retained stream, then applied with
    /// `XTRIM MINID` (exact, never `~`). Races are harmless: acknowledgements and appends
    /// that land meanwhile only raise the safe point.
    async fn trim(&self, max_len: usize) -> Result<u64> {
        if self.stream_len().await? <= max_len as u64 {
            return Ok(0);
        }
        let floors = self.group_floors().await?;
        let mut scan = TrimScan::default();
        let mut after = None;
        loop {
            let page = self.scan_page("trim", after).await?;
            for entry in &page {
                scan.push(entry);
            }
            match page.last() {
                Some(last) if page.len() == self.page => after = Some(last.id()),
                _ => break,
            }
        }
        let Some(min_id) = scan.min_id(&floors, max_len) else {
            return Ok(0);
        };
        let mut cmd = redis::cmd("XTRIM");
        cmd.arg(&self.keys.completions)
            .arg("MINID")
            .arg(min_id.to_string());
        self.conn.query("trim", &cmd).await
    }
}

impl RedisLog {
    /// `e`, or [`DurableError::StreamLost`] when Redis answered that the stream or a
    /// consumer group on it does not exist.
    fn lost(&self, e: DurableError) -> DurableError {
        match e {
            DurableError::Rejected { op, reason } if missing_stream_reply(&reason) => {
                DurableError::StreamLost {
                    op,
                    key: self.keys.completions.clone(),
                    reason,
                }
            }
            e => e,
        }
    }

    /// The error for an append of `epoch` that the fence refused.
    async fn stale(&self, epoch: Epoch) -> DurableError {
        match self.current_epoch().await {
            Ok(current) => DurableError::StaleEpoch { epoch, current },
            Err(e) => e,
        }
    }

    /// [`CompletionStream::cursors`], its errors naming operation `op`.
    async fn cursors_for(&self, op: &'static str) -> Result<Vec<RankCursor>> {
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
    async fn group_info(&self, op: &'static str) -> Result<Vec<GroupInfo>> {
        let mut cmd = redis::cmd("XINFO");
        cmd.arg("GROUPS").arg(&self.keys.completions);
        let info: StreamInfoGroupsReply =
            self.conn.query(op, &cmd).await.map_err(|e| self.lost(e))?;
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

    /// One floor per rank for [`TrimScan::min_id`], `None` where the rank has no consumer
    /// group.
    async fn group_floors(&self) -> Result<Vec<Option<GroupFloor>>> {
        let mut out = vec![None; self.world_size as usize];
        for GroupInfo {
            name,
            rank,
            last_delivered,
            pending,
        } in self.group_info("trim").await?
        {
            let Some(slot) = out.get_mut(rank as usize) else {
                continue;
            };
            let lowest_pending = if pending > 0 {
                let mut cmd = redis::cmd("XPENDING");
                cmd.arg(&self.keys.completions).arg(&name);
                let reply = self.conn.query::<StreamPendingReply>("trim", &cmd).await;
                match reply.map_err(|e| self.lost(e))? {
                    StreamPendingReply::Data(d) => Some(StreamEntryId::parse(&d.start_id)?),
                    StreamPendingReply::Empty => None,
                }
            } else {
                None
            };
            *slot = Some(GroupFloor {
                last_delivered,
                lowest_pending,
            });
        }
        Ok(out)
    }

    /// One page of entries after `after` (from the start when `None`), in stream order.
    async fn scan_page(
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
            let reply: StreamPendingCountReply =
                self.conn.query(op, &cmd).await.map_err(|e| self.lost(e))?;
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
}

/// One rank's consumer group as XINFO GROUPS reports it.
#[derive(Clone, Debug)]
struct GroupInfo {
    name: String,
    rank: u32,
    last_delivered: StreamEntryId,
    pending: usize,
}

/// Whether an error reply says the stream, or a consumer group on it, does not exist:
/// `NOGROUP` (XREADGROUP, XPENDING, XACK of a missing group or key), `ERR no such key`
/// (XINFO), "requires the key to exist" (XGROUP SETID).
pub(crate) fn missing_stream_reply(reason: &str) -> bool {
    reason.contains("NOGROUP")
        || reason.to_ascii_lowercase().contains("no such key")
        || reason.contains("requires the key to exist")
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
    fn replies_of_a_missing_stream_are_told_apart() {
        assert!(missing_stream_reply(
            "NOGROUP: No such key 'k' or consumer group 'rank-0' in XREADGROUP with GROUP option"
        ));
        assert!(missing_stream_reply("ERR: no such key"));
        assert!(missing_stream_reply(
            "ERR: The XGROUP subcommand requires the key to exist."
        ));
        assert!(!missing_stream_reply("WRONGTYPE Operation against a key"));
    }

    #[test]
    fn fenced_ids_are_the_epoch_then_a_star() {
        for e in [1, 9, 10, 4_294_967_296, u64::MAX] {
            assert_eq!(fenced_id(Epoch(e)).as_slice(), format!("{e}-*").as_bytes());
        }
    }

    #[test]
    fn group_names_map_to_ranks() {
        assert_eq!(rank_of_group("rank-12"), Some(12));
        assert_eq!(rank_of_group("rank-x"), None);
        assert_eq!(rank_of_group("other"), None);
    }
}
