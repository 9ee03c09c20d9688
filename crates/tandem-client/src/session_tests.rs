//! The session against a scripted agent on a real Unix socket: each accepted connection
//! answers its requests from a list, in order, and closes when the list ends (a killed agent).

use std::os::fd::BorrowedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tandem_proto::frame::{OutcomeResult, Reconciliation, TaskOutcome, TaskStart};

use super::*;
use crate::api::{CallId, EngineReply, EngineRequest};
use crate::fdpass::{recv_with_fds, FdLedger};
use crate::wire::{decode_call, encode_call, split_message};

/// What the agent does with the next request of a connection.
enum Act {
    Reply(EngineReply),
    /// Close the connection without answering (the agent died).
    Close,
}

/// A scripted agent: requests seen as `kind (N fds)`, in order.
struct Agent {
    dir: tempfile::TempDir,
    seen: Arc<Mutex<Vec<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl Agent {
    fn start(connections: Vec<Vec<Act>>) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(dir.path().join("agent.sock")).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let thread = std::thread::spawn(move || {
            for acts in connections {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                serve(stream, acts, &log);
            }
        });
        Agent {
            dir,
            seen,
            thread: Some(thread),
        }
    }

    fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("agent.sock")
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // Unblock an accept that waits for a connection the test never made.
        let _ = UnixStream::connect(self.socket());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(stream: UnixStream, acts: Vec<Act>, log: &Mutex<Vec<String>>) {
    let (mut inbox, mut at, mut fds) = (Vec::new(), 0u64, FdLedger::default());
    let mut consumed = 0u64;
    for act in acts {
        let (req, call, n_fds) = loop {
            if let Some((range, used)) = split_message(&inbox).unwrap() {
                let (req, call) = decode_call::<EngineRequest>(&inbox[range]).unwrap();
                let mine = fds.take(consumed, consumed + used as u64);
                consumed += used as u64;
                inbox.drain(..used);
                if req == EngineRequest::FrameRing {
                    // This agent has no frame ring: every frame is read on the socket.
                    let no = EngineReply::Error(crate::api::AgentError::NotReady {
                        reason: "no frame ring".into(),
                    });
                    let bytes = encode_call(&no, call.unwrap_or(CallId::NONE)).unwrap();
                    if std::io::Write::write_all(&mut &stream, &bytes).is_err() {
                        return;
                    }
                    continue;
                }
                break (req, call, mine.fds.len());
            }
            let mut chunk = [0u8; 4096];
            match recv_with_fds(&stream, &mut chunk) {
                Ok(r) if r.bytes > 0 => {
                    inbox.extend_from_slice(&chunk[..r.bytes]);
                    at += r.bytes as u64;
                    fds.received(at, r);
                }
                _ => return,
            }
        };
        log.lock()
            .unwrap()
            .push(format!("{} ({n_fds} fds)", kind(&req)));
        match act {
            Act::Reply(reply) => {
                let bytes = encode_call(&reply, call.unwrap_or(CallId::NONE)).unwrap();
                if std::io::Write::write_all(&mut &stream, &bytes).is_err() {
                    return;
                }
            }
            Act::Close => return,
        }
    }
}

fn kind(req: &EngineRequest) -> &'static str {
    match req {
        EngineRequest::Hello { .. } | EngineRequest::HelloVersioned { .. } => "hello",
        EngineRequest::RegisterBuffer { .. } | EngineRequest::RegisterDevice { .. } => "register",
        EngineRequest::Lookup { .. } => "lookup",
        EngineRequest::Store { .. } => "store",
        EngineRequest::Load { .. } => "load",
        EngineRequest::EndStep { .. } => "end_step",
        EngineRequest::Frame { .. } => "frame",
        EngineRequest::Ack { .. } => "ack",
        EngineRequest::Bind { .. } => "bind",
        EngineRequest::Release { .. } => "release",
        EngineRequest::LoadLayerwise { .. } => "load_layerwise",
        EngineRequest::WaitLayer { .. } => "wait_layer",
        EngineRequest::FrameRing => "frame_ring",
    }
}

fn welcome(epoch: u64, rank: u32, next: u64) -> Act {
    Act::Reply(EngineReply::Welcome {
        epoch: Epoch(epoch),
        rank,
        world_size: 2,
        shard_bytes: 64,
        next_step: Step(next),
    })
}

fn reply(r: EngineReply) -> Act {
    Act::Reply(r)
}

fn refuse(e: AgentError) -> Act {
    Act::Reply(EngineReply::Error(e))
}

fn started(epoch: u64, seq: u64) -> Act {
    reply(EngineReply::Started {
        task: TaskId { epoch, seq },
    })
}

fn task_start(epoch: u64, seq: u64) -> TaskStart {
    TaskStart {
        task: TaskId { epoch, seq },
        request: RequestId(seq),
        block_hashes: vec![BlockHash::from(seq)],
        page_ids: vec![PageId(seq as u32)],
        tiers: vec![],
    }
}

fn frame(f: Frame) -> Act {
    reply(EngineReply::Frame(Box::new(f)))
}

fn quick() -> SessionConfig {
    SessionConfig {
        connect: Duration::from_secs(5),
        recovery: Duration::from_secs(5),
        retry_pause: Duration::from_millis(1),
        connect_slice: Duration::from_millis(200),
    }
}

const D: Duration = Duration::from_millis(100);

#[test]
fn a_stale_epoch_rejoins_and_frame_0_settles_every_task_once() {
    let mut f0 = Frame::empty(Epoch(1), Step(0));
    f0.stores.push(task_start(1, 0));
    let mut g0 = Frame::empty(Epoch(2), Step(0));
    g0.reconciliation = Some(Reconciliation {
        redelivered: vec![],
        aborted: vec![TaskOutcome {
            task: TaskId { epoch: 1, seq: 0 },
            kind: TaskKind::Store,
            request: RequestId(0),
            result: OutcomeResult::Aborted,
        }],
    });
    let agent = Agent::start(vec![vec![
        welcome(1, 0, 0),
        reply(EngineReply::Registered { pages: 4 }),
        started(1, 0),
        frame(f0),
        reply(EngineReply::Acked),
        started(1, 1),
        refuse(AgentError::StaleEpoch {
            ours: Epoch(2),
            theirs: Epoch(1),
        }),
        welcome(2, 0, 0),
        reply(EngineReply::Registered { pages: 4 }),
        frame(g0),
        reply(EngineReply::Acked),
    ]]);
    let mut s = EngineSession::connect(agent.socket(), 0, quick()).unwrap();
    let pool = PagePool::create_memfd("session-test", 4, 64).unwrap();
    assert_eq!(s.register_pool(&pool).unwrap(), 4);
    let h = [BlockHash::from(0u64)];
    s.store(RequestId(0), &h, &[PageId(0)]).unwrap();
    let a = s.end_step(D).unwrap();
    assert!(a.sealed_here && a.observed == Observed::default());
    assert_eq!(s.ack().unwrap(), Some(Step(0)));
    s.store(RequestId(1), &[BlockHash::from(1u64)], &[PageId(1)])
        .unwrap();
    assert_eq!(s.tasks().pending_requests(), 1);
    let e = s.end_step(D).unwrap_err();
    assert!(
        matches!(
            e,
            SessionError::NewEpoch {
                call: "end_step",
                from: Epoch(1),
                to: Epoch(2),
                ..
            }
        ),
        "{e}"
    );
    assert_eq!((s.epoch(), s.step()), (Epoch(2), Step(0)));
    let a = s.end_step(D).unwrap();
    assert_eq!(a.frame.epoch, Epoch(2));
    let settled: Vec<_> = a.observed.outcomes.iter().map(|d| d.outcome.task).collect();
    assert_eq!(settled, vec![TaskId { epoch: 1, seq: 0 }]);
    assert!(a.observed.outcomes[0].start.is_some(), "its start was seen");
    assert_eq!(
        a.observed
            .not_started
            .iter()
            .map(|r| r.task)
            .collect::<Vec<_>>(),
        vec![TaskId { epoch: 1, seq: 1 }]
    );
    assert!(a.observed.lost.is_empty());
    assert_eq!(s.ack().unwrap(), Some(Step(0)));
    let (tally, lost) = s.close();
    assert_eq!((tally.outcomes, tally.not_started, tally.lost), (1, 1, 0));
    assert!(lost.is_empty());
    assert_eq!(
        agent.seen(),
        [
            "hello (0 fds)",
            "register (1 fds)",
            "store (0 fds)",
            "end_step (0 fds)",
            "ack (0 fds)",
            "store (0 fds)",
            "end_step (0 fds)",
            "hello (0 fds)",
            "register (1 fds)",
            "end_step (0 fds)",
            "ack (0 fds)",
        ]
    );
}

#[test]
fn a_socket_broken_during_a_store_waits_for_the_new_epoch() {
    let agent = Agent::start(vec![
        vec![welcome(1, 0, 0), Act::Close],
        // The agent answers in the old epoch first: the store's effect is unknown, so the
        // session waits for the epoch the agent must start.
        vec![
            welcome(1, 0, 0),
            welcome(1, 0, 0),
            welcome(2, 0, 0),
            frame(Frame::empty(Epoch(2), Step(0))),
        ],
    ]);
    let mut s = EngineSession::connect(agent.socket(), 0, quick()).unwrap();
    let e = s
        .store(RequestId(0), &[BlockHash::from(1u64)], &[PageId(0)])
        .unwrap_err();
    assert!(
        matches!(e, SessionError::NewEpoch { call: "store", .. }),
        "{e}"
    );
    assert_eq!(s.end_step(D).unwrap().frame.epoch, Epoch(2));
    assert_eq!(
        agent.seen(),
        [
            "hello (0 fds)",
            "store (0 fds)",
            "hello (0 fds)",
            "hello (0 fds)",
            "hello (0 fds)",
            "end_step (0 fds)"
        ]
    );
}

#[test]
fn a_broken_store_in_an_epoch_that_never_ends_is_ambiguous() {
    let mut again: Vec<Act> = (0..10_000).map(|_| welcome(1, 0, 0)).collect();
    again.insert(0, welcome(1, 0, 0));
    let agent = Agent::start(vec![vec![welcome(1, 0, 0), Act::Close], again]);
    let mut cfg = quick();
    cfg.recovery = Duration::from_millis(200);
    let mut s = EngineSession::connect(agent.socket(), 0, cfg).unwrap();
    let e = s
        .load(RequestId(4), &[BlockHash::from(1u64)], &[PageId(0)])
        .unwrap_err();
    assert!(
        matches!(
            e,
            SessionError::Ambiguous {
                call: "load",
                rank: 0,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("cannot tell whether the load took effect"),
        "{e}"
    );
    drop(s);
}

#[test]
fn a_seal_whose_reply_was_lost_is_read_back() {
    let agent = Agent::start(vec![
        vec![welcome(1, 0, 0), Act::Close],
        vec![
            welcome(1, 0, 1),
            refuse(AgentError::WrongStep {
                expected: Step(1),
                got: Step(0),
            }),
            frame(Frame::empty(Epoch(1), Step(0))),
        ],
    ]);
    let mut s = EngineSession::connect(agent.socket(), 0, quick()).unwrap();
    let a = s.end_step(D).unwrap();
    assert!(!a.sealed_here);
    assert_eq!((a.frame.step, s.step()), (Step(0), Step(1)));
}

#[test]
fn a_follower_reads_by_position_and_refuses_a_frame_of_another_one() {
    let agent = Agent::start(vec![vec![
        welcome(1, 1, 3),
        refuse(AgentError::LeaderBehind {
            rank: 1,
            epoch: Epoch(1),
            wanted: Step(0),
            sealed: None,
        }),
        frame(Frame::empty(Epoch(1), Step(0))),
        frame(Frame::empty(Epoch(1), Step(5))),
        refuse(AgentError::NotReady {
            reason: "joining".into(),
        }),
        welcome(1, 1, 3),
        frame(Frame::empty(Epoch(1), Step(0))),
    ]]);
    let mut s = EngineSession::connect(agent.socket(), 1, quick()).unwrap();
    assert_eq!(s.step(), Step(0), "a follower starts at step 0");
    let e = s.next_frame(D).unwrap_err();
    assert!(
        matches!(e, SessionError::Agent(AgentError::LeaderBehind { .. })),
        "{e}"
    );
    s.next_frame(D).unwrap();
    let e = s.next_frame(D).unwrap_err();
    assert_eq!(
        e.to_string(),
        "rank 1: protocol violation in frame at step 1 of epoch 1: asked for step 1 of epoch 1, got step 5 of epoch 1"
    );
    // Not ready: hello, same epoch, ask again.
    assert_eq!(s.reread(Step(0), D).unwrap().step, Step(0));
}

#[test]
fn a_closed_descriptor_is_refused_and_the_connection_stays_usable() {
    let agent = Agent::start(vec![vec![welcome(1, 0, 0), reply(EngineReply::Acked)]]);
    let mut c = EngineClient::connect(agent.socket(), 0, Duration::from_secs(5)).unwrap();
    // A number past any descriptor limit: one just closed could be reopened by another test
    // thread before the calls below, and then the send would succeed.
    let raw = 1 << 30;
    // SAFETY: a descriptor number that is never open, only handed to calls that must refuse it.
    let closed = unsafe { BorrowedFd::borrow_raw(raw) };
    let e = c.register_buffer_fd(closed, 64, 64).unwrap_err();
    assert!(
        matches!(e, ClientError::Descriptor { fd, .. } if fd == raw),
        "{e}"
    );
    c.ack(Step(0)).unwrap();
    let mut s = EngineSession::new(c, quick());
    let e = s.register_fd(closed, 64, 64).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("cannot pass descriptor {raw} to the agent: ")),
        "{e}"
    );
    assert_eq!(agent.seen(), ["hello (0 fds)", "ack (0 fds)"]);
}

#[test]
fn a_page_past_the_registered_pool_is_refused_before_anything_is_sent() {
    let agent = Agent::start(vec![vec![
        welcome(1, 0, 0),
        reply(EngineReply::Registered { pages: 4 }),
        started(1, 0),
    ]]);
    let mut s = EngineSession::connect(agent.socket(), 0, quick()).unwrap();
    let pool = PagePool::create_memfd("range", 4, 64).unwrap();
    s.register_pool(&pool).unwrap();
    let e = s
        .store(RequestId(0), &[BlockHash::from(1u64)], &[PageId(4)])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "page 4 is out of range: the registered pool has 4 pages; nothing was sent"
    );
    s.store(RequestId(0), &[BlockHash::from(1u64)], &[PageId(3)])
        .unwrap();
    assert_eq!(
        agent.seen(),
        ["hello (0 fds)", "register (1 fds)", "store (0 fds)"]
    );
}
