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

/// Finds a shortest path to a discovery of `property`, or `None` when none exists within
/// `max_depth` levels (the initial state is level 1).
///
/// One run may return a longer path than needed: stateright keeps the last discovery it
/// records, not the first, and finishes the block of states it is working on before it stops.
/// So this takes [`first_discovery`], then checks again with the depth bound just below the
/// path found, until no shorter discovery exists.
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
    let mut best = first_discovery(model, property, max_depth)?;
    loop {
        // A path of n actions ends at level n + 1; look only at levels up to n.
        let actions = best.clone().into_actions().len();
        if actions == 0 {
            return Some(best);
        }
        match first_discovery(model, property, actions) {
            Some(shorter) if shorter.clone().into_actions().len() < actions => best = shorter,
            _ => return Some(best),
        }
    }
}

/// A discovery of `property` among the states of levels `1..=max_level`, from a
/// single-threaded breadth-first check that stops after the block of states (1,500 in
/// stateright 0.31) in which it first finds one. Its path may be longer than the shortest
/// (the checker keeps the last discovery it records); [`shortest_discovery`] tightens it.
pub fn first_discovery<M>(
    model: &M,
    property: &'static str,
    max_level: usize,
) -> Option<Path<M::State, M::Action>>
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    let checker = model
        .clone()
        .checker()
        .target_max_depth(max_level.saturating_add(1))
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    checker.discovery(property)
}
