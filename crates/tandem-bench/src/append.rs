//! The write-ahead cost benchmark behind `tandem bench redis` (docs/BENCHMARKS.md): what
//! appending a step with `tandem_durable::RedisLog::append_step` costs, measured against
//! baselines taken in the same run against the same server.
//!
//! Owns measurement only; `tandem bench redis` prints its figures. It never asserts a time.
//! Two ways of appending: one `append_step` at a time (each waits for the previous answer),
//! and pipelined, [`PIPELINE_DEPTH`] appends in flight in step order on the log's one
//! multiplexed connection (what the leader does with `protocol.max_appends_in_flight` at its
//! default), each answered in order, and [`OTHER_PIPELINE_DEPTH`] in flight beside it.
//! Baselines: one PING round trip (interleaved with the appends, so both see the same
//! noise), one plain XADD of the same record bytes (the floor for one append), and a
//! pipelined loop of plain XADDs, one outcome per entry, 256 per pipeline,
//! which is close to the most events per second one connection can push into a stream. The
//! pipelined appends (at both depths) and this baseline alternate in [`ROUNDS`] rounds, each
//! figure summed over its rounds, so that other processes' load falls on them alike.
//! The baselines run on a second connection built as the log's own (a multiplexed,
//! self-reconnecting `ConnectionManager`, every call under the same 5 s deadline), so that
//! this crate needs nothing but the log's public API.
//! It writes only to keys of a fresh group named `bench-{pid}-{ns}` and deletes them after.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, FromRedisValue, Pipeline};
use serde::Serialize;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tandem_durable::{
    mask_url, CompletionStream, ConnTimeouts, DurableConfig, DurableError, EpochStore, RedisLog,
    StepRecord,
};
use tandem_proto::{OutcomeResult, RequestId, Step, TaskId, TaskKind, TaskOutcome};

/// Appends in flight at once in the pipelined measurement: the default of
/// `protocol.max_appends_in_flight`.
pub const PIPELINE_DEPTH: usize = tandem_config::DEFAULT_MAX_APPENDS_IN_FLIGHT as usize;

/// Another depth measured beside it: 8, the default of `protocol.max_appends_in_flight` until
/// the default became 32 (docs/BENCHMARKS.md, "Write-ahead cost (redis)"), so that each run
/// shows what the deeper window buys.
pub const OTHER_PIPELINE_DEPTH: usize = 8;

/// Rounds the pipelined appends and their baseline alternate in.
const ROUNDS: usize = 4;
/// Commands per pipeline in the plain XADD baseline.
const BASELINE_PIPELINE: usize = 256;
/// Deadline of every call, the log's and the baseline connection's, in ms.
const OP_TIMEOUT_MS: u64 = 5000;

/// Why the benchmark could not run. Credentials in the URL never reach a message.
#[derive(Debug, thiserror::Error)]
pub enum AppendBenchError {
    /// A call of the completion log failed.
    #[error("redis bench: {0}")]
    Log(#[from] DurableError),
    /// The baseline connection could not be made.
    #[error("redis bench: baseline connection to {url}: {reason}")]
    Connect {
        /// The server URL, credentials masked.
        url: String,
        /// The client's error.
        reason: String,
    },
    /// A baseline command (`PING`, `XADD`, the pipeline, the final `DEL`) failed.
    #[error("redis bench: baseline {op}: {reason}")]
    Baseline {
        /// Which command.
        op: &'static str,
        /// The client's error.
        reason: String,
    },
    /// A baseline command took longer than its deadline.
    #[error("redis bench: baseline {op} took longer than {ms} ms")]
    Timeout {
        /// Which command.
        op: &'static str,
        /// The deadline, ms.
        ms: u64,
    },
    /// The step record could not be encoded (it cannot for these types; the variant keeps
    /// the call panic-free).
    #[error("redis bench: cannot encode the step record: {0}")]
    Encode(#[from] postcard::Error),
}

type Result<T> = std::result::Result<T, AppendBenchError>;

/// Figures for one batch size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AppendBenchRow {
    /// Outcomes in each appended step.
    pub outcomes_per_step: usize,
    /// Steps appended (one `append_step` each, one after the other).
    pub steps: usize,
    /// Median `append_step` round trip, µs.
    pub append_us_p50: f64,
    /// 99th percentile `append_step` round trip, µs.
    pub append_us_p99: f64,
    /// Median PING round trip measured between those appends, µs.
    pub ping_us_p50: f64,
    /// Median round trip of one plain `XADD * ...` of the same record bytes, µs:
    /// `append_us_p50` minus this is what encoding, the fenced id and decoding the reply cost.
    pub plain_xadd_us_p50: f64,
    /// `append_us_p50 / ping_us_p50`: the append's cost in round trips (target ≤ 1.5).
    pub round_trips: f64,
    /// Outcomes per second through back-to-back `append_step` calls, one in flight.
    pub events_per_s: f64,
    /// Outcomes per second through `append_step` calls with `pipeline_depth` in flight.
    pub pipelined_events_per_s: f64,
    /// Appends in flight at once in `pipelined_events_per_s`.
    pub pipeline_depth: usize,
    /// Outcomes per second with `other_pipeline_depth` appends in flight.
    pub other_pipelined_events_per_s: f64,
    /// Appends in flight at once in `other_pipelined_events_per_s`.
    pub other_pipeline_depth: usize,
    /// Outcomes per second through pipelined plain XADDs, one outcome per entry.
    pub baseline_events_per_s: f64,
    /// `events_per_s / baseline_events_per_s`: one append in flight.
    pub events_ratio: f64,
    /// `pipelined_events_per_s / baseline_events_per_s` (target ≥ 0.5).
    pub pipelined_ratio: f64,
    /// `other_pipelined_events_per_s / baseline_events_per_s`.
    pub other_pipelined_ratio: f64,
}

/// The whole benchmark: one row per batch size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AppendBench {
    /// One row per entry of `outcomes_per_step`, in that order.
    pub rows: Vec<AppendBenchRow>,
}

impl fmt::Display for AppendBench {
    /// A table, one line per batch size: one append in flight, [`PIPELINE_DEPTH`] and
    /// [`OTHER_PIPELINE_DEPTH`] in flight, each with its ratio to pipelined XADD.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:>9} {:>6} {:>10} {:>10} {:>9} {:>9} {:>7} {:>12} {:>6} {:>12} {:>6} {:>12} {:>6} {:>12}",
            "outcomes",
            "steps",
            "append p50",
            "append p99",
            "xadd p50",
            "ping p50",
            "RTTs",
            "events/s",
            "ratio",
            "piped ev/s",
            "ratio",
            "other ev/s",
            "ratio",
            "xadd ev/s"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:>9} {:>6} {:>8.1}us {:>8.1}us {:>7.1}us {:>7.1}us {:>7.2} {:>12.0} {:>6.2} {:>12.0} {:>6.2} {:>12.0} {:>6.2} {:>12.0}",
                r.outcomes_per_step,
                r.steps,
                r.append_us_p50,
                r.append_us_p99,
                r.plain_xadd_us_p50,
                r.ping_us_p50,
                r.round_trips,
                r.events_per_s,
                r.events_ratio,
                r.pipelined_events_per_s,
                r.pipelined_ratio,
                r.other_pipelined_events_per_s,
                r.other_pipelined_ratio,
                r.baseline_events_per_s
            )?;
        }
        Ok(())
    }
}

/// Measures `append_step` against a PING round trip and against pipelined plain XADDs,
/// for each batch size in `outcomes_per_step`, with `steps` appends per size (at least 1),
/// one in flight and then [`PIPELINE_DEPTH`] in flight.
///
/// # Errors
/// [`AppendBenchError::Log`] from connecting the log or from one of its calls;
/// [`AppendBenchError::Connect`], [`AppendBenchError::Baseline`] or
/// [`AppendBenchError::Timeout`] from the baseline connection (deadline 5 s per call).
pub async fn bench_append(
    url: &str,
    outcomes_per_step: &[usize],
    steps: usize,
) -> Result<AppendBench> {
    let steps = steps.max(1);
    let ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let group = format!("bench-{}-{ns}", std::process::id());
    let timeouts = ConnTimeouts {
        op_timeout_ms: OP_TIMEOUT_MS,
        ..ConnTimeouts::default()
    };
    let mut config = DurableConfig::new(url, group, 1);
    config.timeouts = timeouts;
    let log = RedisLog::connect(&config).await?;
    let conn = Baseline::connect(url, timeouts).await?;
    let result = run(&log, &conn, outcomes_per_step, steps).await;
    let keys = log.keys();
    let mut del = redis::cmd("DEL");
    del.arg(&keys.completions)
        .arg(&keys.epoch)
        .arg(baseline_key(&log));
    let cleanup = conn.query::<()>("DEL", &del).await;
    let bench = result?;
    cleanup?;
    Ok(bench)
}

/// The baselines' connection: built as the log's own, a deadline on every call.
struct Baseline {
    manager: ConnectionManager,
}

impl Baseline {
    async fn connect(url: &str, timeouts: ConnTimeouts) -> Result<Baseline> {
        let connect_error = |reason: String| AppendBenchError::Connect {
            url: mask_url(url),
            reason: reason.replace(url, &mask_url(url)),
        };
        let client = redis::Client::open(url).map_err(|e| connect_error(e.to_string()))?;
        let config = ConnectionManagerConfig::new()
            .set_factor(2)
            .set_exponent_base(2)
            .set_max_delay(timeouts.max_reconnect_delay_ms)
            .set_number_of_retries(2)
            .set_connection_timeout(Duration::from_millis(timeouts.connect_timeout_ms))
            .set_response_timeout(Duration::from_millis(timeouts.op_timeout_ms));
        let manager = tokio::time::timeout(
            Duration::from_millis(timeouts.op_timeout_ms),
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| AppendBenchError::Timeout {
            op: "connect",
            ms: timeouts.op_timeout_ms,
        })?
        .map_err(|e| connect_error(e.to_string()))?;
        Ok(Baseline { manager })
    }

    /// Runs one command as baseline operation `op`.
    async fn query<T: FromRedisValue>(&self, op: &'static str, cmd: &Cmd) -> Result<T> {
        let mut c = self.manager.clone();
        deadline(op, cmd.query_async(&mut c)).await
    }

    /// Runs a pipeline as baseline operation `op` (one round trip).
    async fn pipeline<T: FromRedisValue>(&self, op: &'static str, pipe: &Pipeline) -> Result<T> {
        let mut c = self.manager.clone();
        deadline(op, pipe.query_async(&mut c)).await
    }
}

async fn deadline<T>(
    op: &'static str,
    call: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(Duration::from_millis(OP_TIMEOUT_MS), call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(AppendBenchError::Baseline {
            op,
            reason: e.to_string(),
        }),
        Err(_) => Err(AppendBenchError::Timeout {
            op,
            ms: OP_TIMEOUT_MS,
        }),
    }
}

fn baseline_key(log: &RedisLog) -> String {
    format!("tandem:{{{}}}:bench-baseline", log.keys().group)
}

async fn run(
    log: &RedisLog,
    conn: &Baseline,
    sizes: &[usize],
    steps: usize,
) -> Result<AppendBench> {
    let epoch = log.next_epoch().await?;
    let ping = redis::cmd("PING");
    let warm = outcomes(1);
    for i in 0..20 {
        conn.query::<String>("PING", &ping).await?;
        log.append_step(epoch, Step(i), &[], &warm).await?;
    }
    let mut rows = Vec::new();
    let mut step = 20;
    for &k in sizes {
        let batch = outcomes(k);
        let mut appends = Vec::with_capacity(steps);
        let mut pings = Vec::with_capacity(steps);
        let mut plain = Vec::with_capacity(steps);
        // The bytes append_step writes for this record (the log encodes a borrowed twin of
        // StepRecord with postcard; the bytes are the same).
        let bytes = postcard::to_allocvec(&StepRecord {
            epoch,
            step: Step(step),
            started: Vec::new(),
            finished: batch.clone(),
        })?;
        let mut xadd = redis::cmd("XADD");
        xadd.arg(baseline_key(log))
            .arg("*")
            .arg("v")
            .arg(1)
            .arg("rec")
            .arg(&bytes[..]);
        let mut append_total = Duration::ZERO;
        for _ in 0..steps {
            let t = Instant::now();
            conn.query::<String>("PING", &ping).await?;
            pings.push(t.elapsed());
            let t = Instant::now();
            conn.query::<String>("XADD", &xadd).await?;
            plain.push(t.elapsed());
            let t = Instant::now();
            log.append_step(epoch, Step(step), &[], &batch).await?;
            let d = t.elapsed();
            append_total += d;
            appends.push(d);
            step += 1;
        }
        // The pipelined appends and their baseline alternate in rounds (ABC, then CBA), each
        // figure the sum of its parts: load from other processes, which swung a baseline
        // measured once by 2–5× between runs, falls on all three alike.
        let (mut piped, mut other, mut base) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        let base_total = (k * steps).max(BASELINE_PIPELINE);
        let mut base_sent = 0;
        for round in 0..ROUNDS {
            let n = share(steps, round);
            let b = share(base_total, round);
            let mut parts = [Part::Default, Part::Other, Part::Baseline];
            if round % 2 == 1 {
                parts.reverse();
            }
            for part in parts {
                match part {
                    Part::Default => {
                        piped += pipelined(log, epoch, step, n, &batch, PIPELINE_DEPTH).await?;
                        step += n as u64;
                    }
                    Part::Other => {
                        other +=
                            pipelined(log, epoch, step, n, &batch, OTHER_PIPELINE_DEPTH).await?;
                        step += n as u64;
                    }
                    Part::Baseline => base += baseline_xadds(log, conn, b).await?,
                }
            }
            base_sent += b;
        }
        let baseline = per_s(base_sent as f64, base);
        let events = per_s((k * steps) as f64, append_total);
        let piped_events = per_s((k * steps) as f64, piped);
        let other_events = per_s((k * steps) as f64, other);
        let append_p50 = micros(percentile(&mut appends, 50));
        let ping_p50 = micros(percentile(&mut pings, 50));
        rows.push(AppendBenchRow {
            outcomes_per_step: k,
            steps,
            append_us_p50: append_p50,
            append_us_p99: micros(percentile(&mut appends, 99)),
            ping_us_p50: ping_p50,
            plain_xadd_us_p50: micros(percentile(&mut plain, 50)),
            round_trips: ratio(append_p50, ping_p50),
            events_per_s: events,
            pipelined_events_per_s: piped_events,
            pipeline_depth: PIPELINE_DEPTH,
            other_pipelined_events_per_s: other_events,
            other_pipeline_depth: OTHER_PIPELINE_DEPTH,
            baseline_events_per_s: baseline,
            events_ratio: ratio(events, baseline),
            pipelined_ratio: ratio(piped_events, baseline),
            other_pipelined_ratio: ratio(other_events, baseline),
        });
    }
    Ok(AppendBench { rows })
}

/// One append in flight: awaited, or answered and kept until every earlier one is.
type Slot<'a> = (
    Pin<
        Box<dyn Future<Output = tandem_durable::Result<tandem_durable::StreamEntryId>> + Send + 'a>,
    >,
    Option<tandem_durable::Result<tandem_durable::StreamEntryId>>,
);

/// The time `steps` appends of `batch` (steps `first`, `first + 1`, ...) take with at most
/// `depth` in flight (at least 1) on `log`.
///
/// Appends are first polled in step order (so they reach the connection in that order) and
/// taken in that order, as the leader's driver does (one task polling them all, as an actor
/// polls the futures it spawned; a task per append measured slower: 0.29–0.30× against
/// 0.36–0.39× at 8 in flight). Each wake-up polls every unanswered append once and then takes
/// every answered one at the front of the window before the window is filled again: the
/// answers of one pipeline arrive together, and polling the whole window again for each of
/// them cost O(depth) polls per append.
///
/// # Errors
/// [`AppendBenchError::Log`]: the first append that failed, in step order.
pub async fn pipelined(
    log: &RedisLog,
    epoch: tandem_proto::Epoch,
    first: u64,
    steps: usize,
    batch: &[TaskOutcome],
    depth: usize,
) -> Result<Duration> {
    let depth = depth.max(1);
    let start = Instant::now();
    let mut window: VecDeque<Slot<'_>> = VecDeque::with_capacity(depth);
    let mut issued = 0;
    let mut answered = 0;
    while answered < steps {
        while window.len() < depth && issued < steps {
            let fut = log.append_step(epoch, Step(first + issued as u64), &[], batch);
            window.push_back((fut, None));
            issued += 1;
        }
        answered += std::future::poll_fn(|cx| {
            for (fut, done) in window.iter_mut() {
                if done.is_none() {
                    if let Poll::Ready(r) = fut.as_mut().poll(cx) {
                        *done = Some(r);
                    }
                }
            }
            let mut taken = 0;
            while let Some((_, Some(_))) = window.front() {
                if let Some((_, Some(Err(e)))) = window.pop_front() {
                    return Poll::Ready(Err(e));
                }
                taken += 1;
            }
            if taken == 0 {
                Poll::Pending
            } else {
                Poll::Ready(Ok(taken))
            }
        })
        .await?;
    }
    Ok(start.elapsed())
}

/// The time `total` plain XADDs (one outcome each) take in pipelines of
/// [`BASELINE_PIPELINE`].
async fn baseline_xadds(log: &RedisLog, conn: &Baseline, total: usize) -> Result<Duration> {
    let key = baseline_key(log);
    let payload = postcard::to_allocvec(&outcomes(1)[0]).unwrap_or_default();
    let mut sent = 0;
    let start = Instant::now();
    while sent < total {
        let n = BASELINE_PIPELINE.min(total - sent);
        let mut pipe = redis::pipe();
        for _ in 0..n {
            pipe.cmd("XADD")
                .arg(&key)
                .arg("*")
                .arg("v")
                .arg(1)
                .arg("rec")
                .arg(&payload[..])
                .ignore();
        }
        conn.pipeline::<()>("XADD pipeline", &pipe).await?;
        sent += n;
    }
    Ok(start.elapsed())
}

/// The parts of one round of the pipelined measurement.
#[derive(Clone, Copy)]
enum Part {
    /// [`PIPELINE_DEPTH`] appends in flight.
    Default,
    /// [`OTHER_PIPELINE_DEPTH`] appends in flight.
    Other,
    /// Pipelined plain XADDs.
    Baseline,
}

/// Round `round`'s share of `total` spread over [`ROUNDS`] (the first rounds take the rest).
fn share(total: usize, round: usize) -> usize {
    total / ROUNDS + usize::from(round < total % ROUNDS)
}

fn outcomes(k: usize) -> Vec<TaskOutcome> {
    (0..k as u64)
        .map(|seq| TaskOutcome {
            task: TaskId { epoch: 1, seq },
            kind: TaskKind::Store,
            request: RequestId(seq),
            result: OutcomeResult::Ok,
        })
        .collect()
}

fn percentile(v: &mut [Duration], p: usize) -> Duration {
    v.sort_unstable();
    let i = (v.len() * p / 100).min(v.len().saturating_sub(1));
    v.get(i).copied().unwrap_or_default()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn per_s(n: f64, d: Duration) -> f64 {
    ratio(n, d.as_secs_f64())
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_ratios() {
        let mut v: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        assert_eq!(percentile(&mut v, 50), Duration::from_micros(51));
        assert_eq!(percentile(&mut v, 99), Duration::from_micros(100));
        assert_eq!(percentile(&mut [], 50), Duration::ZERO);
        assert_eq!(ratio(1.0, 0.0), 0.0);
        assert_eq!(per_s(10.0, Duration::from_secs(2)), 5.0);
        for total in [0, 1, 3, 2000, 2001] {
            let shares: Vec<usize> = (0..ROUNDS).map(|r| share(total, r)).collect();
            assert_eq!(shares.iter().sum::<usize>(), total, "{shares:?}");
            assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1);
        }
    }

    #[test]
    fn table_has_one_line_per_row() {
        let row = AppendBenchRow {
            outcomes_per_step: 10,
            steps: 100,
            append_us_p50: 60.0,
            append_us_p99: 90.0,
            ping_us_p50: 50.0,
            plain_xadd_us_p50: 52.0,
            round_trips: 1.2,
            events_per_s: 150000.0,
            pipelined_events_per_s: 200000.0,
            pipeline_depth: 32,
            other_pipelined_events_per_s: 300000.0,
            other_pipeline_depth: 8,
            other_pipelined_ratio: 1.0,
            baseline_events_per_s: 300000.0,
            events_ratio: 0.5,
            pipelined_ratio: 0.67,
        };
        let text = AppendBench { rows: vec![row] }.to_string();
        assert_eq!(text.lines().count(), 2);
        assert!(text.lines().nth(1).unwrap().contains("1.20"), "{text}");
    }
}
