//! Bad input against real processes (docs/RELIABILITY.md): garbage, huge length headers and truncated
//! messages on a live agent's engine socket and on the leader's peer port; malformed HTTP
//! requests to an agent and to the supervisor; malformed trace lines through `tandem replay`;
//! configuration files and environment variables with wrong types or unknown keys.
//!
//! After every bad input the process must still be up (`/healthz` 200), the group still ready
//! in the same epoch, and a later valid client must be served. Rounds of random garbage per
//! port: `TANDEM_BAD_INPUT_ROUNDS` (default 12; `scripts/fault-suite.sh` runs 500).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tandem_client::wire::{read_message, write_message, MAX_MESSAGE_BYTES};
use tandem_client::{AgentError, EngineReply, EngineRequest};
use tandem_proto::ids::Step;
use tandem_proto::wire::{HEADER_LEN, MAGIC, WIRE_VERSION};
use tandem_tests::cluster::{http_get, Group, GroupSpec};
use tandem_tests::engines::{connect_engine, Rng};
use tandem_tests::figures::{bad_input_rounds, figure};
use tandem_tests::procs::pid_rss_kib;
use tandem_tests::{free_port, serial, tandem, ChildGuard};

const READY: Duration = Duration::from_secs(30);
/// How long a process may take to close a connection it must close (a generous bound, not a
/// timing assertion: a hang fails the test instead of stalling CI).
const CLOSE_WITHIN: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------------------------
// Helpers.

fn healthz(g: &Group, rank: u32) {
    let answer = g.http_get(rank, "/healthz");
    assert!(
        matches!(answer, Some((200, _))),
        "rank {rank} /healthz: {answer:?}\nlog:\n{}",
        g.log(rank)
    );
}

/// A fresh engine on every rank runs one step: the leader seals it, the followers read it.
fn valid_step(g: &Group, tag: &str) {
    let mut clients = Vec::new();
    for r in 0..g.world_size {
        let pool = g.path().join(format!("pool-{tag}-{r}"));
        clients.push(connect_engine(&g.socket(r), &pool, r, 4));
    }
    let next = clients[0].0.welcome().next_step;
    let sealed = clients[0]
        .0
        .end_step(next, Duration::from_secs(10))
        .unwrap_or_else(|e| {
            panic!(
                "{tag}: end_step {next:?}: {e}\n--- rank 0 log:\n{}\n--- rank 1 log:\n{}",
                g.log(0),
                g.log(1)
            )
        });
    clients[0].0.ack(next).expect("leader ack");
    for (r, (c, _)) in clients.iter_mut().enumerate().skip(1) {
        let f = c
            .frame(next, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{tag}: rank {r} frame {next:?}: {e}"));
        assert_eq!(f, sealed, "{tag}: rank {r} reads the sealed frame");
        c.ack(next).expect("follower ack");
    }
}

/// Read from `s` until the peer closes it; the bytes. Panics if it stays open past
/// [`CLOSE_WITHIN`].
fn read_to_close<S: Read>(s: &mut S, what: &str) -> Vec<u8> {
    let started = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                assert!(
                    started.elapsed() < CLOSE_WITHIN,
                    "{what}: the connection is still open after {:?}",
                    started.elapsed()
                );
            }
            Err(_) => return out, // reset by the peer: closed too
        }
    }
}

fn engine_stream(g: &Group, rank: u32) -> UnixStream {
    let s = UnixStream::connect(g.socket(rank))
        .unwrap_or_else(|e| panic!("rank {rank} engine socket: {e}"));
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("read timeout");
    s
}

/// Every reply the agent sent before closing: each must be a well-formed `EngineReply`.
fn replies(bytes: &[u8], what: &str) -> Vec<EngineReply> {
    let mut r = bytes;
    let mut out = Vec::new();
    while !r.is_empty() {
        out.push(read_message::<EngineReply>(&mut r).unwrap_or_else(|e| {
            panic!("{what}: the agent answered bytes that are not a reply: {e}")
        }));
    }
    out
}

fn bad_request(reply: &EngineReply) -> Option<&str> {
    match reply {
        EngineReply::Error(AgentError::BadRequest { reason }) => Some(reason),
        _ => None,
    }
}

fn peer_stream(addr: &str) -> TcpStream {
    let s =
        TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to the leader at {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("read timeout");
    s
}

fn envelope_header(claimed: u32) -> Vec<u8> {
    let mut h = Vec::from(MAGIC);
    h.extend_from_slice(&WIRE_VERSION.to_be_bytes());
    h.extend_from_slice(&claimed.to_be_bytes());
    h
}

// ---------------------------------------------------------------------------------------------
// Engine socket.

#[test]
fn engine_socket_garbage_leaves_the_agent_serving() {
    let _serial = serial();
    let g = Group::start(&GroupSpec::new(1, 2));
    g.wait_ready(READY);
    let epoch = g.ready_epoch();
    valid_step(&g, "before");
    let limit = MAX_MESSAGE_BYTES;

    for rank in 0..g.world_size {
        // A header over the limit: refused by name before any payload is read, then closed.
        for claimed in [limit as u32 + 1, u32::MAX] {
            let mut s = engine_stream(&g, rank);
            s.write_all(&claimed.to_be_bytes()).expect("send header");
            // The agent may already have refused and closed: a failed write is fine here.
            let _ = s.write_all(&[0u8; 32]);
            let got = replies(&read_to_close(&mut s, "huge header"), "huge header");
            let reason = got
                .first()
                .and_then(bad_request)
                .unwrap_or_else(|| panic!("rank {rank}: header claiming {claimed}: {got:?}"));
            assert_eq!(
                reason,
                format!("message too large: header claims {claimed} bytes, limit is {limit}")
            );
        }
        // An HTTP request on the engine socket: its first four bytes read as a huge length.
        let mut s = engine_stream(&g, rank);
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("send");
        let got = replies(
            &read_to_close(&mut s, "http on engine socket"),
            "http on engine socket",
        );
        assert!(
            got.first()
                .and_then(bad_request)
                .is_some_and(|r| r.starts_with("message too large")),
            "rank {rank}: {got:?}"
        );
        // A payload that is not a request: malformed, then closed.
        let mut s = engine_stream(&g, rank);
        s.write_all(&[0, 0, 0, 6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
            .expect("send");
        let got = replies(
            &read_to_close(&mut s, "malformed payload"),
            "malformed payload",
        );
        assert!(
            got.first()
                .and_then(bad_request)
                .is_some_and(|r| r.starts_with("malformed message")),
            "rank {rank}: {got:?}"
        );
        // A valid request followed by garbage: the request is answered, the garbage ends it.
        let mut s = engine_stream(&g, rank);
        write_message(&mut s, &EngineRequest::hello(rank)).expect("hello");
        let _ = s.write_all(&[0, 0, 0, 2, 0xee, 0xee]);
        let got = replies(
            &read_to_close(&mut s, "hello then garbage"),
            "hello then garbage",
        );
        assert!(
            matches!(got.first(), Some(EngineReply::Welcome { .. })),
            "rank {rank}: {got:?}"
        );
        assert!(
            got.get(1).and_then(bad_request).is_some(),
            "rank {rank}: {got:?}"
        );
        // A truncated message: the header promises 100 bytes, 10 arrive, the engine goes away.
        let mut s = engine_stream(&g, rank);
        s.write_all(&100u32.to_be_bytes()).expect("send");
        s.write_all(&[1u8; 10]).expect("send");
        s.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let got = read_to_close(&mut s, "truncated");
        assert!(
            got.is_empty(),
            "rank {rank}: a truncated request was answered: {got:?}"
        );
        // Seeded random garbage; the writer then closes its side.
        let mut rng = Rng::new(0xbad0 + u64::from(rank));
        let mut answered = 0;
        for _ in 0..bad_input_rounds() {
            let n = rng.range(1, 300) as usize;
            let mut bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            if rng.chance(0.5) {
                // A plausible length, so that the payload parser is reached.
                let len = rng.range(0, n as u64 + 8) as u32;
                bytes.splice(0..0, len.to_be_bytes());
            }
            let mut s = engine_stream(&g, rank);
            let _ = s.write_all(&bytes);
            let _ = s.shutdown(std::net::Shutdown::Write);
            answered += replies(&read_to_close(&mut s, "random garbage"), "random garbage").len();
        }
        println!(
            "rank {rank}: {} random garbage connections, {answered} replies (all well-formed)",
            bad_input_rounds()
        );
        healthz(&g, rank);
        figure(
            "engine_socket_garbage",
            &[
                ("rank", rank.to_string()),
                ("fixed_cases", "7".into()),
                ("random_connections", bad_input_rounds().to_string()),
                ("replies_all_well_formed", answered.to_string()),
                ("healthz", "200".into()),
            ],
        );
    }
    assert_eq!(
        g.ready_epoch(),
        epoch,
        "bad input on an engine socket moved the group to another epoch"
    );
    valid_step(&g, "after");
}

/// Connections that send only a 4-byte header claiming the largest allowed payload
/// (`MAX_MESSAGE_BYTES`, 64 MiB) and then wait. Each is within the limit, so none is refused;
/// the agent must still go on serving its group (heartbeats, frames) and its engine.
///
/// Prints the agent's resident memory before and while the connections are held.
#[test]
fn idle_connections_claiming_the_largest_message_leave_the_group_serving() {
    let _serial = serial();
    let g = Group::start(&GroupSpec::new(1, 2));
    g.wait_ready(READY);
    let epoch = g.ready_epoch();
    valid_step(&g, "before");
    let limit = MAX_MESSAGE_BYTES;
    let connections = 16;
    let pid = g.agents[1].as_ref().expect("rank 1 runs").0.id();
    let before = pid_rss_kib(pid);
    let held: Vec<UnixStream> = (0..connections)
        .map(|_| {
            let mut s = engine_stream(&g, 1);
            s.write_all(&(limit as u32).to_be_bytes())
                .expect("send header");
            s
        })
        .collect();
    // Longer than the heartbeat timeout (1000 ms), so a stalled rank is noticed.
    let mut peak = before;
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(2500) {
        peak = peak.max(pid_rss_kib(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("\nFIGURE fault=engine_socket_idle_max_headers connections={connections} claimed_bytes={limit} rss_before_kib={before} rss_peak_kib={peak} growth_kib={}", peak.saturating_sub(before));
    healthz(&g, 1);
    assert_eq!(
        g.ready_epoch(),
        epoch,
        "idle engine connections moved the group to another epoch"
    );
    valid_step(&g, "while-held");
    drop(held);
    healthz(&g, 1);
    assert_eq!(g.ready_epoch(), epoch);
    valid_step(&g, "after-held");
}

// ---------------------------------------------------------------------------------------------
// Peer port.

#[test]
fn peer_port_garbage_leaves_the_group_serving() {
    let _serial = serial();
    let g = Group::start(&GroupSpec::new(1, 2));
    g.wait_ready(READY);
    let epoch = g.ready_epoch();
    let addr = g.leader_addr();
    let challenge_len = HEADER_LEN + 1 + 32;

    // Each of these is answered with the challenge, then the connection is closed.
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "an HTTP request",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        ("a header over the limit", {
            let mut b = envelope_header(u32::MAX);
            b.extend_from_slice(&[0u8; 64]);
            b
        }),
        ("another wire version", {
            let mut b = Vec::from(MAGIC);
            b.extend_from_slice(&(WIRE_VERSION + 1).to_be_bytes());
            b.extend_from_slice(&4u32.to_be_bytes());
            b.extend_from_slice(&[0u8; 4]);
            b
        }),
        ("a malformed payload", {
            let mut b = envelope_header(6);
            b.extend_from_slice(&[0xff; 6]);
            b
        }),
        ("a message that is not a hello", {
            let ack = tandem_proto::wire::Message::Ack(tandem_proto::wire::Ack {
                epoch: tandem_proto::ids::Epoch(epoch),
                rank: tandem_proto::ids::Rank(1),
                step: Step(0),
            });
            tandem_proto::wire::encode(&ack)
        }),
    ];
    for (what, bytes) in &cases {
        let mut s = peer_stream(&addr);
        s.write_all(bytes).expect("send");
        let got = read_to_close(&mut s, what);
        assert_eq!(
            got.len(),
            challenge_len,
            "{what}: only the challenge is sent before the close: {} bytes",
            got.len()
        );
    }
    // A truncated message, the sender gone; and one whose sender stays silent: both end by the
    // handshake deadline at the latest.
    let mut s = peer_stream(&addr);
    s.write_all(&envelope_header(100)).expect("send");
    s.write_all(&[0u8; 10]).expect("send");
    s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    read_to_close(&mut s, "truncated hello");
    let mut silent: Vec<TcpStream> = (0..16).map(|_| peer_stream(&addr)).collect();
    let mut partial = peer_stream(&addr);
    partial.write_all(&envelope_header(100)).expect("send");
    let t = Instant::now();
    for s in silent.iter_mut() {
        read_to_close(s, "silent peer");
    }
    read_to_close(&mut partial, "partial hello");
    let closed_after = t.elapsed();
    println!("16 silent peers and one partial hello were closed after {closed_after:?} (handshake_timeout_ms = 2000)");
    // Seeded random garbage.
    let mut rng = Rng::new(0x9ee7);
    for _ in 0..bad_input_rounds() {
        let n = rng.range(1, 300) as usize;
        let mut bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
        if rng.chance(0.5) {
            let len = rng.range(0, n as u64 + 8) as u32;
            bytes.splice(0..0, envelope_header(len));
        }
        let mut s = peer_stream(&addr);
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        read_to_close(&mut s, "random garbage");
    }
    let log = g.log(0);
    for reason in [
        "bad magic",
        "message too large",
        "unsupported wire version",
        "malformed payload",
        "expected hello, got ack",
    ] {
        assert!(
            log.contains(reason),
            "rank 0's log names the refusal {reason:?}:\n{log}"
        );
    }
    healthz(&g, 0);
    healthz(&g, 1);
    assert_eq!(
        g.ready_epoch(),
        epoch,
        "bad input on the peer port moved the group to another epoch"
    );
    valid_step(&g, "after");
    figure(
        "peer_port_garbage",
        &[
            ("fixed_cases", (cases.len() + 1).to_string()),
            ("silent_connections", "17".into()),
            ("closed_after_ms", closed_after.as_millis().to_string()),
            ("random_connections", bad_input_rounds().to_string()),
            ("epoch_unchanged", "yes".into()),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// HTTP.

/// Send raw bytes to an HTTP port; the status code of the answer (`None`: closed without one).
fn raw_http(addr: &str, bytes: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let got = read_to_close(&mut s, "http");
    let text = String::from_utf8_lossy(&got);
    text.strip_prefix("HTTP/1.")?.get(2..5)?.parse().ok()
}

fn http_cases() -> Vec<(&'static str, Vec<u8>, &'static [u16])> {
    let big_header = {
        let mut b = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
        b.extend(std::iter::repeat_n(b'a', 1 << 20));
        b.extend_from_slice(b"\r\n\r\n");
        b
    };
    let many_headers = {
        let mut b = b"GET /healthz HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..5000 {
            b.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
        }
        b.extend_from_slice(b"\r\n");
        b
    };
    let long_path = {
        let mut b = b"GET /".to_vec();
        b.extend(std::iter::repeat_n(b'p', 100_000));
        b.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
        b
    };
    // (what, bytes, acceptable status codes; an empty list means "closed without an answer is
    // fine too, and any 4xx").
    vec![
        (
            "garbage request line",
            b"\x00\x01\x02\xff garbage\r\n\r\n".to_vec(),
            &[],
        ),
        (
            "unknown method",
            b"BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            &[404, 405],
        ),
        (
            "unknown path",
            b"GET /no/such/path HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            &[404],
        ),
        (
            "POST to /healthz",
            b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".to_vec(),
            &[404, 405],
        ),
        (
            "DELETE /status",
            b"DELETE /status HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            &[404, 405],
        ),
        ("1 MiB header", big_header, &[]),
        ("5,000 headers", many_headers, &[]),
        ("100 kB path", long_path, &[]),
        ("HTTP/0.9 request", b"GET /\r\n\r\n".to_vec(), &[]),
        (
            "absurd content length",
            b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n"
                .to_vec(),
            &[],
        ),
        (
            "broken chunked body",
            b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
                .to_vec(),
            &[],
        ),
        ("truncated request", b"GET /heal".to_vec(), &[]),
        (
            "bad HTTP version",
            b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n".to_vec(),
            &[],
        ),
    ]
}

fn check_http_port(name: &str, addr: &str) {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let port: u16 = port.parse().expect("port");
    let alive = || {
        let a = http_get((host, port), "/healthz");
        assert!(
            matches!(a, Some((200, _))),
            "{name} /healthz after bad input: {a:?}"
        );
    };
    alive();
    let mut codes = Vec::new();
    for (what, bytes, allowed) in http_cases() {
        let code = raw_http(addr, &bytes);
        println!("{name}: {what}: {code:?}");
        codes.push(format!(
            "{}:{}",
            what.replace(' ', "-"),
            code.map_or("closed".into(), |c| c.to_string())
        ));
        match (code, allowed.is_empty()) {
            (None, true) => {}
            (Some(c), true) => assert!((400..500).contains(&c), "{name}: {what}: answered {c}"),
            (c, false) => assert!(
                c.is_some_and(|c| allowed.contains(&c)),
                "{name}: {what}: answered {c:?}, expected one of {allowed:?}"
            ),
        }
        alive();
    }
    // Slow clients: 32 connections that sent half a request and wait; the port still answers.
    let held: Vec<TcpStream> = (0..32)
        .map(|_| {
            let mut s = TcpStream::connect(addr).expect("connect");
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHo");
            s
        })
        .collect();
    alive();
    drop(held);
    alive();
    // The documented endpoints still answer.
    for path in ["/readyz", "/status", "/metrics", "/"] {
        let a = http_get((host, port), path);
        assert!(matches!(a, Some((200 | 503, _))), "{name} {path}: {a:?}");
    }
    figure(
        "malformed_http",
        &[
            ("port", name.replace(' ', "-")),
            ("answers", codes.join(",")),
            ("slow_clients_held", "32".into()),
            ("healthz_after_each", "200".into()),
        ],
    );
}

#[test]
fn malformed_http_leaves_agent_and_supervisor_serving() {
    let _serial = serial();
    let g = Group::start(&GroupSpec::new(1, 2));
    g.wait_ready(READY);
    let epoch = g.ready_epoch();
    check_http_port("agent rank 0", &format!("127.0.0.1:{}", g.http_base_port));
    check_http_port(
        "agent rank 1",
        &format!("127.0.0.1:{}", g.http_base_port + 1),
    );
    assert_eq!(g.ready_epoch(), epoch);

    // The supervisor serves HTTP while it looks for Redis: point it at a port nobody listens on.
    let text = std::fs::read_to_string(&g.config).expect("config");
    let sup = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("http_addr = "))
        .map(|v| v.trim_matches('"').to_string())
        .expect("http_addr");
    let log = std::fs::File::create(g.path().join("supervisor.log")).expect("log");
    let child = tandem()
        .arg("supervisor")
        .arg("--config")
        .arg(&g.config)
        .env(
            "TANDEM__REDIS__URL",
            format!("redis://127.0.0.1:{}", free_port()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn supervisor");
    let _sup = ChildGuard(child);
    let (host, port) = sup.rsplit_once(':').expect("host:port");
    let port: u16 = port.parse().expect("port");
    let started = Instant::now();
    while !matches!(http_get((host, port), "/healthz"), Some((200, _))) {
        assert!(
            started.elapsed() < READY,
            "the supervisor's HTTP port never answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    check_http_port("supervisor", &sup);
}

// ---------------------------------------------------------------------------------------------
// Trace lines.

fn trace_file(dir: &std::path::Path) -> std::path::PathBuf {
    let mut bytes = Vec::new();
    for l in [
        r#"{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}"#,
        r#"{"timestamp": 1, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2"#,
        r#"[1, 2, 3]"#,
        r#"{"timestamp": 2, "input_length": 512, "output_length": 10}"#,
        r#"{"timestamp": 3, "input_length": "many", "output_length": 10, "hash_ids": [5]}"#,
        r#"{"timestamp": 4, "input_length": 1024, "output_length": 10, "hash_ids": [1, -2]}"#,
        r#"{"timestamp": 5, "input_length": 2048, "output_length": 10, "hash_ids": [1]}"#,
        "",
        r#"{"timestamp": 6, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]}"#,
    ] {
        bytes.extend_from_slice(l.as_bytes());
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(b"\xff\xfe{\"not utf-8\"}\n");
    bytes.extend_from_slice(
        br#"{"timestamp": 7, "input_length": 512, "output_length": 1, "hash_ids": [9]}"#,
    );
    bytes.push(b'\n');
    let path = dir.join("malformed.jsonl");
    std::fs::write(&path, bytes).expect("write trace");
    path
}

#[test]
fn malformed_trace_lines_are_reported_by_line_number() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = trace_file(dir.path());
    let expected = [
        "line 2: invalid JSON",
        "line 3: expected a JSON object, found an array",
        "line 4: missing field `hash_ids`",
        "line 5: field `input_length` must be a non-negative integer, found a string",
        "line 6: field `hash_ids` must be an array of non-negative integers",
        "line 7: field `hash_ids` has 1 blocks, but input_length 2048 needs 4 blocks",
        "line 10: not valid UTF-8",
    ];

    // --on-malformed fail: stops at line 2, exits non-zero, before any cluster starts.
    let out = tandem()
        .arg("replay")
        .arg("--trace")
        .arg(&trace)
        .args(["--on-malformed", "fail", "--json"])
        .output()
        .expect("run replay");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "fail policy exited {:?}", out.status);
    assert!(
        err.contains("line 2: invalid JSON") && err.contains(&trace.display().to_string()),
        "{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "no summary is printed: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // --on-malformed skip: every malformed line reported with its number, the rest replayed.
    let out = tandem()
        .arg("replay")
        .arg("--trace")
        .arg(&trace)
        .args(["--on-malformed", "skip", "--json"])
        .env("TANDEM__LOG__LEVEL", "warn")
        .output()
        .expect("run replay");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "skip policy exited {:?}:\n{err}",
        out.status
    );
    for e in expected {
        assert!(
            err.contains(&format!("skipped malformed trace line: {e}")),
            "missing {e:?} in:\n{err}"
        );
    }
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    assert_eq!(
        summary["requests"], 3,
        "the three well-formed lines are replayed: {summary}"
    );
    for k in [
        "verify_failures",
        "lost_completions",
        "duplicate_completions",
        "mismatches",
    ] {
        assert_eq!(summary[k], 0, "{k}: {summary}");
    }

    // A trace with nothing well-formed is an error, not an empty success.
    let empty = dir.path().join("only-bad.jsonl");
    std::fs::write(&empty, "not json\n{}\n").expect("write");
    let out = tandem()
        .arg("replay")
        .arg("--trace")
        .arg(&empty)
        .args(["--on-malformed", "skip"])
        .output()
        .expect("run replay");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("line 1: invalid JSON")
            && err.contains("line 2: missing field")
            && err.contains("no requests to replay"),
        "{err}"
    );
    figure(
        "malformed_trace_lines",
        &[
            ("malformed_lines", expected.len().to_string()),
            ("skip", "exit_0,3_replayed,each_line_named".into()),
            ("fail", "exit_non_zero_at_line_2".into()),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Configuration.

fn config_file(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write config");
    p
}

/// Run `tandem ARGS` and expect exit 78 with every one of `needles` in stderr; the stderr.
fn expect_78(
    args: &[&str],
    config: &std::path::Path,
    env: &[(&str, &str)],
    needles: &[&str],
) -> String {
    let mut cmd = tandem();
    cmd.args(args).arg(config);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if started.elapsed() > CLOSE_WITHIN {
            let _ = child.kill();
            panic!(
                "tandem {args:?} {} did not exit on a bad configuration",
                config.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read stderr");
    assert_eq!(
        status.code(),
        Some(78),
        "tandem {args:?} {}: {status:?}\n{err}",
        config.display()
    );
    for n in needles {
        assert!(
            err.contains(n),
            "tandem {args:?}: {n:?} missing from:\n{err}"
        );
    }
    err
}

#[test]
fn bad_configuration_exits_78_naming_the_key_and_the_origin() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let secret = "[group]\nsecret = \"0123456789abcdef0123\"\n";
    let commands: [&[&str]; 4] = [
        &["check-config"],
        &["agent", "--rank", "0", "--config"],
        &["agent", "--rank", "1", "--config"],
        &["supervisor", "--config"],
    ];

    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "wrong type (string for an integer)",
            format!("{secret}pp_size = \"two\"\n"),
            vec!["pp_size", "invalid type: string \"two\""],
        ),
        (
            "wrong type (table for a string)",
            format!("{secret}[network]\nleader_addr = {{ host = 1 }}\n"),
            vec!["leader_addr", "invalid type"],
        ),
        (
            "wrong type (float for an integer)",
            format!("{secret}[protocol]\nwindow_steps = 2.5\n"),
            vec!["window_steps", "invalid type"],
        ),
        (
            "negative count",
            format!("{secret}[store]\nhost_capacity_blocks = -1\n"),
            vec!["host_capacity_blocks", "-1"],
        ),
        (
            "unknown section",
            format!("{secret}[nonsense]\nx = 1\n"),
            vec!["nonsense", "unknown field"],
        ),
        (
            "unknown key in [network]",
            format!("{secret}[network]\nhttp_hots = \"0.0.0.0\"\n"),
            vec!["http_hots", "unknown field"],
        ),
        (
            "unknown key in [redis]",
            format!("{secret}[redis]\npasword = \"x\"\n"),
            vec!["pasword", "unknown field"],
        ),
        (
            "TOML syntax error",
            format!("{secret}[protocol\nwindow_steps = 8\n"),
            vec!["line 3"],
        ),
        (
            "a section that is a value",
            format!("supervisor = 5\n{secret}"),
            vec!["supervisor", "invalid type"],
        ),
    ];
    for (i, (what, text, needles)) in cases.iter().enumerate() {
        let path = config_file(d, &format!("case{i}.toml"), text);
        let file = path.display().to_string();
        for args in commands {
            let mut all = needles.clone();
            all.push(&file);
            let err = expect_78(args, &path, &[], &all);
            assert!(
                !err.contains("0123456789abcdef0123"),
                "{what}: the secret is printed:\n{err}"
            );
        }
        println!("{what}: exit 78 from check-config, agent (ranks 0 and 1) and supervisor, naming the key and {file}");
    }

    // Environment overrides: the variable's key and the origin are named.
    let good = config_file(d, "good.toml", secret);
    let env_cases: [(&str, &str, &[&str]); 3] = [
        (
            "TANDEM__PROTOCOL__WINDOW_STEPS",
            "abc",
            &["protocol.window_steps", "environment"],
        ),
        ("TANDEM__GROUP__NOPE", "1", &["nope", "environment"]),
        (
            "TANDEM__SUPERVISOR__HEARTBEAT_TIMEOUT_MS",
            "-3",
            &["heartbeat_timeout_ms", "environment"],
        ),
    ];
    for (k, v, needles) in env_cases {
        for args in commands {
            expect_78(args, &good, &[(k, v)], needles);
        }
    }

    // Values a type cannot refuse: the key is named.
    let range: [(&str, &[&str]); 4] = [
        (
            "[protocol]\nmax_frame_bytes = 100\n",
            &["protocol.max_frame_bytes", "4096"],
        ),
        ("[protocol]\nwindow_steps = 0\n", &["protocol.window_steps"]),
        (
            "[supervisor]\nheartbeat_interval_ms = 500\nheartbeat_timeout_ms = 100\n",
            &["supervisor.heartbeat_timeout_ms"],
        ),
        // Still inside the `[group]` table the secret opened.
        ("id = \"has space\"\n", &["group.id"]),
    ];
    for (i, (text, needles)) in range.iter().enumerate() {
        let path = config_file(d, &format!("range{i}.toml"), &format!("{secret}{text}"));
        for args in commands {
            expect_78(args, &path, &[], needles);
        }
    }

    // The agent refuses to start without a secret, or as a rank outside the group.
    let no_secret = config_file(d, "nosecret.toml", "[group]\nsecret = \"\"\n");
    expect_78(
        &["agent", "--rank", "0", "--config"],
        &no_secret,
        &[],
        &["group.secret"],
    );
    let short = config_file(d, "short.toml", "[group]\nsecret = \"short\"\n");
    let err = expect_78(
        &["agent", "--rank", "0", "--config"],
        &short,
        &[],
        &["group.secret", "at least 16 bytes"],
    );
    assert!(!err.contains("\"short\""), "{err}");
    expect_78(
        &["agent", "--rank", "9", "--config"],
        &good,
        &[],
        &["rank 9 is out of range"],
    );
    let runs = (cases.len() + env_cases.len() + range.len()) * commands.len() + 3;
    figure(
        "bad_configuration",
        &[
            (
                "cases",
                (cases.len() + env_cases.len() + range.len() + 3).to_string(),
            ),
            ("process_runs", runs.to_string()),
            ("exit_78", runs.to_string()),
        ],
    );
}
