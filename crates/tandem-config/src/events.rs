//! `[events]`: the leader's KV cache event stream (ZeroMQ, in vLLM's wire format).
//!
//! Owns the section's keys and defaults only; the agent's `events` module binds the sockets
//! and `tandem_core::cache_events` decides what is published.

use serde::{Deserialize, Serialize};

/// `[events]`: where rank 0 publishes the group's KV cache events (off by default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EventsConfig {
    /// Publish events (rank 0 only; other ranks ignore the section).
    pub enabled: bool,
    /// ZeroMQ PUB endpoint the leader binds, e.g. `tcp://0.0.0.0:5557`.
    pub pub_addr: String,
    /// ZeroMQ ROUTER endpoint serving replays of past batches by sequence number; empty: none.
    pub replay_addr: String,
    /// Topic, the first frame of every published message.
    pub topic: String,
    /// Batches kept for replay (the newest ones), at least 1.
    pub buffer_batches: u32,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            pub_addr: "tcp://127.0.0.1:5557".into(),
            replay_addr: "tcp://127.0.0.1:5558".into(),
            topic: "kv-events".into(),
            buffer_batches: 10_000,
        }
    }
}
