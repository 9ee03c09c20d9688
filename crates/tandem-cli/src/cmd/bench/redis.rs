//! `tandem bench redis`: what writing a step's outcomes to the completion stream before sealing
//! costs, in PING round trips, and outcome events per second against pipelined plain XADDs.
//!
//! Wraps `tandem_bench::bench_append` (which owns the measurement and its baselines: a PING
//! interleaved with the appends, one plain XADD of the same bytes, pipelined plain XADDs). This
//! module starts a `redis-server` child with the settings of a local cluster (append-only file
//! on, no RDB snapshots) unless `REDIS_URL` names a server, and prints the table with marks.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::report::{mark, Table};
use super::{BenchArgs, PartOutput};

/// Outcomes per step measured.
const OUTCOMES: [usize; 3] = [1, 10, 100];
/// Target: an append costs at most this many PING round trips.
const RTT_TARGET: f64 = 1.5;
/// Target: outcome events per second through pipelined appends, at the default depth of
/// `protocol.max_appends_in_flight`, at least this × pipelined plain XADD.
const EVENTS_TARGET: f64 = 0.5;

/// A `redis-server` child on a free loopback port, killed when dropped.
pub(super) struct RedisChild {
    child: Child,
    _dir: tempfile::TempDir,
    /// `redis://127.0.0.1:PORT`.
    pub url: String,
}

impl RedisChild {
    /// Start one as a local cluster does (`--appendonly yes`, `--save ""`).
    ///
    /// # Errors
    /// When `redis-server` is not installed or does not listen within 10 s.
    pub(super) fn start() -> anyhow::Result<Self> {
        Self::start_with(&[])
    }

    /// As [`Self::start`], with more arguments (for example `--replicaof 127.0.0.1 PORT`).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub(super) fn start_with(extra: &[&str]) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = tempfile::Builder::new()
            .prefix("tandem-bench-redis-")
            .tempdir()?;
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
            ])
            .args(extra)
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("redis-server is not installed and REDIS_URL is not set")?;
        let mut me = RedisChild {
            child,
            _dir: dir,
            url: format!("redis://127.0.0.1:{port}"),
        };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = me.child.try_wait() {
                bail!("redis-server exited at start ({status})");
            }
            if start.elapsed() > Duration::from_secs(10) {
                bail!("redis-server did not listen on port {port} within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(me)
    }
}

impl RedisChild {
    /// The server's port.
    pub(super) fn port(&self) -> u16 {
        self.url
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(0)
    }

    /// The server's process id (for its CPU time).
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for RedisChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run the append benchmark.
///
/// # Errors
/// When no Redis can be reached or started, or a Redis call fails.
pub(super) fn run(args: &BenchArgs) -> anyhow::Result<PartOutput> {
    let steps = if args.quick { 200 } else { 2000 };
    let (url, _child) = match std::env::var("REDIS_URL") {
        Ok(u) if !u.is_empty() => (u, None),
        _ => {
            let c = RedisChild::start()?;
            (c.url.clone(), Some(c))
        }
    };
    let rt = actix_rt::Runtime::new().context("cannot start an async runtime")?;
    let bench = rt.block_on(tandem_bench::bench_append(&url, &OUTCOMES, steps))?;
    let depth = tandem_bench::append::PIPELINE_DEPTH;
    let other = tandem_bench::append::OTHER_PIPELINE_DEPTH;
    let piped = format!("events/s ({depth} in flight, the default)");
    let other_piped = format!("events/s ({other} in flight)");
    let mut t = Table::new(&[
        "outcomes",
        "steps",
        "append p50 µs",
        "p99 µs",
        "plain XADD p50 µs",
        "PING p50 µs",
        "ratio (RTTs)",
        "events/s (1 in flight)",
        "ratio",
        piped.as_str(),
        "ratio",
        other_piped.as_str(),
        "ratio",
        "XADD pipelined ev/s",
    ]);
    for r in &bench.rows {
        t.row(vec![
            r.outcomes_per_step.to_string(),
            r.steps.to_string(),
            format!("{:.1}", r.append_us_p50),
            format!("{:.1}", r.append_us_p99),
            format!("{:.1}", r.plain_xadd_us_p50),
            format!("{:.1}", r.ping_us_p50),
            format!("{:.2} {}", r.round_trips, mark(r.round_trips <= RTT_TARGET)),
            format!("{:.0}", r.events_per_s),
            format!("{:.2}", r.events_ratio),
            format!("{:.0}", r.pipelined_events_per_s),
            format!(
                "{:.2} {}",
                r.pipelined_ratio,
                mark(r.pipelined_ratio >= EVENTS_TARGET)
            ),
            format!("{:.0}", r.other_pipelined_events_per_s),
            format!("{:.2}", r.other_pipelined_ratio),
            format!("{:.0}", r.baseline_events_per_s),
        ]);
    }
    let table = format!(
        "redis: one append_step per step (one connection, append-only file on), one in flight, {depth} in flight (the default of protocol.max_appends_in_flight) and {other} in flight, against a PING round trip and pipelined plain XADDs (256 per pipeline) in the same run\n{}targets: append ≤ {RTT_TARGET} PING round trips; events/s at the default depth ≥ {EVENTS_TARGET}× pipelined XADD\n",
        t.render()
    );
    Ok(PartOutput {
        table,
        json: serde_json::to_value(&bench)?,
    })
}
