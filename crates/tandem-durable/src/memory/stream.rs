//! [`CompletionStream`] in memory: the same ids, fence, per-rank positions, recovery and trim
//! point as the Redis stream, folded with the same [`RecoveryBuilder`] and [`TrimScan`].

use super::{MemoryLog, State};
use crate::error::{DurableError, Result};
use crate::id::StreamEntryId;
use crate::record::{LoggedStep, StartedTask, StepRecord, StreamEntry};
use crate::recovery::{Recovery, RecoveryBuilder};
use crate::stream::{CompletionStream, RankCursor};
use crate::trim::{GroupFloor, TrimScan};
use async_trait::async_trait;
use tandem_proto::{Epoch, Rank, Step, TaskOutcome};

impl State {
    /// The id Redis gives `XADD {epoch}-*`: the next sequence number within the epoch, or
    /// `{epoch}-0` above the last id; `None` when the last id is already past `epoch`.
    fn next_id(&self, epoch: Epoch) -> Option<StreamEntryId> {
        let last = self.last_id;
        if epoch.0 > last.ms {
            Some(StreamEntryId {
                ms: epoch.0,
                seq: 0,
            })
        } else if epoch.0 == last.ms {
            let seq = last.seq.checked_add(1)?;
            Some(StreamEntryId { ms: epoch.0, seq })
        } else {
            None
        }
    }

    /// Adds `entry` under its id, which must be above every id generated so far.
    pub(super) fn push_entry(&mut self, entry: StreamEntry) {
        let id = entry.id();
        self.last_id = self.last_id.max(id);
        self.entries.insert(id, entry);
    }

    fn cursors(&self) -> Vec<RankCursor> {
        self.positions
            .iter()
            .map(|p| RankCursor {
                last_delivered: p.last_delivered,
                pending: p.pending.clone(),
            })
            .collect()
    }
}

#[async_trait]
impl CompletionStream for MemoryLog {
    fn world_size(&self) -> u32 {
        self.world_size
    }

    async fn append_step(
        &self,
        epoch: Epoch,
        step: Step,
        started: &[StartedTask],
        finished: &[TaskOutcome],
    ) -> Result<StreamEntryId> {
        let mut state = self.state("append_step")?;
        let stale = DurableError::StaleEpoch {
            epoch,
            current: Epoch(state.epoch),
        };
        if epoch.0 == 0 {
            return Err(stale);
        }
        let id = state.next_id(epoch).ok_or(stale)?;
        state.push_entry(StreamEntry::Step(LoggedStep {
            id,
            record: StepRecord {
                epoch,
                step,
                started: started.to_vec(),
                finished: finished.to_vec(),
            },
        }));
        Ok(id)
    }

    async fn read_new(&self, rank: Rank, count: usize) -> Result<Vec<LoggedStep>> {
        self.check_rank(rank)?;
        let mut state = self.state("read_new")?;
        let after = state.positions[rank.0 as usize].last_delivered;
        let handed: Vec<StreamEntry> = state
            .entries
            .range(after.successor()..)
            .take(count.max(1))
            .map(|(_, e)| e.clone())
            .collect();
        let position = &mut state.positions[rank.0 as usize];
        let mut steps = Vec::new();
        for entry in handed {
            position.last_delivered = entry.id();
            // A barrier is acknowledged at once, as the Redis twin does with one XACK.
            if let StreamEntry::Step(s) = entry {
                position.pending.insert(s.id);
                steps.push(s);
            }
        }
        Ok(steps)
    }

    async fn ack(&self, rank: Rank, ids: &[StreamEntryId]) -> Result<u64> {
        self.check_rank(rank)?;
        let mut state = self.state("ack")?;
        let pending = &mut state.positions[rank.0 as usize].pending;
        Ok(ids.iter().filter(|id| pending.remove(id)).count() as u64)
    }

    async fn pending(&self, rank: Rank) -> Result<Vec<StreamEntryId>> {
        self.check_rank(rank)?;
        let state = self.state("pending")?;
        Ok(state.positions[rank.0 as usize]
            .pending
            .iter()
            .copied()
            .collect())
    }

    async fn ack_through(&self, rank: Rank, through: StreamEntryId) -> Result<u64> {
        self.check_rank(rank)?;
        let mut state = self.state("ack_through")?;
        let position = &mut state.positions[rank.0 as usize];
        let before = position.pending.len();
        position.pending.retain(|id| *id > through);
        position.last_delivered = position.last_delivered.max(through);
        Ok((before - position.pending.len()) as u64)
    }

    async fn stream_len(&self) -> Result<u64> {
        Ok(self.state("stream_len")?.entries.len() as u64)
    }

    async fn cursors(&self) -> Result<Vec<RankCursor>> {
        Ok(self.state("cursors")?.cursors())
    }

    async fn recover(&self) -> Result<Recovery> {
        let state = self.state("recover")?;
        let mut builder = RecoveryBuilder::new(state.cursors());
        for entry in state.entries.values() {
            builder.push(entry);
        }
        Ok(builder.finish())
    }

    async fn trim(&self, max_len: usize) -> Result<u64> {
        let mut state = self.state("trim")?;
        if state.entries.len() <= max_len {
            return Ok(0);
        }
        let floors: Vec<Option<GroupFloor>> = state
            .positions
            .iter()
            .map(|p| {
                Some(GroupFloor {
                    last_delivered: p.last_delivered,
                    lowest_pending: p.pending.first().copied(),
                })
            })
            .collect();
        let mut scan = TrimScan::default();
        for entry in state.entries.values() {
            scan.push(entry);
        }
        let Some(min_id) = scan.min_id(&floors, max_len) else {
            return Ok(0);
        };
        let kept = state.entries.split_off(&min_id);
        let removed = state.entries.len() as u64;
        state.entries = kept;
        Ok(removed)
    }
}
