//! Bounded waiting and fencing at the engine endpoint (docs/DESIGN.md invariants 4 and 6),
//! against real agent processes.
//!
//! - A follower engine asking for a step far beyond the leader gets the typed
//!   `AgentError::LeaderBehind` after its deadline, naming the step it wants and the step the
//!   leader has sealed, instead of hanging; the rank goes on working afterwards.
//! - A follower engine that replaces one which left frames unacknowledged (enough to fill the
//!   leader's window) is welcomed at the first of them: reading on from its welcome opens the
//!   window again, where a welcome past them left it waiting for a frame the leader could not
//!   seal (the datapath bench's 40 s stall, docs/BENCHMARKS.md).
//! - A request that names another epoch than the group's is refused `StaleEpoch` on the leader
//!   and on a follower, and is never applied (a stale `end_step` seals nothing, a stale `ack`
//!   acknowledges nothing). These go over the raw wire, since `EngineClient` always speaks the
//!   epoch its hello learned.

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use tandem_client::wire::{read_message, write_message};
use tandem_client::{AgentError, ClientError, EngineReply, EngineRequest};
use tandem_proto::ids::{Epoch, Step};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::{connect_engine, step_both};
use tandem_tests::ChildGuard;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn follower_far_ahead_gets_leader_behind_after_its_deadline() {
    let g = Group::start(&GroupSpec::new(1, 2));
    g.wait_ready(Duration::from_secs(30));
    let (mut leader, _lpool) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 4);
    let (mut follower, _fpool) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 4);
    let epoch = follower.epoch();

    // The leader seals steps 0..=2; the follower applies them.
    for s in 0..3 {
        leader.end_step(Step(s), WAIT).expect("end_step");
        leader.ack(Step(s)).expect("leader ack");
        follower.frame(Step(s), WAIT).expect("frame");
        follower.ack(Step(s)).expect("follower ack");
    }

    let deadline = Duration::from_millis(300);
    let asked = Instant::now();
    let err = follower
        .frame(Step(500), deadline)
        .expect_err("step 500 is not sealed");
    let waited = asked.elapsed();
    println!("frame(Step(500), {deadline:?}) returned after {waited:?}: {err}");
    match &err {
        ClientError::Agent(AgentError::LeaderBehind {
            rank,
            epoch: e,
            wanted,
            sealed,
        }) => {
            assert_eq!(
                (*rank, *e, *wanted, *sealed),
                (1, epoch, Step(500), Some(Step(2))),
                "{err}"
            );
        }
        other => panic!("expected LeaderBehind, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("wants step 500") && text.contains("sealed step 2"),
        "the message names both positions: {text}"
    );
    // It waited for its deadline (the agent's millisecond clock may round the start down by
    // under a millisecond), and it did return.
    assert!(
        waited >= deadline - Duration::from_millis(5),
        "returned before its deadline: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(10),
        "returned only after {waited:?}"
    );

    // The refused wait changed nothing: the next step still flows to the follower.
    let sealed = leader.end_step(Step(3), WAIT).expect("end_step 3");
    let read = follower
        .frame(Step(3), WAIT)
        .expect("frame 3 after the refused wait");
    assert_eq!(
        read, sealed,
        "the follower reads the frame the leader sealed"
    );
    follower.ack(Step(3)).expect("ack 3");
}

#[test]
fn a_new_follower_engine_resumes_at_the_first_frame_its_rank_has_not_acknowledged() {
    let g = Group::start(&GroupSpec::new(1, 2));
    g.wait_ready(Duration::from_secs(30));
    let (mut leader, _lpool) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 4);
    let (mut first, first_pool) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 4);
    step_both(&mut leader, &mut first, Step(0));
    // Rank 1's engine applies nothing more: the leader seals until its window is full.
    let mut open = 1;
    loop {
        match leader.end_step(Step(open), Duration::ZERO) {
            Ok(_) => {
                leader.ack(Step(open)).expect("leader ack");
                open += 1;
            }
            Err(ClientError::Agent(AgentError::WindowFull { .. })) => break,
            Err(e) => panic!("end_step {open}: {e}"),
        }
    }
    // That engine leaves (no task in flight: nothing fails) and a new one joins rank 1.
    drop((first, first_pool));
    let (mut second, _pool) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 4);
    let next = second.welcome().next_step;
    assert_eq!(
        next,
        Step(1),
        "welcomed at the first frame rank 1 has not acknowledged"
    );
    for s in next.0..open {
        second
            .frame(Step(s), WAIT)
            .expect("a frame the first engine left");
        second.ack(Step(s)).expect("ack");
    }
    let sealed = leader
        .end_step(Step(open), WAIT)
        .expect("the window is open again");
    assert_eq!(second.frame(Step(open), WAIT).expect("frame"), sealed);
}

/// One request over the raw engine socket; the reply.
fn call(stream: &mut UnixStream, req: &EngineRequest) -> EngineReply {
    write_message(stream, req).expect("send request");
    read_message(stream).expect("read reply")
}

fn raw(g: &Group, rank: u32) -> (UnixStream, Epoch, Step) {
    let started = Instant::now();
    let mut s = loop {
        match UnixStream::connect(g.socket(rank)) {
            Ok(s) => break s,
            Err(e) if started.elapsed() > Duration::from_secs(20) => {
                panic!("rank {rank} socket: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    match call(&mut s, &EngineRequest::hello(rank)) {
        EngineReply::Welcome {
            epoch, next_step, ..
        } => (s, epoch, next_step),
        other => panic!("rank {rank} hello: {other:?}"),
    }
}

fn expect_stale(reply: EngineReply, ours: Epoch, theirs: Epoch, what: &str) {
    match reply {
        EngineReply::Error(e @ AgentError::StaleEpoch { .. }) => {
            assert_eq!(e, AgentError::StaleEpoch { ours, theirs }, "{what}");
            let text = e.to_string();
            assert!(
                text.contains(&format!("epoch {}", theirs.0))
                    && text.contains(&format!("epoch {}", ours.0)),
                "{what}: {text}"
            );
        }
        other => panic!("{what}: expected StaleEpoch, got {other:?}"),
    }
}

#[test]
fn requests_of_another_epoch_are_refused_and_never_applied() {
    // The group runs epoch 3, as after two restarts.
    let mut g = Group::configure(&GroupSpec::new(1, 2));
    for rank in 0..2 {
        let child = g
            .agent_command(rank)
            .arg("--epoch")
            .arg("3")
            .spawn()
            .expect("spawn agent");
        g.agents.push(Some(ChildGuard(child)));
    }
    g.wait_ready(Duration::from_secs(30));
    let (mut leader, ours, next) = raw(&g, 0);
    let (mut follower, f_epoch, _) = raw(&g, 1);
    assert_eq!((ours, f_epoch, next), (Epoch(3), Epoch(3), Step(0)));
    let old = Epoch(2);

    // Leader: a stale end_step, lookup and ack are refused.
    let reply = call(
        &mut leader,
        &EngineRequest::EndStep {
            epoch: old,
            step: Step(0),
            deadline_ms: 100,
        },
    );
    expect_stale(reply, ours, old, "stale end_step");
    let reply = call(
        &mut leader,
        &EngineRequest::Lookup {
            epoch: old,
            step: Step(0),
            request: tandem_proto::ids::RequestId(1),
            block_hashes: vec![],
        },
    );
    expect_stale(reply, ours, old, "stale lookup");
    // A request from a future epoch is no more current than one from the past.
    let reply = call(
        &mut leader,
        &EngineRequest::EndStep {
            epoch: Epoch(4),
            step: Step(0),
            deadline_ms: 100,
        },
    );
    expect_stale(reply, ours, Epoch(4), "future end_step");
    // Nothing was sealed: the leader's next step is still 0, and step 0 seals now.
    match call(&mut leader, &EngineRequest::hello(0)) {
        EngineReply::Welcome { next_step, .. } => {
            assert_eq!(next_step, Step(0), "a stale end_step sealed a step")
        }
        other => panic!("hello: {other:?}"),
    }
    match call(
        &mut leader,
        &EngineRequest::EndStep {
            epoch: ours,
            step: Step(0),
            deadline_ms: 5_000,
        },
    ) {
        EngineReply::Frame(f) => assert_eq!((f.epoch, f.step), (ours, Step(0))),
        other => panic!("end_step 0 in the current epoch: {other:?}"),
    }

    // Follower: a stale frame read and a stale ack are refused; the current ones are not.
    let reply = call(
        &mut follower,
        &EngineRequest::Frame {
            epoch: old,
            step: Step(0),
            deadline_ms: 100,
        },
    );
    expect_stale(reply, ours, old, "stale frame");
    let reply = call(
        &mut follower,
        &EngineRequest::Ack {
            epoch: old,
            step: Step(0),
        },
    );
    expect_stale(reply, ours, old, "stale ack");
    let (acked, body) = acked_step(&g, 1);
    assert_eq!(
        acked,
        serde_json::Value::Null,
        "a stale ack was applied: {body}"
    );
    println!("follower status after the stale requests: {body}");
    match call(
        &mut follower,
        &EngineRequest::Frame {
            epoch: ours,
            step: Step(0),
            deadline_ms: 5_000,
        },
    ) {
        EngineReply::Frame(f) => assert_eq!((f.epoch, f.step), (ours, Step(0))),
        other => panic!("frame 0 in the current epoch: {other:?}"),
    }
    assert_eq!(
        call(
            &mut follower,
            &EngineRequest::Ack {
                epoch: ours,
                step: Step(0)
            }
        ),
        EngineReply::Acked
    );
    let (acked, body) = acked_step(&g, 1);
    assert_eq!(
        acked,
        serde_json::json!(0),
        "the current ack is applied: {body}"
    );
}

/// `rank`'s engine acknowledgement as `/status` reports it (`null` before any), and the body.
fn acked_step(g: &Group, rank: u32) -> (serde_json::Value, String) {
    let (code, body) = g.http_get(rank, "/status").expect("status answers");
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("status is JSON");
    let acked = status
        .get("agent")
        .and_then(|a| a.get("acked_step"))
        .unwrap_or_else(|| panic!("no agent.acked_step in {body}"));
    (acked.clone(), body)
}
