//! The figures of one data-path case. Owns arithmetic only: no clocks, no IO.

use serde::Serialize;

/// Nearest-rank percentiles of a set of samples, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Samples.
    pub n: usize,
    /// Median, µs.
    pub p50: f64,
    /// 99th percentile, µs.
    pub p99: f64,
    /// Largest, µs.
    pub max: f64,
}

impl Latency {
    /// Summarise `samples` (µs, any order). Empty input gives zeros.
    pub fn of(samples: &[f64]) -> Self {
        let mut v = samples.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| {
            if v.is_empty() {
                return 0.0;
            }
            let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            v[i]
        };
        Latency {
            n: v.len(),
            p50: at(0.50),
            p99: at(0.99),
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

/// One direction (store or load) of one case.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseFigures {
    /// Tasks run, one at a time (the next is called once the previous one's finish frame
    /// returned).
    pub tasks: usize,
    /// Bytes each rank moved (blocks × shard bytes).
    pub bytes_per_rank: u64,
    /// From the first call to the last finish frame, seconds.
    pub seconds: f64,
    /// `bytes_per_rank / seconds`, GB/s (10^9 bytes per second).
    pub gbps_per_rank: f64,
    /// `ranks × bytes_per_rank / seconds`, GB/s.
    pub gbps_group: f64,
    /// Each task: its `store` / `load` call → the leader's `end_step` returned the frame that
    /// lists it finished, µs.
    pub task_us: Latency,
    /// Each task: steps from the open step at the call to the step whose frame finished it
    /// (1 = the frame of the very next step after the one that started it).
    pub task_steps: Latency,
    /// Mean time between two sealed steps in the phase, µs (the step cadence).
    pub step_period_us: f64,
}

impl PhaseFigures {
    /// Figures of a phase of `tasks` tasks moving `bytes_per_rank` bytes on each of `ranks`
    /// ranks in `seconds`, with its per-task samples and the steps sealed.
    pub fn new(
        ranks: u32,
        bytes_per_rank: u64,
        seconds: f64,
        task_us: &[f64],
        task_steps: &[f64],
        steps_sealed: u64,
    ) -> Self {
        let gbps = |b: f64| {
            if seconds > 0.0 {
                b / seconds / 1e9
            } else {
                0.0
            }
        };
        PhaseFigures {
            tasks: task_us.len(),
            bytes_per_rank,
            seconds,
            gbps_per_rank: gbps(bytes_per_rank as f64),
            gbps_group: gbps(bytes_per_rank as f64 * f64::from(ranks)),
            task_us: Latency::of(task_us),
            task_steps: Latency::of(task_steps),
            step_period_us: if steps_sealed > 0 {
                seconds * 1e6 / steps_sealed as f64
            } else {
                0.0
            },
        }
    }
}

/// Everything one case measured through the agents.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CaseFigures {
    /// Store of the working set.
    pub store: PhaseFigures,
    /// Load of the working set (into zeroed pages), every byte verified afterwards.
    pub load: PhaseFigures,
    /// Blocks whose loaded bytes were checked on every rank.
    pub verified_blocks: u64,
    /// The control floor: one engine round trip (re-reading a sealed frame), µs.
    pub control_us: Latency,
    /// A lookup of 1 cached block, call → reply, µs.
    pub lookup_1_us: Latency,
    /// A lookup of 128 blocks (the cached ones first), call → reply, µs.
    pub lookup_128_us: Latency,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_rates() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let l = Latency::of(&v);
        assert_eq!((l.n, l.p50, l.p99, l.max), (100, 50.0, 99.0, 100.0));
        assert_eq!(Latency::of(&[]), Latency::default());
        let p = PhaseFigures::new(4, 2_000_000_000, 2.0, &[1.0], &[1.0], 4);
        assert_eq!((p.gbps_per_rank, p.gbps_group), (1.0, 4.0));
        assert_eq!(p.step_period_us, 500_000.0);
        assert_eq!(PhaseFigures::new(1, 5, 0.0, &[], &[], 0).gbps_group, 0.0);
    }
}
