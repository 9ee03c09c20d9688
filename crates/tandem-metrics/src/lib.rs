//! Tandem's operations pieces, shared by the agent and the supervisor processes: the
//! Prometheus metric families each exports on `/metrics`, and the HTML status pages each
//! serves at `/`.
//!
//! Nothing here performs IO, starts a thread or reads a clock. The processes push values
//! in (durations they measured, counters their state machines keep) and serve the text
//! this crate renders.
//!
//! # Naming
//!
//! Families follow Prometheus naming: prefix `tandem_` (`tandem_supervisor_` for the
//! supervisor), counters end in `_total`, units (`_seconds`, `_bytes`, `_blocks`) come
//! before it. Agent samples carry the constant labels `group` and `rank`; supervisor
//! samples carry `group`. The tables in [`agent`] and [`supervisor`] list every family.
//!
//! # Counters from state-machine totals
//!
//! Every counter is a [`SyncedCounter`]: call [`SyncedCounter::add`] for events that happen
//! in the process, or [`SyncedCounter::set_total`] with the cumulative total a sans-IO core
//! already keeps (for example the leader's `steps_sealed`); the counter then grows by the
//! difference and treats a smaller total as a restarted source. Use one way per counter.
//!
//! # Serving
//!
//! `/metrics`: `metrics.exposition(accept_header)` gives the body and the matching
//! `Content-Type` (OpenMetrics for Prometheus, which asks for it; Prometheus text 0.0.4
//! otherwise). `/`: [`render_agent_page`] or [`render_supervisor_page`] of the `/status`
//! JSON, served as `text/html; charset=utf-8`.
//!
//! # Layout
//!
//! - [`agent`]: [`AgentMetrics`], one rank's families, [`LATENCY_BUCKETS_SECONDS`].
//! - [`supervisor`]: [`SupervisorMetrics`], the supervisor's families.
//! - [`labels`]: the closed label value sets ([`TaskKind`], [`TaskResult`], [`Tier`],
//!   [`Direction`], [`GroupState`], [`NotReadyReason`], [`RefusalReason`]).
//! - [`total`]: [`SyncedCounter`], increments or absolute totals.
//! - [`encode`]: the two text formats, content types, `Accept` negotiation.
//! - [`exposition`]: [`parse_exposition`], a strict reader of the text format for tests.
//! - [`agent_page`]: the agent's page, [`render_agent_page`] (human units, tiers, counters).
//! - [`supervisor_page`]: the supervisor's page, [`render_supervisor_page`] (rank grid,
//!   group tiers, charts, restart history).
//! - [`status_page`]: a generic page of any JSON document, [`render_status_html`].
//! - [`history`]: [`History`], recent group figures (rates, hit ratio, latency quantiles)
//!   from successive expositions, for the charts.
//! - [`chart`]: inline SVG charts.
//! - [`units`]: figures in human units (MiB, GB/s, %, ms, UTC times).
//! - [`html`]: escaping and JSON-to-text helpers for the pages.
//! - [`error`]: the crate's error, [`MetricsError`].

pub mod agent;
pub mod agent_page;
pub mod chart;
pub mod encode;
pub mod error;
pub mod events;
pub mod exposition;
pub mod history;
pub mod html;
pub mod labels;
mod page;
pub mod status_page;
pub mod supervisor;
pub mod supervisor_page;
pub mod total;
pub mod units;

pub use agent::{AgentMetrics, LATENCY_BUCKETS_SECONDS};
pub use agent_page::render_agent_page;
pub use encode::{Exposition, TextFormat, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_TEXT_CONTENT_TYPE};
pub use error::MetricsError;
pub use events::EventMetrics;
pub use exposition::{parse_exposition, ExpositionError, ParsedExposition, Sample};
pub use history::{GroupPoint, History, RankCounters};
pub use labels::{
    Direction, GroupState, NotReadyReason, RefusalReason, TaskKind, TaskResult, Tier,
};
pub use status_page::{render_status_html, REFRESH_SECONDS};
pub use supervisor::SupervisorMetrics;
pub use supervisor_page::render_supervisor_page;
pub use total::SyncedCounter;

/// The `Content-Type` of [`render_status_html`]'s page.
pub const HTML_CONTENT_TYPE: &str = "text/html; charset=utf-8";
