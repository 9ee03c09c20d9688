//! The replay's result: [`ReplaySummary`], built from every engine's report, serialized to
//! JSON with serde and printed as a table by `Display`.
//!
//! Definitions:
//! - `blocks_stored`/`blocks_loaded`: blocks of stores (recomputes included) and loads that
//!   finished `Ok`, counted once per block at the leader; `bytes_*` are those blocks times
//!   the shard size times the ranks (every rank moved its own shard).
//! - hit ratios: from the leader's lookup answers, one per request, prefix semantics, the
//!   partial last block counted by its tokens (the [`tandem_trace::PrefixCacheSim`]
//!   definition); `expected_*` are that simulator's figures for the same requests in the same
//!   order with `expected_capacity_blocks` (`null` = unlimited).
//! - `verify_failures`: block shards whose bytes were wrong, summed over ranks.
//! - `lost_completions`, `duplicate_completions`: summed over ranks (see [`crate::ledger`]).
//! - `mismatches`: `cross_rank` (a follower's frame digest for an `(epoch, step)` differs
//!   from the leader's, or from the lowest rank that read it) + `reread` (a re-read frame
//!   differed) + `content` (a frame's lookups or started tasks differ from what the leader did
//!   in that step).
//! - `epochs`: distinct epochs whose frames any engine read; `restarts`: last minus first of
//!   them (the epoch counter rises once per group restart).
//! - `recovery_ms_*`: from an engine's first failed call to the first frame it read in the
//!   next epoch, over every rank and restart; `null` when there was none.
//! - `step_latency_us`: the leader's `end_step` calls, window-full retries included.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use tandem_trace::Capacity;

use crate::engine::EngineReport;
use crate::leader::{LeaderReport, MAX_MISMATCH_SAMPLES};

/// Frame digests of one engine, by `(epoch, step)`.
type FrameDigests = BTreeMap<(u64, u64), u64>;

/// Percentiles of a latency, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LatencySummary {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

impl LatencySummary {
    /// Nearest-rank percentiles of `samples` (all zero when empty).
    pub fn of(samples: &[u64]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let rank = |q: f64| -> u64 {
            if sorted.is_empty() {
                return 0;
            }
            let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
            sorted[i]
        };
        LatencySummary {
            p50: rank(0.50),
            p99: rank(0.99),
            max: sorted.last().copied().unwrap_or(0),
        }
    }
}

/// Where mismatches came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MismatchDetail {
    /// Frames whose digest differs between ranks.
    pub cross_rank: u64,
    /// Re-reads that returned a different frame.
    pub reread: u64,
    /// Frames whose lookups or started tasks differ from the leader's own record.
    pub content: u64,
}

/// Everything a replay measured. Field meanings are in the module docs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReplaySummary {
    /// Requests completed.
    pub requests: u64,
    /// Steps the leader sealed.
    pub steps: u64,
    /// Ranks in the group.
    pub ranks: u32,
    /// Bytes of one block shard.
    pub shard_bytes: u64,
    /// Blocks stored `Ok`.
    pub blocks_stored: u64,
    /// Blocks loaded `Ok`.
    pub blocks_loaded: u64,
    /// Bytes stored, all ranks.
    pub bytes_stored: u64,
    /// Bytes loaded, all ranks.
    pub bytes_loaded: u64,
    /// Σ hit tokens / Σ input tokens, from the lookups.
    pub token_prefix_hit_ratio: f64,
    /// Σ hit blocks / Σ blocks, from the lookups.
    pub block_prefix_hit_ratio: f64,
    /// The simulator's token ratio.
    pub expected_token_prefix_hit_ratio: f64,
    /// The simulator's block ratio.
    pub expected_block_prefix_hit_ratio: f64,
    /// The simulator's capacity, blocks (`None` = unlimited).
    pub expected_capacity_blocks: Option<u64>,
    /// Block shards with wrong bytes, all ranks.
    pub verify_failures: u64,
    /// Tasks seen started and never finished, all ranks.
    pub lost_completions: u64,
    /// Outcomes seen twice after an acknowledgement, all ranks.
    pub duplicate_completions: u64,
    /// All mismatches (see `mismatch_detail`).
    pub mismatches: u64,
    /// Distinct epochs seen.
    pub epochs: u64,
    /// Group restarts during the run.
    pub restarts: u64,
    /// Mean recovery, ms.
    pub recovery_ms_mean: Option<f64>,
    /// Longest recovery, ms.
    pub recovery_ms_max: Option<f64>,
    /// The leader's `end_step` latency.
    pub step_latency_us: LatencySummary,
    /// Wall-clock length of the run, seconds.
    pub wall_seconds: f64,
    /// Loads that failed or were aborted (then recomputed).
    pub loads_failed: u64,
    /// Stores that failed or were aborted.
    pub stores_failed: u64,
    /// Outcomes delivered again because their frame was never acknowledged, all ranks.
    pub redelivered_unacked: u64,
    /// Outcomes of tasks an engine never saw started, all ranks.
    pub unseen_outcomes: u64,
    /// Block shards verified, all ranks.
    pub blocks_verified: u64,
    /// Where mismatches came from.
    pub mismatch_detail: MismatchDetail,
    /// The first verify failures, described.
    pub verify_failure_samples: Vec<String>,
    /// The first lost completions, described.
    pub lost_completion_samples: Vec<String>,
    /// The first mismatches, described.
    pub mismatch_samples: Vec<String>,
}

impl ReplaySummary {
    /// The summary as one JSON object.
    pub fn to_json(&self) -> String {
        // Plain data with string keys: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Combine the leader's report and the followers' reports of a run that took
    /// `wall_seconds`.
    pub(crate) fn build(
        leader: &LeaderReport,
        followers: &[EngineReport],
        capacity: Capacity,
        wall_seconds: f64,
    ) -> ReplaySummary {
        let engines: Vec<&EngineReport> =
            std::iter::once(&leader.engine).chain(followers).collect();
        let ranks = engines.len() as u32;
        let sum = |f: &dyn Fn(&EngineReport) -> u64| engines.iter().map(|e| f(e)).sum::<u64>();
        let epochs: std::collections::BTreeSet<u64> = engines
            .iter()
            .flat_map(|e| e.epochs.iter().copied())
            .collect();
        let recoveries: Vec<f64> = engines
            .iter()
            .flat_map(|e| e.recoveries_ms.iter().copied())
            .collect();
        let by_rank: Vec<(u32, &FrameDigests)> =
            engines.iter().map(|e| (e.rank, &e.ledger.frames)).collect();
        let (cross_rank, cross_samples) = cross_rank_mismatches(&by_rank);
        let mut mismatch_samples: Vec<String> = leader
            .mismatch_samples
            .iter()
            .cloned()
            .chain(cross_samples)
            .collect();
        mismatch_samples.truncate(MAX_MISMATCH_SAMPLES);
        let detail = MismatchDetail {
            cross_rank,
            reread: sum(&|e| e.ledger.tally.reread_mismatches),
            content: leader.content_mismatches,
        };
        let group_bytes = |blocks: u64| {
            blocks
                .saturating_mul(leader.shard_bytes)
                .saturating_mul(u64::from(ranks))
        };
        let mut samples: Vec<String> = engines
            .iter()
            .flat_map(|e| e.verify_samples.iter().cloned())
            .collect();
        samples.truncate(crate::engine::MAX_FAILURE_SAMPLES);
        let mut lost_samples: Vec<String> = engines
            .iter()
            .flat_map(|e| {
                e.ledger
                    .lost_samples
                    .iter()
                    .map(move |s| format!("rank {}: {s}", e.rank))
            })
            .collect();
        lost_samples.truncate(crate::ledger::MAX_LOST_SAMPLES);
        ReplaySummary {
            requests: leader.observed.requests,
            steps: leader.steps,
            ranks,
            shard_bytes: leader.shard_bytes,
            blocks_stored: leader.sched.blocks_stored,
            blocks_loaded: leader.sched.blocks_loaded,
            bytes_stored: group_bytes(leader.sched.blocks_stored),
            bytes_loaded: group_bytes(leader.sched.blocks_loaded),
            token_prefix_hit_ratio: leader.observed.token_prefix_hit_ratio(),
            block_prefix_hit_ratio: leader.observed.block_prefix_hit_ratio(),
            expected_token_prefix_hit_ratio: leader.expected.token_prefix_hit_ratio(),
            expected_block_prefix_hit_ratio: leader.expected.block_prefix_hit_ratio(),
            expected_capacity_blocks: match capacity {
                Capacity::Unlimited => None,
                Capacity::Blocks(b) => Some(b),
            },
            verify_failures: sum(&|e| e.verify_failures),
            lost_completions: sum(&|e| e.ledger.tally.lost_completions),
            duplicate_completions: sum(&|e| e.ledger.tally.duplicate_completions),
            mismatches: detail.cross_rank + detail.reread + detail.content,
            epochs: epochs.len() as u64,
            restarts: match (epochs.first(), epochs.last()) {
                (Some(a), Some(b)) => b - a,
                _ => 0,
            },
            recovery_ms_mean: (!recoveries.is_empty())
                .then(|| recoveries.iter().sum::<f64>() / recoveries.len() as f64),
            recovery_ms_max: recoveries.iter().copied().reduce(f64::max),
            step_latency_us: LatencySummary::of(&leader.step_latency_us),
            wall_seconds,
            loads_failed: leader.sched.loads_failed,
            stores_failed: leader.sched.stores_failed,
            redelivered_unacked: sum(&|e| e.ledger.tally.redelivered_unacked),
            unseen_outcomes: sum(&|e| e.ledger.tally.unseen_outcomes),
            blocks_verified: sum(&|e| e.blocks_verified),
            mismatch_detail: detail,
            verify_failure_samples: samples,
            lost_completion_samples: lost_samples,
            mismatch_samples,
        }
    }
}

/// Frames, by `(epoch, step)`, whose digest on some rank differs from the first rank (in
/// rank order) that read the same frame; counted once per differing rank. Returns the count
/// and the first few, described.
pub(crate) fn cross_rank_mismatches(frames_by_rank: &[(u32, &FrameDigests)]) -> (u64, Vec<String>) {
    let mut reference: BTreeMap<(u64, u64), (u32, u64)> = BTreeMap::new();
    let mut differing = 0;
    let mut samples = Vec::new();
    for (rank, frames) in frames_by_rank {
        for (key, digest) in frames.iter() {
            match reference.get(key) {
                Some(&(first_rank, first)) if first != *digest => {
                    differing += 1;
                    if samples.len() < MAX_MISMATCH_SAMPLES {
                        samples.push(format!("frame {} of epoch {}: rank {rank} read a different frame than rank {first_rank}", key.1, key.0));
                    }
                }
                Some(_) => {}
                None => {
                    reference.insert(*key, (*rank, *digest));
                }
            }
        }
    }
    (differing, samples)
}

fn ratio_line(f: &mut fmt::Formatter<'_>, name: &str, got: f64, expected: f64) -> fmt::Result {
    writeln!(f, "  {name:<30} {:>9.4}   (expected {:.4})", got, expected)
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |ms| format!("{ms:.1} ms"))
}

impl fmt::Display for ReplaySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = |f: &mut fmt::Formatter<'_>, name: &str, value: String| {
            writeln!(f, "  {name:<30} {value:>9}")
        };
        writeln!(
            f,
            "tandem replay: {} requests, {} ranks, {:.1} s",
            self.requests, self.ranks, self.wall_seconds
        )?;
        line(f, "steps", self.steps.to_string())?;
        line(f, "blocks stored", self.blocks_stored.to_string())?;
        line(f, "blocks loaded", self.blocks_loaded.to_string())?;
        line(
            f,
            "MiB stored (all ranks)",
            format!("{:.1}", self.bytes_stored as f64 / 1048576.0),
        )?;
        line(
            f,
            "MiB loaded (all ranks)",
            format!("{:.1}", self.bytes_loaded as f64 / 1048576.0),
        )?;
        ratio_line(
            f,
            "token prefix hit ratio",
            self.token_prefix_hit_ratio,
            self.expected_token_prefix_hit_ratio,
        )?;
        ratio_line(
            f,
            "block prefix hit ratio",
            self.block_prefix_hit_ratio,
            self.expected_block_prefix_hit_ratio,
        )?;
        let capacity = self
            .expected_capacity_blocks
            .map_or_else(|| "unlimited".to_string(), |b| b.to_string());
        line(f, "expected for capacity (blocks)", capacity)?;
        line(
            f,
            "loads failed (recomputed)",
            self.loads_failed.to_string(),
        )?;
        line(f, "stores failed", self.stores_failed.to_string())?;
        line(f, "verify failures", self.verify_failures.to_string())?;
        line(f, "lost completions", self.lost_completions.to_string())?;
        line(
            f,
            "duplicate completions",
            self.duplicate_completions.to_string(),
        )?;
        line(
            f,
            "redelivered (frame not acked)",
            self.redelivered_unacked.to_string(),
        )?;
        line(
            f,
            "outcomes of unseen tasks",
            self.unseen_outcomes.to_string(),
        )?;
        let d = self.mismatch_detail;
        line(
            f,
            "mismatches",
            format!(
                "{} (cross-rank {}, re-read {}, content {})",
                self.mismatches, d.cross_rank, d.reread, d.content
            ),
        )?;
        line(
            f,
            "epochs / restarts",
            format!("{} / {}", self.epochs, self.restarts),
        )?;
        line(
            f,
            "recovery mean / max",
            format!(
                "{} / {}",
                opt_ms(self.recovery_ms_mean),
                opt_ms(self.recovery_ms_max)
            ),
        )?;
        let l = self.step_latency_us;
        line(
            f,
            "end_step p50 / p99 / max",
            format!("{} / {} / {} µs", l.p50, l.p99, l.max),
        )?;
        for sample in &self.verify_failure_samples {
            writeln!(f, "  ! {sample}")?;
        }
        for sample in &self.lost_completion_samples {
            writeln!(f, "  ? {sample}")?;
        }
        for sample in &self.mismatch_samples {
            writeln!(f, "  ~ {sample}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
