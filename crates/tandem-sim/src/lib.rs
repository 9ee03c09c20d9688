//! Tandem's deterministic simulator: a whole group in one thread, on a virtual clock, with
//! faults drawn from a seed and the group's invariants checked after every event.
//!
//! What runs is the real code: every rank's `tandem_core::RankCore` (leader and followers)
//! and `tandem_core::EpochLoop`, the completion log's in-memory twin
//! (`tandem_durable::MemoryLog`, on a `ManualClock`), the supervisor's
//! `tandem_supervisor::RestartMachine`, and each engine's task map
//! (`tandem_client::TaskBook`). What is simulated is what those drive: the agents' drivers
//! (carrying the cores' outputs), the engines (the calls they make and when), the stores
//! (tiers and copies), the network and the processes. A failing seed replays exactly:
//! `cargo run -p tandem-sim --release -- --seed N --trace` prints its event trace.
//! docs/SIMULATION.md lists the faults and the invariants.
//!
//! ```
//! let run = tandem_sim::run_seed(7, &tandem_sim::SimConfig::default());
//! assert!(run.violation.is_none(), "{:?}", run.violation);
//! assert!(run.report.events > 0);
//! ```
//!
//! # Layout
//!
//! - [`config`]: [`SimConfig`], [`Broken`] drivers for the tests, the world's timings.
//! - `world`: the world, its event queue and its one loop.
//! - `agent`: a rank's agent as its drivers (epoch loop effects, core outputs).
//! - `engine`: the simulated engines.
//! - `store`: a rank's store (tiers, copies, corrupt shards, full tiers).
//! - `net`: connections, delivery, loss, the join handshake.
//! - `supervisor`: the supervisor's driver around its restart machine.
//! - `faults`: the faults and their end.
//! - [`check`] and `invariants`: the rules, and [`Violation`].
//! - [`report`]: [`SeedReport`] and [`Totals`].

mod agent;
pub mod check;
pub mod config;
mod engine;
mod faults;
mod invariants;
mod net;
pub mod report;
mod store;
mod supervisor;
mod world;

pub use check::Violation;
pub use config::{Broken, SimConfig};
pub use report::{SeedReport, Totals};

/// What one seed's run came to.
#[derive(Clone, Debug)]
pub struct Run {
    /// Its figures.
    pub report: SeedReport,
    /// The first invariant broken, if any.
    pub violation: Option<Violation>,
    /// Its event trace (empty unless `SimConfig::trace`).
    pub trace: Vec<String>,
}

/// Runs `seed` with `config`. The same seed and configuration always give the same run.
pub fn run_seed(seed: u64, config: &SimConfig) -> Run {
    let (report, violation, trace) = world::World::new(seed, config.clone()).run();
    Run {
        report,
        violation,
        trace,
    }
}
