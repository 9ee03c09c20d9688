//! `tandem replay --cluster-config` on a group that is already running (as `tandem up` leaves
//! it), one replay after another on the same agents.
//!
//! An engine that ends may leave frames its rank has not acknowledged: a replay's followers
//! defer acknowledgements under simulated memory pressure and stop once they applied the
//! leader's last step, and the leader seals drain steps while the slowest one catches up. The
//! next replay's followers must start where their own agent's welcome says, the first frame
//! their rank has not acknowledged (`FollowerCore::resume_step`), not at the leader's next
//! step: frames skipped there are never acknowledged, and once they fill the window the
//! leader seals nothing more while the followers wait for a step past it (docs/DESIGN.md,
//! "The window").
//!
//! The test drives one group of 2 ranks (window 8, no Redis: one epoch throughout):
//! 1. a replay of 40 synthetic requests ends clean;
//! 2. an engine of rank 0 seals steps until the window is full, acknowledging each, while no
//!    engine of rank 1 reads them: rank 1's agent now welcomes a follower a whole window
//!    before the leader's next step (the worst an earlier replay's followers can leave);
//! 3. a second replay ends clean: its rank-1 follower reads those frames first and opens the
//!    window (reading from the leader's next step, it waited for a step the leader could not
//!    seal, and the leader gave up after its window deadline, 60 s);
//! 4. a third replay right after the second ends clean too.
//!
//! Every replay runs under a deadline; a stalled one is stopped and the test fails with its
//! stderr and each rank's `/status`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tandem_client::{AgentError, ClientError, EngineClient};
use tandem_proto::ids::Step;
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::connect_engine;
use tandem_tests::{serial, tandem, ChildGuard};

/// Longest one replay of [`REQUESTS`] may take (a few seconds when nothing stalls; the
/// leader's window deadline, 60 s, ends a stalled one before this).
const RUN_DEADLINE: Duration = Duration::from_secs(150);

/// Requests per replay (synthetic workload).
const REQUESTS: usize = 40;

/// The group's window, in steps.
const WINDOW: u64 = 8;

/// Run `tandem replay --cluster-config <g> --limit REQUESTS --json` to its end and check that
/// it ended clean; its summary.
fn replay_on(g: &Group, what: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut cmd = tandem();
    cmd.arg("replay")
        .arg("--cluster-config")
        .arg(&g.config)
        .args(["--limit", &REQUESTS.to_string(), "--json"])
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"));
    let start = Instant::now();
    let mut child = ChildGuard(cmd.spawn().expect("spawn tandem replay"));
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait for tandem replay") {
            break status;
        }
        if start.elapsed() > RUN_DEADLINE {
            let status: Vec<String> = (0..g.world_size)
                .map(|r| format!("rank {r}: {:?}", g.http_get(r, "/status")))
                .collect();
            drop(child);
            panic!(
                "{what}: tandem replay did not end within {RUN_DEADLINE:?}\n{}\nstderr:\n{}",
                status.join("\n"),
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    eprintln!("{what}: {:.1} s, {status}", start.elapsed().as_secs_f64());
    assert!(
        status.success(),
        "{what}: tandem replay failed ({status}); stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let json: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .unwrap_or_else(|| panic!("{what}: no JSON summary; stdout:\n{stdout}"));
    for key in [
        "verify_failures",
        "lost_completions",
        "duplicate_completions",
        "mismatches",
    ] {
        assert_eq!(json[key].as_u64(), Some(0), "{what}: {key} in {json}");
    }
    assert_eq!(
        json["requests"].as_u64(),
        Some(REQUESTS as u64),
        "{what}: every request completed: {json}"
    );
    json
}

/// The step a follower engine of `rank` is welcomed at now (it says hello and leaves).
fn follower_welcome(g: &Group, rank: u32) -> Step {
    let c = EngineClient::connect(g.socket(rank), rank, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("rank {rank} engine connects: {e}"));
    c.welcome().next_step
}

#[test]
fn back_to_back_replays_read_the_frames_an_earlier_engine_left_unacknowledged() {
    let _serial = serial();
    let mut spec = GroupSpec::new(1, 2);
    spec.window_steps = WINDOW;
    spec.host_capacity_blocks = 8192;
    let g = Group::start(&spec);
    g.wait_ready(Duration::from_secs(60));
    let epoch = g.ready_epoch();

    let first = replay_on(&g, "first replay");
    eprintln!("first replay: {first}");

    // An engine of rank 0 seals steps, acknowledging each, until the window is full; no engine
    // of rank 1 reads them.
    let (mut leader, _pool) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 4);
    let mut s = leader.welcome().next_step;
    let refused = loop {
        match leader.end_step(s, Duration::from_millis(300)) {
            Ok(f) => {
                assert_eq!(f.step, s);
                leader.ack(s).expect("leader ack");
                s = s.next();
            }
            Err(e) => break e,
        }
    };
    match &refused {
        ClientError::Agent(AgentError::WindowFull { rank, window, .. }) => {
            assert_eq!((*rank, *window), (1, WINDOW), "{refused}");
        }
        other => panic!("expected WindowFull, got {other}"),
    }
    drop(leader);
    let resume = follower_welcome(&g, 1);
    assert_eq!(
        resume.0 + WINDOW,
        s.0,
        "rank 1's agent welcomes a follower a whole window before the leader's next step {s:?}"
    );

    let second = replay_on(&g, "second replay (rank 1 a window behind)");
    eprintln!("second replay: {second}");
    let third = replay_on(&g, "third replay, right after the second");
    eprintln!("third replay: {third}");
    assert_eq!(g.ready_epoch(), epoch, "one epoch throughout");
}
