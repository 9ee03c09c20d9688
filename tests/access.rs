//! Access control with real processes (docs/RELIABILITY.md; docs/DESIGN.md invariant 7):
//!
//! - the leader admits a peer only with a proof of the group secret: a wrong secret, no
//!   secret, or a proof replayed from another connection is refused `BadSecret`, logged
//!   without the secret, and leaves the admitted ranks undisturbed;
//! - every port an agent or the supervisor listens on is bound to loopback unless the
//!   configuration says otherwise (read from `/proc/net/tcp{,6}` for each process);
//! - Redis credentials in the URL (file or `TANDEM__REDIS__URL`) never appear in a log,
//!   `/status`, `/metrics` or the status page, on the happy path or when Redis refuses them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tandem_proto::ids::{Epoch, GroupId, Rank};
use tandem_proto::wire::{
    decode, encode, hello_proof, GroupSecret, HandshakeError, Hello, Message, PROTOCOL_VERSION,
};
use tandem_proto::ConfigFingerprint;
use tandem_tests::cluster::{http_get, Group, GroupSpec, TEST_SECRET};
use tandem_tests::procs::{is_loopback, listening};
use tandem_tests::redis::{RedisOptions, RedisServer};
use tandem_tests::{free_port, serial, tandem, ChildGuard};

const READY: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Peers and the group secret.

/// Read one message from the peer port (the leader writes whole messages).
fn read_msg(s: &mut TcpStream) -> Option<Message> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let started = Instant::now();
    loop {
        if let Ok(Some((m, _))) = decode(&buf, 1 << 20) {
            return Some(m);
        }
        match s.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) if started.elapsed() < Duration::from_secs(10) => {}
            Err(_) => return None,
        }
    }
}

/// The fingerprint the test group's ranks present (see `Group::configure`: 8 layers, 8 KV heads,
/// head_dim 16, 2 bytes, 16 tokens per block, pp 1 × tp 2, 64 host and 64 disk blocks, window 8,
/// heartbeats every 50 ms with a 1 s timeout, the default frame limit and retention).
fn group_fingerprint() -> ConfigFingerprint {
    ConfigFingerprint {
        world_size: 2,
        pp_size: 1,
        tp_size: 2,
        tokens_per_block: 16,
        num_layers: 8,
        num_kv_heads: 8,
        head_dim: 16,
        dtype_bytes: 2,
        shard_bytes: 8 * 2 * 4 * 16 * 2 * 16,
        host_capacity_blocks: 64,
        disk_capacity_blocks: 64,
        max_frame_bytes: 16 * 1024 * 1024,
        window_steps: 8,
        frame_retention_steps: 1024,
        heartbeat_interval_ms: 50,
        heartbeat_timeout_ms: 1000,
    }
}

/// Connect as an impostor, take the challenge, answer with `make(nonce)`; the leader's answer.
fn impostor(addr: &str, make: impl FnOnce(&[u8; 32]) -> Hello) -> (Option<Message>, [u8; 32]) {
    let mut s = TcpStream::connect(addr).expect("connect to the leader");
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let nonce = match read_msg(&mut s) {
        Some(Message::Challenge { nonce }) => nonce,
        other => panic!("expected a challenge, got {other:?}"),
    };
    s.write_all(&encode(&Message::Hello(make(&nonce))))
        .expect("send hello");
    let answer = read_msg(&mut s);
    // After a refusal the leader closes the connection.
    let mut rest = [0u8; 16];
    let closed = loop {
        match s.read(&mut rest) {
            Ok(0) => break true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break false
            }
            Err(_) => break true,
        }
    };
    if matches!(answer, Some(Message::Refused { .. })) {
        assert!(closed, "the leader kept a refused connection open");
    }
    (answer, nonce)
}

fn hello(secret: &[u8], nonce: &[u8; 32], rank: u32) -> Hello {
    let group = GroupId("itest".into());
    Hello {
        protocol_version: PROTOCOL_VERSION,
        group_id: group.clone(),
        rank: Rank(rank),
        epoch: Epoch(1),
        fingerprint: group_fingerprint(),
        proof: hello_proof(
            &GroupSecret::new(secret.to_vec()),
            nonce,
            &group,
            Rank(rank),
            Epoch(1),
        ),
    }
}

/// Builds an impostor's hello from the leader's challenge nonce.
type MakeHello = Box<dyn FnOnce(&[u8; 32]) -> Hello>;

fn refused(answer: &Option<Message>) -> Option<&HandshakeError> {
    match answer {
        Some(Message::Refused { reason }) => Some(reason),
        _ => None,
    }
}

fn ready_epochs(g: &Group) -> Vec<(u16, String)> {
    (0..g.world_size)
        .map(|r| g.http_get(r, "/readyz").unwrap_or((0, String::new())))
        .collect()
}

#[test]
fn peers_are_admitted_only_with_the_group_secret() {
    let _serial = serial();
    let g = Group::start(&GroupSpec::new(1, 2));
    g.wait_ready(READY);
    let before = ready_epochs(&g);
    let addr = g.leader_addr();
    let wrong = b"not-the-group-secret-but-long-enough";

    // The control: the right secret for a rank that is already in passes the secret check and
    // is refused only as a duplicate (so the impostors below fail on the secret alone).
    let (a, _) = impostor(&addr, |n| hello(TEST_SECRET.as_bytes(), n, 1));
    assert_eq!(
        refused(&a),
        Some(&HandshakeError::DuplicateRank {
            rank: Rank(1),
            epoch: Epoch(1)
        }),
        "{a:?}"
    );

    let cases: Vec<(&str, MakeHello)> = vec![
        (
            "a wrong secret",
            Box::new(|n: &[u8; 32]| hello(wrong, n, 1)),
        ),
        ("an empty secret", Box::new(|n: &[u8; 32]| hello(b"", n, 1))),
        (
            "no proof at all (zeros)",
            Box::new(|n: &[u8; 32]| {
                let mut h = hello(b"", n, 1);
                h.proof = [0; 32];
                h
            }),
        ),
        (
            "a wrong secret for a free rank number",
            Box::new(|n: &[u8; 32]| hello(wrong, n, 7)),
        ),
        (
            "the secret's prefix",
            Box::new(|n: &[u8; 32]| hello(&TEST_SECRET.as_bytes()[..16], n, 1)),
        ),
    ];
    for (what, make) in cases {
        let (a, _) = impostor(&addr, make);
        assert_eq!(
            refused(&a),
            Some(&HandshakeError::BadSecret),
            "{what}: {a:?}"
        );
    }
    // A proof made for one challenge is worthless on another connection.
    let (_, first_nonce) = impostor(&addr, |n| hello(wrong, n, 1));
    let replayed = hello(TEST_SECRET.as_bytes(), &first_nonce, 1);
    let (a, nonce) = impostor(&addr, move |_| replayed);
    assert_ne!(nonce, first_nonce, "the leader reused a nonce");
    assert_eq!(
        refused(&a),
        Some(&HandshakeError::BadSecret),
        "a replayed proof: {a:?}"
    );

    // Nothing changed for the group; the refusals are logged with the reason only.
    assert_eq!(ready_epochs(&g), before, "impostors disturbed the group");
    let log = g.log(0);
    let refusals = log
        .lines()
        .filter(|l| l.contains("follower refused") && l.contains("bad group secret"))
        .count();
    assert!(
        refusals >= 7,
        "expected the refusals in rank 0's log, found {refusals}:\n{log}"
    );
    for (r, log) in [(0, g.log(0)), (1, g.log(1))] {
        assert!(
            !log.contains(TEST_SECRET) && !log.contains("not-the-group-secret"),
            "rank {r}'s log holds a secret:\n{log}"
        );
        assert!(
            !log.contains(&TEST_SECRET[..16]),
            "rank {r}'s log holds part of the secret"
        );
    }
    for r in 0..g.world_size {
        for path in ["/status", "/metrics", "/"] {
            let (_, body) = g.http_get(r, path).expect("answers");
            assert!(
                !body.contains(TEST_SECRET) && !body.contains(&TEST_SECRET[..16]),
                "rank {r} {path} shows the group secret"
            );
        }
    }
    println!("7 impostor handshakes refused BadSecret, 1 DuplicateRank; the group stayed ready: {before:?}");
    println!("\nFIGURE fault=impostor_peers bad_secret_refusals=7 duplicate_rank_refusals=1 secret_in_logs_status_metrics=0 group_epoch_unchanged=yes");
}

// ---------------------------------------------------------------------------------------------
// Listening addresses.

fn wait_listening(pid: u32, n: usize) -> Vec<(String, u16)> {
    let started = Instant::now();
    loop {
        let l = listening(pid);
        if l.len() >= n || started.elapsed() > READY {
            return l;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn every_port_binds_loopback_unless_configured_otherwise() {
    let _serial = serial();
    // The defaults, as the configuration resolves them.
    let dir = tempfile::tempdir().expect("tempdir");
    let minimal = dir.path().join("minimal.toml");
    std::fs::write(&minimal, "[group]\nsecret = \"0123456789abcdef0123\"\n").expect("write");
    let out = tandem()
        .arg("check-config")
        .arg(&minimal)
        .arg("--json")
        .output()
        .expect("check-config");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let e = &v["effective"];
    for (key, value) in [
        ("network.leader_addr", &e["network"]["leader_addr"]),
        ("network.http_host", &e["network"]["http_host"]),
        ("supervisor.http_addr", &e["supervisor"]["http_addr"]),
    ] {
        let text = value
            .as_str()
            .unwrap_or_else(|| panic!("{key} missing: {v}"));
        let host = text.rsplit_once(':').map_or(text, |(h, _)| h);
        assert!(is_loopback(host), "default {key} = {text} is not loopback");
    }

    // A live group whose configuration leaves `http_host` at its default.
    let mut g = Group::configure(&GroupSpec::new(1, 2));
    let text = std::fs::read_to_string(&g.config)
        .expect("config")
        .replace("http_host = \"127.0.0.1\"\n", "");
    assert!(!text.contains("http_host"));
    std::fs::write(&g.config, &text).expect("write config");
    for rank in 0..2 {
        let child = g.agent_command(rank).spawn().expect("spawn agent");
        g.agents.push(Some(ChildGuard(child)));
    }
    g.wait_ready(READY);
    let redis = RedisServer::start();
    let sup_log = std::fs::File::create(g.path().join("supervisor.log")).expect("log");
    let sup = ChildGuard(
        tandem()
            .arg("supervisor")
            .arg("--config")
            .arg(&g.config)
            .env("TANDEM__REDIS__URL", redis.url())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(sup_log)
            .spawn()
            .expect("spawn supervisor"),
    );
    let expected = [
        (
            "rank 0 (HTTP and peer port)",
            g.agents[0].as_ref().map(|c| c.0.id()),
            2,
        ),
        ("rank 1 (HTTP)", g.agents[1].as_ref().map(|c| c.0.id()), 1),
        ("supervisor (HTTP)", Some(sup.0.id()), 1),
    ];
    for (what, pid, n) in expected {
        let pid = pid.expect("running");
        let l = wait_listening(pid, n);
        println!("{what}: pid {pid} listens on {l:?}");
        assert!(
            l.len() >= n,
            "{what}: expected {n} listening sockets, found {l:?}"
        );
        for (addr, port) in &l {
            assert!(
                is_loopback(addr),
                "{what} listens on {addr}:{port}, not loopback"
            );
        }
        let list: Vec<String> = l.iter().map(|(a, p)| format!("{a}:{p}")).collect();
        println!(
            "\nFIGURE fault=listening_addresses process={} sockets={}",
            what.split(' ').take(2).collect::<Vec<_>>().join("-"),
            list.join(",")
        );
    }
    drop(sup);
    drop(g);

    // Binding elsewhere is an explicit choice: a one-rank group with http_host = "0.0.0.0".
    let mut g = Group::configure(&GroupSpec::new(1, 1));
    let child = g
        .agent_command(0)
        .env("TANDEM__NETWORK__HTTP_HOST", "0.0.0.0")
        .spawn()
        .expect("spawn agent");
    g.agents.push(Some(ChildGuard(child)));
    let pid = g.agents[0].as_ref().expect("runs").0.id();
    let l = wait_listening(pid, 2);
    println!("with TANDEM__NETWORK__HTTP_HOST=0.0.0.0: {l:?}");
    assert!(
        l.iter()
            .any(|(a, p)| a == "0.0.0.0" && *p == g.http_base_port),
        "the explicit choice is honoured: {l:?}"
    );
    assert!(
        l.iter()
            .filter(|(_, p)| *p != g.http_base_port)
            .all(|(a, _)| is_loopback(a)),
        "only the configured port moved: {l:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Redis credentials.

/// Every text an operator can see: logs, and each HTTP endpoint of every process.
fn visible_text(
    g: &Group,
    sup: &(String, u16),
    sup_logs: &[std::path::PathBuf],
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for r in 0..g.world_size {
        out.push((format!("rank {r} log"), g.log(r)));
        for path in ["/status", "/metrics", "/", "/readyz"] {
            out.push((
                format!("rank {r} {path}"),
                g.http_get(r, path).map(|a| a.1).unwrap_or_default(),
            ));
        }
    }
    for path in ["/status", "/metrics", "/", "/readyz"] {
        out.push((
            format!("supervisor {path}"),
            http_get((&sup.0, sup.1), path)
                .map(|a| a.1)
                .unwrap_or_default(),
        ));
    }
    for p in sup_logs {
        out.push((
            p.display().to_string(),
            std::fs::read_to_string(p).unwrap_or_default(),
        ));
    }
    out
}

fn assert_absent(texts: &[(String, String)], needles: &[&str]) {
    for (what, text) in texts {
        for n in needles {
            assert!(
                !text.contains(n),
                "{what} shows the credential {n:?}:\n{text}"
            );
        }
    }
}

#[test]
fn redis_credentials_never_appear_in_logs_status_or_metrics() {
    let _serial = serial();
    const PASS: &str = "Redis-Pa55word-Do-Not-Print-7f3a";
    const WRONG: &str = "Wrong-Pa55word-Do-Not-Print-c9d1";
    let redis = RedisServer::start_with_options(RedisOptions {
        extra_args: vec!["--requirepass".into(), PASS.into()],
        ..RedisOptions::default()
    });

    // The password in the configuration file for the agents, in TANDEM__REDIS__URL for the
    // supervisor; debug logging everywhere, so that every connection line is written.
    let mut spec = GroupSpec::new(1, 2);
    spec.redis_url = redis.url_with_userinfo(&format!(":{PASS}@"));
    spec.extra_toml = String::new();
    let mut g = Group::configure(&spec);
    let text = std::fs::read_to_string(&g.config)
        .expect("config")
        .replace("level = \"info\"", "level = \"debug\"");
    std::fs::write(&g.config, text).expect("write config");
    for rank in 0..2 {
        let child = g.agent_command(rank).spawn().expect("spawn agent");
        g.agents.push(Some(ChildGuard(child)));
    }
    let sup_addr = g.supervisor_http();
    let sup_log = g.path().join("supervisor.log");
    let sup = ChildGuard(
        tandem()
            .arg("supervisor")
            .arg("--config")
            .arg(&g.config)
            .env(
                "TANDEM__REDIS__URL",
                redis.url_with_userinfo(&format!("default:{PASS}@")),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&sup_log).expect("log"))
            .spawn()
            .expect("spawn supervisor"),
    );
    g.wait_ready(Duration::from_secs(60));
    let started = Instant::now();
    while !matches!(
        http_get((&sup_addr.0, sup_addr.1), "/readyz"),
        Some((200, _))
    ) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the supervisor never became ready:\n{}",
            std::fs::read_to_string(&sup_log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Redis unreachable for a moment, so that error paths (which may print the URL) run too.
    // SAFETY: kill(2) on our own redis-server child.
    unsafe { libc::kill(redis.pid() as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(2500));
    let during = visible_text(&g, &sup_addr, std::slice::from_ref(&sup_log));
    // SAFETY: as above.
    unsafe { libc::kill(redis.pid() as i32, libc::SIGCONT) };
    assert_absent(&during, &[PASS]);
    std::thread::sleep(Duration::from_millis(2000));

    // check-config prints the effective configuration: masked.
    let out = tandem()
        .arg("check-config")
        .arg(&g.config)
        .arg("--json")
        .output()
        .expect("check-config");
    let printed =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(printed.contains("<redacted>"), "{printed}");

    // A supervisor given the wrong password: refused by Redis, and it says so without the
    // password it tried.
    let wrong_log = g.path().join("supervisor-wrong.log");
    let wrong_port = free_port();
    let mut wrong_cfg = std::fs::read_to_string(&g.config).expect("config");
    let (_, old_port) = g.supervisor_http();
    wrong_cfg = wrong_cfg.replace(
        &format!("127.0.0.1:{old_port}"),
        &format!("127.0.0.1:{wrong_port}"),
    );
    let wrong_path = g.path().join("wrong.toml");
    std::fs::write(&wrong_path, wrong_cfg).expect("write");
    let wrong = ChildGuard(
        tandem()
            .arg("supervisor")
            .arg("--config")
            .arg(&wrong_path)
            .env(
                "TANDEM__REDIS__URL",
                redis.url_with_userinfo(&format!(":{WRONG}@")),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&wrong_log).expect("log"))
            .spawn()
            .expect("spawn supervisor"),
    );
    let started = Instant::now();
    let status = loop {
        let s = http_get(("127.0.0.1", wrong_port), "/status");
        if let Some((_, body)) = &s {
            let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
            if v["redis"].as_str().is_some_and(|r| r != "connecting") {
                break body.clone();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the supervisor with a wrong password never reported Redis: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("supervisor with a wrong password: /status = {status}");
    let wrong_texts = vec![
        ("wrong-password supervisor /status".to_string(), status),
        (
            "wrong-password supervisor /metrics".to_string(),
            http_get(("127.0.0.1", wrong_port), "/metrics")
                .map(|a| a.1)
                .unwrap_or_default(),
        ),
        (
            "wrong-password supervisor log".to_string(),
            std::fs::read_to_string(&wrong_log).unwrap_or_default(),
        ),
    ];
    drop(wrong);

    let after = visible_text(&g, &sup_addr, std::slice::from_ref(&sup_log));
    assert_absent(&after, &[PASS, WRONG]);
    assert_absent(&wrong_texts, &[PASS, WRONG]);
    // The group secret is no more visible than the password.
    assert_absent(&after, &[TEST_SECRET]);
    let log_bytes: usize = after.iter().map(|(_, t)| t.len()).sum();
    let texts = after.len() + during.len() + wrong_texts.len();
    println!("checked {texts} texts ({log_bytes} bytes: logs at debug level, /status, /metrics, /, /readyz) for the Redis password and the group secret");
    println!("\nFIGURE fault=redis_credentials texts_checked={texts} bytes_after={log_bytes} password_found=0 wrong_password_found=0");
    drop(sup);
}
