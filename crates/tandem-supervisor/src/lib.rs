//! Tandem's group supervisor: one per group. It watches every rank and restarts the whole
//! group into a new epoch when any rank fails (DESIGN.md invariant 4).
//!
//! # Layout
//! - [`policy`]: restart intensity (at most R restarts in T) and exponential backoff with
//!   jitter, as a pure decision.
//! - [`liveness`]: which ranks are silent, from their heartbeats, as a pure judgement.
//! - [`runner`]: the loop that gathers failures (reports, heartbeats, launched agents' exits)
//!   from Redis and acts on them; its state lives in Redis.
//! - [`launcher`]: agent processes the supervisor starts itself (`tandem up`).
//! - [`collector`]: reads every rank's `/status` and `/metrics` for the status page (never
//!   for decisions), and the group figures' history.
//! - [`http`]: `/healthz`, `/readyz`, `/status`, `/metrics`, `/`, `/ranks/{r}`.
//!
//! The supervisor never takes part in the group protocol: it only moves the epoch. Agents
//! notice the new epoch in Redis and restart their actors into it.

pub mod collector;
pub mod http;
pub mod launcher;
pub mod liveness;
pub mod policy;
pub mod runner;

pub use launcher::LaunchSpec;
pub use runner::{Exit, Supervisor, SupervisorError, SupervisorView};
