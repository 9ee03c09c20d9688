//! The checker must fail on the FIFO protocol of SGLang's FlexKV connector: it finds the
//! `Tag mismatch: expected CMD_STORE_COMPLETE` counterexample and prints it.

use stateright::{Checker, Model};
use tandem_model::check::{bfs, shortest_discovery};
use tandem_model::flexkv::{render_trace, EvictAt, FlexKvModel, Site, Tag};

#[test]
fn checker_finds_the_flexkv_tag_mismatch() {
    let model = FlexKvModel::small();
    let (checker, report) = bfs(model.clone(), None, 1);
    println!(
        "flexkv model (leader + {} followers, {} steps, evict() before layerwise): {report}",
        model.followers, model.steps
    );

    assert!(
        checker.discovery("no tag mismatch").is_some(),
        "the checker must find a tag mismatch"
    );
    let any = shortest_discovery(&model, "no tag mismatch", 30).expect("a shortest mismatch");
    println!(
        "shortest counterexample \"no tag mismatch\" ({} actions):\n{}",
        any.clone().into_actions().len(),
        render_trace(&model, &any)
    );

    const STORE_COMPLETE: &str = "a CMD_STORE_COMPLETE receive reads CMD_STORE_COMPLETE";
    assert!(checker.discovery(STORE_COMPLETE).is_some());
    let trace = shortest_discovery(&model, STORE_COMPLETE, 30).expect("a shortest mismatch");
    let last = trace.last_state().clone();
    println!(
        "shortest counterexample \"{STORE_COMPLETE}\" ({} actions):\n{}",
        trace.clone().into_actions().len(),
        render_trace(&model, &trace)
    );
    let faults: Vec<String> = last
        .followers
        .iter()
        .filter_map(|f| f.fault)
        .map(|f| f.to_string())
        .collect();
    assert!(
        faults
            .iter()
            .any(|m| m == "Tag mismatch: expected CMD_STORE_COMPLETE, got 2"),
        "the counterexample should be the connector's error, got {faults:?}"
    );

    assert!(
        checker.discovery("every rank finishes").is_some(),
        "a clean run is reachable too"
    );
}

#[test]
fn checker_finds_a_follower_blocked_forever_when_evict_ends_the_step() {
    let model = FlexKvModel {
        followers: 2,
        steps: 2,
        evict_at: EvictAt::EndOfStep,
    };
    let (checker, report) = bfs(model.clone(), None, 1);
    println!("flexkv model, evict() at the end of the step: {report}");
    assert!(checker.discovery("no receive blocks forever").is_some());
    let blocked = shortest_discovery(&model, "no receive blocks forever", 30)
        .expect("the checker must find a follower blocked forever");
    println!(
        "shortest counterexample \"no receive blocks forever\" ({} actions):\n{}",
        blocked.clone().into_actions().len(),
        render_trace(&model, &blocked)
    );
    let last = blocked.last_state();
    assert_eq!(last.leader.site, Site::Done);
    assert!(last
        .followers
        .iter()
        .any(|f| f.awaiting() == Some(Tag::StoreComplete) && f.stream.is_empty()));
}

#[test]
fn same_pressure_everywhere_never_mismatches() {
    // Sanity of the model itself: if every rank made the same eviction decision (what Tandem's
    // leader-decides rule enforces), the stream would always be read in order.
    let model = FlexKvModel::small();
    let mut state = model.init_states().remove(0);
    for pressure in [true, false] {
        let actions = [
            tandem_model::flexkv::FlexKvAction::LeaderSend(Tag::PutMeta),
            tandem_model::flexkv::FlexKvAction::LeaderEvict { pressure },
            tandem_model::flexkv::FlexKvAction::LeaderSend(Tag::Layerwise),
        ];
        for action in actions {
            state = model
                .next_state(&state, action)
                .expect("leader action applies");
        }
        for rank in 1..=2u8 {
            use tandem_model::flexkv::FlexKvAction::*;
            state = model
                .next_state(&state, FollowerRecv { rank })
                .expect("put_meta");
            state = model
                .next_state(&state, FollowerEvict { rank, pressure })
                .expect("evict");
            if pressure {
                state = model
                    .next_state(&state, FollowerRecv { rank })
                    .expect("completion");
            }
            state = model
                .next_state(&state, FollowerRecv { rank })
                .expect("layerwise");
        }
    }
    assert!(state
        .followers
        .iter()
        .all(|f| f.fault.is_none() && f.position.site == Site::Done));
    assert!(state.followers.iter().all(|f| f.stream.is_empty()));
}
