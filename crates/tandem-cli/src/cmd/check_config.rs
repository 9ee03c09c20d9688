//! `tandem check-config FILE`: validate and print the effective configuration.

use std::path::Path;

use serde::Serialize;
use tandem_config::{load, Overrides, ShardLayout, TandemConfig};

/// What `check-config` prints: the effective configuration (secrets masked) and what follows
/// from it.
#[derive(Serialize)]
struct Report {
    effective: TandemConfig,
    derived: Derived,
}

#[derive(Serialize)]
struct Derived {
    world_size: u32,
    shard_layout: ShardLayout,
    /// Bytes of one block shard on one rank.
    shard_bytes: u64,
    /// Bytes the host tier preallocates on each rank.
    host_tier_bytes: u64,
    /// Bytes the disk tier preallocates on each rank.
    disk_tier_bytes: u64,
}

pub(super) fn run(file: &Path, json: bool) -> anyhow::Result<()> {
    let cfg = load(Some(file), &Overrides::default())?;
    let layout = cfg.shard_layout()?;
    let derived = Derived {
        world_size: cfg.group.world_size(),
        shard_layout: layout,
        shard_bytes: layout.shard_bytes,
        host_tier_bytes: layout
            .shard_bytes
            .saturating_mul(cfg.store.host_capacity_blocks),
        disk_tier_bytes: layout
            .shard_bytes
            .saturating_mul(cfg.store.disk_capacity_blocks),
    };
    let report = Report {
        effective: cfg.redacted(),
        derived,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("# {}: valid", file.display());
        println!("{}", toml::to_string(&report.effective)?);
        let d = &report.derived;
        println!("# derived");
        println!("world_size = {}", d.world_size);
        println!(
            "shard = {} layers x 2 (K,V) x {} KV heads x {} head_dim x {} bytes x {} tokens",
            d.shard_layout.layers_per_rank,
            d.shard_layout.kv_heads_per_rank,
            d.shard_layout.head_dim,
            d.shard_layout.dtype_bytes,
            d.shard_layout.tokens_per_block
        );
        println!(
            "shard_bytes = {} ({})",
            d.shard_bytes,
            human_bytes(d.shard_bytes)
        );
        println!(
            "host_tier_bytes = {} ({}) per rank",
            d.host_tier_bytes,
            human_bytes(d.host_tier_bytes)
        );
        println!(
            "disk_tier_bytes = {} ({}) per rank",
            d.disk_tier_bytes,
            human_bytes(d.disk_tier_bytes)
        );
    }
    Ok(())
}

/// Binary units (KiB = 1024 bytes), one decimal.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}
