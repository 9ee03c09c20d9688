//! Exhaustive check of the Tandem model, which drives the real rank cores (`tandem-core`'s
//! `RankCore`, leader and followers) the agents run; and proof that its properties can fail: deliberately broken
//! drivers are caught by the same properties.

use stateright::{Checker, Expectation, Model};
use tandem_model::check::{bfs, shortest_discovery};
use tandem_model::tandem::properties::{
    APPLIES_LEADER_DECISION, EX_APPEND_REFUSED, EX_LOAD_FINISHED, EX_REFUSED, EX_SHARD_FAILED,
    NO_OUTCOME_TWICE, REVEALS_ONLY_DURABLE,
};

/// The examples of the task paths, each reached by the exhaustive run.
const TASK_EXAMPLES: [&str; 4] = [
    EX_LOAD_FINISHED,
    EX_REFUSED,
    EX_APPEND_REFUSED,
    EX_SHARD_FAILED,
];
use tandem_model::tandem::{trace, TandemConfig, TandemModel, Variant};

/// Threads for the exhaustive run (CI machines have two cores).
const THREADS: usize = 2;

#[test]
fn tandem_model_holds_every_property_exhaustively() {
    let config = TandemConfig::ci();
    let model = TandemModel::new(config.clone()).expect("valid config");
    let (checker, report) = bfs(model.clone(), None, THREADS);
    println!("tandem model, exhaustive: {report}");
    println!("bounds: {config:?}");
    let mut names: Vec<&str> = model.properties().iter().map(|p| p.name).collect();
    names.sort();
    for name in names {
        match checker.discovery(name) {
            Some(path) => println!(
                "  discovered: {name} ({} actions)",
                path.into_actions().len()
            ),
            None => println!("  no discovery: {name}"),
        }
    }
    // Every `always` property holds in every reachable state (the state space is finite and
    // was explored to the end: no depth bound), and every `sometimes` example was found.
    checker.assert_properties();
}

/// The task paths: lookups with their loads, stores refused by a host tier of pinned blocks,
/// loads refused for a lookup that pinned nothing, a refused append, a failed shard copy; on a
/// leader and one follower in one epoch. Every `always` property holds in every reachable
/// state, and each task path's example is reached.
#[test]
fn tandem_model_with_loads_refusals_and_failed_appends_holds_every_property() {
    let config = TandemConfig::ci_tasks();
    let model = TandemModel::new(config.clone()).expect("valid config");
    let (checker, report) = bfs(model.clone(), None, THREADS);
    println!("tandem model, task paths, exhaustive: {report}");
    println!("bounds: {config:?}");
    for p in model.properties() {
        let found = checker.discovery(p.name).map(|p| p.into_actions().len());
        println!("  {}: {found:?}", p.name);
        match p.expectation {
            Expectation::Always => assert!(found.is_none(), "\"{}\" broken", p.name),
            Expectation::Sometimes if TASK_EXAMPLES.contains(&p.name) => {
                assert!(found.is_some(), "\"{}\" never reached", p.name)
            }
            _ => {}
        }
    }
}

fn caught(variant: Variant, property: &'static str) {
    let mut config = TandemConfig::ci().with_variant(variant);
    // The counterexamples need no duplicate report; a smaller space finds them sooner.
    config.duplicate_reports = 0;
    caught_with(config, property);
}

fn caught_with(config: TandemConfig, property: &'static str) {
    let variant = config.variant;
    let model = TandemModel::new(config).expect("valid config");
    let path = shortest_discovery(&model, property, 60);
    let Some(path) = path else {
        panic!("variant {variant:?} was not caught by \"{property}\"");
    };
    println!(
        "variant {variant:?} violates \"{property}\" after {} actions:\n{}",
        path.clone().into_actions().len(),
        trace::render(&path)
    );
    let last = path.last_state();
    let holds = model
        .properties()
        .into_iter()
        .find(|p| p.name == property)
        .map(|p| (p.condition)(&model, last));
    assert_eq!(
        holds,
        Some(false),
        "the trace must end in a state that violates the property"
    );
}

#[test]
fn follower_applying_frames_by_arrival_order_is_caught() {
    caught(Variant::ApplyByArrival, APPLIES_LEADER_DECISION);
}

#[test]
fn engine_without_the_redelivery_filter_is_caught() {
    caught(Variant::NoEngineDedup, NO_OUTCOME_TWICE);
}

#[test]
fn driver_confirming_a_refused_append_is_caught() {
    let config = TandemConfig::ci_tasks().with_variant(Variant::ConfirmRefusedAppend);
    caught_with(config, REVEALS_ONLY_DURABLE);
}
