//! `tandem replay`: replay a request trace through a local cluster and verify everything.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use rand::Rng;
use tandem_replay::{pool_pages_needed, run_replay, Capacity, ReplayParams, Speed};
use tandem_trace::{open_trace, MalformedPolicy, SynthWorkload, TraceRecord};

use crate::cli::{layout, Malformed, ReplayArgs};
use crate::cmd::up::small_model;
use crate::local::{LocalCluster, LocalSpec};

/// Read the requests: the trace file, plain `.jsonl` or gzip `.jsonl.gz` (reporting malformed
/// lines), or the synthetic workload.
fn requests(args: &ReplayArgs) -> anyhow::Result<Vec<TraceRecord>> {
    let Some(path) = &args.trace else {
        return Ok(
            SynthWorkload::new(args.limit.unwrap_or(SynthWorkload::DEFAULT_REQUESTS), 0).collect(),
        );
    };
    let policy = match args.on_malformed {
        Malformed::Skip => MalformedPolicy::Skip,
        Malformed::Fail => MalformedPolicy::Fail,
    };
    let mut reader = open_trace(path, policy)?;
    let mut out = Vec::new();
    for record in reader.by_ref() {
        let record = record.with_context(|| format!("trace {}", path.display()))?;
        out.push(record);
        if args.limit.is_some_and(|n| out.len() >= n) {
            break;
        }
    }
    let report = reader.report();
    for e in &report.malformed {
        eprintln!("tandem: skipped malformed trace line: {e}");
    }
    if report.out_of_order_timestamps > 0 || report.missing_output_length > 0 {
        eprintln!(
            "tandem: trace notes: {} timestamps out of order, {} lines without output_length, {} blank lines",
            report.out_of_order_timestamps, report.missing_output_length, report.blank_lines
        );
    }
    Ok(out)
}

/// `kill-agent:SECONDS` → the interval.
fn parse_chaos(spec: &str) -> anyhow::Result<Duration> {
    match spec.split_once(':') {
        Some(("kill-agent", secs)) => {
            let s: f64 = secs
                .parse()
                .with_context(|| format!("--chaos {spec}: {secs:?} is not a number of seconds"))?;
            if !(s > 0.0 && s.is_finite()) {
                bail!("--chaos {spec}: the interval must be a positive number of seconds");
            }
            Ok(Duration::from_secs_f64(s))
        }
        _ => bail!("--chaos {spec}: expected kill-agent:SECONDS"),
    }
}

/// Replay against a cluster that is already running (its agents' configuration file).
fn run_existing(
    args: &ReplayArgs,
    config: &std::path::Path,
    records: Vec<TraceRecord>,
) -> anyhow::Result<()> {
    let cfg = tandem_config::load(Some(config), &tandem_config::Overrides::default())?;
    let world = cfg.group.world_size();
    let dir = std::path::PathBuf::from(&cfg.network.engine_socket_dir);
    let mut params = ReplayParams::new(
        (0..world)
            .map(|r| dir.join(format!("rank{r}.sock")))
            .collect(),
    );
    params.speed = match args.speed {
        Some(x) if !args.max_rate => Speed::Factor(x),
        _ => Speed::MaxRate,
    };
    params.pool_pages = pool_pages_needed(&records);
    params.expected_capacity =
        Capacity::Blocks(cfg.store.host_capacity_blocks + cfg.store.disk_capacity_blocks);
    params.progress_bar = !args.json;
    let summary =
        run_replay(&params, records, None).map_err(|e| anyhow::anyhow!("replay failed: {e}"))?;
    report(args, &summary, None, None)
}

/// Print the summary; an error when it counts any verify failure, lost or duplicate completion
/// or mismatch.
fn report(
    args: &ReplayArgs,
    summary: &tandem_replay::ReplaySummary,
    kills: Option<u64>,
    restarts: Option<u64>,
) -> anyhow::Result<()> {
    if args.json {
        let mut v: serde_json::Value = serde_json::from_str(&summary.to_json())?;
        if let Some(k) = kills {
            v["agents_killed"] = k.into();
        }
        v["supervisor_restarts"] = restarts.into();
        println!("{v}");
    } else {
        println!("{summary}");
        if let Some(k) = kills {
            println!(
                "agents killed by chaos: {k}, group restarts: {}",
                restarts.map_or("?".into(), |r| r.to_string())
            );
        }
    }
    let bad = summary.verify_failures
        + summary.lost_completions
        + summary.duplicate_completions
        + summary.mismatches;
    if bad > 0 {
        bail!(
            "the replay found errors: {} verify failures, {} lost, {} duplicate completions, {} mismatches",
            summary.verify_failures,
            summary.lost_completions,
            summary.duplicate_completions,
            summary.mismatches
        );
    }
    Ok(())
}

pub(super) fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let chaos = args.chaos.as_deref().map(parse_chaos).transpose()?;
    if let Some(config) = args.cluster_config.clone() {
        let records = requests(&args)?;
        return run_existing(&args, &config, records);
    }
    let (pp, tp) = layout(args.ranks, args.pp, args.tp);
    let records = requests(&args)?;
    if records.is_empty() {
        bail!("no requests to replay");
    }
    let distinct: std::collections::BTreeSet<u64> = records
        .iter()
        .flat_map(|r| r.hash_ids.iter().copied())
        .collect();
    let host_capacity = args.host_capacity.unwrap_or(distinct.len() as u64 + 16);
    let unlimited = args.host_capacity.is_none() && args.disk_capacity == 0;
    let spec = LocalSpec {
        pp,
        tp,
        host_capacity_blocks: host_capacity,
        disk_capacity_blocks: args.disk_capacity,
        tokens_per_block: tandem_trace::TOKENS_PER_BLOCK as u32,
        // 2 KiB shards: the trace's block count, not the model, is what a replay exercises.
        model_toml: small_model(pp, tp, 1),
        heartbeat_ms: (100, 500),
        // Chaos restarts the group on purpose, as often as asked: no restart limit then.
        max_restarts: if chaos.is_some() {
            1_000_000
        } else {
            tandem_config::SupervisorConfig::default().max_restarts
        },
        dir: None,
    };
    if !args.json {
        eprintln!("tandem replay: {} requests, {} distinct blocks, {} ranks (pp {pp} × tp {tp}), host capacity {host_capacity} blocks", records.len(), distinct.len(), pp * tp);
    }
    let cluster = LocalCluster::start(&spec)?;
    let mut params = ReplayParams::new(
        (0..cluster.world_size())
            .map(|r| cluster.socket(r))
            .collect(),
    );
    params.speed = match args.speed {
        Some(x) if !args.max_rate => Speed::Factor(x),
        _ => Speed::MaxRate,
    };
    params.pool_pages = pool_pages_needed(&records);
    params.pool_dir = cluster.dir().join("pools");
    params.expected_capacity = if unlimited {
        Capacity::Unlimited
    } else {
        Capacity::Blocks(host_capacity + args.disk_capacity)
    };
    params.progress_bar = !args.json;

    let done = Arc::new(AtomicBool::new(false));
    let kills = Arc::new(AtomicU64::new(0));
    let cluster = Arc::new(std::sync::Mutex::new(cluster));
    let chaos_thread = chaos.map(|every| {
        let (done, kills, cluster) = (done.clone(), kills.clone(), cluster.clone());
        std::thread::spawn(move || chaos_loop(every, &done, &kills, &cluster))
    });
    // A group the supervisor gave up on cannot recover: end the replay instead of waiting out
    // its recovery deadline.
    let cancel = Arc::new(AtomicBool::new(false));
    params.cancel = Some(cancel.clone());
    let watch_thread = {
        let (done, cancel, cluster) = (done.clone(), cancel.clone(), cluster.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(500));
                let failed = cluster
                    .lock()
                    .ok()
                    .and_then(|c| c.supervisor_status())
                    .is_some_and(|s| s["state"] == "failed");
                if failed {
                    cancel.store(true, Ordering::SeqCst);
                    return;
                }
            }
        })
    };
    let summary = run_replay(&params, records, None);
    done.store(true, Ordering::SeqCst);
    if let Some(t) = chaos_thread {
        let _ = t.join();
    }
    let _ = watch_thread.join();
    let mut cluster = match Arc::try_unwrap(cluster) {
        Ok(m) => m.into_inner().unwrap_or_else(|e| e.into_inner()),
        Err(_) => bail!("chaos thread still holds the cluster"),
    };
    let summary = match summary {
        Ok(s) => s,
        Err(e) if cancel.load(Ordering::SeqCst) => {
            let reason = cluster
                .supervisor_status()
                .map(|s| s["reason"].to_string())
                .unwrap_or_default();
            bail!("replay stopped: the supervisor marked the group failed ({reason}): {e}")
        }
        Err(e) => bail!(
            "replay failed: {e}\n--- cluster log (last lines) ---\n{}",
            cluster.log_tail(40)
        ),
    };
    let restarts = cluster
        .supervisor_status()
        .and_then(|s| s["restarts_total"].as_u64());
    cluster.stop();
    report(
        &args,
        &summary,
        chaos.map(|_| kills.load(Ordering::SeqCst)),
        restarts,
    )
}

/// Every `every`, SIGKILL a random agent: on a timer, whether or not the group has recovered
/// from the last kill (a kill can land in a recovery).
fn chaos_loop(
    every: Duration,
    done: &AtomicBool,
    kills: &AtomicU64,
    cluster: &std::sync::Mutex<LocalCluster>,
) {
    let mut rng = rand::thread_rng();
    loop {
        let start = std::time::Instant::now();
        while start.elapsed() < every {
            if done.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let Ok(c) = cluster.lock() else { return };
        let rank = rng.gen_range(0..c.world_size());
        if let Some(pid) = c.agent_pid(rank) {
            // SAFETY: kill(2) on an agent of our own cluster.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            kills.fetch_add(1, Ordering::SeqCst);
            tracing::info!(rank, pid, "chaos: agent killed");
        }
    }
}
