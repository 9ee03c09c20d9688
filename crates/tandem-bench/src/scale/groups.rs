//! How many groups one Redis process carries: synthetic groups that send a real group's
//! Redis traffic through [`tandem_durable::RedisLog`] (the agents' and the supervisor's own
//! client code), at a fixed step rate each, against one `redis-server`, with its CPU read
//! from `/proc`.
//!
//! Owns [`bench_groups`]. One synthetic group of `world_size` ranks does, per step: the
//! leader's `append_step` (one task started, one finished: a step of a busy engine), then for
//! each rank `read_new` and `ack` of what it read (an engine acknowledging the frame); per
//! heartbeat interval (100 ms, the default) for each rank: `heartbeat`, `current_epoch` and
//! `read_new` (the agent's tick), and for the supervisor: `take_failures`, `heartbeats` and
//! `members`; every 50 ticks the leader's `trim` and `stream_len`. That is the agents' and
//! supervisor's cadence (`tandem_agent::runtime::cadence`, the supervisor's round); the
//! per-step command mix of a real local cluster is measured beside it by `tandem bench
//! scale`. Each group holds `world_size + 1` connections, as its processes do.
//!
//! The load generator shares the machine with `redis-server`; its own CPU is reported too,
//! so that a run that saturates the generator rather than Redis says so. Nothing is asserted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tandem_durable::{
    CompletionStream, DurableConfig, DurableError, EpochStore, Heartbeat, LivenessStore, RedisLog,
    StartedTask,
};
use tandem_proto::{
    BlockHash, Epoch, OutcomeResult, PageId, Rank, RequestId, Step, TaskId, TaskKind, TaskOutcome,
    TaskStart,
};

/// Heartbeat interval of the agents and the supervisor's round, ms (the defaults).
const TICK_MS: u64 = 100;
/// The leader trims every this many ticks (the agent's cadence).
const TRIM_EVERY_TICKS: u64 = 50;
/// Blocks per task in the synthetic steps (a request of 4 blocks).
const BLOCKS_PER_TASK: u64 = 4;

/// What one load level did.
#[derive(Clone, Debug, Serialize)]
pub struct GroupsRow {
    /// Groups driven at once.
    pub groups: u32,
    /// Steps per second each group was asked for.
    pub offered_steps_per_s: f64,
    /// Steps per second all groups together achieved.
    pub achieved_steps_per_s: f64,
    /// `achieved / (groups × offered)`.
    pub achieved_ratio: f64,
    /// `redis-server` CPU over the run, in cores (1.0 = one core busy all the time).
    pub redis_cpu_cores: f64,
    /// The load generator's own CPU, in cores.
    pub generator_cpu_cores: f64,
    /// Redis commands per second over the run (`INFO stats` `total_commands_processed`).
    pub redis_commands_per_s: f64,
    /// Redis commands per achieved step, every kind included.
    pub commands_per_step: f64,
    /// Redis CPU µs per achieved step: the cost that bounds how many groups a core carries.
    pub redis_cpu_us_per_step: f64,
    /// Median `append_step` latency, µs.
    pub append_p50_us: f64,
    /// 99th percentile `append_step` latency, µs.
    pub append_p99_us: f64,
    /// Calls that failed (any error).
    pub errors: u64,
    /// Entries each stream held before the run.
    pub prefill_entries: u64,
}

/// Where and how to drive.
#[derive(Clone, Debug)]
pub struct GroupsOptions {
    /// The Redis to load (`redis://127.0.0.1:PORT`).
    pub url: String,
    /// Its process id, for its CPU time (`None`: not measured).
    pub redis_pid: Option<u32>,
    /// Ranks per group.
    pub world_size: u32,
    /// Steps per second per group.
    pub steps_per_s: f64,
    /// Seconds per load level.
    pub seconds: f64,
    /// Load levels: groups at once.
    pub levels: Vec<u32>,
    /// `stream_max_len` the leaders trim to.
    pub stream_max_len: usize,
    /// Entries each group's stream holds before the run (appended and acknowledged by every
    /// rank, as after a long run): the steady state the trim scans at every pass.
    pub prefill_entries: u64,
}

/// Why the run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum GroupsError {
    /// A group could not connect or start its epoch.
    #[error("synthetic group {group}: {source}")]
    Durable {
        /// The group's name.
        group: String,
        /// The client's error.
        source: DurableError,
    },
    /// The runtime could not be built.
    #[error("tokio runtime: {0}")]
    Runtime(std::io::Error),
    /// `INFO` could not be read.
    #[error("INFO stats: {0}")]
    Info(String),
}

/// Drives each load level in turn and returns one row per level.
///
/// # Errors
/// [`GroupsError`] when a group cannot connect (the levels measured so far are lost).
pub fn bench_groups(options: &GroupsOptions) -> Result<Vec<GroupsRow>, GroupsError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(GroupsError::Runtime)?;
    runtime.block_on(async {
        let mut rows = Vec::new();
        for (level, &groups) in options.levels.iter().enumerate() {
            rows.push(one_level(options, level, groups).await?);
        }
        Ok(rows)
    })
}

/// One group's handles: one log per rank (its agent's connection) and one for the supervisor.
struct SyntheticGroup {
    ranks: Vec<RedisLog>,
    supervisor: RedisLog,
    epoch: Epoch,
    /// The first step the run appends (after a prefill).
    first_step: u64,
}

async fn one_level(
    options: &GroupsOptions,
    level: usize,
    groups: u32,
) -> Result<GroupsRow, GroupsError> {
    let mut built = Vec::new();
    for g in 0..groups {
        let name = format!("bench-l{level}-g{g}");
        let err = |source| GroupsError::Durable {
            group: name.clone(),
            source,
        };
        let config = DurableConfig::new(&options.url, &name, options.world_size);
        let mut ranks = Vec::new();
        for _ in 0..options.world_size {
            ranks.push(RedisLog::connect(&config).await.map_err(err)?);
        }
        let supervisor = RedisLog::connect(&config).await.map_err(err)?;
        let epoch = supervisor.next_epoch().await.map_err(err)?;
        built.push(SyntheticGroup {
            ranks,
            supervisor,
            epoch,
            first_step: 0,
        });
    }
    if options.prefill_entries > 0 {
        let mut fills = Vec::new();
        for (i, g) in built.iter().enumerate() {
            let (log, epoch, n) = (g.ranks[0].clone(), g.epoch, options.prefill_entries);
            let ranks = g.ranks.clone();
            let name = format!("bench-l{level}-g{i}");
            fills.push(tokio::spawn(async move {
                let mut last = None;
                for s in 0..n {
                    let started = [started_task(epoch, s)];
                    let finished = s
                        .checked_sub(1)
                        .map(|p| finished_task(epoch, p))
                        .into_iter()
                        .collect::<Vec<_>>();
                    last = Some(log.append_step(epoch, Step(s), &started, &finished).await?);
                }
                if let Some(last) = last {
                    for (r, l) in ranks.iter().enumerate() {
                        l.ack_through(Rank(r as u32), last).await?;
                    }
                }
                Ok::<_, DurableError>(name)
            }));
        }
        for f in fills {
            match f.await {
                Ok(Ok(_)) => {}
                Ok(Err(source)) => {
                    return Err(GroupsError::Durable {
                        group: "prefill".into(),
                        source,
                    })
                }
                Err(e) => return Err(GroupsError::Info(e.to_string())),
            }
        }
        for g in &mut built {
            g.first_step = options.prefill_entries;
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let steps = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let before = snapshot(options).await?;
    let mut tasks = Vec::new();
    for (i, g) in built.into_iter().enumerate() {
        let (stop, steps, errors) = (stop.clone(), steps.clone(), errors.clone());
        let period = Duration::from_secs_f64(1.0 / options.steps_per_s);
        let max_len = options.stream_max_len;
        // Spread the groups' step clocks over one period.
        let offset = period.mul_f64(i as f64 / f64::from(groups.max(1)));
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(offset).await;
            drive(g, period, max_len, &stop, &steps, &errors).await
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(options.seconds)).await;
    stop.store(true, Ordering::SeqCst);
    let mut latencies = Vec::new();
    for t in tasks {
        if let Ok(mut l) = t.await {
            latencies.append(&mut l);
        }
    }
    let after = snapshot(options).await?;
    let seconds = after.at.duration_since(before.at).as_secs_f64();
    let achieved = steps.load(Ordering::SeqCst) as f64 / seconds;
    let commands = after.commands.saturating_sub(before.commands) as f64;
    let redis_cpu = after.redis_cpu_s - before.redis_cpu_s;
    latencies.sort_unstable();
    let pct = |q: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * q).round() as usize)
            .map_or(f64::NAN, |&ns| ns as f64 / 1e3)
    };
    Ok(GroupsRow {
        groups,
        offered_steps_per_s: options.steps_per_s,
        achieved_steps_per_s: achieved,
        achieved_ratio: achieved / (f64::from(groups) * options.steps_per_s),
        redis_cpu_cores: redis_cpu / seconds,
        generator_cpu_cores: (after.own_cpu_s - before.own_cpu_s) / seconds,
        redis_commands_per_s: commands / seconds,
        commands_per_step: commands / (achieved * seconds).max(1.0),
        redis_cpu_us_per_step: redis_cpu * 1e6 / (achieved * seconds).max(1.0),
        append_p50_us: pct(0.5),
        append_p99_us: pct(0.99),
        errors: errors.load(Ordering::SeqCst),
        prefill_entries: options.prefill_entries,
    })
}

/// One group's loop until `stop`; the append latencies, ns.
async fn drive(
    g: SyntheticGroup,
    period: Duration,
    max_len: usize,
    stop: &AtomicBool,
    steps: &AtomicU64,
    errors: &AtomicU64,
) -> Vec<u64> {
    let mut latencies = Vec::new();
    let mut step = g.first_step;
    let mut ticks = 0u64;
    let mut next_step = tokio::time::Instant::now();
    let mut next_tick = next_step;
    let count = |r: Result<(), DurableError>| {
        if r.is_err() {
            errors.fetch_add(1, Ordering::Relaxed);
        }
    };
    while !stop.load(Ordering::SeqCst) {
        let now = tokio::time::Instant::now();
        if now >= next_step {
            let t = Instant::now();
            let started = [started_task(g.epoch, step)];
            let finished = step
                .checked_sub(1)
                .map(|s| finished_task(g.epoch, s))
                .into_iter()
                .collect::<Vec<_>>();
            count(
                g.ranks[0]
                    .append_step(g.epoch, Step(step), &started, &finished)
                    .await
                    .map(drop),
            );
            latencies.push(t.elapsed().as_nanos() as u64);
            for (r, log) in g.ranks.iter().enumerate() {
                let rank = Rank(r as u32);
                match log.read_new(rank, 512).await {
                    Ok(read) => {
                        let ids: Vec<_> = read.iter().map(|e| e.id).collect();
                        count(log.ack(rank, &ids).await.map(drop));
                    }
                    Err(_) => count(Err(DurableError::Timeout { op: "read", ms: 0 })),
                }
            }
            steps.fetch_add(1, Ordering::Relaxed);
            step += 1;
            next_step += period;
        }
        if now >= next_tick {
            ticks += 1;
            for (r, log) in g.ranks.iter().enumerate() {
                let rank = Rank(r as u32);
                let beat = Heartbeat {
                    epoch: g.epoch,
                    unix_ms: 0,
                    incarnation: 0,
                };
                count(log.heartbeat(rank, beat, 10_000).await);
                count(log.current_epoch().await.map(drop));
                count(log.read_new(rank, 512).await.map(drop));
            }
            count(g.supervisor.take_failures(64).await.map(drop));
            count(g.supervisor.heartbeats().await.map(drop));
            count(g.supervisor.members(g.epoch).await.map(drop));
            if ticks % TRIM_EVERY_TICKS == 0 {
                count(g.ranks[0].trim(max_len).await.map(drop));
                count(g.ranks[0].stream_len().await.map(drop));
            }
            next_tick += Duration::from_millis(TICK_MS);
        }
        let wake = next_step.min(next_tick);
        tokio::time::sleep_until(wake).await;
    }
    latencies
}

fn started_task(epoch: Epoch, seq: u64) -> StartedTask {
    StartedTask {
        kind: TaskKind::Store,
        start: TaskStart {
            task: TaskId::new(epoch, seq),
            request: RequestId(seq),
            block_hashes: (0..BLOCKS_PER_TASK)
                .map(|b| BlockHash(u128::from(seq) << 8 | u128::from(b)))
                .collect(),
            page_ids: (0..BLOCKS_PER_TASK).map(|b| PageId(b as u32)).collect(),
            tiers: vec![],
        },
    }
}

fn finished_task(epoch: Epoch, seq: u64) -> TaskOutcome {
    TaskOutcome {
        task: TaskId::new(epoch, seq),
        kind: TaskKind::Store,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    }
}

/// Counters at one moment.
struct Snapshot {
    at: Instant,
    commands: u64,
    redis_cpu_s: f64,
    own_cpu_s: f64,
}

async fn snapshot(options: &GroupsOptions) -> Result<Snapshot, GroupsError> {
    let client =
        redis::Client::open(options.url.as_str()).map_err(|e| GroupsError::Info(e.to_string()))?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| GroupsError::Info(e.to_string()))?;
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut conn)
        .await
        .map_err(|e| GroupsError::Info(e.to_string()))?;
    let commands = info
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Ok(Snapshot {
        at: Instant::now(),
        commands,
        redis_cpu_s: options.redis_pid.map_or(0.0, cpu_seconds),
        own_cpu_s: cpu_seconds(std::process::id()),
    })
}

/// User plus system CPU seconds of `pid` (`/proc/PID/stat`, clock ticks of 1/100 s).
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3; utime and stime are fields 14 and 15.
    let ticks = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(14) + ticks(15)) as f64 / hz
}
