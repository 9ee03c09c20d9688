//! The engines against an in-process fake group (see `fake_agent`): a clean run whose hit
//! ratios equal the simulator's exactly, and runs with group restarts, answered by stale
//! epochs on live connections or by broken sockets, that must verify every byte and see every
//! outcome exactly once.

mod fake_agent;

use std::time::Duration;

use fake_agent::{FakeGroup, FakeSpec};
use tandem_replay::{run_replay, ReadPattern, ReplayParams, ReplaySummary, Speed};
use tandem_trace::{SynthWorkload, TraceRecord};

fn spec(world: u32) -> FakeSpec {
    FakeSpec {
        world,
        shard_bytes: 4096,
        window: 8,
        restart_every: None,
        restarts: 0,
        break_sockets: false,
    }
}

fn replay(g: &FakeGroup, requests: usize) -> ReplaySummary {
    replay_at(g, requests, Speed::MaxRate)
}

fn replay_at(g: &FakeGroup, requests: usize, speed: Speed) -> ReplaySummary {
    let mut p = ReplayParams::new(g.sockets.clone());
    p.speed = speed;
    p.pool_dir = g.pool_dir().join("pools");
    p.pool_pages = 256;
    p.min_step_interval = Duration::ZERO;
    p.deadlines.recovery = Duration::from_secs(20);
    p.deadlines.stall = Duration::from_secs(60);
    p.follower_patterns = vec![
        ReadPattern::Pressure {
            seed: 1,
            max_stall_ms: 5,
        },
        ReadPattern::Reread { times: 2 },
        ReadPattern::Bursty {
            every: 5,
            stall_ms: 4,
        },
    ];
    let records: Vec<TraceRecord> = SynthWorkload::new(requests, 3).collect();
    let summary = run_replay(&p, records, None).unwrap_or_else(|e| panic!("replay failed: {e}"));
    println!("{summary}");
    summary
}

fn assert_clean(s: &ReplaySummary, requests: u64) {
    assert_eq!(s.requests, requests, "{s}");
    assert_eq!(s.verify_failures, 0, "{s}");
    assert_eq!(s.lost_completions, 0, "{s}");
    assert_eq!(s.duplicate_completions, 0, "{s}");
    assert_eq!(s.mismatches, 0, "{s}");
    assert!(s.blocks_verified > 0, "{s}");
}

#[test]
fn a_clean_run_verifies_every_load_and_matches_the_simulator_exactly() {
    let g = FakeGroup::start(spec(4));
    let s = replay(&g, 150);
    assert_clean(&s, 150);
    assert_eq!((s.epochs, s.restarts, s.recovery_ms_mean), (1, 0, None));
    assert!(s.blocks_loaded > 0 && s.blocks_stored > 0, "{s}");
    assert_eq!(s.token_prefix_hit_ratio, s.expected_token_prefix_hit_ratio);
    assert_eq!(s.block_prefix_hit_ratio, s.expected_block_prefix_hit_ratio);
    assert_eq!(
        s.blocks_verified,
        s.blocks_loaded * 4,
        "every rank verified every loaded block"
    );
}

#[test]
fn restarts_answered_by_stale_epochs_lose_and_duplicate_nothing() {
    let g = FakeGroup::start(FakeSpec {
        restart_every: Some(30),
        restarts: 3,
        ..spec(3)
    });
    let s = replay(&g, 150);
    assert_eq!(g.restarts_done(), 3);
    assert_clean(&s, 150);
    assert_eq!((s.epochs, s.restarts), (4, 3), "{s}");
    assert!(s.recovery_ms_mean.is_some(), "{s}");
    assert!(
        s.loads_failed + s.stores_failed > 0,
        "restarts aborted tasks in flight: {s}"
    );
}

#[test]
fn restarts_that_break_every_socket_lose_and_duplicate_nothing() {
    let g = FakeGroup::start(FakeSpec {
        restart_every: Some(20),
        restarts: 4,
        break_sockets: true,
        ..spec(4)
    });
    let s = replay(&g, 150);
    assert_eq!(g.restarts_done(), 4);
    assert_clean(&s, 150);
    assert_eq!((s.epochs, s.restarts), (5, 4), "{s}");
    assert!(
        s.loads_failed + s.stores_failed > 0,
        "restarts aborted tasks in flight: {s}"
    );
}

#[test]
fn paced_requests_follow_the_trace_timestamps() {
    let g = FakeGroup::start(spec(2));
    // 40 synthetic requests span several seconds of trace time; 100 times faster is a
    // fraction of a second, and the leader idles between arrivals instead of stepping.
    let s = replay_at(&g, 40, Speed::Factor(100.0));
    assert_clean(&s, 40);
    assert_eq!(s.token_prefix_hit_ratio, s.expected_token_prefix_hit_ratio);
}

#[test]
fn a_cancelled_run_stops_promptly_with_every_position() {
    // A group that stops answering frames after a restart that never completes would make
    // every engine wait out its recovery deadline; the caller's cancel flag ends it first.
    let g = FakeGroup::start(spec(2));
    let mut p = ReplayParams::new(g.sockets.clone());
    p.pool_dir = g.pool_dir().join("pools");
    p.speed = Speed::Factor(0.001);
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    p.cancel = Some(cancel.clone());
    let records: Vec<TraceRecord> = SynthWorkload::new(50, 3).collect();
    let flag = cancel.clone();
    let progress = move |pr: &tandem_replay::ReplayProgress| {
        if pr.requests_done >= 1 {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    };
    let err = run_replay(&p, records, Some(&progress)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "the replay was cancelled\nwhere each rank stood:\n  rank 0 (leader): epoch 1"
        ),
        "{text}"
    );
}

#[test]
fn a_single_rank_group_and_an_empty_trace_end_cleanly() {
    let g = FakeGroup::start(spec(1));
    let s = replay(&g, 30);
    assert_clean(&s, 30);
    assert_eq!(s.ranks, 1);
    let g = FakeGroup::start(spec(3));
    let s = replay(&g, 0);
    assert_eq!(
        (s.requests, s.blocks_stored, s.verify_failures, s.mismatches),
        (0, 0, 0, 0),
        "{s}"
    );
    assert!(
        s.steps >= 1,
        "the leader seals at least one step for the followers to reach: {s}"
    );
}
