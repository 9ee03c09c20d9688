use super::*;
use tandem_proto::ids::{Epoch, Step};

fn positions() -> Positions {
    Positions(vec![
        RankPosition {
            rank: 0,
            epoch: Some(3),
            applied: Some(812),
            doing: "sealing step 813".into(),
        },
        RankPosition {
            rank: 1,
            epoch: Some(3),
            applied: None,
            doing: String::new(),
        },
        RankPosition {
            rank: 2,
            epoch: None,
            applied: None,
            doing: "connecting".into(),
        },
    ])
}

#[test]
fn sched_error_messages() {
    let cases: Vec<(SchedError, &str)> = vec![
        (
            SchedError::UnknownRequest { request: 4 },
            "request 4 is not in flight",
        ),
        (
            SchedError::DuplicateRequest { request: 4 },
            "request 4 was admitted twice",
        ),
        (
            SchedError::NotAdmissible {
                request: 4,
                why: "InFlightFull".into(),
            },
            "request 4 cannot be admitted now: InFlightFull",
        ),
        (
            SchedError::KindMismatch {
                task: TaskId { epoch: 2, seq: 9 },
                started: TaskKind::Load,
                outcome: TaskKind::Store,
            },
            "task 2.9: the engine started a load, the outcome is for a store",
        ),
        (
            SchedError::Pages(PageError::DoubleFree { page: 3 }),
            "page 3 was freed twice",
        ),
        (
            SchedError::Transition {
                request: 1,
                role: Role::Recompute,
                what: "planned twice",
            },
            "request 1: recompute planned twice",
        ),
    ];
    for (err, text) in cases {
        assert_eq!(err.to_string(), text);
    }
}

#[test]
fn engine_error_messages_name_rank_and_position() {
    let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no socket");
    let e = EngineError::Join {
        rank: 2,
        waited_ms: 30000,
        source: ClientError::Connect {
            path: "/tmp/r2.sock".into(),
            waited_ms: 30000,
            source: io,
        },
    };
    assert_eq!(e.to_string(), "rank 2: cannot join the group within 30000 ms: cannot connect to agent at /tmp/r2.sock within 30000 ms: no socket");
    let e = EngineError::Pool {
        rank: 1,
        source: PagePoolError::Empty {
            pages: 0,
            page_size_bytes: 8,
        },
    };
    assert_eq!(e.to_string(), "rank 1: page pool must have at least one page of at least one byte (got 0 pages of 8 bytes)");
    let e = EngineError::WorldSize {
        rank: 0,
        agent: 4,
        given: 2,
    };
    assert_eq!(
        e.to_string(),
        "rank 0: the agent reports a world size of 4, the replay was given 2 engine sockets"
    );
    let e = EngineError::Refused {
        rank: 1,
        call: "frame",
        epoch: 2,
        step: 5,
        source: AgentError::FrameExpired {
            epoch: Epoch(2),
            wanted: Step(5),
            oldest: Step(9),
        },
    };
    assert_eq!(e.to_string(), "rank 1: the agent refused frame at step 5 of epoch 2: frame expired: step 5 of epoch 2 is older than the oldest retained step 9");
    let e = EngineError::Protocol {
        rank: 1,
        call: "frame",
        epoch: 2,
        step: 5,
        detail: "asked for step 5, got step 6".into(),
    };
    assert_eq!(
        e.to_string(),
        "rank 1: protocol violation in frame at step 5 of epoch 2: asked for step 5, got step 6"
    );
    let e = EngineError::Rejoin {
        rank: 3,
        call: "ack",
        epoch: 4,
        step: 17,
        waited_ms: 60000,
        last: "not ready: rank 1 has not joined".into(),
    };
    assert_eq!(e.to_string(), "rank 3: could not rejoin the group within 60000 ms after ack failed at step 17 of epoch 4; last error: not ready: rank 1 has not joined");
    let e = EngineError::Ambiguous {
        rank: 0,
        call: "store",
        epoch: 4,
        step: 17,
        waited_ms: 60000,
    };
    assert_eq!(e.to_string(), "rank 0: the connection broke during store at step 17 of epoch 4 and the group stayed in epoch 4 for 60000 ms: cannot tell whether the store took effect");
    let e = EngineError::SealTimeout {
        epoch: 1,
        step: 20,
        waited_ms: 9000,
        last: AgentError::WindowFull {
            step: Step(20),
            rank: 1,
            slowest_ack: Some(Step(11)),
            window: 8,
        },
    };
    assert_eq!(e.to_string(), "rank 0: could not seal step 20 of epoch 1 within 9000 ms: window full: cannot seal step 20; slowest follower rank 1 acknowledged step 11, window is 8 steps");
    let e = EngineError::PoolTooSmall {
        request: 12,
        blocks: 400,
        pages: 256,
    };
    assert_eq!(
        e.to_string(),
        "rank 0: request 12 has 400 blocks but the page pool has 256 pages; raise pool_pages"
    );
    let e = EngineError::Scheduler {
        epoch: 1,
        step: 2,
        source: SchedError::LookupTwice { request: 5 },
    };
    assert_eq!(
        e.to_string(),
        "rank 0 at step 2 of epoch 1: request 5: the lookup was answered twice"
    );
    assert_eq!(
        EngineError::Stopped { rank: 2 }.to_string(),
        "rank 2: stopped because the run was stopped"
    );
}

#[test]
fn replay_error_messages_list_every_rank() {
    let e = ReplayError::Stalled {
        waited_ms: 120000,
        positions: positions(),
    };
    assert_eq!(
        e.to_string(),
        "no progress for 120000 ms\nwhere each rank stood:\n  rank 0 (leader): epoch 3, applied step 812; sealing step 813\n  rank 1 (follower): epoch 3, no step applied\n  rank 2 (follower): not joined; connecting"
    );
    let e = ReplayError::Engine {
        source: EngineError::Stopped { rank: 1 },
        positions: Positions(vec![RankPosition::default()]),
    };
    assert_eq!(e.to_string(), "rank 1: stopped because the run was stopped\nwhere each rank stood:\n  rank 0 (leader): not joined");
    assert_eq!(
        ReplayError::Params("no sockets".into()).to_string(),
        "bad replay parameters: no sockets"
    );
    let e = ReplayError::Cancelled {
        positions: Positions(vec![RankPosition::default()]),
    };
    assert_eq!(
        e.to_string(),
        "the replay was cancelled\nwhere each rank stood:\n  rank 0 (leader): not joined"
    );
    let e = ReplayError::Spawn {
        rank: 1,
        source: std::io::Error::other("no threads"),
    };
    assert_eq!(
        e.to_string(),
        "cannot start the engine thread of rank 1: no threads"
    );
    let e = ReplayError::Panicked {
        rank: 0,
        message: "boom".into(),
    };
    assert_eq!(e.to_string(), "the engine thread of rank 0 panicked: boom");
}
