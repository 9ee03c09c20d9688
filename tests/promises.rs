//! Issue 19, broken promises, with real processes.

use std::time::{Duration, Instant};

use tandem_client::ClientError;
use tandem_proto::ids::{BlockHash, RequestId, Step};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::connect_engine;
use tandem_tests::ChildGuard;

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child process this test started and still owns.
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

fn start_ranks(g: &mut Group, env: &[(&str, &str)]) {
    for rank in 0..g.world_size {
        let mut cmd = g.agent_command(rank);
        for (k, v) in env {
            cmd.env(k, v);
        }
        g.agents
            .push(Some(ChildGuard(cmd.spawn().expect("spawn agent"))));
    }
}

#[test]
fn a_stalled_agent_never_puts_the_client_out_of_step() {
    let mut g = Group::configure(&GroupSpec::new(1, 2));
    start_ranks(
        &mut g,
        &[("TANDEM__SUPERVISOR__HEARTBEAT_TIMEOUT_MS", "60000")],
    );
    g.wait_ready(Duration::from_secs(30));
    let (mut leader, _lp) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 4);
    let (mut follower, _fp) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 4);
    let pid = g.agents[1].as_ref().unwrap().0.id();

    // Step 0 goes through; then the follower's agent stops while its engine waits for step 1.
    let f0 = leader.end_step(Step(0), Duration::from_secs(5)).unwrap();
    leader.ack(Step(0)).unwrap();
    assert_eq!(follower.frame(Step(0), Duration::from_secs(5)).unwrap(), f0);
    follower.ack(Step(0)).unwrap();
    follower.set_reply_slack(Duration::from_millis(500));
    signal(pid, libc::SIGSTOP);
    let t = Instant::now();
    let stalled = follower.frame(Step(1), Duration::from_millis(200));
    println!("stalled call after {:?}: {stalled:?}", t.elapsed());
    assert!(
        matches!(
            stalled,
            Err(ClientError::Timeout {
                request: "frame",
                ..
            })
        ),
        "{stalled:?}"
    );
    std::thread::sleep(Duration::from_secs(2).saturating_sub(t.elapsed()));
    signal(pid, libc::SIGCONT);

    // 1,000 more calls on the same client, every reply matched to its request.
    let mut calls = 0;
    let mut s = 1u64;
    while calls < 1_000 {
        let request = RequestId(1_000_000 + s);
        let r = leader
            .lookup(Step(s), request, vec![BlockHash(s), BlockHash(s + 1)])
            .unwrap_or_else(|e| panic!("lookup in step {s}: {e}"));
        assert_eq!(r.request, request);
        let f = leader.end_step(Step(s), Duration::from_secs(5)).unwrap();
        assert_eq!(f.step, Step(s));
        leader.ack(Step(s)).unwrap();
        let got = follower
            .frame(Step(s), Duration::from_secs(5))
            .unwrap_or_else(|e| {
                panic!(
                    "call {calls}: frame {s}: {e}\n{}\n---\n{}",
                    g.log(1),
                    g.log(0)
                )
            });
        calls += 1;
        assert_eq!(got.step, Step(s), "call {calls}: the frame of another step");
        assert_eq!(got, f, "call {calls}: another frame");
        follower
            .ack(Step(s))
            .unwrap_or_else(|e| panic!("call {calls}: ack {s}: {e}"));
        calls += 1;
        s += 1;
    }
    assert_eq!(
        follower.late_replies(),
        1,
        "the stalled call's late reply was discarded"
    );
}

/// Run `rank` with `env` until it exits (at most 60 s): its status and log.
fn run_to_exit(g: &Group, rank: u32, env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let mut cmd = g.agent_command(rank);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = ChildGuard(cmd.spawn().expect("spawn agent"));
    let started = Instant::now();
    loop {
        if let Some(status) = child.0.try_wait().expect("poll agent") {
            return (status, g.log(rank));
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "rank {rank} still runs after 60 s:\n{}\n--- leader:\n{}",
            g.log(rank),
            g.log(0)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ranks_with_other_tier_capacities_are_refused_at_join() {
    let mut spec = GroupSpec::new(1, 2);
    spec.host_capacity_blocks = 64;
    spec.disk_capacity_blocks = 128;
    let mut g = Group::configure(&spec);
    let leader = g.agent_command(0).spawn().expect("spawn leader");
    g.agents.push(Some(ChildGuard(leader)));
    for (key, field, ours, theirs) in [
        (
            "TANDEM__STORE__HOST_CAPACITY_BLOCKS",
            "host_capacity_blocks",
            "64",
            "32",
        ),
        (
            "TANDEM__STORE__DISK_CAPACITY_BLOCKS",
            "disk_capacity_blocks",
            "128",
            "0",
        ),
    ] {
        let (status, log) = run_to_exit(&g, 1, &[(key, theirs)]);
        println!("follower with {key}={theirs}: {status}");
        assert!(
            !status.success(),
            "a follower with {field} {theirs} joined:\n{log}"
        );
        let want = format!(
            "configuration fingerprint differs in field {field}: leader has {ours}, rank has {theirs}"
        );
        assert!(
            log.contains(&want),
            "the refusal names {field} and both values:\n{log}"
        );
    }
    // The leader is unharmed: a follower configured like it joins.
    let follower = g.agent_command(1).spawn().expect("spawn follower");
    g.agents.push(Some(ChildGuard(follower)));
    g.wait_ready(Duration::from_secs(30));
}
