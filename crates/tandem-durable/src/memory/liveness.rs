//! [`LivenessStore`] in memory: heartbeats and manifests expire on the [`crate::WallClock`]
//! the log was given; the failure list keeps the newest [`MAX_FAILURE_REPORTS`].

use super::{Expiring, MemoryLog};
use crate::error::Result;
use crate::liveness::{FailureReport, Heartbeat, LivenessStore, MAX_FAILURE_REPORTS};
use async_trait::async_trait;
use tandem_proto::{Epoch, Rank};

#[async_trait]
impl LivenessStore for MemoryLog {
    async fn heartbeat(&self, rank: Rank, beat: Heartbeat, ttl_ms: u64) -> Result<()> {
        self.check_rank(rank)?;
        let now = self.now_ms();
        let mut state = self.state("heartbeat")?;
        state
            .heartbeats
            .insert(rank, Expiring::new(beat, now, ttl_ms));
        Ok(())
    }

    async fn heartbeats(&self) -> Result<Vec<Option<Heartbeat>>> {
        let now = self.now_ms();
        let state = self.state("heartbeats")?;
        Ok((0..self.world_size)
            .map(|r| state.heartbeats.get(&Rank(r)).and_then(|b| b.get(now)))
            .collect())
    }

    async fn report_failure(&self, report: &FailureReport) -> Result<()> {
        let mut state = self.state("report_failure")?;
        state.failures.push_back(report.clone());
        let keep = MAX_FAILURE_REPORTS.unsigned_abs();
        while state.failures.len() > keep {
            state.failures.pop_front();
        }
        Ok(())
    }

    async fn take_failures(&self, max: usize) -> Result<(Vec<FailureReport>, Vec<String>)> {
        let mut state = self.state("take_failures")?;
        let n = max.max(1).min(state.failures.len());
        // Reports are stored as values, never as text: none can be undecodable here.
        Ok((state.failures.drain(..n).collect(), Vec::new()))
    }

    async fn put_manifest(
        &self,
        epoch: Epoch,
        rank: Rank,
        bytes: &[u8],
        ttl_ms: u64,
    ) -> Result<()> {
        self.check_rank(rank)?;
        let now = self.now_ms();
        let mut state = self.state("put_manifest")?;
        // Expired manifests are dropped on write, so old epochs' do not accumulate.
        state.manifests.retain(|_, m| m.get(now).is_some());
        state
            .manifests
            .insert((epoch, rank), Expiring::new(bytes.to_vec(), now, ttl_ms));
        Ok(())
    }

    async fn manifests(&self, epoch: Epoch) -> Result<Vec<Option<Vec<u8>>>> {
        let now = self.now_ms();
        let state = self.state("manifests")?;
        Ok((0..self.world_size)
            .map(|r| {
                state
                    .manifests
                    .get(&(epoch, Rank(r)))
                    .and_then(|m| m.get(now))
            })
            .collect())
    }

    async fn reserve_event_seqs(&self, n: u64) -> Result<u64> {
        let mut state = self.state("reserve_event_seqs")?;
        let first = state.event_seq;
        state.event_seq += n;
        Ok(first)
    }
}
