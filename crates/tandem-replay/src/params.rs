//! What a replay is asked to do: the engine sockets, pacing, limits, deadlines and follower
//! read patterns, with defaults that suit a local cluster. Owns validation only.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tandem_trace::{Capacity, TraceRecord};

use crate::error::ReplayError;
use crate::pressure::ReadPattern;

/// How fast requests arrive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Speed {
    /// Admit each request as soon as the scheduler has room.
    MaxRate,
    /// Follow the trace's timestamps, `factor` times faster than recorded (2.0 = twice as
    /// fast): a request is admitted no earlier than `(timestamp − first timestamp) / factor`
    /// ms after the replay started.
    Factor(f64),
}

/// Every wait of the replay is bounded by one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// First connection of each engine to its agent (hello and pool registration included).
    pub connect: Duration,
    /// The deadline passed with each `end_step` (the agent's wait while the window is full).
    pub end_step: Duration,
    /// The deadline passed with each follower `frame` read; a `LeaderBehind` answer after it
    /// only means "not sealed yet" and the follower asks again.
    pub frame_poll: Duration,
    /// Longest time the leader keeps retrying one step refused with `WindowFull`.
    pub window: Duration,
    /// Longest time an engine tries to rejoin after a failure (stale epoch, not ready, broken
    /// socket) before the run ends in error.
    pub recovery: Duration,
    /// The driver ends the run when the leader made no progress for this long.
    pub stall: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            connect: Duration::from_secs(30),
            end_step: Duration::from_secs(1),
            frame_poll: Duration::from_millis(100),
            window: Duration::from_secs(60),
            recovery: Duration::from_secs(60),
            stall: Duration::from_secs(120),
        }
    }
}

/// Parameters of [`crate::run_replay`]. Build with [`ReplayParams::new`] and adjust fields.
#[derive(Clone, Debug)]
pub struct ReplayParams {
    /// The engine socket of each rank's agent; index = rank, rank 0 is the leader.
    pub sockets: Vec<PathBuf>,
    /// Request pacing.
    pub speed: Speed,
    /// Pages in each engine's page pool (the same on every rank; a page is one shard of
    /// the agent's shard size, so each rank maps `pool_pages × shard bytes` of
    /// `pool_dir`). Must be at least the largest request's blocks (see
    /// [`pool_pages_needed`]); more lets more requests run at once.
    pub pool_pages: u32,
    /// Directory of the page pools' files (a tmpfs such as `/dev/shm` keeps them in memory).
    pub pool_dir: PathBuf,
    /// Most requests running at once.
    pub max_in_flight: usize,
    /// Most requests admitted in one step.
    pub max_admit_per_step: usize,
    /// Shortest time between two steps of the leader (a real engine's step takes
    /// milliseconds; 0 steps as fast as the agent answers).
    pub min_step_interval: Duration,
    /// Cache capacity for the expected hit ratios ([`tandem_trace::PrefixCacheSim`]): the
    /// blocks the group's tiers hold (host plus disk), or unlimited.
    pub expected_capacity: Capacity,
    /// Read patterns of the followers: rank `r` uses `follower_patterns[(r − 1) % len]`, a
    /// `Pressure` seed offset by the rank. Empty means `ReadPattern::default()`.
    pub follower_patterns: Vec<ReadPattern>,
    /// Deadlines.
    pub deadlines: Deadlines,
    /// Draw an indicatif progress bar on stderr when stderr is a terminal.
    pub progress_bar: bool,
    /// Set it to `true` (from any thread) to end the run early: the engines stop within
    /// about one deadline slice and [`crate::run_replay`] returns
    /// [`ReplayError::Cancelled`] (for example when the supervisor marked the group
    /// failed, so that no engine waits out its recovery deadline).
    pub cancel: Option<Arc<AtomicBool>>,
}

/// The fewest pool pages that can run every one of `records`: its largest request's blocks
/// (at least 1).
pub fn pool_pages_needed<'a>(records: impl IntoIterator<Item = &'a TraceRecord>) -> u32 {
    let most = records
        .into_iter()
        .map(TraceRecord::blocks)
        .max()
        .unwrap_or(0);
    u32::try_from(most).unwrap_or(u32::MAX).max(1)
}

impl ReplayParams {
    /// Defaults for the group behind `sockets`: max rate, 512 pages per pool under
    /// `/dev/shm/tandem-replay`, 16 requests in flight, 4 admitted per step, 1 ms per step,
    /// unlimited expected capacity, a mix of follower patterns, no progress bar, no cancel
    /// flag.
    pub fn new(sockets: Vec<PathBuf>) -> Self {
        let shm = PathBuf::from("/dev/shm");
        let base = if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        };
        ReplayParams {
            sockets,
            speed: Speed::MaxRate,
            pool_pages: 512,
            pool_dir: base.join("tandem-replay"),
            max_in_flight: 16,
            max_admit_per_step: 4,
            min_step_interval: Duration::from_millis(1),
            expected_capacity: Capacity::Unlimited,
            follower_patterns: vec![
                ReadPattern::Pressure {
                    seed: 0,
                    max_stall_ms: 20,
                },
                ReadPattern::Reread { times: 2 },
                ReadPattern::Bursty {
                    every: 16,
                    stall_ms: 15,
                },
            ],
            deadlines: Deadlines::default(),
            progress_bar: false,
            cancel: None,
        }
    }

    /// Ranks in the group (`sockets.len()`).
    pub fn world_size(&self) -> u32 {
        self.sockets.len() as u32
    }

    /// The read pattern of follower `rank` (`rank >= 1`).
    pub fn pattern_for(&self, rank: u32) -> ReadPattern {
        if self.follower_patterns.is_empty() {
            return ReadPattern::default();
        }
        let i = (rank.saturating_sub(1) as usize) % self.follower_patterns.len();
        match self.follower_patterns[i] {
            ReadPattern::Pressure { seed, max_stall_ms } => ReadPattern::Pressure {
                seed: seed.wrapping_add(u64::from(rank)),
                max_stall_ms,
            },
            other => other,
        }
    }

    /// Check that the parameters describe a run.
    ///
    /// # Errors
    /// [`ReplayError::Params`] naming the bad field.
    pub fn validate(&self) -> Result<(), ReplayError> {
        let bad = |s: &str| Err(ReplayError::Params(s.to_string()));
        if self.sockets.is_empty() {
            return bad("sockets: at least one engine socket (rank 0) is needed");
        }
        if self.pool_pages == 0 {
            return bad("pool_pages must be at least 1");
        }
        if self.max_in_flight == 0 || self.max_admit_per_step == 0 {
            return bad("max_in_flight and max_admit_per_step must be at least 1");
        }
        if let Speed::Factor(f) = self.speed {
            if !(f.is_finite() && f > 0.0) {
                return Err(ReplayError::Params(format!(
                    "speed factor must be a positive number, got {f}"
                )));
            }
        }
        let d = &self.deadlines;
        if [
            d.connect,
            d.end_step,
            d.frame_poll,
            d.window,
            d.recovery,
            d.stall,
        ]
        .contains(&Duration::ZERO)
        {
            return bad("every deadline must be longer than zero");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_fields_are_named() {
        let p = ReplayParams::new(vec!["/tmp/r0.sock".into(), "/tmp/r1.sock".into()]);
        p.validate().unwrap();
        assert_eq!(p.world_size(), 2);
        let msg = |p: ReplayParams| p.validate().unwrap_err().to_string();
        assert_eq!(
            msg(ReplayParams::new(vec![])),
            "bad replay parameters: sockets: at least one engine socket (rank 0) is needed"
        );
        let mut q = p.clone();
        q.pool_pages = 0;
        assert_eq!(
            msg(q),
            "bad replay parameters: pool_pages must be at least 1"
        );
        let mut q = p.clone();
        q.max_in_flight = 0;
        assert_eq!(
            msg(q),
            "bad replay parameters: max_in_flight and max_admit_per_step must be at least 1"
        );
        let mut q = p.clone();
        q.speed = Speed::Factor(-1.0);
        assert_eq!(
            msg(q),
            "bad replay parameters: speed factor must be a positive number, got -1"
        );
        let mut q = p.clone();
        q.deadlines.frame_poll = Duration::ZERO;
        assert_eq!(
            msg(q),
            "bad replay parameters: every deadline must be longer than zero"
        );
    }

    #[test]
    fn pool_pages_needed_is_the_largest_request() {
        let rec = |blocks: u64| TraceRecord {
            timestamp: 0,
            input_length: blocks * 512,
            output_length: 0,
            hash_ids: (0..blocks).collect(),
        };
        assert_eq!(pool_pages_needed(&[rec(3), rec(374), rec(20)]), 374);
        assert_eq!(pool_pages_needed(&[]), 1);
    }

    #[test]
    fn follower_patterns_cycle_and_pressure_seeds_differ_by_rank() {
        let mut p = ReplayParams::new(vec![PathBuf::new(); 5]);
        p.follower_patterns = vec![
            ReadPattern::Pressure {
                seed: 10,
                max_stall_ms: 5,
            },
            ReadPattern::Steady,
        ];
        assert_eq!(
            p.pattern_for(1),
            ReadPattern::Pressure {
                seed: 11,
                max_stall_ms: 5
            }
        );
        assert_eq!(p.pattern_for(2), ReadPattern::Steady);
        assert_eq!(
            p.pattern_for(3),
            ReadPattern::Pressure {
                seed: 13,
                max_stall_ms: 5
            }
        );
        p.follower_patterns.clear();
        assert_eq!(p.pattern_for(4), ReadPattern::default());
    }
}
