//! Rank-local simulated memory pressure: when a follower engine reads its next frame, how
//! many times, and whether it acknowledges at once.
//!
//! This reproduces the FlexKV failure pattern on purpose: in the real connector, whether a
//! rank polls for finished stores depends on rank-local memory pressure, so ranks make
//! different numbers of calls. Here each follower reads frames at its own moments (stalls,
//! bursts, repeated reads, deferred acknowledgements); positional frames must make that
//! harmless. Deterministic for a pattern and seed; pure (the follower engine does the
//! sleeping).

use serde::{Deserialize, Serialize};

/// How a follower engine reads frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadPattern {
    /// Every frame once, as soon as it is sealed, acknowledged at once.
    Steady,
    /// Every frame `times` times (at least 2); each re-read must return the same frame.
    Reread {
        /// Reads per frame.
        times: u32,
    },
    /// After every `every` frames, stall `stall_ms` ms (frames pile up at the leader, then
    /// are read in a burst).
    Bursty {
        /// Frames between stalls.
        every: u32,
        /// Stall length, ms.
        stall_ms: u64,
    },
    /// A seeded random mix per frame: 10% a stall of 1..=`max_stall_ms` ms before reading,
    /// 20% two or three reads, 30% an acknowledgement deferred (up to 3 frames, flushed when
    /// the follower catches up).
    Pressure {
        /// Seed of the rank's stream (the driver adds the rank).
        seed: u64,
        /// Longest stall, ms.
        max_stall_ms: u64,
    },
}

impl Default for ReadPattern {
    fn default() -> Self {
        ReadPattern::Pressure {
            seed: 0,
            max_stall_ms: 20,
        }
    }
}

/// What to do for the next frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadPlan {
    /// Sleep this long before reading, ms.
    pub stall_ms: u64,
    /// Read the frame this many times (at least 1).
    pub reads: u32,
    /// Do not acknowledge yet (a later acknowledgement covers this frame).
    pub defer_ack: bool,
}

/// Most frames a follower leaves unacknowledged under [`ReadPattern::Pressure`].
pub const MAX_DEFERRED_ACKS: u32 = 3;

/// A follower's pressure generator.
#[derive(Clone, Debug)]
pub struct PressureClock {
    pattern: ReadPattern,
    rng: u64,
    frames: u64,
    deferred: u32,
}

impl PressureClock {
    /// A generator for `pattern` on `rank`.
    pub fn new(pattern: ReadPattern, rank: u32) -> Self {
        let seed = match pattern {
            ReadPattern::Pressure { seed, .. } => seed,
            _ => 0,
        };
        PressureClock {
            pattern,
            rng: seed ^ (u64::from(rank) << 32) ^ 0x5EED,
            frames: 0,
            deferred: 0,
        }
    }

    /// The plan for the next frame.
    pub fn next_plan(&mut self) -> ReadPlan {
        self.frames += 1;
        let plan = match self.pattern {
            ReadPattern::Steady => ReadPlan {
                stall_ms: 0,
                reads: 1,
                defer_ack: false,
            },
            ReadPattern::Reread { times } => ReadPlan {
                stall_ms: 0,
                reads: times.max(2),
                defer_ack: false,
            },
            ReadPattern::Bursty { every, stall_ms } => {
                let stall = if self.frames % u64::from(every.max(1)) == 0 {
                    stall_ms
                } else {
                    0
                };
                ReadPlan {
                    stall_ms: stall,
                    reads: 1,
                    defer_ack: false,
                }
            }
            ReadPattern::Pressure { max_stall_ms, .. } => {
                let stall_ms = if self.below(100) < 10 {
                    1 + self.below(max_stall_ms.max(1))
                } else {
                    0
                };
                let reads = if self.below(100) < 20 {
                    2 + self.below(2) as u32
                } else {
                    1
                };
                let defer_ack = self.below(100) < 30 && self.deferred < MAX_DEFERRED_ACKS;
                ReadPlan {
                    stall_ms,
                    reads,
                    defer_ack,
                }
            }
        };
        self.deferred = if plan.defer_ack { self.deferred + 1 } else { 0 };
        plan
    }

    /// The follower caught up and acknowledged everything it applied.
    pub fn flushed(&mut self) {
        self.deferred = 0;
    }

    /// SplitMix64 step, then uniform in `0..n` by multiply-high.
    fn below(&mut self, n: u64) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((u128::from(z) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_patterns() {
        let mut c = PressureClock::new(ReadPattern::Steady, 1);
        assert_eq!(
            c.next_plan(),
            ReadPlan {
                stall_ms: 0,
                reads: 1,
                defer_ack: false
            }
        );
        let mut c = PressureClock::new(ReadPattern::Reread { times: 1 }, 1);
        assert_eq!(
            c.next_plan().reads,
            2,
            "a re-read pattern reads at least twice"
        );
        let mut c = PressureClock::new(
            ReadPattern::Bursty {
                every: 3,
                stall_ms: 40,
            },
            2,
        );
        let stalls: Vec<u64> = (0..6).map(|_| c.next_plan().stall_ms).collect();
        assert_eq!(stalls, vec![0, 0, 40, 0, 0, 40]);
    }

    #[test]
    fn pressure_mixes_stalls_rereads_and_bounded_deferred_acks() {
        let pattern = ReadPattern::Pressure {
            seed: 7,
            max_stall_ms: 20,
        };
        let mut c = PressureClock::new(pattern, 1);
        let plans: Vec<ReadPlan> = (0..2000).map(|_| c.next_plan()).collect();
        assert!(plans.iter().any(|p| p.stall_ms > 0));
        assert!(plans.iter().all(|p| p.stall_ms <= 20));
        assert!(plans.iter().any(|p| p.reads > 1));
        assert!(plans.iter().all(|p| (1..=3).contains(&p.reads)));
        let mut run = 0;
        for p in &plans {
            run = if p.defer_ack { run + 1 } else { 0 };
            assert!(run <= MAX_DEFERRED_ACKS);
        }
        let mut again = PressureClock::new(pattern, 1);
        assert_eq!(
            (0..2000).map(|_| again.next_plan()).collect::<Vec<_>>(),
            plans,
            "deterministic"
        );
        let mut other = PressureClock::new(pattern, 2);
        assert_ne!(
            (0..2000).map(|_| other.next_plan()).collect::<Vec<_>>(),
            plans,
            "rank-local"
        );
    }
}
