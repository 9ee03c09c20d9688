//! A follower engine that stops acknowledging stalls the leader at the window (docs/DESIGN.md,
//! "The window"), and the stall is visible, against real agent processes:
//!
//! - the leader engine's `end_step` ends in `WindowFull` naming the rank that holds the window;
//! - once the window has been full for the heartbeat timeout (1,000 ms here), rank 0's
//!   `/readyz` answers 503 with a reason naming the stall and the rank, and its metrics say
//!   so (`tandem_not_ready{reason="window_stalled"}`, `tandem_window_stalled_follower`,
//!   `tandem_window_stalls_total`);
//! - when the follower catches up, the window opens and rank 0 is ready again in the same
//!   epoch (a stall never fails the epoch).

use std::time::{Duration, Instant};

use tandem_client::{AgentError, ClientError};
use tandem_proto::ids::Step;
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::connect_engine;
use tandem_tests::http::{json, metric_in};

const WAIT: Duration = Duration::from_secs(10);

/// Poll rank 0 until `done` holds for its `/readyz` answer, for at most 30 s.
fn wait_readyz(g: &Group, what: &str, done: impl Fn(u16, &serde_json::Value) -> bool) {
    let start = Instant::now();
    loop {
        let answer = g.http_get(0, "/readyz");
        let code = answer.as_ref().map_or(0, |a| a.0);
        let body = json(answer);
        if done(code, &body) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: rank 0 /readyz answered {code} {body}\nlog:\n{}",
            g.log(0)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Rank 0's metrics once `name{label}` shows `value` (the agent copies its counters into
/// the metrics every 250 ms), for at most 30 s.
fn metrics_once(g: &Group, name: &str, label: &str, value: f64) -> String {
    let start = Instant::now();
    loop {
        let text = g.http_get(0, "/metrics").map(|a| a.1).unwrap_or_default();
        if metric_in(&text, name, label) == value {
            return text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{name}{{{label}}} never reached {value}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_follower_that_stops_acknowledging_makes_the_stall_visible_naming_its_rank() {
    let mut spec = GroupSpec::new(1, 4);
    spec.window_steps = 4;
    let g = Group::start(&spec);
    g.wait_ready(Duration::from_secs(30));
    let epoch = g.ready_epoch();
    let (mut leader, _p0) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 4);
    let (mut r1, _p1) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 4);
    let (mut r2, _p2) = connect_engine(&g.socket(2), &g.pool_path(2), 2, 4);
    let (mut r3, _p3) = connect_engine(&g.socket(3), &g.pool_path(3), 3, 4);

    // Step 0 on every rank; then rank 2's engine reads frames but stops acknowledging
    // (ranks 1 and 3 go on: the rank named is the one holding the window, not the last one).
    for s in 0..4 {
        leader.end_step(Step(s), WAIT).expect("end_step");
        leader.ack(Step(s)).expect("leader ack");
        for (r, e) in [(1, &mut r1), (3, &mut r3)] {
            e.frame(Step(s), WAIT)
                .unwrap_or_else(|err| panic!("rank {r} frame: {err}"));
            e.ack(Step(s))
                .unwrap_or_else(|err| panic!("rank {r} ack: {err}"));
        }
        r2.frame(Step(s), WAIT).expect("rank 2 frame");
        if s == 0 {
            r2.ack(Step(s)).expect("rank 2 ack");
        }
    }
    // Steps 1..=4 are four steps past rank 2's acknowledgement of step 0: step 4 is sealed,
    // step 5 is refused.
    leader.end_step(Step(4), WAIT).expect("end_step 4");
    let err = leader
        .end_step(Step(5), Duration::from_millis(300))
        .expect_err("the window holds step 5");
    println!("end_step(5): {err}");
    match &err {
        ClientError::Agent(AgentError::WindowFull {
            step,
            rank,
            slowest_ack,
            window,
        }) => assert_eq!(
            (*step, *rank, *slowest_ack, *window),
            (Step(5), 2, Some(Step(0)), 4),
            "{err}"
        ),
        other => panic!("expected WindowFull, got {other}"),
    }
    assert!(err.to_string().contains("rank 2"), "{err}");

    // After the grace (the heartbeat timeout), readiness names the stall and the rank.
    wait_readyz(&g, "the stall shows on /readyz", |code, body| {
        code == 503
            && body["reason"]
                .as_str()
                .is_some_and(|r| r.contains("window stalled: rank 2"))
    });
    let body = json(g.http_get(0, "/readyz"));
    println!("rank 0 /readyz while stalled: {body}");
    assert_eq!(body["epoch"].as_u64(), Some(epoch));
    let metrics = metrics_once(&g, "tandem_window_stalled_follower", "", 2.0);
    assert_eq!(
        metric_in(&metrics, "tandem_not_ready", "reason=\"window_stalled\""),
        1.0
    );
    assert_eq!(metric_in(&metrics, "tandem_window_stalls_total", ""), 1.0);
    assert_eq!(metric_in(&metrics, "tandem_ready", ""), 0.0);
    // Followers are not the ones stalled: their readiness is unchanged.
    for r in 1..4 {
        assert_eq!(g.http_get(r, "/readyz").map(|a| a.0), Some(200), "rank {r}");
    }

    // Rank 2 catches up: the window opens, rank 0 is ready again in the same epoch.
    for s in 1..5 {
        r2.ack(Step(s)).expect("rank 2 ack");
    }
    wait_readyz(&g, "ready again once rank 2 acknowledged", |code, _| {
        code == 200
    });
    assert_eq!(g.ready_epoch(), epoch, "a stall never restarts the group");
    let metrics = metrics_once(&g, "tandem_window_stalled_follower", "", 0.0);
    assert_eq!(metric_in(&metrics, "tandem_window_stalls_total", ""), 1.0);
    assert_eq!(
        metric_in(&metrics, "tandem_not_ready", "reason=\"window_stalled\""),
        0.0
    );
    leader.end_step(Step(5), WAIT).expect("step 5 seals now");
}
