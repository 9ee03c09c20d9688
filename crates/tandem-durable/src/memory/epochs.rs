//! [`EpochStore`] in memory: the counter moves with its barrier in one locked step, as the
//! Redis script does, including the step past a stream whose epochs are ahead of the counter.

use super::MemoryLog;
use crate::epochs::EpochStore;
use crate::error::{DurableError, Result};
use crate::id::StreamEntryId;
use crate::record::StreamEntry;
use crate::supervisor::SupervisorState;
use async_trait::async_trait;
use tandem_proto::{Epoch, Rank};

#[async_trait]
impl EpochStore for MemoryLog {
    async fn next_epoch(&self) -> Result<Epoch> {
        let mut state = self.state("next_epoch")?;
        let mut epoch = state.epoch.saturating_add(1);
        // The barrier `{epoch}-0` must be above every id: never reuse an epoch the stream
        // already holds (the Redis script's recovery from a lost counter).
        if epoch <= state.last_id.ms {
            epoch = state.last_id.ms.saturating_add(1);
        }
        state.epoch = epoch;
        // Per-epoch keys stay bounded: the older epochs' membership and manifests go (the
        // Redis script deletes the previous epoch's; older ones cannot exist there).
        state.members.retain(|e, _| e.0 >= epoch);
        state.manifests.retain(|(e, _), _| e.0 >= epoch);
        let id = StreamEntryId { ms: epoch, seq: 0 };
        state.push_entry(StreamEntry::Barrier {
            id,
            epoch: Epoch(epoch),
        });
        Ok(Epoch(epoch))
    }

    async fn current_epoch(&self) -> Result<Epoch> {
        Ok(Epoch(self.state("current_epoch")?.epoch))
    }

    async fn save_supervisor_state(&self, state: &SupervisorState) -> Result<()> {
        self.state("save_supervisor_state")?.supervisor = Some(state.clone());
        Ok(())
    }

    async fn load_supervisor_state(&self) -> Result<Option<SupervisorState>> {
        Ok(self.state("load_supervisor_state")?.supervisor.clone())
    }

    async fn join(&self, epoch: Epoch, rank: Rank) -> Result<bool> {
        self.check_rank(rank)?;
        let mut state = self.state("join")?;
        if epoch.0 < state.epoch {
            return Err(DurableError::EpochOver {
                epoch,
                current: Epoch(state.epoch),
            });
        }
        Ok(state.members.entry(epoch).or_default().insert(rank))
    }

    async fn members(&self, epoch: Epoch) -> Result<Vec<Rank>> {
        let state = self.state("members")?;
        Ok(state
            .members
            .get(&epoch)
            .map(|m| m.iter().copied().collect())
            .unwrap_or_default())
    }

    async fn forget_members(&self, epoch: Epoch) -> Result<()> {
        self.state("forget_members")?.members.remove(&epoch);
        Ok(())
    }
}
