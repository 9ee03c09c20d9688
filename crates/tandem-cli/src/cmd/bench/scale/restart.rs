//! `tandem bench scale`, restart: an agent with a disk tier full of blocks against the same
//! agent with an empty tier of the same size, from process start to `/readyz` 200, and the
//! part of it that grows with the tier (opening the store) on its own, with what an open
//! that read every shard back (before the manifest was trusted) costs beside it.
//!
//! Owns the trials and the agent's configuration: one rank (pp 1 × tp 1) on a Redis of its
//! own, a small host tier, the disk tier under test. Each trial moves the group to a new
//! epoch (what the supervisor does when it restarts a group), then starts the agent and
//! times it to `/readyz` 200: it opens its store, connects, recovers the completion stream,
//! publishes its manifest, reads every rank's back and rebuilds the group index from them,
//! which is the whole path of a restart that depends on the tier. The supervisor's failure
//! detection before it (a heartbeat timeout, `tandem bench recovery`) does not. Full and
//! empty trials alternate, on two groups of the same Redis.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use tandem_bench::scale::{fill_disk_tier, time_open, time_scrub, Fill, Filled};
use tandem_proto::ids::Rank;
use tandem_store::disk::IoMode;
use tandem_store::store::StoreConfig;

use tandem_durable::{DurableConfig, EpochStore, RedisLog};

use crate::cmd::bench::redis::RedisChild;
use crate::cmd::bench::stats::Summary;
use crate::local::http_get;

/// Tokens per block of the agent under test; the shard size follows from the head size.
const TOKENS_PER_BLOCK: usize = 16;
/// Bytes per token of one head dimension: 4 layers × 8 KV heads × K and V × 2 bytes.
const BYTES_PER_HEAD_DIM_TOKEN: usize = 4 * 8 * 2 * 2;
/// Host tier blocks of the agent (small: the disk tier is under test).
const HOST_BLOCKS: u64 = 16;
/// Agent restarts per kind of tier: the figures are a few ms on a shared machine whose
/// noise is as large, so the median of nine.
const TRIALS: usize = 9;
/// Longest an agent may take to become ready.
const READY_DEADLINE: Duration = Duration::from_secs(120);

/// The restart figures.
#[derive(Clone, Debug, Serialize)]
pub(super) struct RestartReport {
    /// Bytes of one shard (one slot of the tier).
    pub shard_bytes: usize,
    /// The full tier as filled.
    pub full: Filled,
    /// The empty baseline as filled.
    pub empty: Filled,
    /// Agent process start → `/readyz` 200 with the full tier, ms.
    pub agent_full_ms: Summary,
    /// The same with the empty tier, ms.
    pub agent_empty_ms: Summary,
    /// `agent_full_ms.p50 / agent_empty_ms.p50` (target ≤ 1.5).
    pub agent_ratio: f64,
    /// `Store::open` of the full tier, ms.
    pub open_full_ms: Summary,
    /// `Store::open` of the empty tier, ms.
    pub open_empty_ms: Summary,
    /// Open and read every shard back (what an open did before), ms, once.
    pub open_and_scrub_full_ms: f64,
    /// Shards the scrub verified.
    pub scrub_verified: usize,
}

fn store_config(root: &Path, which: &str, disk_blocks: u64, shard_bytes: usize) -> StoreConfig {
    StoreConfig {
        rank: Rank(0),
        shard_bytes,
        host_capacity_blocks: HOST_BLOCKS,
        disk_capacity_blocks: disk_blocks,
        host_dir: root.join(which).join("host"),
        disk_dir: root.join(which).join("disk"),
        disk_io: IoMode::Buffered,
        layout: Default::default(),
    }
}

/// Fills the tiers, then times opens and agent restarts.
///
/// # Errors
/// When a tier cannot be filled or an agent does not become ready.
pub(super) fn run(
    root: &Path,
    tier_bytes: u64,
    shard_kib: usize,
    fill: Fill,
) -> anyhow::Result<RestartReport> {
    // The shard is a whole number of head dimensions: round the size asked for down to one.
    let head_dim = ((shard_kib << 10) / (TOKENS_PER_BLOCK * BYTES_PER_HEAD_DIM_TOKEN)).max(1);
    let shard_bytes = head_dim * TOKENS_PER_BLOCK * BYTES_PER_HEAD_DIM_TOKEN;
    let blocks = tier_bytes / shard_bytes as u64;
    let full_cfg = store_config(root, "full", blocks, shard_bytes);
    let empty_cfg = store_config(root, "empty", blocks, shard_bytes);
    eprintln!(
        "tandem bench scale: filling a {:.1} GiB disk tier ({blocks} blocks of {} KiB, {fill:?}) ...",
        tier_bytes as f64 / (1u64 << 30) as f64,
        shard_bytes >> 10
    );
    let full = fill_disk_tier(&full_cfg, fill, 1)?;
    let empty = fill_disk_tier(&empty_cfg, Fill::Empty, 2)?;

    let mut open_full = Vec::new();
    let mut open_empty = Vec::new();
    for _ in 0..TRIALS {
        open_full.push(time_open(&full_cfg)?.0);
        open_empty.push(time_open(&empty_cfg)?.0);
    }
    eprintln!("tandem bench scale: reading every shard back once (the open before) ...");
    let (scrub_ms, scrub_verified) = time_scrub(&full_cfg)?;

    let redis = RedisChild::start()?;
    let full_conf = write_config(root, "full", &full_cfg, head_dim, &redis.url)?;
    let empty_conf = write_config(root, "empty", &empty_cfg, head_dim, &redis.url)?;
    let runtime = actix_rt::Runtime::new().context("cannot start an async runtime")?;
    let mut agent_full = Vec::new();
    let mut agent_empty = Vec::new();
    for _ in 0..TRIALS {
        for (conf, out) in [
            (&full_conf, &mut agent_full),
            (&empty_conf, &mut agent_empty),
        ] {
            runtime.block_on(next_epoch(&redis.url, &conf.2))?;
            out.push(agent_to_ready(conf)?);
        }
    }
    drop(redis);
    let agent_full_ms = Summary::of(&agent_full);
    let agent_empty_ms = Summary::of(&agent_empty);
    Ok(RestartReport {
        shard_bytes,
        agent_ratio: agent_full_ms.p50 / agent_empty_ms.p50,
        full,
        empty,
        agent_full_ms,
        agent_empty_ms,
        open_full_ms: Summary::of(&open_full),
        open_empty_ms: Summary::of(&open_empty),
        open_and_scrub_full_ms: scrub_ms,
        scrub_verified,
    })
}

/// Moves `group` (one rank) to a new epoch, as its supervisor does at a restart.
async fn next_epoch(url: &str, group: &str) -> anyhow::Result<()> {
    let log = RedisLog::connect(&DurableConfig::new(url, group, 1)).await?;
    log.next_epoch().await?;
    Ok(())
}

/// The agent's configuration for one tier: its path, HTTP port and group name.
fn write_config(
    root: &Path,
    which: &str,
    store: &StoreConfig,
    head_dim: usize,
    redis_url: &str,
) -> anyhow::Result<(PathBuf, u16, String)> {
    let port = |()| -> anyhow::Result<u16> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    };
    let (leader, http) = (port(())?, port(())?);
    let dir = root.join(which);
    let text = format!(
        r#"[group]
id = "scale-{which}"
secret = "scale-bench-secret-0123456789abcdef"
pp_size = 1
tp_size = 1
tokens_per_block = {TOKENS_PER_BLOCK}

[model]
num_layers = 4
num_kv_heads = 8
head_dim = {head_dim}
dtype_bytes = 2

[store]
host_capacity_blocks = {host}
disk_capacity_blocks = {disk}
host_dir = "{host_dir}"
disk_dir = "{disk_dir}"

[network]
leader_addr = "127.0.0.1:{leader}"
http_base_port = {http}
engine_socket_dir = "{dir}/sock"

[redis]
url = "{redis_url}"

[log]
level = "warn"
"#,
        host = store.host_capacity_blocks,
        disk = store.disk_capacity_blocks,
        host_dir = store.host_dir.display(),
        disk_dir = store.disk_dir.display(),
        dir = dir.display(),
    );
    let path = dir.join("tandem.toml");
    std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
    let cfg = tandem_config::load(Some(&path), &tandem_config::Overrides::default())?;
    let shard = cfg.shard_layout()?.shard_bytes;
    if shard != store.shard_bytes as u64 {
        bail!(
            "the agent's shard is {shard} bytes, the tier's {}",
            store.shard_bytes
        );
    }
    Ok((path, http, format!("scale-{which}")))
}

/// Starts `tandem agent --rank 0` on `config` and returns ms until `/readyz` answers 200;
/// then stops it (SIGTERM, then SIGKILL) and waits for it.
fn agent_to_ready(config: &(PathBuf, u16, String)) -> anyhow::Result<f64> {
    let exe = std::env::current_exe().context("cannot find the tandem binary")?;
    let started = Instant::now();
    let mut child = Command::new(exe)
        .args(["agent", "--rank", "0", "--config"])
        .arg(&config.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start an agent")?;
    let url = format!("http://127.0.0.1:{}/readyz", config.1);
    let ready = loop {
        if matches!(http_get(&url), Some((200, _))) {
            break Some(started.elapsed().as_secs_f64() * 1e3);
        }
        if started.elapsed() > READY_DEADLINE || child.try_wait()?.is_some() {
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let stop = Instant::now();
    while child.try_wait()?.is_none() {
        if stop.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    ready.ok_or_else(|| {
        anyhow::anyhow!(
            "the agent on {} was not ready within {READY_DEADLINE:?}",
            config.0.display()
        )
    })
}

/// Free bytes on the file system of `dir` (`statvfs`), `None` when it cannot be read.
pub(super) fn free_bytes(dir: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs with a valid path and a zeroed struct.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::statvfs(c.as_ptr(), &mut s) } == 0)
        .then(|| s.f_bavail as u64 * s.f_frsize as u64)
}
