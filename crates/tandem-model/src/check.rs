//! Running the checker: breadth-first runs with a printed size report, and the shortest
//! discovery of one property by iterative deepening.
//!
//! Owns: how tests call stateright and what they print. Must never: know about a particular
//! model; everything here is generic over [`stateright::Model`].

use std::collections::BTreeSet;
use std::fmt;
use std::hash::Hash;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model, Path};

/// Size and time of one checker run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// States generated, repeats included.
    pub states: usize,
    /// Distinct states (by fingerprint).
    pub unique_states: usize,
    /// Deepest level reached, counting the initial state as depth 1.
    pub max_depth: usize,
    /// The depth bound the run was given (`None`: unbounded).
    pub depth_bound: Option<usize>,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bound = match self.depth_bound {
            Some(d) => format!("depth bound {d}"),
            None => "no depth bound".to_string(),
        };
        write!(
            f,
            "{} states generated, {} unique, max depth {} ({bound}), {:.2?}",
            self.states, self.unique_states, self.max_depth, self.elapsed
        )
    }
}

/// Runs an exhaustive breadth-first check of `model` on `threads` threads, stopping at
/// `depth_bound` levels (the initial state is level 1; `None`: until no new state appears).
/// Returns the joined checker, whose discoveries the caller asserts, and its size report.
pub fn bfs<M>(
    model: M,
    depth_bound: Option<usize>,
    threads: usize,
) -> (impl Checker<M>, CheckReport)
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    let started = Instant::now();
    let mut builder = model.checker().threads(threads.max(1));
    if let Some(depth) = depth_bound {
        builder = builder.target_max_depth(depth);
    }
    let checker = builder.spawn_bfs().join();
    let report = CheckReport {
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        depth_bound,
        elapsed: started.elapsed(),
    };
    (checker, report)
}

/// Finds a shortest path to a discovery of `property` by running single-threaded breadth-first
/// checks with depth bounds 2, 3, ... up to `max_depth`, each stopping at its first discovery of
/// that property. (One unbounded run may return a longer path: stateright keeps the last
/// discovery it records, not the first.) Returns `None` when no discovery exists within
/// `max_depth` levels.
pub fn shortest_discovery<M>(
    model: &M,
    property: &'static str,
    max_depth: usize,
) -> Option<Path<M::State, M::Action>>
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    for depth in 2..=max_depth {
        let checker = model
            .clone()
            .checker()
            .target_max_depth(depth)
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
            .spawn_bfs()
            .join();
        if let Some(path) = checker.discovery(property) {
            return Some(path);
        }
    }
    None
}
