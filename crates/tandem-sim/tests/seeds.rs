//! The simulator in CI: thousands of seeds keep every invariant, a seed replays exactly, and
//! each deliberately broken driver is caught within the CI seeds (so the checks can fail).

use tandem_sim::{run_seed, Broken, SimConfig};

/// Seeds every `cargo test` runs.
const CI_SEEDS: u64 = 2_000;

#[test]
fn ci_seeds_keep_every_invariant() {
    let config = SimConfig::default();
    let mut failed = Vec::new();
    let (mut events, mut faults, mut outcomes) = (0, 0, 0);
    let (mut most_out, mut pipelined_refusals) = (0, 0);
    for seed in 0..CI_SEEDS {
        let run = run_seed(seed, &config);
        events += run.report.events;
        faults += run.report.faults;
        outcomes += run.report.outcomes;
        most_out = most_out.max(run.report.max_appends_out);
        pipelined_refusals += run.report.pipelined_refusals;
        if let Some(v) = run.violation {
            failed.push(format!("seed {seed}: {v}"));
        }
    }
    assert!(
        failed.is_empty(),
        "{} seeds failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
    // The runs did something: faults were injected and tasks finished.
    assert!(faults > CI_SEEDS, "faults injected: {faults}");
    assert!(outcomes > CI_SEEDS, "outcomes delivered: {outcomes}");
    // The leader had several appends out, and some were refused in the middle.
    assert!(most_out > 1, "appends out at once: {most_out}");
    assert!(
        pipelined_refusals > 0,
        "refusals with later appends out: {pipelined_refusals}"
    );
    println!("{CI_SEEDS} seeds: {events} events, {faults} faults, {outcomes} outcomes, up to {most_out} appends out, {pipelined_refusals} refused with later ones out");
}

#[test]
fn a_seed_replays_exactly() {
    let config = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    for seed in [3, 41, 977] {
        let a = run_seed(seed, &config);
        let b = run_seed(seed, &config);
        assert_eq!(a.report, b.report, "seed {seed}");
        assert_eq!(a.trace, b.trace, "seed {seed}");
        assert!(!a.trace.is_empty());
    }
}

/// The first seed in `0..CI_SEEDS` whose run breaks an invariant under `broken`, with the
/// rule broken.
fn first_caught(broken: Broken) -> Option<(u64, u8)> {
    let config = SimConfig {
        broken: Some(broken),
        ..SimConfig::default()
    };
    (0..CI_SEEDS).find_map(|seed| run_seed(seed, &config).violation.map(|v| (seed, v.rule)))
}

#[test]
fn a_follower_driver_applying_frames_by_arrival_order_is_caught() {
    let caught = first_caught(Broken::FollowerAppliesArrivalOrder);
    println!("caught: {caught:?}");
    assert!(matches!(caught, Some((_, 1))), "{caught:?}");
}

#[test]
fn a_leader_driver_revealing_before_durable_is_caught() {
    let caught = first_caught(Broken::AppendedBeforeDurable);
    println!("caught: {caught:?}");
    assert!(matches!(caught, Some((_, 2))), "{caught:?}");
}

#[test]
fn a_follower_driver_dropping_tier_operations_is_caught() {
    let caught = first_caught(Broken::FollowerSkipsTierOps);
    println!("caught: {caught:?}");
    assert!(matches!(caught, Some((_, 7))), "{caught:?}");
}

#[test]
fn a_leader_driver_answering_appends_out_of_order_is_caught() {
    let caught = first_caught(Broken::AnswersAppendsOutOfOrder);
    println!("caught: {caught:?}");
    assert!(matches!(caught, Some((_, 2))), "{caught:?}");
}
