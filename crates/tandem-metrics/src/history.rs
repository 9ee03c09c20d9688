//! A group's recent figures, kept in memory for the status page's charts: steps per second,
//! bytes per second per tier and direction, the prefix hit ratio and frame latency
//! quantiles, one point per sample of every rank's `/metrics`.
//!
//! Owns turning successive counter readings into rates, and histogram buckets into
//! quantiles, the way Prometheus's `rate()` and `histogram_quantile()` do (a counter that
//! went down restarted from 0; a quantile is interpolated linearly inside its bucket). It
//! never reads a clock or performs IO: the caller passes each sample's wall-clock time and
//! the parsed expositions. The history is bounded ([`History::new`]'s capacity).

use std::collections::VecDeque;

use serde::Serialize;

use crate::exposition::ParsedExposition;
use crate::labels::{Direction, Tier};

/// Index of host and disk in [`Tier::PLACED`] (the order of the arrays below).
const HOST: usize = 0;
const DISK: usize = 1;

/// What one rank's `/metrics` says, reduced to the counters the charts need.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankCounters {
    /// `tandem_steps_sealed_total`, frames.
    pub steps_sealed: f64,
    /// `tandem_tier_moved_bytes_total`, `[tier][direction]` in [`Tier::PLACED`] ×
    /// [`Direction::ALL`] order, bytes.
    pub moved_bytes: [[f64; 2]; 2],
    /// `tandem_lookup_blocks_total{result="hit"}`, blocks.
    pub lookup_hit: f64,
    /// `tandem_lookup_blocks_total{result="miss"}`, blocks.
    pub lookup_miss: f64,
    /// `tandem_frame_latency_seconds_bucket`: `(le, cumulative count)`, ascending `le`,
    /// `+Inf` last.
    pub frame_latency_buckets: Vec<(f64, f64)>,
}

impl RankCounters {
    /// Read the counters from one agent's exposition (either text format). Absent series
    /// read 0.
    pub fn from_exposition(p: &ParsedExposition) -> Self {
        let mut moved_bytes = [[0.0; 2]; 2];
        for (t, tier) in Tier::PLACED.into_iter().enumerate() {
            for dir in Direction::ALL {
                moved_bytes[t][dir.index()] = p
                    .value(
                        "tandem_tier_moved_bytes_total",
                        &[("tier", tier.name()), ("direction", dir.as_str())],
                    )
                    .unwrap_or(0.0);
            }
        }
        let mut frame_latency_buckets: Vec<(f64, f64)> = p
            .samples_named("tandem_frame_latency_seconds_bucket")
            .filter_map(|s| {
                let le = match s.label("le")? {
                    "+Inf" => f64::INFINITY,
                    v => v.parse().ok()?,
                };
                Some((le, s.value))
            })
            .collect();
        frame_latency_buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Self {
            steps_sealed: p.value("tandem_steps_sealed_total", &[]).unwrap_or(0.0),
            moved_bytes,
            lookup_hit: p
                .value("tandem_lookup_blocks_total", &[("result", "hit")])
                .unwrap_or(0.0),
            lookup_miss: p
                .value("tandem_lookup_blocks_total", &[("result", "miss")])
                .unwrap_or(0.0),
            frame_latency_buckets,
        }
    }
}

/// The group's figures over one sampling interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupPoint {
    /// End of the interval, wall-clock ms since the Unix epoch.
    pub unix_ms: u64,
    /// Steps sealed per second (the fastest rank's count: every rank sees the same steps).
    pub steps_per_s: f64,
    /// Bytes per second summed over the ranks: host tier stored (engine pages → tier).
    pub host_store_bytes_per_s: f64,
    /// Host tier loaded (tier → engine pages), bytes per second.
    pub host_load_bytes_per_s: f64,
    /// Disk tier stored, bytes per second.
    pub disk_store_bytes_per_s: f64,
    /// Disk tier loaded, bytes per second.
    pub disk_load_bytes_per_s: f64,
    /// Blocks matched / blocks asked by lookups in the interval; `None` without lookups.
    pub hit_ratio: Option<f64>,
    /// Median frame latency over the interval, ms; `None` without frames.
    pub frame_latency_p50_ms: Option<f64>,
    /// 99th percentile frame latency over the interval, ms; `None` without frames.
    pub frame_latency_p99_ms: Option<f64>,
}

/// The last [`History::new`]`(capacity)` points of a group, oldest first.
#[derive(Clone, Debug)]
pub struct History {
    capacity: usize,
    last: Option<(u64, Vec<Option<RankCounters>>)>,
    points: VecDeque<GroupPoint>,
}

impl History {
    /// An empty history that keeps at most `capacity` points (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            last: None,
            points: VecDeque::new(),
        }
    }

    /// Record the counters read at `unix_ms` (`None` for a rank that did not answer). The
    /// first call, and a call whose time is not after the previous one, only remembers the
    /// readings; each later call adds one point for the interval since the previous call.
    /// A rank absent from either reading contributes nothing to that interval.
    pub fn record(&mut self, unix_ms: u64, ranks: Vec<Option<RankCounters>>) {
        if let Some((t0, before)) = &self.last {
            if unix_ms > *t0 {
                let point = interval_point(*t0, before, unix_ms, &ranks);
                if self.points.len() == self.capacity {
                    self.points.pop_front();
                }
                self.points.push_back(point);
            }
        }
        self.last = Some((unix_ms, ranks));
    }

    /// The points, oldest first.
    pub fn points(&self) -> impl ExactSizeIterator<Item = &GroupPoint> {
        self.points.iter()
    }

    /// The newest point.
    pub fn latest(&self) -> Option<&GroupPoint> {
        self.points.back()
    }
}

/// Growth of a counter from `a` to `b`; a smaller `b` means the source restarted from 0.
fn increase(a: f64, b: f64) -> f64 {
    if b >= a {
        b - a
    } else {
        b
    }
}

fn interval_point(
    t0: u64,
    before: &[Option<RankCounters>],
    t1: u64,
    after: &[Option<RankCounters>],
) -> GroupPoint {
    let secs = (t1 - t0) as f64 / 1000.0;
    let mut steps: f64 = 0.0;
    let mut moved = [[0.0; 2]; 2];
    let (mut hit, mut miss) = (0.0, 0.0);
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for (a, b) in before.iter().zip(after) {
        let (Some(a), Some(b)) = (a, b) else { continue };
        steps = steps.max(increase(a.steps_sealed, b.steps_sealed));
        for (t, row) in moved.iter_mut().enumerate() {
            for (d, cell) in row.iter_mut().enumerate() {
                *cell += increase(a.moved_bytes[t][d], b.moved_bytes[t][d]);
            }
        }
        hit += increase(a.lookup_hit, b.lookup_hit);
        miss += increase(a.lookup_miss, b.lookup_miss);
        add_bucket_increase(
            &mut buckets,
            &a.frame_latency_buckets,
            &b.frame_latency_buckets,
        );
    }
    let quantile_ms = |q: f64| histogram_quantile(q, &buckets).map(|s| s * 1000.0);
    GroupPoint {
        unix_ms: t1,
        steps_per_s: steps / secs,
        host_store_bytes_per_s: moved[HOST][Direction::Store.index()] / secs,
        host_load_bytes_per_s: moved[HOST][Direction::Load.index()] / secs,
        disk_store_bytes_per_s: moved[DISK][Direction::Store.index()] / secs,
        disk_load_bytes_per_s: moved[DISK][Direction::Load.index()] / secs,
        hit_ratio: (hit + miss > 0.0).then(|| hit / (hit + miss)),
        frame_latency_p50_ms: quantile_ms(0.5),
        frame_latency_p99_ms: quantile_ms(0.99),
    }
}

/// Add the per-bucket increase from `a` to `b` into `sum` (buckets matched by `le`; a
/// histogram whose `+Inf` count went down restarted, and counts from 0).
fn add_bucket_increase(sum: &mut Vec<(f64, f64)>, a: &[(f64, f64)], b: &[(f64, f64)]) {
    let restarted = match (a.last(), b.last()) {
        (Some(x), Some(y)) => y.1 < x.1,
        _ => false,
    };
    for (le, count) in b {
        let earlier = if restarted {
            0.0
        } else {
            a.iter().find(|(l, _)| l == le).map_or(0.0, |(_, c)| *c)
        };
        let grown = (count - earlier).max(0.0);
        match sum.iter_mut().find(|(l, _)| l == le) {
            Some(slot) => slot.1 += grown,
            None => sum.push((*le, grown)),
        }
    }
    sum.sort_by(|x, y| x.0.total_cmp(&y.0));
}

/// The `q` quantile (0..1) of cumulative `buckets` (`(le, count)`, ascending, `+Inf`
/// last), interpolated linearly inside the bucket that holds it, as Prometheus's
/// `histogram_quantile` does; `None` when the buckets hold no observation. A quantile in the
/// `+Inf` bucket reads as the largest finite bound.
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total;
    let mut prev = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let in_bucket = count - prev.1;
            let frac = if in_bucket > 0.0 {
                (rank - prev.1) / in_bucket
            } else {
                1.0
            };
            return Some(prev.0 + (le - prev.0) * frac);
        }
        prev = (le, count);
    }
    Some(prev.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(steps: f64, host_store: f64, hit: f64, miss: f64, fast: f64) -> RankCounters {
        let mut c = RankCounters {
            steps_sealed: steps,
            lookup_hit: hit,
            lookup_miss: miss,
            // `fast` frames under 1 ms, every frame under 10 ms.
            frame_latency_buckets: vec![(0.001, fast), (0.01, steps), (f64::INFINITY, steps)],
            ..Default::default()
        };
        c.moved_bytes[0][0] = host_store;
        c
    }

    #[test]
    fn rates_over_an_interval() {
        let mut h = History::new(10);
        h.record(1_000, vec![Some(counters(10.0, 0.0, 0.0, 0.0, 10.0))]);
        assert_eq!(h.points().len(), 0, "one reading is not an interval");
        h.record(3_000, vec![Some(counters(30.0, 4e6, 30.0, 10.0, 20.0))]);
        let p = h.latest().unwrap();
        assert_eq!(p.steps_per_s, 10.0);
        assert_eq!(p.host_store_bytes_per_s, 2e6);
        assert_eq!(p.hit_ratio, Some(0.75));
        // 20 frames in the interval: 10 under 1 ms, 10 between 1 and 10 ms.
        assert_eq!(p.frame_latency_p50_ms, Some(1.0));
        assert!((p.frame_latency_p99_ms.unwrap() - 9.82).abs() < 1e-9);
    }

    #[test]
    fn a_restarted_counter_counts_from_zero_and_absent_ranks_count_nothing() {
        let mut h = History::new(2);
        h.record(0, vec![Some(counters(100.0, 0.0, 0.0, 0.0, 0.0)), None]);
        h.record(
            1_000,
            vec![
                Some(counters(5.0, 0.0, 0.0, 0.0, 0.0)),
                Some(counters(9.0, 0.0, 0.0, 0.0, 0.0)),
            ],
        );
        assert_eq!(h.latest().unwrap().steps_per_s, 5.0);
        assert_eq!(h.latest().unwrap().hit_ratio, None);
        h.record(2_000, vec![None, None]);
        h.record(3_000, vec![None, None]);
        assert_eq!(h.points().len(), 2, "bounded by the capacity");
        assert_eq!(h.points().next().unwrap().unix_ms, 2_000);
    }

    #[test]
    fn quantiles_like_prometheus() {
        let b = [(0.1, 50.0), (0.2, 100.0), (f64::INFINITY, 100.0)];
        assert_eq!(histogram_quantile(0.5, &b), Some(0.1));
        assert!((histogram_quantile(0.75, &b).unwrap() - 0.15).abs() < 1e-12);
        assert_eq!(
            histogram_quantile(0.5, &[(0.1, 0.0), (f64::INFINITY, 0.0)]),
            None
        );
        // Everything above the largest bound: the largest finite bound.
        assert_eq!(
            histogram_quantile(0.9, &[(0.1, 0.0), (f64::INFINITY, 4.0)]),
            Some(0.1)
        );
    }
}
