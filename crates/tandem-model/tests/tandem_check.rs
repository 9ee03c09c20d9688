//! Exhaustive check of the Tandem model, which drives the real rank cores (`tandem-core`'s
//! `RankCore`, leader and followers) the agents run; and proof that its properties can fail: deliberately broken
//! drivers are caught by the same properties.

use stateright::{Checker, Model};
use tandem_model::check::{bfs, shortest_discovery};
use tandem_model::tandem::properties::{APPLIES_LEADER_DECISION, NO_OUTCOME_TWICE};
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

fn caught(variant: Variant, property: &'static str) {
    let mut config = TandemConfig::ci().with_variant(variant);
    // The counterexamples need no duplicate report; a smaller space finds them sooner.
    config.duplicate_reports = 0;
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
