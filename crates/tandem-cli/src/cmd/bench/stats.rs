//! Percentiles and ratios of the benchmark samples. Owns arithmetic only: no clocks, no IO.

use serde::Serialize;

/// p50, p99 and max of a set of samples, in the samples' unit (µs or ms as the caller says).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub(super) struct Summary {
    /// Samples summarised.
    pub n: usize,
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Summary {
    /// Summarise `samples` (any order; NaN samples sort last). Empty input gives zeros.
    pub(super) fn of(samples: &[f64]) -> Self {
        let mut v = samples.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        Summary {
            n: v.len(),
            p50: percentile(&v, 50.0),
            p99: percentile(&v, 99.0),
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

/// Nearest-rank percentile `p` (0..=100) of `sorted` (ascending); 0 for an empty slice.
pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `a / b`, or 0 when `b` is not positive.
pub(super) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// A duration in microseconds.
pub(super) fn micros(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Summary::of(&v);
        assert_eq!((s.n, s.p50, s.p99, s.max), (100, 50.0, 99.0, 100.0));
        assert_eq!(Summary::of(&[]), Summary::default());
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 0.0), 1.0);
    }

    #[test]
    fn ratio_of_nothing_is_zero() {
        assert_eq!(ratio(3.0, 0.0), 0.0);
        assert_eq!(ratio(3.0, 2.0), 1.5);
        assert_eq!(micros(std::time::Duration::from_millis(2)), 2000.0);
    }
}
