//! The replay's engines (`tandem_replay::run_replay`, in a thread of the test) against groups
//! of real agent processes: what the engines promise whatever the group does.
//!
//! - A clean run of 4 ranks verifies every load on every rank and its hit ratios equal the
//!   simulator's exactly (the `tandem replay` command's runs on the shipped traces assert the
//!   hit ratio too: `replay_cli.rs`, `replay_*_trace`).
//! - Restarts while the replay runs lose and duplicate nothing: one follower's agent killed and
//!   started again per restart (the other ranks answer the old epoch's engines with
//!   `StaleEpoch` on their live connections), and every agent killed per restart (every
//!   engine socket breaks). The same promise under random faults: `faults.rs`
//!   (`sigstop_agents_during_a_replay`, `sigkill_agents_during_a_replay`,
//!   `engine_connections_cut_during_a_replay`) and `replay_cli.rs` (`--chaos`).
//! - Paced requests (trace time 100 times faster) end clean with the simulator's hit ratio.
//! - A cancelled run stops at once, its error naming where each rank stood.
//! - A single-rank group and an empty trace end cleanly.
//!
//! Groups without Redis run one epoch with no supervisor; the restart tests run a supervisor
//! and a `redis-server` on a free port. The tests run one at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tandem_replay::{run_replay, ReadPattern, ReplayParams, ReplaySummary, Speed};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::redis::RedisServer;
use tandem_tests::replay::InProcessReplay;
use tandem_tests::serial;
use tandem_tests::supervisor::SupervisedGroup;
use tandem_tests::ChildGuard;
use tandem_trace::{SynthWorkload, TraceRecord};

const READY: Duration = Duration::from_secs(60);

/// `world` ranks (TP), tiers large enough that nothing is evicted.
fn spec(world: u32) -> GroupSpec {
    let mut s = GroupSpec::new(1, world);
    s.host_capacity_blocks = 8192;
    s
}

/// `spec`'s group configured (2 KiB shards), with as many KV heads as its ranks need to split
/// them evenly (8, or `8 × world` when `world` does not divide 8).
fn configure(spec: &GroupSpec) -> Group {
    let g = SupervisedGroup::configure_small(spec);
    let world = spec.world_size();
    if 8 % world != 0 {
        g.edit_config("num_kv_heads = 8", &format!("num_kv_heads = {}", 8 * world));
    }
    g
}

/// A started group without Redis or supervisor (one epoch), ready.
fn group(world: u32) -> Group {
    let mut g = configure(&spec(world));
    for rank in 0..g.world_size {
        let child = g.agent_command(rank).spawn().expect("spawn tandem agent");
        g.agents.push(Some(ChildGuard(child)));
    }
    g.wait_ready(READY);
    g
}

/// The replay's parameters over `g`'s sockets: every follower read pattern, no pause
/// between steps, deadlines long enough for a restart.
fn params(g: &Group, speed: Speed) -> ReplayParams {
    let mut p = ReplayParams::new((0..g.world_size).map(|r| g.socket(r)).collect());
    p.speed = speed;
    p.pool_dir = g.path().join("pools");
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
    p
}

fn records(requests: usize) -> Vec<TraceRecord> {
    SynthWorkload::new(requests, 3).collect()
}

fn replay(g: &Group, requests: usize) -> ReplaySummary {
    replay_at(g, requests, Speed::MaxRate)
}

fn replay_at(g: &Group, requests: usize, speed: Speed) -> ReplaySummary {
    let summary = run_replay(&params(g, speed), records(requests), None)
        .unwrap_or_else(|e| panic!("replay failed: {e}"));
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
    let _serial = serial();
    let g = group(4);
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

/// Replay `requests` through a supervised group of `world` ranks and restart it `rounds`
/// times while it runs, each time once the replay is a further `requests / (rounds + 1)`
/// requests in: `every_rank` kills (and starts again) every agent, otherwise follower
/// `1 + round % (world - 1)`. Each restart waits until the group is ready in a new epoch.
fn replay_through_restarts(world: u32, requests: usize, rounds: u32, every_rank: bool) {
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut spec = spec(world);
    spec.redis_url = redis.url();
    let mut c = SupervisedGroup::start_configured(configure(&spec), "info");
    let replay = InProcessReplay::run(params(&c.group, Speed::MaxRate), records(requests));
    let mut done = 0;
    for round in 0..rounds {
        let at = (round as u64 + 1) * requests as u64 / (rounds as u64 + 1);
        while replay.progress() < at && !replay.done() {
            std::thread::sleep(Duration::from_millis(2));
        }
        if replay.done() {
            break;
        }
        let epoch = c
            .supervisor_epoch()
            .expect("the supervisor names its epoch");
        if every_rank {
            for rank in 0..world {
                c.kill_and_respawn(rank);
            }
        } else {
            c.kill_and_respawn(1 + round % (world - 1));
        }
        c.wait_epoch_after(epoch, READY);
        c.wait_ready(READY);
        done += 1;
    }
    let s = replay
        .finish()
        .unwrap_or_else(|e| panic!("replay failed: {e}\n{}", c.diagnostics()));
    println!("{s}");
    assert_eq!(done, rounds, "the replay ended before every restart: {s}");
    assert_clean(&s, requests as u64);
    assert!(s.restarts >= u64::from(rounds), "{s}");
    assert_eq!(s.epochs, s.restarts + 1, "{s}");
    assert!(s.recovery_ms_mean.is_some(), "{s}");
    assert!(
        s.loads_failed + s.stores_failed > 0,
        "restarts aborted tasks in flight: {s}"
    );
}

#[test]
fn restarts_answered_by_stale_epochs_lose_and_duplicate_nothing() {
    let _serial = serial();
    replay_through_restarts(3, 600, 3, false);
}

#[test]
fn restarts_that_break_every_socket_lose_and_duplicate_nothing() {
    let _serial = serial();
    replay_through_restarts(4, 600, 4, true);
}

#[test]
fn paced_requests_follow_the_trace_timestamps() {
    let _serial = serial();
    let g = group(2);
    // 40 synthetic requests span several seconds of trace time; 100 times faster is a
    // fraction of a second, and the leader idles between arrivals instead of stepping.
    let s = replay_at(&g, 40, Speed::Factor(100.0));
    assert_clean(&s, 40);
    assert_eq!(s.token_prefix_hit_ratio, s.expected_token_prefix_hit_ratio);
}

#[test]
fn a_cancelled_run_stops_promptly_with_every_position() {
    let _serial = serial();
    // Trace time 1000 times slower: the second request would arrive hours later; the
    // caller's cancel flag ends the run first.
    let g = group(2);
    let mut p = params(&g, Speed::Factor(0.001));
    let cancel = Arc::new(AtomicBool::new(false));
    p.cancel = Some(cancel.clone());
    let flag = cancel.clone();
    let progress = move |pr: &tandem_replay::ReplayProgress| {
        if pr.requests_done >= 1 {
            flag.store(true, Ordering::SeqCst);
        }
    };
    let err = run_replay(&p, records(50), Some(&progress)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "the replay was cancelled\nwhere each rank stood:\n  rank 0 (leader): epoch 1"
        ),
        "{text}"
    );
    assert!(text.contains("\n  rank 1"), "{text}");
}

#[test]
fn a_single_rank_group_and_an_empty_trace_end_cleanly() {
    let _serial = serial();
    let g = group(1);
    let s = replay(&g, 30);
    assert_clean(&s, 30);
    assert_eq!(s.ranks, 1);
    drop(g);
    let g = group(3);
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
