//! The agent's KV cache event stream families (rank 0, when `[events] enabled`).
//!
//! | family | type | meaning |
//! |---|---|---|
//! | `tandem_events_published_total` | counter | cache events published (stored, removed, all cleared) |
//! | `tandem_event_batches_published_total` | counter | batches published, one sequence number each |
//! | `tandem_event_replay_requests_total` | counter | replay requests served on the ROUTER socket |
//! | `tandem_event_last_seq` | gauge | the sequence number of the last batch published |
//!
//! Owns the families only; the agent's `events` module counts.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::SyncedCounter;

/// The event stream's counters; clones share the values.
#[derive(Clone, Debug, Default)]
pub struct EventMetrics {
    /// Events published.
    pub events: SyncedCounter,
    /// Batches published.
    pub batches: SyncedCounter,
    /// Replay requests served.
    pub replay_requests: SyncedCounter,
    /// Sequence number of the last batch published.
    pub last_seq: Gauge,
}

impl EventMetrics {
    /// The families, registered in `registry` (the agent's, prefix `tandem`).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "events_published",
            "KV cache events published (stored, removed, all cleared)",
            m.events.clone(),
        );
        registry.register(
            "event_batches_published",
            "KV cache event batches published, one sequence number each",
            m.batches.clone(),
        );
        registry.register(
            "event_replay_requests",
            "KV cache event replay requests served",
            m.replay_requests.clone(),
        );
        registry.register(
            "event_last_seq",
            "Sequence number of the last KV cache event batch published",
            m.last_seq.clone(),
        );
        m
    }
}
