//! Tandem's group supervisor: one per group. It watches every rank and restarts the whole
//! group into a new epoch when any rank fails (docs/DESIGN.md invariant 4).
//!
//! # Layout
//! - [`policy`]: restart intensity (at most R restarts in T) and exponential backoff with
//!   jitter, as a pure decision.
//! - [`liveness`]: which ranks are silent, from their heartbeats, as a pure judgement.
//! - [`restart`]: the restart state machine, sans IO: failures in, effects out (save the
//!   state, move the epoch, relaunch, give up), the one_for_all decision, backoff as a
//!   deadline.
//! - [`actor`]: the `SupervisorActor` on actix, the machine's driver: it reads the group
//!   through the `tandem_durable` traits and carries out the effects.
//! - [`runner`]: the entry point ([`Supervisor`]): connect, continue from the stored state,
//!   launch, run the actor.
//! - [`cadence`]: every retry, cadence and batch figure, in one place.
//! - [`view`]: what `/status`, `/readyz` and the metrics show.
//! - [`launcher`]: agent processes the supervisor starts itself (`tandem up`).
//! - [`collector`]: reads every rank's `/status` and `/metrics` for the status page (never
//!   for decisions), and the group figures' history.
//! - [`http`]: `/healthz`, `/readyz`, `/status`, `/metrics`, `/`, `/ranks/{r}`.
//!
//! The supervisor never takes part in the group protocol: it only moves the epoch. Agents
//! notice the new epoch in Redis and restart their actors into it. It catches no signal: it
//! stops when the `CancellationToken` it is given is cancelled (the binary does that on
//! SIGTERM or SIGINT), stopping and waiting for the agents it launched.

pub mod actor;
pub mod cadence;
pub mod collector;
pub mod http;
pub mod launcher;
pub mod liveness;
pub mod policy;
pub mod restart;
pub mod runner;
pub mod view;

pub use actor::{Backends, Observe, SupervisorActor, SupervisorWiring};
pub use cadence::Cadence;
pub use launcher::LaunchSpec;
pub use policy::RestartPolicy;
pub use restart::{Effect, MachineConfig, Observation, RestartMachine};
pub use runner::{Exit, Supervisor, SupervisorError, SupervisorView};
