//! The frame benchmark's baseline: a plain TCP fan-out ping-pong of the frame's payload between
//! the same number of processes, measured in the same run.
//!
//! The bench process listens on loopback and starts `ranks − 1` echo peers, each a child
//! process (this binary re-run as `tandem bench --echo-peer ADDR --payload-bytes B`) that
//! connects, sets TCP_NODELAY and sends back every payload it reads. Per step the bench process
//! sleeps the same gap as the frame benchmark, takes `t0`, writes the payload to every peer,
//! then reads every reply; the sample is `t0` → the last reply read.
//!
//! Why it is the floor: the frame path also starts in the bench process (the leader engine),
//! crosses process boundaries to reach `ranks − 1` other processes, and ends back in the bench
//! process (the follower engines), with wake-ups of the processes in between. The baseline does
//! the least such a round can do: two loopback TCP hops per peer, no framing, no actors, no
//! Unix-socket hops. The frame path has one more hop (engine → agent → agent → engine).
//!
//! Owns the baseline only; it never talks to an agent.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::busy::{per_step_us, Busy, Timed};
use super::stats::micros;

/// Time `warmup + steps` fan-out rounds of `payload_bytes` to `ranks − 1` echo peer processes;
/// µs per timed round, `t0` → last reply, and the machine's CPU time per timed round.
///
/// # Errors
/// When a peer cannot be started or does not connect within 10 s, or a socket fails.
pub(super) fn fanout_baseline(
    ranks: u32,
    payload_bytes: usize,
    warmup: usize,
    steps: usize,
    gap: Duration,
) -> anyhow::Result<Timed> {
    let peers = ranks.saturating_sub(1) as usize;
    if peers == 0 || payload_bytes == 0 {
        bail!("the fan-out baseline needs at least one peer and one payload byte");
    }
    let listener = TcpListener::bind("127.0.0.1:0").context("fan-out listener")?;
    let addr = listener.local_addr()?;
    let exe = std::env::current_exe().context("cannot find the tandem binary")?;
    let mut children = Children(Vec::new());
    for _ in 0..peers {
        let child = Command::new(&exe)
            .args([
                "bench",
                "--echo-peer",
                &addr.to_string(),
                "--payload-bytes",
                &payload_bytes.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start an echo peer")?;
        children.0.push(child);
    }
    listener.set_nonblocking(true)?;
    let mut streams = Vec::new();
    let started = Instant::now();
    while streams.len() < peers {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(Duration::from_secs(10)))?;
                streams.push(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if started.elapsed() > Duration::from_secs(10) {
                    bail!(
                        "only {} of {peers} echo peers connected within 10 s",
                        streams.len()
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e).context("accepting an echo peer"),
        }
    }
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
        for s in &mut streams {
            s.write_all(&payload).context("fan-out write")?;
        }
        for s in &mut streams {
            s.read_exact(&mut reply).context("fan-out read")?;
        }
        let d = t0.elapsed();
        if i >= warmup {
            samples.push(micros(d));
        }
    }
    let cpu_us_per_step = per_step_us(busy_from, Busy::now(), steps);
    drop(streams);
    Ok(Timed {
        samples_us: samples,
        cpu_us_per_step,
    })
}

/// Child processes of a baseline (echo peers, relay processes); each is given 2 s to end on
/// its own once its sockets closed, then killed, and reaped, when dropped (also on an early
/// error).
pub(super) struct Children(pub(super) Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The hidden `tandem bench --echo-peer ADDR`: connect and echo `payload_bytes`-sized messages
/// until the bench process closes the connection.
///
/// # Errors
/// When the connection cannot be made or fails mid-message.
pub(super) fn echo_peer(addr: &str, payload_bytes: usize) -> anyhow::Result<()> {
    if payload_bytes == 0 {
        bail!("--echo-peer needs --payload-bytes of at least 1");
    }
    let mut s =
        TcpStream::connect(addr).with_context(|| format!("echo peer cannot connect to {addr}"))?;
    s.set_nodelay(true)?;
    let mut buf = vec![0u8; payload_bytes];
    loop {
        match s.read_exact(&mut buf) {
            Ok(()) => s.write_all(&buf)?,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}
