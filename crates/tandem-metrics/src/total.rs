//! [`SyncedCounter`]: a Prometheus counter that can be fed either increments or the
//! cumulative totals a state machine already keeps.
//!
//! The sans-IO cores (leader, follower, store) keep their own cumulative counters and
//! report them in their status. Copying those into Prometheus counters with plain
//! increments would need the caller to remember the last value it saw; this type remembers
//! it instead. It owns only that bookkeeping; it never reads a clock or a state machine.
//!
//! Two ways to update one counter:
//! - [`SyncedCounter::add`]: add a delta (an event just happened here).
//! - [`SyncedCounter::set_total`]: the source's cumulative total is now `total`; the counter
//!   grows by what the source counted since the previous call. A total below the previous
//!   one means the source started again from zero (a new state machine after a restart):
//!   everything it counted is new, so the counter grows by `total`. This is the same reset
//!   rule Prometheus' `rate()` applies, and it keeps the exported counter monotonic.
//!
//! Use one way per counter. `set_total` assumes one updater per source (the actor that owns
//! the state machine); two threads racing with totals from one source could count a
//! decrease as a reset.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::{MetricType, TypedMetric};

/// A monotonic counter (exported as `<name>_total`) with a remembered source total.
///
/// Clones share the same value, like [`Counter`]. All operations are a few relaxed atomic
/// operations.
#[derive(Clone, Debug, Default)]
pub struct SyncedCounter {
    counter: Counter,
    source_last: Arc<AtomicU64>,
}

impl SyncedCounter {
    /// Add one.
    pub fn inc(&self) {
        self.counter.inc();
    }

    /// Add `n` (in the counter's unit: events, blocks or bytes).
    pub fn add(&self, n: u64) {
        self.counter.inc_by(n);
    }

    /// The source's cumulative total is now `total`. Grows the counter by `total - previous`,
    /// or by `total` when `total < previous` (the source was reset). Returns the amount
    /// added.
    pub fn set_total(&self, total: u64) -> u64 {
        let previous = self.source_last.swap(total, Ordering::Relaxed);
        let delta = if total >= previous {
            total - previous
        } else {
            total
        };
        if delta > 0 {
            self.counter.inc_by(delta);
        }
        delta
    }

    /// The exported value.
    pub fn get(&self) -> u64 {
        self.counter.get()
    }
}

impl TypedMetric for SyncedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for SyncedCounter {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.counter.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_inc_accumulate() {
        let c = SyncedCounter::default();
        c.inc();
        c.add(4);
        assert_eq!(c.get(), 5);
    }

    #[test]
    fn set_total_adds_the_difference() {
        let c = SyncedCounter::default();
        assert_eq!(c.set_total(10), 10);
        assert_eq!(c.set_total(10), 0);
        assert_eq!(c.set_total(15), 5);
        assert_eq!(c.get(), 15);
    }

    #[test]
    fn set_total_below_previous_is_a_source_reset() {
        let c = SyncedCounter::default();
        c.set_total(100);
        // A new state machine after a restart counts from zero again.
        assert_eq!(c.set_total(3), 3);
        assert_eq!(c.set_total(7), 4);
        assert_eq!(c.get(), 107);
    }

    #[test]
    fn clones_share_the_value() {
        let a = SyncedCounter::default();
        let b = a.clone();
        a.add(2);
        b.set_total(5);
        assert_eq!(a.get(), 7);
        assert_eq!(b.get(), 7);
    }
}
