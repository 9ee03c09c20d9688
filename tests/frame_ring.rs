//! The frame ring (issue 15) with real agent processes: follower engines read every sealed
//! frame from shared memory, the same frame the leader sealed, while every refusal
//! (`LeaderBehind` with both positions, `FrameExpired`) still comes from the agent over the
//! socket; and an engine whose agent died while it waited on the ring gets a typed error by
//! its deadline, not a hang on a futex.

use std::time::{Duration, Instant};

use tandem_client::{AgentError, ClientError, EngineClient};
use tandem_proto::ids::{BlockHash, RequestId, Step};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::connect_engine;
use tandem_tests::{serial, ChildGuard};

const WAIT: Duration = Duration::from_secs(10);

/// A group of `ranks` agents whose frames are retained for 16 steps.
fn group(ranks: u32) -> Group {
    let mut g = Group::configure(&GroupSpec::new(1, ranks));
    g.edit_config(
        "window_steps = 8",
        "window_steps = 8\nframe_retention_steps = 16",
    );
    for rank in 0..g.world_size {
        let child = g.agent_command(rank).spawn().expect("spawn tandem agent");
        g.agents.push(Some(ChildGuard(child)));
    }
    g.wait_ready(Duration::from_secs(30));
    g
}

#[test]
fn followers_read_sealed_frames_from_the_ring_and_refusals_from_the_socket() {
    let _one = serial();
    let g = group(2);
    let (mut leader, _lpool) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 4);
    let (follower, _fpool) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 4);
    // A second engine connection of rank 1 that only reads (the ring has many readers).
    let second = EngineClient::connect(g.socket(1), 1, WAIT).expect("second connection");
    let mut followers = vec![follower, second];
    assert!(
        leader.has_frame_ring(),
        "the leader's agent hands out its ring"
    );
    for f in &followers {
        assert!(f.has_frame_ring(), "every connection maps the ring");
    }

    const STEPS: u64 = 200;
    for s in 0..STEPS {
        // Frames with content that differs per step: a lookup of blocks nobody stored.
        if s % 3 == 0 {
            let blocks = (0..s % 5)
                .map(|b| BlockHash(u128::from(s * 10 + b + 1)))
                .collect();
            leader
                .lookup(Step(s), RequestId(s), blocks)
                .expect("lookup");
        }
        let sealed = leader.end_step(Step(s), WAIT).expect("end_step");
        leader.ack(Step(s)).expect("leader ack");
        for (i, f) in followers.iter_mut().enumerate() {
            let got = f.frame(Step(s), WAIT).expect("frame");
            assert_eq!(got, sealed, "connection {i} step {s}");
            // Positional and idempotent: asking again gives the same frame.
            assert_eq!(f.frame(Step(s), WAIT).expect("frame again"), sealed);
            if i == 0 {
                f.ack(Step(s)).expect("follower ack");
            }
        }
        // The leader's engine reads its own frames from its ring too.
        assert_eq!(leader.frame(Step(s), WAIT).expect("leader frame"), sealed);
    }
    for (i, f) in followers.iter().enumerate() {
        assert_eq!(
            f.ring_reads(),
            2 * STEPS,
            "connection {i}: every read of a sealed frame came from the ring"
        );
    }
    assert_eq!(leader.ring_reads(), STEPS);

    let f = &mut followers[0];
    let epoch = f.epoch();
    // A step the leader has not sealed: LeaderBehind by its deadline, naming both positions.
    match f.frame(Step(10_000), Duration::from_millis(200)) {
        Err(ClientError::Agent(AgentError::LeaderBehind {
            rank,
            epoch: e,
            wanted,
            sealed,
        })) => assert_eq!(
            (rank, e, wanted, sealed),
            (1, epoch, Step(10_000), Some(Step(STEPS - 1)))
        ),
        other => panic!("expected LeaderBehind, got {other:?}"),
    }
    // A deadline of 0 is answered at once, the same way.
    assert!(matches!(
        f.frame(Step(STEPS), Duration::ZERO),
        Err(ClientError::Agent(AgentError::LeaderBehind { .. }))
    ));
    // Older than the agent retains (16 steps): FrameExpired naming the oldest retained, both
    // for a step whose ring slot was reused (0) and for one the ring still holds (150).
    for old in [0, 150] {
        match f.frame(Step(old), WAIT) {
            Err(ClientError::Agent(AgentError::FrameExpired {
                epoch: e,
                wanted,
                oldest,
            })) => assert_eq!(
                (e, wanted, oldest),
                (epoch, Step(old), Step(STEPS - 16)),
                "step {old}"
            ),
            other => panic!("step {old}: expected FrameExpired, got {other:?}"),
        }
    }
    assert_eq!(f.ring_reads(), 2 * STEPS, "refusals came from the socket");

    // A frame sealed while the follower waits on the ring wakes it.
    let waiter = {
        let mut f = followers.remove(1);
        std::thread::spawn(move || {
            let got = f.frame(Step(STEPS), WAIT);
            (got, f.ring_reads())
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let sealed = leader.end_step(Step(STEPS), WAIT).expect("end_step");
    let (got, reads) = waiter.join().expect("waiter");
    assert_eq!(got.expect("the frame"), sealed);
    assert_eq!(reads, 2 * STEPS + 1);
}

#[test]
fn an_engine_whose_agent_died_gets_a_typed_error_by_its_deadline() {
    let _one = serial();
    let mut g = group(2);
    let (mut leader, _lpool) = connect_engine(&g.socket(0), &g.pool_path(0), 0, 4);
    let (mut follower, fpool) = connect_engine(&g.socket(1), &g.pool_path(1), 1, 4);
    assert!(follower.has_frame_ring());
    // A second engine connection of rank 1 that only reads.
    let mut reader = EngineClient::connect(g.socket(1), 1, WAIT).expect("second connection");
    assert!(reader.has_frame_ring());
    let sealed = leader.end_step(Step(0), WAIT).expect("end_step");
    assert_eq!(follower.frame(Step(0), WAIT).expect("frame"), sealed);
    assert_eq!(reader.frame(Step(0), WAIT).expect("frame"), sealed);

    // The follower waits on the ring for a step far ahead, with a long deadline; its agent is
    // SIGKILLed meanwhile.
    let deadline = Duration::from_secs(60);
    let waiter = std::thread::spawn(move || {
        let asked = Instant::now();
        let got = follower.frame(Step(1_000), deadline);
        let waited = asked.elapsed();
        drop(fpool);
        (got, waited, follower)
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut agent = g.agents[1].take().expect("rank 1's agent");
    agent.0.kill().expect("SIGKILL rank 1's agent");
    let _ = agent.0.wait();

    let (got, waited, mut follower) = waiter.join().expect("waiter");
    println!("frame(1000) returned after {waited:?}: {got:?}");
    match &got {
        Err(ClientError::Broken { reason }) => {
            assert!(reason.contains("closed"), "{reason}")
        }
        other => panic!("expected a broken connection, got {other:?}"),
    }
    // The contract, not a speed: the hang-up ended the wait, not the 60 s deadline.
    assert!(waited < deadline, "returned only after {waited:?}");
    // And every later call says the same.
    assert!(matches!(
        follower.frame(Step(1), Duration::from_secs(1)),
        Err(ClientError::Broken { .. })
    ));
    // As on the socket, a dead agent is an error even for a frame its ring still holds.
    match reader.frame(Step(0), WAIT) {
        Err(ClientError::Broken { reason }) => assert!(reason.contains("closed"), "{reason}"),
        other => panic!("expected a broken connection, got {other:?}"),
    }
}
