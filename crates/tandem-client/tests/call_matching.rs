//! Issue 19: every reply is matched to the call that asked for it. A stand-in agent on a real
//! Unix socket answers some calls only after the client gave up on them (late replies), some
//! in pieces torn across the client's deadline, and some with ids that belong to no call; the
//! client must return each call's own reply or a typed error, never another call's reply.
//!
//! The stand-in is the only scripted part; the client, the socket and the wire are the real
//! ones. The process-level version (a real agent SIGSTOPped mid-call) is in the workspace's
//! `tests/promises.rs`. Cases: `TANDEM_FUZZ_CASES` (default 2,000) divided by 50.

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::time::Duration;

use proptest::prelude::*;
use tandem_client::api::{AgentError, CallId, EngineReply, EngineRequest};
use tandem_client::wire::{encode, encode_call, read_call};
use tandem_client::{ClientError, EngineClient};
use tandem_proto::frame::Frame;
use tandem_proto::ids::{BlockHash, Epoch, RequestId, Step};

/// How the stand-in treats one `frame` call.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Answer at once, in one write.
    Reply,
    /// Answer at once, in two writes.
    Split,
    /// Answer only when the next request arrives (the client has timed out by then).
    Hold,
    /// Write the first part of the answer at once, the rest when the next request arrives.
    Torn,
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        3 => Just(Act::Reply),
        2 => Just(Act::Split),
        2 => Just(Act::Hold),
        2 => Just(Act::Torn)
    ]
}

fn frame_reply(step: Step) -> EngineReply {
    EngineReply::Frame(Box::new(Frame::empty(Epoch(1), step)))
}

fn welcome() -> EngineReply {
    EngineReply::Welcome {
        epoch: Epoch(1),
        rank: 1,
        world_size: 2,
        shard_bytes: 64,
        next_step: Step(0),
    }
}

/// Answer the client's `FrameRing` request (its second, after hello): this stand-in has no
/// ring, so every frame is asked on the socket.
fn refuse_ring(s: &mut std::os::unix::net::UnixStream) {
    let (req, call) = read_call::<EngineRequest>(s).expect("frame ring");
    assert_eq!(req, EngineRequest::FrameRing);
    let no = EngineReply::Error(AgentError::NotReady {
        reason: "no frame ring".into(),
    });
    s.write_all(&encode_call(&no, call.expect("an id")).expect("encodes"))
        .expect("refusal");
}

/// A listener at a fresh path and the path.
fn listener() -> (tempfile::TempDir, std::path::PathBuf, UnixListener) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("agent.sock");
    let l = UnixListener::bind(&path).expect("bind");
    (dir, path, l)
}

/// The stand-in: hello, then one scripted answer per `frame` request.
fn stand_in(l: UnixListener, acts: Vec<Act>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let (req, call) = read_call::<EngineRequest>(&mut s).expect("hello");
        assert!(matches!(req, EngineRequest::HelloVersioned { .. }));
        s.write_all(&encode_call(&welcome(), call.expect("an id")).expect("encodes"))
            .expect("welcome");
        refuse_ring(&mut s);
        let mut held: Vec<u8> = Vec::new();
        for a in acts {
            let Ok((req, call)) = read_call::<EngineRequest>(&mut s) else {
                return;
            };
            let EngineRequest::Frame { step, .. } = req else {
                panic!("{req:?}")
            };
            // What an earlier call left unsent goes first: replies keep the request order.
            if !held.is_empty() {
                let _ = s.write_all(&std::mem::take(&mut held));
            }
            let bytes = encode_call(&frame_reply(step), call.expect("an id")).expect("encodes");
            let half = bytes.len() / 2;
            let _ = match a {
                Act::Reply => s.write_all(&bytes),
                Act::Split => s.write_all(&bytes[..half]).and_then(|()| {
                    std::thread::sleep(Duration::from_millis(2));
                    s.write_all(&bytes[half..])
                }),
                Act::Hold => {
                    held = bytes;
                    Ok(())
                }
                Act::Torn => {
                    held = bytes[half..].to_vec();
                    s.write_all(&bytes[..half])
                }
            };
        }
        // Keep the connection open until the client is done with it.
        let _ = read_call::<EngineRequest>(&mut s);
    })
}

fn cases() -> u32 {
    std::env::var("TANDEM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(2_000)
        .div_ceil(50)
        .max(4)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the stand-in holds back or tears, every call returns its own frame or a
    /// timeout, and every late reply is discarded.
    #[test]
    fn every_reply_answers_its_own_call(acts in prop::collection::vec(act(), 1..24)) {
        let (_dir, path, l) = listener();
        let agent = stand_in(l, acts.clone());
        let mut c = EngineClient::connect(&path, 1, Duration::from_secs(5)).expect("connect");
        c.set_reply_slack(Duration::from_millis(30));
        let mut timed_out = 0;
        for (i, a) in acts.iter().enumerate() {
            let step = Step(i as u64);
            match (a, c.frame(step, Duration::ZERO)) {
                (Act::Reply | Act::Split, Ok(f)) => prop_assert_eq!(f.step, step),
                (Act::Hold | Act::Torn, Err(ClientError::Timeout { request: "frame", call, .. })) => {
                    // Call 1 was the hello, call 2 the frame ring.
                    prop_assert_eq!(call, CallId(i as u64 + 3));
                    timed_out += 1;
                }
                (a, r) => prop_assert!(false, "call {} ({:?}): {:?}", i, a, r),
            }
        }
        // Late replies still owed are read and dropped by the calls that followed them.
        let owed = u64::from(matches!(acts.last(), Some(Act::Hold | Act::Torn)));
        prop_assert_eq!(c.late_replies() + owed, timed_out);
        drop(c);
        agent.join().expect("stand-in");
    }
}

/// Replies that belong to no call sent break the connection with a typed error, and every
/// later call says so until a reconnect.
#[test]
fn replies_for_no_call_break_the_connection() {
    for bad in ["later", "bare", "none"] {
        let (_dir, path, l) = listener();
        let agent = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            let (_, call) = read_call::<EngineRequest>(&mut s).expect("hello");
            s.write_all(&encode_call(&welcome(), call.unwrap()).unwrap())
                .unwrap();
            refuse_ring(&mut s);
            let (_, call) = read_call::<EngineRequest>(&mut s).expect("frame");
            let call = call.unwrap();
            let bytes = match bad {
                "later" => encode_call(&frame_reply(Step(0)), CallId(call.0 + 1)),
                "bare" => encode(&frame_reply(Step(0))),
                _ => encode_call(
                    &EngineReply::Error(AgentError::BadRequest {
                        reason: "malformed".into(),
                    }),
                    CallId::NONE,
                ),
            };
            s.write_all(&bytes.unwrap()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        });
        let mut c = EngineClient::connect(&path, 1, Duration::from_secs(5)).expect("connect");
        let e = c.frame(Step(0), Duration::from_secs(1)).unwrap_err();
        match bad {
            "later" => assert_eq!(
                e.to_string(),
                format!(
                    "engine connection broken: a reply naming call 4 arrived while call 3 (frame) waited: {:?}; reconnect",
                    frame_reply(Step(0))
                )
            ),
            "bare" => assert!(
                e.to_string().contains("a reply naming no call id arrived while call 3"),
                "{e}"
            ),
            _ => assert!(
                matches!(&e, ClientError::Agent(AgentError::BadRequest { .. })),
                "{e:?}"
            ),
        }
        let again = c.ack(Step(0)).unwrap_err();
        assert!(
            matches!(again, ClientError::Broken { .. }),
            "{bad}: {again}"
        );
        agent.join().unwrap();
    }
}

/// A request the agent does not read (its socket full) ends in `Timeout` by the call's
/// deadline, not in a hang; the part left unsent goes first with the next call, and once the
/// agent reads again the connection carries on in step (the late reply is discarded).
#[test]
fn a_request_the_agent_does_not_read_times_out_and_the_connection_goes_on() {
    let (_dir, path, l) = listener();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let agent = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let (_, call) = read_call::<EngineRequest>(&mut s).expect("hello");
        s.write_all(&encode_call(&welcome(), call.unwrap()).unwrap())
            .unwrap();
        refuse_ring(&mut s);
        // Read nothing until the client's first call gave up.
        wait.recv().expect("go");
        for _ in 0..2 {
            let (req, call) = read_call::<EngineRequest>(&mut s).expect("a whole request");
            let reply = match req {
                EngineRequest::Lookup { block_hashes, .. } => {
                    EngineReply::Error(AgentError::BadRequest {
                        reason: format!("{} hashes", block_hashes.len()),
                    })
                }
                EngineRequest::Frame { step, .. } => frame_reply(step),
                other => panic!("{other:?}"),
            };
            s.write_all(&encode_call(&reply, call.unwrap()).unwrap())
                .unwrap();
        }
        let _ = read_call::<EngineRequest>(&mut s);
    });
    let mut c = EngineClient::connect(&path, 1, Duration::from_secs(5)).expect("connect");
    // Long enough for the request to be encoded (a debug build) and its first part sent.
    c.set_reply_slack(Duration::from_secs(1));
    // More than a Unix socket buffers: the write must wait for room, and cannot get it.
    let hashes: Vec<BlockHash> = (0..150_000u128).map(BlockHash).collect();
    match c.lookup(Step(0), RequestId(1), hashes) {
        Err(ClientError::Timeout {
            request: "lookup",
            call,
            ..
        }) => assert_eq!(call, CallId(3)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    go.send(()).expect("stand-in waits");
    let f = c
        .frame(Step(7), Duration::from_secs(5))
        .expect("the next call");
    assert_eq!(f.step, Step(7));
    assert_eq!(c.late_replies(), 1);
    drop(c);
    agent.join().expect("stand-in");
}
