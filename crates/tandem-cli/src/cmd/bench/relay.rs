//! The frame benchmark's hop floor: the frame path's topology with nothing in it but bytes,
//! measured in the same run (a figure beside the targets, not one of them).
//!
//! The frame path crosses three process boundaries: the leader engine (the bench process)
//! writes to its agent over a Unix socket, that agent writes to `ranks − 1` follower agents
//! over TCP, and each follower agent hands the frame to its engine (the bench process again).
//! The relay does the same with no framing, actors, core or ring: the bench process writes the
//! payload to one hub process over a Unix stream socket; the hub writes it to each of
//! `ranks − 1` leaf processes over loopback TCP (TCP_NODELAY); each leaf writes it back to the
//! bench process over its own Unix stream socket. The sample is `t0` (just before the write to
//! the hub) → the last leaf's payload read, after the same pause as the frame benchmark.
//! The plain fan-out of [`super::fanout`] is two hops per peer; this is three, so the frame
//! path's ratio against it says what the agent's own work costs, apart from the extra hop.
//!
//! Processes: this binary re-run as `tandem bench --relay-hub SOCKET --relay-peers K` (it
//! listens on loopback TCP and prints its address as its first stdout line) and as
//! `tandem bench --relay-leaf SOCKET --relay-hub-addr ADDR`; each greets the bench's socket
//! with one byte (`H` hub, `L` leaf). Owns the floor only; it never talks to an agent.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::busy::{per_step_us, Busy, Timed};
use super::fanout::Children;
use super::stats::micros;

/// The hub's greeting byte on the bench's socket.
const HUB: u8 = b'H';
/// A leaf's greeting byte on the bench's socket.
const LEAF: u8 = b'L';
/// How long the bench waits for the hub and every leaf to connect.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// Time `warmup + steps` relay rounds of `payload_bytes` through a hub to `ranks − 1` leaf
/// processes; µs per timed round, `t0` → the last leaf's payload read, and the machine's CPU
/// time per timed round.
///
/// # Errors
/// When a process cannot be started, the hub does not print its address, a process does not
/// connect within 10 s, or a socket fails.
pub(super) fn relay_floor(
    ranks: u32,
    payload_bytes: usize,
    warmup: usize,
    steps: usize,
    gap: Duration,
) -> anyhow::Result<Timed> {
    let leaves = ranks.saturating_sub(1) as usize;
    if leaves == 0 || payload_bytes == 0 {
        bail!("the relay floor needs at least one leaf and one payload byte");
    }
    let dir = tempfile::tempdir().context("relay socket directory")?;
    let socket = dir.path().join("relay.sock");
    let listener = UnixListener::bind(&socket).context("relay listener")?;
    let exe = std::env::current_exe().context("cannot find the tandem binary")?;
    let mut children = Children(Vec::new());
    let sock_arg = socket.to_string_lossy().into_owned();
    let size_arg = payload_bytes.to_string();
    let mut hub = Command::new(&exe)
        .args([
            "bench",
            "--relay-hub",
            &sock_arg,
            "--payload-bytes",
            &size_arg,
        ])
        .args(["--relay-peers", &leaves.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start the relay hub")?;
    let hub_out = hub.stdout.take().context("the relay hub's stdout")?;
    children.0.push(hub);
    let mut hub_addr = String::new();
    BufReader::new(hub_out)
        .read_line(&mut hub_addr)
        .context("reading the relay hub's address")?;
    let hub_addr = hub_addr.trim().to_owned();
    if hub_addr.is_empty() {
        bail!("the relay hub exited before printing its address");
    }
    for _ in 0..leaves {
        let child = Command::new(&exe)
            .args([
                "bench",
                "--relay-leaf",
                &sock_arg,
                "--payload-bytes",
                &size_arg,
            ])
            .args(["--relay-hub-addr", &hub_addr])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start a relay leaf")?;
        children.0.push(child);
    }
    let (mut to_hub, mut from_leaves) = accept_all(&listener, leaves)?;
    let payload = vec![0x5au8; payload_bytes];
    let mut reply = vec![0u8; payload_bytes];
    let mut samples = Vec::with_capacity(steps);
    let mut busy_from = None;
    for i in 0..warmup + steps {
        if i == warmup {
            busy_from = Busy::now();
        }
        std::thread::sleep(gap);
        let t0 = Instant::now();
        to_hub
            .write_all(&payload)
            .context("relay write to the hub")?;
        for s in &mut from_leaves {
            s.read_exact(&mut reply).context("relay read from a leaf")?;
        }
        let d = t0.elapsed();
        if i >= warmup {
            samples.push(micros(d));
        }
    }
    Ok(Timed {
        cpu_us_per_step: per_step_us(busy_from, Busy::now(), steps),
        samples_us: samples,
    })
}

/// Accept the hub and `leaves` leaves on the bench's socket, told apart by their greeting.
fn accept_all(
    listener: &UnixListener,
    leaves: usize,
) -> anyhow::Result<(UnixStream, Vec<UnixStream>)> {
    listener.set_nonblocking(true)?;
    let started = Instant::now();
    let (mut hub, mut from_leaves) = (None, Vec::new());
    while hub.is_none() || from_leaves.len() < leaves {
        match listener.accept() {
            Ok((mut s, _)) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(CONNECT_WITHIN))?;
                let mut hello = [0u8; 1];
                s.read_exact(&mut hello).context("relay greeting")?;
                match hello[0] {
                    HUB => hub = Some(s),
                    LEAF => from_leaves.push(s),
                    other => bail!("unknown relay greeting {other:#04x}"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if started.elapsed() > CONNECT_WITHIN {
                    bail!(
                        "the relay hub ({}) and {} of {leaves} leaves connected within 10 s",
                        if hub.is_some() { "in" } else { "missing" },
                        from_leaves.len()
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e).context("accepting a relay process"),
        }
    }
    let hub = hub.context("the relay hub did not connect")?;
    Ok((hub, from_leaves))
}

/// The hidden `tandem bench --relay-hub SOCKET --relay-peers K`: listen on loopback TCP, print
/// the address, take `peers` leaf connections, greet the bench's socket, then write every
/// payload read from it to every leaf, until the bench closes its end.
///
/// # Errors
/// When a socket cannot be made or fails mid-payload.
pub(super) fn hub(socket: &Path, peers: usize, payload_bytes: usize) -> anyhow::Result<()> {
    if payload_bytes == 0 || peers == 0 {
        bail!("--relay-hub needs --payload-bytes and --relay-peers of at least 1");
    }
    let listener = TcpListener::bind("127.0.0.1:0").context("relay hub listener")?;
    println!("{}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let mut leaves = Vec::with_capacity(peers);
    while leaves.len() < peers {
        let (s, _) = listener.accept().context("accepting a relay leaf")?;
        s.set_nodelay(true)?;
        leaves.push(s);
    }
    let mut bench = UnixStream::connect(socket)
        .with_context(|| format!("relay hub cannot connect to {}", socket.display()))?;
    bench.write_all(&[HUB])?;
    let mut buf = vec![0u8; payload_bytes];
    loop {
        match bench.read_exact(&mut buf) {
            Ok(()) => {
                for l in &mut leaves {
                    l.write_all(&buf)?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// The hidden `tandem bench --relay-leaf SOCKET --relay-hub-addr ADDR`: connect to the hub and
/// to the bench's socket, then write back to the bench every payload read from the hub, until
/// the hub closes its end.
///
/// # Errors
/// When a connection cannot be made or fails mid-payload.
pub(super) fn leaf(socket: &Path, hub_addr: &str, payload_bytes: usize) -> anyhow::Result<()> {
    if payload_bytes == 0 {
        bail!("--relay-leaf needs --payload-bytes of at least 1");
    }
    let mut from_hub = TcpStream::connect(hub_addr)
        .with_context(|| format!("relay leaf cannot connect to {hub_addr}"))?;
    from_hub.set_nodelay(true)?;
    let mut bench = UnixStream::connect(socket)
        .with_context(|| format!("relay leaf cannot connect to {}", socket.display()))?;
    bench.write_all(&[LEAF])?;
    let mut buf = vec![0u8; payload_bytes];
    loop {
        match from_hub.read_exact(&mut buf) {
            Ok(()) => bench.write_all(&buf)?,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}
