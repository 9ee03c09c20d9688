//! A panic inside the StoreActor's or the ProtocolActor's handler stops the agent (never a rank
//! that looks healthy with a dead actor): the supervisor moves the group to a new epoch, the
//! rank is started again, and a replay running across it completes every request exactly once.
//!
//! The panic comes from the agent's test-only fault hook (`TANDEM_FAULT_PANIC_AT`), compiled
//! into a second binary: `cargo build -p tandem-cli --bin tandem --features fault-hooks`,
//! copied to `target/debug/tandem-fault-hooks` (scripts/test.sh does both). Without it the
//! tests print SKIPPED.

use std::process::Stdio;
use std::time::Duration;

use tandem_tests::cluster::GroupSpec;
use tandem_tests::figures::{figure, seeded};
use tandem_tests::procs::wait_exit;
use tandem_tests::redis::RedisServer;
use tandem_tests::replay::{assert_exactly_once, InProcessReplay};
use tandem_tests::supervisor::SupervisedGroup;
use tandem_tests::{serial, tandem_fault_bin, ChildGuard};

fn panic_in(actor: &str, at: u64) {
    let _serial = serial();
    let Some(fault_bin) = tandem_fault_bin() else {
        println!(
            "SKIPPED a panic in the {actor} actor: no target/debug/tandem-fault-hooks \
             (cargo build -p tandem-cli --bin tandem --features fault-hooks, then copy it there)"
        );
        return;
    };
    let redis = RedisServer::start_bound("127.0.0.1");
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = redis.url();
    spec.host_capacity_blocks = 32;
    spec.disk_capacity_blocks = 64;
    let mut c = SupervisedGroup::start_small(&spec, "info");
    let mut rng = seeded(&format!("panic-{actor}"));
    let replay = InProcessReplay::start(
        &c.group,
        (0..2).map(|r| c.group.socket(r)).collect(),
        400,
        rng.next_u64(),
    );

    // Rank 1 runs the binary with the hook, armed to panic at its actor's `at`th message.
    let old = c.supervisor_epoch().unwrap_or(0);
    if let Some(mut a) = c.group.agents[1].take() {
        let _ = a.0.kill();
        let _ = a.0.wait();
    }
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(c.group.log_path(1))
        .expect("log");
    let armed = std::process::Command::new(&fault_bin)
        .args(["agent", "--rank", "1", "--config"])
        .arg(&c.group.config)
        .env("TANDEM_FAULT_PANIC_AT", format!("{actor}:{at}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn the agent with the fault hook");
    c.group.agents[1] = Some(ChildGuard(armed));
    let epoch_armed = c.wait_epoch_after(old, Duration::from_secs(60));

    // The panic stops the agent by itself: it exits with an error.
    let status = wait_exit(
        &mut c.group.agents[1].as_mut().expect("armed agent").0,
        Duration::from_secs(120),
    );
    let text = c.group.log(1);
    assert!(
        text.contains("fault hook armed"),
        "{} has no fault hook compiled in:\n{text}",
        fault_bin.display()
    );
    let status = status.unwrap_or_else(|| {
        panic!(
            "rank 1 still runs after the {actor} actor's message {at}\n{}",
            c.diagnostics()
        )
    });
    assert!(!status.success(), "the agent exited cleanly after a panic");
    assert!(
        text.contains(&format!(
            "fault hook: {}",
            if actor == "store" {
                "Store"
            } else {
                "Protocol"
            }
        )) && text.contains("the agent stops"),
        "the log names the panic and the stop:\n{text}"
    );

    // The outer restart policy starts the rank again; the group moves on and keeps serving.
    c.kill_and_respawn(1);
    let epoch_after = c.wait_epoch_after(epoch_armed, Duration::from_secs(60));
    c.wait_ready(Duration::from_secs(60));
    let s = replay
        .finish()
        .unwrap_or_else(|e| panic!("the replay failed: {e}\n{}", c.diagnostics()));
    assert_exactly_once(&s, &format!("a panic in the {actor} actor"));
    figure(
        &format!("panic_in_{actor}_actor"),
        &[
            ("panic_at_message", at.to_string()),
            ("exit", format!("{:?}", status.code())),
            ("epochs", format!("{old}->{epoch_armed}->{epoch_after}")),
        ],
    );
}

#[test]
fn a_panic_in_the_store_actor_stops_the_rank_and_the_group_moves_to_a_new_epoch() {
    panic_in("store", 40);
}

#[test]
fn a_panic_in_the_protocol_actor_stops_the_rank_and_the_group_moves_to_a_new_epoch() {
    panic_in("protocol", 400);
}
