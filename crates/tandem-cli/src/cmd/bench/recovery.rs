//! `tandem bench recovery`: SIGKILL one agent → the supervisor's `/readyz` answers 200 with a
//! higher epoch, over repeated trials on a 4-rank local cluster with the default heartbeat
//! settings.
//!
//! Each trial kills the agent of rank `trial % 4` (leader and followers alike), takes `t0` just
//! before `kill(2)`, and polls `/readyz` every 2 ms; it records when the supervisor first stops
//! answering "ready in the old epoch" (detection) and when it answers ready in a new epoch.
//! The supervisor's restart limit (3 restarts in 60 s by default) would mark the group failed
//! after the third trial, so the cluster runs with `supervisor.restart_window_s = 1` and trials
//! start 1.2 s apart: every trial is an isolated first failure with the default backoff.
//! Owns the trials and their table; targets are printed, never asserted.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use super::report::{mark, Table};
use super::stats::{ratio, Summary};
use super::{BenchArgs, PartOutput};
use crate::cmd::up::small_model;
use crate::local::{http_get, LocalCluster, LocalSpec};

/// Ranks of the cluster.
const RANKS: u32 = 4;
/// Target: p50 ≤ this many ms.
const TARGET_MS: f64 = 1000.0;
/// The restart window set for the run, seconds.
const WINDOW_S: u64 = 1;

/// One trial.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Trial {
    /// The rank whose agent was killed.
    pub rank: u32,
    /// The epoch before.
    pub from_epoch: u64,
    /// The epoch the group was ready in after.
    pub to_epoch: u64,
    /// `t0` → `/readyz` first no longer "ready in the old epoch", ms.
    pub detected_ms: f64,
    /// `t0` → `/readyz` 200 in a higher epoch, ms.
    pub ready_ms: f64,
    /// The supervisor's own figure (failure seen → every rank joined), ms.
    pub supervisor_recovery_ms: Option<u64>,
}

/// The whole part.
#[derive(Clone, Debug, Serialize)]
pub(super) struct RecoveryReport {
    /// Ranks of the cluster.
    pub ranks: u32,
    /// Heartbeat interval and timeout used (the defaults), ms.
    pub heartbeat_interval_ms: u64,
    /// See `heartbeat_interval_ms`.
    pub heartbeat_timeout_ms: u64,
    /// `supervisor.restart_window_s` for the run.
    pub restart_window_s: u64,
    /// Kill → ready in the new epoch, ms.
    pub ready_ms: Summary,
    /// Kill → not ready in the old epoch any more, ms.
    pub detected_ms: Summary,
    /// `ready_ms.p50 / 1000` (target ≤ 1).
    pub ratio_to_target: f64,
    /// `ready_ms.p50 / heartbeat_timeout_ms`: recovery against the time a silent rank takes
    /// to be declared failed.
    pub ratio_to_heartbeat_timeout: f64,
    /// Every trial.
    pub trials: Vec<Trial>,
}

/// Run the trials.
///
/// # Errors
/// When the cluster does not start, or a trial does not recover within 30 s.
pub(super) fn run(args: &BenchArgs) -> anyhow::Result<PartOutput> {
    let trials = if args.quick { 5 } else { 20 };
    let hb = tandem_config::SupervisorConfig::default();
    let spec = LocalSpec {
        // Every trial kills an agent on purpose: no restart limit.
        max_restarts: 1_000_000,
        pp: 1,
        tp: RANKS,
        host_capacity_blocks: 64,
        disk_capacity_blocks: 0,
        tokens_per_block: 512,
        model_toml: small_model(1, RANKS, 1),
        heartbeat_ms: (hb.heartbeat_interval_ms, hb.heartbeat_timeout_ms),
        dir: None,
    };
    // The supervisor (and the agents it launches) read TANDEM__* overrides from the
    // environment they inherit; only the cluster started here sees this one.
    std::env::set_var("TANDEM__SUPERVISOR__RESTART_WINDOW_S", WINDOW_S.to_string());
    let cluster = LocalCluster::start(&spec);
    std::env::remove_var("TANDEM__SUPERVISOR__RESTART_WINDOW_S");
    let cluster = cluster?;
    let mut done = Vec::new();
    for i in 0..trials {
        std::thread::sleep(Duration::from_millis(WINDOW_S * 1000 + 200));
        let rank = i as u32 % RANKS;
        match trial(&cluster, rank) {
            Ok(t) => {
                eprintln!(
                    "  recovery: trial {}: rank {rank} killed, ready in epoch {} after {:.0} ms",
                    i + 1,
                    t.to_epoch,
                    t.ready_ms
                );
                done.push(t);
            }
            Err(e) => bail!(
                "trial {} (rank {rank}): {e:#}\n--- cluster log (last lines) ---\n{}",
                i + 1,
                cluster.log_tail(20)
            ),
        }
    }
    let ready: Vec<f64> = done.iter().map(|t| t.ready_ms).collect();
    let detected: Vec<f64> = done.iter().map(|t| t.detected_ms).collect();
    let ready_ms = Summary::of(&ready);
    let report = RecoveryReport {
        ranks: RANKS,
        heartbeat_interval_ms: hb.heartbeat_interval_ms,
        heartbeat_timeout_ms: hb.heartbeat_timeout_ms,
        restart_window_s: WINDOW_S,
        detected_ms: Summary::of(&detected),
        ratio_to_target: ratio(ready_ms.p50, TARGET_MS),
        ratio_to_heartbeat_timeout: ratio(ready_ms.p50, hb.heartbeat_timeout_ms as f64),
        ready_ms,
        trials: done,
    };
    Ok(PartOutput {
        table: table(&report),
        json: serde_json::to_value(&report)?,
    })
}

/// `/readyz`: `(ready, epoch)`, or `None` when the supervisor did not answer.
fn readyz(cluster: &LocalCluster) -> Option<(bool, u64)> {
    let (code, body) = http_get(&format!("http://{}/readyz", cluster.supervisor_http()))?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some((code == 200, v["epoch"].as_u64()?))
}

fn trial(cluster: &LocalCluster, rank: u32) -> anyhow::Result<Trial> {
    let wait = Instant::now();
    let (from_epoch, pid) = loop {
        if let (Some((true, epoch)), Some(pid)) = (readyz(cluster), cluster.agent_pid(rank)) {
            break (epoch, pid);
        }
        if wait.elapsed() > Duration::from_secs(30) {
            bail!("the group was not ready before the trial within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let t0 = Instant::now();
    // SAFETY: kill(2) on an agent process of the cluster this function was given.
    if unsafe { libc::kill(pid as i32, libc::SIGKILL) } != 0 {
        return Err(std::io::Error::last_os_error()).context("kill");
    }
    let mut detected = None;
    loop {
        let answer = readyz(cluster);
        let at = t0.elapsed();
        if detected.is_none() && answer != Some((true, from_epoch)) {
            detected = Some(at);
        }
        if let Some((true, epoch)) = answer {
            if epoch > from_epoch {
                let supervisor_recovery_ms = cluster
                    .supervisor_status()
                    .and_then(|s| s["last_recovery_ms"].as_u64());
                let ms = |d: Duration| d.as_secs_f64() * 1e3;
                return Ok(Trial {
                    rank,
                    from_epoch,
                    to_epoch: epoch,
                    detected_ms: ms(detected.unwrap_or(at)),
                    ready_ms: ms(at),
                    supervisor_recovery_ms,
                });
            }
        }
        if at > Duration::from_secs(30) {
            bail!("not ready in a new epoch within 30 s of the kill (last answer {answer:?})");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn table(r: &RecoveryReport) -> String {
    let mut t = Table::new(&[
        "ranks",
        "trials",
        "ready p50 ms",
        "p99 ms",
        "max ms",
        "detected p50 ms",
        "ratio to 1000 ms",
        "ratio to hb timeout",
    ]);
    t.row(vec![
        r.ranks.to_string(),
        r.ready_ms.n.to_string(),
        format!("{:.0}", r.ready_ms.p50),
        format!("{:.0}", r.ready_ms.p99),
        format!("{:.0}", r.ready_ms.max),
        format!("{:.0}", r.detected_ms.p50),
        format!(
            "{:.2} {}",
            r.ratio_to_target,
            mark(r.ready_ms.p50 <= TARGET_MS)
        ),
        format!("{:.2}", r.ratio_to_heartbeat_timeout),
    ]);
    format!(
        "recovery: SIGKILL one agent → supervisor /readyz 200 in a higher epoch (heartbeat {} ms, timeout {} ms, restart window {} s)\n{}target: p50 ≤ {TARGET_MS} ms\n",
        r.heartbeat_interval_ms,
        r.heartbeat_timeout_ms,
        r.restart_window_s,
        t.render()
    )
}
