//! Checked membership (docs/DESIGN.md invariant 7) with real processes: a follower that
//! differs from its leader in protocol version, group secret or model layout is refused with a
//! message naming what differs, exits non-zero, and leaves the leader able to admit the right
//! follower. No log ever contains a group secret.

use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use tandem_tests::cluster::{Group, GroupSpec, TEST_SECRET};
use tandem_tests::ChildGuard;

/// Another secret, long enough to be accepted by the configuration.
const OTHER_SECRET: &str = "not-the-group-secret-9876543210";

/// A 1 × 2 group with only its leader running.
fn leader_only() -> Group {
    let mut g = Group::configure(&GroupSpec::new(1, 2));
    let child = g.agent_command(0).spawn().expect("spawn leader");
    g.agents.push(Some(ChildGuard(child)));
    g
}

/// Run rank 1 with `tweak` applied; wait (bounded) for it to exit and return its status and log.
fn refused_follower(g: &Group, tweak: impl FnOnce(&mut Command)) -> (ExitStatus, String) {
    let mut cmd = g.agent_command(1);
    tweak(&mut cmd);
    let mut child = ChildGuard(cmd.spawn().expect("spawn follower"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("poll follower") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the refused follower is still running after 60 s:\n{}\n--- leader:\n{}",
            g.log(1),
            g.log(0)
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, g.log(1))
}

/// Wait (bounded) until the leader's log contains `needle`; return the log.
fn leader_log_with(g: &Group, needle: &str) -> String {
    let started = Instant::now();
    loop {
        let log = g.log(0);
        if log.contains(needle) {
            return log;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "leader log never named {needle:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// After a refusal the leader is unharmed: the right follower joins and the group is ready.
fn right_follower_joins(g: &mut Group) {
    let child = g.agent_command(1).spawn().expect("spawn follower");
    g.agents.push(Some(ChildGuard(child)));
    g.wait_ready(Duration::from_secs(30));
}

fn assert_no_secret(log: &str, whose: &str) {
    for secret in [TEST_SECRET, OTHER_SECRET] {
        assert!(
            !log.contains(secret),
            "{whose} log contains a group secret:\n{log}"
        );
    }
}

#[test]
fn other_protocol_version_is_refused_naming_the_field() {
    let mut g = leader_only();
    // The previous version (before per-rank page binding), as an agent of the last release
    // speaks it.
    let old = tandem_proto::wire::handshake::PROTOCOL_VERSION - 1;
    let (status, log) = refused_follower(&g, |c| {
        c.arg("--test-protocol-version").arg(old.to_string());
    });
    println!("follower exit: {status}\n{log}");
    assert!(
        !status.success(),
        "a follower of protocol version {old} was not refused:\n{log}"
    );
    let both = format!(
        "protocol version differs: leader speaks {}, rank speaks {old}",
        tandem_proto::wire::handshake::PROTOCOL_VERSION
    );
    assert!(
        log.contains(&both),
        "the refusal names both versions ({both}):\n{log}"
    );
    let leader = leader_log_with(&g, "protocol version");
    assert!(
        leader.contains("refused"),
        "the leader logs the refusal:\n{leader}"
    );
    right_follower_joins(&mut g);
}

#[test]
fn wrong_group_secret_is_refused_and_never_logged() {
    let mut g = leader_only();
    let (status, log) = refused_follower(&g, |c| {
        c.env("TANDEM__GROUP__SECRET", OTHER_SECRET);
    });
    println!("follower exit: {status}\n{log}");
    assert!(
        !status.success(),
        "a follower with another secret was not refused:\n{log}"
    );
    assert!(
        log.contains("bad group secret"),
        "the refusal names the secret:\n{log}"
    );
    let leader = leader_log_with(&g, "bad group secret");
    assert!(
        leader.contains("refused"),
        "the leader logs the refusal:\n{leader}"
    );
    assert_no_secret(&log, "follower");
    assert_no_secret(&leader, "leader");
    right_follower_joins(&mut g);
    assert_no_secret(&g.log(0), "leader");
    assert_no_secret(&g.log(1), "follower");
}

#[test]
fn other_model_layout_is_refused_naming_the_field() {
    let mut g = leader_only();
    let (status, log) = refused_follower(&g, |c| {
        c.env("TANDEM__GROUP__TOKENS_PER_BLOCK", "32");
    });
    println!("follower exit: {status}\n{log}");
    assert!(
        !status.success(),
        "a follower with 32 tokens per block was not refused:\n{log}"
    );
    assert!(
        log.contains("fingerprint differs in field tokens_per_block")
            && log.contains("leader has 16, rank has 32"),
        "the refusal names the field and both values:\n{log}"
    );
    let leader = leader_log_with(&g, "tokens_per_block");
    assert!(
        leader.contains("refused"),
        "the leader logs the refusal:\n{leader}"
    );
    right_follower_joins(&mut g);
}
