//! `tandem bench scale`, Redis: the commands one group sends per step, counted by Redis
//! itself under a replay through a real local cluster (two ranks, their supervisor), the
//! stream memory per retained entry, and how many groups one `redis-server` carries at 50
//! steps per second each (synthetic groups sending the same traffic through the same client
//! code: `tandem_bench::scale::bench_groups`), with its CPU measured.
//!
//! And what `redis.wait_replicas = 1` costs an append, against `0`, on a primary and its
//! replica on loopback.
//!
//! Owns the replay's set-up and the load levels; targets none (docs/SCALE.md extrapolates).

use std::collections::BTreeMap;

use anyhow::Context;
use serde::Serialize;
use tandem_bench::scale::redis_info::{
    command_calls, keys, raise_open_files, reset_stats, stream_size,
};
use tandem_bench::scale::{bench_groups, GroupsOptions, GroupsRow};
use tandem_replay::{pool_pages_needed, run_replay, Capacity, ReplayParams, Speed};
use tandem_trace::SynthWorkload;

use tandem_durable::{CompletionStream, DurableConfig, EpochStore, RedisLog, ReplicationWait};
use tandem_proto::Step;

use crate::cmd::bench::redis::RedisChild;
use crate::cmd::bench::stats::Summary;
use crate::cmd::up::small_model;
use crate::local::{LocalCluster, LocalSpec};

/// Steps per second each synthetic group runs at.
pub(super) const STEPS_PER_S: f64 = 50.0;
/// A level whose groups achieve less than this share of their offered steps is saturated.
const SATURATED_BELOW: f64 = 0.95;

/// What one group costs Redis.
#[derive(Clone, Debug, Serialize)]
pub(super) struct OpsReport {
    /// Requests replayed.
    pub requests: u64,
    /// Steps the leader sealed.
    pub steps: u64,
    /// Ranks of the group.
    pub ranks: u32,
    /// Seconds the replay ran.
    pub seconds: f64,
    /// Every command per step, all processes of the group together.
    pub commands_per_step: f64,
    /// Per command name, calls per step.
    pub by_command: BTreeMap<String, f64>,
    /// Entries retained in the group's stream at the end.
    pub stream_entries: u64,
    /// Bytes Redis uses for the stream (`MEMORY USAGE`).
    pub stream_bytes: u64,
}

/// Counts a replay's commands.
///
/// # Errors
/// When the cluster does not start or the replay fails.
pub(super) fn ops_per_step(requests: usize) -> anyhow::Result<OpsReport> {
    let records: Vec<_> = SynthWorkload::new(requests, 7).collect();
    let spec = LocalSpec {
        pp: 1,
        tp: 2,
        host_capacity_blocks: 8192,
        disk_capacity_blocks: 0,
        tokens_per_block: tandem_trace::TOKENS_PER_BLOCK as u32,
        model_toml: small_model(1, 2, 1),
        heartbeat_ms: (100, 500),
        max_restarts: tandem_config::SupervisorConfig::default().max_restarts,
        dir: None,
    };
    let mut cluster = LocalCluster::start(&spec)?;
    let url = cluster.redis_url.clone();
    let mut params = ReplayParams::new(
        (0..cluster.world_size())
            .map(|r| cluster.socket(r))
            .collect(),
    );
    params.speed = Speed::MaxRate;
    params.pool_pages = pool_pages_needed(&records);
    params.pool_dir = cluster.dir().join("pools");
    params.expected_capacity = Capacity::Unlimited;
    reset_stats(&url).map_err(anyhow::Error::msg)?;
    let summary = run_replay(&params, records, None).map_err(|e| anyhow::anyhow!("replay: {e}"))?;
    let calls = command_calls(&url).map_err(anyhow::Error::msg)?;
    let stream = keys(&url, "tandem:*:completions")
        .map_err(anyhow::Error::msg)?
        .into_iter()
        .next()
        .context("no completion stream")?;
    let (stream_entries, stream_bytes) = stream_size(&url, &stream).map_err(anyhow::Error::msg)?;
    cluster.stop();
    let steps = summary.steps.max(1);
    let total: u64 = calls
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "config|resetstat" | "info"))
        .map(|(_, c)| c)
        .sum();
    Ok(OpsReport {
        requests: summary.requests,
        steps: summary.steps,
        ranks: 2,
        seconds: summary.wall_seconds,
        commands_per_step: total as f64 / steps as f64,
        by_command: calls
            .into_iter()
            .filter(|(name, _)| !matches!(name.as_str(), "config|resetstat" | "info"))
            .map(|(n, c)| (n, c as f64 / steps as f64))
            .collect(),
        stream_entries,
        stream_bytes,
    })
}

/// Groups per `redis-server`: load levels until the groups no longer get their steps.
#[derive(Clone, Debug, Serialize)]
pub(super) struct GroupsReport {
    /// Open-file limit of the load generator.
    pub open_files: u64,
    /// Each level.
    pub levels: Vec<GroupsRow>,
    /// The most groups a level carried at ≥ 95% of their steps.
    pub carried: u32,
    /// Redis CPU (cores) at that level.
    pub carried_cpu_cores: f64,
}

/// Runs the load levels on a fresh `redis-server` (append-only file on, as a local cluster
/// runs it), stopping after the first saturated level.
///
/// # Errors
/// When Redis cannot start or a group cannot connect.
pub(super) fn groups(levels: &[u32], seconds: f64) -> anyhow::Result<GroupsReport> {
    groups_with(levels, seconds, 0)
}

/// As [`groups`], every stream holding `prefill` acknowledged entries before the run.
///
/// # Errors
/// As [`groups`].
pub(super) fn groups_with(
    levels: &[u32],
    seconds: f64,
    prefill: u64,
) -> anyhow::Result<GroupsReport> {
    let open_files = raise_open_files();
    let mut rows: Vec<GroupsRow> = Vec::new();
    for &groups in levels {
        // A fresh server per level: earlier levels' streams do not weigh on later ones.
        let redis = RedisChild::start()?;
        eprintln!("tandem bench scale: {groups} synthetic groups at {STEPS_PER_S} steps/s (streams prefilled with {prefill} entries) ...");
        let options = GroupsOptions {
            url: redis.url.clone(),
            redis_pid: Some(redis.pid()),
            world_size: 2,
            steps_per_s: STEPS_PER_S,
            seconds,
            levels: vec![groups],
            stream_max_len: tandem_config::RedisConfig::default().stream_max_len as usize,
            prefill_entries: prefill,
        };
        let mut row = bench_groups(&options)?;
        let row = row.pop().context("no level measured")?;
        let saturated = row.achieved_ratio < SATURATED_BELOW;
        rows.push(row);
        if saturated {
            break;
        }
    }
    let carried = rows
        .iter()
        .filter(|r| r.achieved_ratio >= SATURATED_BELOW)
        .max_by_key(|r| r.groups);
    Ok(GroupsReport {
        open_files,
        carried: carried.map_or(0, |r| r.groups),
        carried_cpu_cores: carried.map_or(0.0, |r| r.redis_cpu_cores),
        levels: rows,
    })
}

/// What waiting for a replica costs an append.
#[derive(Clone, Debug, Serialize)]
pub(super) struct WaitReport {
    /// Appends per setting.
    pub appends: usize,
    /// `append_step` with `wait_replicas = 0`, µs.
    pub no_wait_us: Summary,
    /// `append_step` with `wait_replicas = 1` (the replica on loopback), µs.
    pub wait_one_us: Summary,
    /// `wait_one_us.p50 / no_wait_us.p50`.
    pub ratio_p50: f64,
}

/// Appends with and without waiting for the replica of a primary started here (both with
/// their append-only file on), interleaved.
///
/// # Errors
/// When Redis does not start or an append fails.
pub(super) fn replication_wait(appends: usize) -> anyhow::Result<WaitReport> {
    let primary = RedisChild::start()?;
    let port = primary.port().to_string();
    let replica = RedisChild::start_with(&["--replicaof", "127.0.0.1", &port])?;
    let runtime = actix_rt::Runtime::new().context("cannot start an async runtime")?;
    let (no_wait, wait_one) = runtime.block_on(async {
        let mut config = DurableConfig::new(&primary.url, "wait-bench", 1);
        let plain = RedisLog::connect(&config).await?;
        config.wait = ReplicationWait {
            replicas: 1,
            timeout_ms: 1000,
        };
        let waited = RedisLog::connect(&config).await?;
        // The replica's first sync: the first waited append returns once it is done.
        let epoch = plain.next_epoch().await?;
        let started = std::time::Instant::now();
        loop {
            match waited.append_step(epoch, Step(0), &[], &[]).await {
                Ok(_) => break,
                Err(_) if started.elapsed() < std::time::Duration::from_secs(30) => {}
                Err(e) => return Err(anyhow::Error::from(e)),
            }
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for s in 0..appends as u64 {
            for (log, out) in [(&plain, &mut a), (&waited, &mut b)] {
                let t = std::time::Instant::now();
                log.append_step(epoch, Step(s), &[], &[outcome(epoch, s)])
                    .await?;
                out.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        Ok::<_, anyhow::Error>((a, b))
    })?;
    drop(replica);
    let no_wait_us = Summary::of(&no_wait);
    let wait_one_us = Summary::of(&wait_one);
    Ok(WaitReport {
        appends,
        ratio_p50: wait_one_us.p50 / no_wait_us.p50,
        no_wait_us,
        wait_one_us,
    })
}

fn outcome(epoch: tandem_proto::Epoch, seq: u64) -> tandem_proto::TaskOutcome {
    tandem_proto::TaskOutcome {
        task: tandem_proto::TaskId::new(epoch, seq),
        kind: tandem_proto::TaskKind::Store,
        request: tandem_proto::RequestId(seq),
        result: tandem_proto::OutcomeResult::Ok,
    }
}
