//! `tandem up`: a local cluster in the foreground until Ctrl-C or SIGTERM (also during its
//! start-up), or until its supervisor gives up on the group (exit code 3).

use crate::local::{Cancelled, LocalCluster, LocalSpec};

/// The model of a local cluster: one layer and one KV head per rank, so that a shard is
/// `2 × head_dim × dtype_bytes × tokens_per_block` bytes (64 KiB here).
pub(crate) fn small_model(pp: u32, tp: u32, head_dim: u32) -> String {
    format!("num_layers = {pp}\nnum_kv_heads = {tp}\nhead_dim = {head_dim}\ndtype_bytes = 2")
}

pub(crate) fn run(pp: u32, tp: u32, host_capacity: u64, disk_capacity: u64) -> anyhow::Result<()> {
    let shutdown = crate::signals::shutdown_on_signals()?;
    let spec = LocalSpec {
        pp,
        tp,
        host_capacity_blocks: host_capacity,
        disk_capacity_blocks: disk_capacity,
        tokens_per_block: 512,
        model_toml: small_model(pp, tp, 32),
        heartbeat_ms: (100, 500),
        max_restarts: tandem_config::SupervisorConfig::default().max_restarts,
        dir: None,
    };
    eprintln!(
        "starting a local cluster: {} ranks (pp {pp} × tp {tp}) ...",
        pp * tp
    );
    let mut cluster = match LocalCluster::start_until(&spec, shutdown) {
        Ok(c) => c,
        Err(e) if e.is::<Cancelled>() => {
            eprintln!("{e}: stopped everything");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    println!(
        "tandem is up: {} ranks, epoch {}",
        cluster.world_size(),
        cluster
            .supervisor_status()
            .map(|s| s["epoch"].clone())
            .unwrap_or_default()
    );
    println!(
        "  supervisor status: http://{}/status  (ready: /readyz)",
        cluster.supervisor_http()
    );
    for r in 0..cluster.world_size() {
        println!(
            "  rank {r}: http://{}/status   engine socket {}",
            cluster.agent_http(r),
            cluster.socket(r).display()
        );
    }
    println!("  redis: {}", tandem_config::redact_url(&cluster.redis_url));
    println!("  files and logs: {}", cluster.dir().display());
    println!("Ctrl-C stops everything.");
    let outcome = cluster.wait_for_shutdown();
    eprintln!("stopping ...");
    cluster.stop();
    outcome
}
