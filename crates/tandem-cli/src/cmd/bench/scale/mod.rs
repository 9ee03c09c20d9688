//! `tandem bench scale`: what a large tier, a large index and many groups cost
//! (docs/SCALE.md).
//!
//! - **restart** ([`restart`]): an agent with a disk tier full of blocks (16 GiB by default,
//!   `--tier-gib`) against the same agent with an empty tier, start → ready; and the store's
//!   open alone, next to an open that reads every shard back (what it did before).
//! - **index**: the group index's bytes per block and ns per lookup, insert and eviction at
//!   10^5, 10^6 and 10^7 blocks against a `HashSet` of the same hashes, and the leader's
//!   rebuild from 8 ranks' manifests (`tandem_bench::scale::bench_index`).
//! - **redis** ([`redis`]): commands per step of one group under a replay, stream memory per
//!   entry, the most groups one `redis-server` carries at 50 steps per second each, and what
//!   waiting for a replica costs an append.
//!
//! Owns the part's order, its flags' defaults and its tables; targets are printed with
//! pass/fail marks, never asserted.

mod redis;
mod restart;

use anyhow::Context;
use serde_json::json;
use tandem_bench::scale::{bench_index, Fill, IndexRow};

use super::report::{mark, Table};
use super::{BenchArgs, PartOutput};

/// Target: restart with a full tier ≤ this × with an empty one.
const RESTART_TARGET: f64 = 1.5;
/// Target: index bytes per block at 10^7 blocks.
const BYTES_TARGET: f64 = 100.0;
/// Ranks whose manifests the rebuild intersects (a TP 8 group).
const REBUILD_RANKS: u32 = 8;

/// How the full tier is filled (`--tier-fill`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TierFill {
    /// Real shards when the disk has room for them (and 2 GiB more), sparse otherwise.
    Auto,
    /// Every shard written and synced.
    Real,
    /// No shard written (a sparse slab of zero shards, every one valid).
    Sparse,
}

/// Run the scale part.
///
/// # Errors
/// When a tier cannot be written, an agent or a cluster does not start.
pub(super) fn run(args: &BenchArgs) -> anyhow::Result<PartOutput> {
    let tier_gib = args.tier_gib.unwrap_or(if args.quick { 1.0 } else { 16.0 });
    let tier_bytes = (tier_gib * (1u64 << 30) as f64) as u64;
    let root = tempfile::Builder::new()
        .prefix("tandem-bench-scale-")
        .tempdir_in(args.disk_dir.clone().unwrap_or_else(std::env::temp_dir))
        .context("a directory for the tiers")?;
    let free = restart::free_bytes(root.path());
    let fill = match args.tier_fill {
        TierFill::Real => Fill::Real,
        TierFill::Sparse => Fill::Sparse,
        TierFill::Auto if free.is_some_and(|f| f > tier_bytes + (2 << 30)) => Fill::Real,
        TierFill::Auto => Fill::Sparse,
    };
    let restart = restart::run(root.path(), tier_bytes, args.shard_kib, fill)?;
    drop(root);

    let sizes: Vec<u64> = if args.quick {
        vec![100_000, 1_000_000]
    } else {
        vec![100_000, 1_000_000, 10_000_000]
    };
    eprintln!("tandem bench scale: group index at {sizes:?} blocks ...");
    let index = bench_index(&sizes, REBUILD_RANKS, 200_000);

    let ops = redis::ops_per_step(if args.quick { 150 } else { 600 })?;
    let levels: &[u32] = if args.quick {
        &[10, 40]
    } else {
        &[10, 25, 50, 100, 200, 400, 800]
    };
    let groups = redis::groups(levels, if args.quick { 4.0 } else { 10.0 })?;
    // The steady state: every stream at the default `stream_max_len`, which each trim scans.
    let steady_entries = if args.quick {
        10_000
    } else {
        tandem_config::RedisConfig::default().stream_max_len
    };
    let steady = redis::groups_with(&[10], if args.quick { 4.0 } else { 10.0 }, steady_entries)?;
    let wait = redis::replication_wait(if args.quick { 300 } else { 3000 })?;

    let mut table = render(&restart, fill, free, &index, &ops, &groups);
    if let Some(r) = steady.levels.first() {
        table += &format!(
            "\nsteady state: {} groups whose streams hold {} acknowledged entries each (the default stream_max_len, what every trim then scans): achieved {:.0} of {:.0} steps/s, redis {:.2} cores, {:.1} redis CPU µs/step (same groups on empty streams: the level of {} above)\n",
            r.groups, r.prefill_entries, r.achieved_steps_per_s, r.offered_steps_per_s * f64::from(r.groups), r.redis_cpu_cores, r.redis_cpu_us_per_step, r.groups
        );
    }
    table += &format!(
        "\nreplication wait: append_step on a primary with one replica on loopback (append-only files on), {} appends each, interleaved\nwait_replicas = 0: p50 {:.0} µs, p99 {:.0} µs; wait_replicas = 1: p50 {:.0} µs, p99 {:.0} µs; ratio p50 {:.2}\n",
        wait.appends, wait.no_wait_us.p50, wait.no_wait_us.p99, wait.wait_one_us.p50, wait.wait_one_us.p99, wait.ratio_p50
    );
    Ok(PartOutput {
        table,
        json: json!({
            "restart": restart,
            "tier_fill": fill,
            "disk_free_bytes": free,
            "index": index,
            "index_targets": index_targets(&index),
            "redis_ops": ops,
            "redis_groups": groups,
            "redis_steady_state": steady,
            "replication_wait": wait,
        }),
    })
}

/// `(bytes_per_block at the largest size ≤ 100, lookup growth vs log growth per size)`.
fn index_targets(index: &[IndexRow]) -> serde_json::Value {
    let base = index.first();
    let rows: Vec<_> = index
        .iter()
        .map(|r| {
            let (growth, log_growth) = growth(base, r);
            json!({"blocks": r.blocks, "lookup_growth": growth, "log_growth": log_growth,
                   "hashset_lookup_growth": base.map(|b| r.hashset_lookup_ns / b.hashset_lookup_ns)})
        })
        .collect();
    json!({
        "bytes_per_block_at_largest": index.last().map(|r| r.bytes_per_block),
        "bytes_target": BYTES_TARGET,
        "lookup_growth": rows,
    })
}

/// Lookup ns at `r` over the smallest size's, and log2 of the sizes' ratio of logs.
fn growth(base: Option<&IndexRow>, r: &IndexRow) -> (f64, f64) {
    match base {
        Some(b) => (
            r.lookup_ns / b.lookup_ns,
            (r.blocks as f64).log2() / (b.blocks as f64).log2(),
        ),
        None => (f64::NAN, f64::NAN),
    }
}

fn render(
    restart: &restart::RestartReport,
    fill: Fill,
    free: Option<u64>,
    index: &[IndexRow],
    ops: &redis::OpsReport,
    groups: &redis::GroupsReport,
) -> String {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let mut out = String::new();
    let mut t = Table::new(&[
        "tier",
        "blocks",
        "manifest KiB",
        "agent start→ready p50 ms",
        "p99 ms",
        "Store::open p50 ms",
        "open + read every shard ms",
    ]);
    for (name, f, agent, open, scrub) in [
        (
            "full",
            &restart.full,
            &restart.agent_full_ms,
            &restart.open_full_ms,
            Some(restart.open_and_scrub_full_ms),
        ),
        (
            "empty",
            &restart.empty,
            &restart.agent_empty_ms,
            &restart.open_empty_ms,
            None,
        ),
    ] {
        t.row(vec![
            name.into(),
            f.blocks.to_string(),
            format!("{:.0}", f.manifest_bytes as f64 / 1024.0),
            format!("{:.1}", agent.p50),
            format!("{:.1}", agent.p99),
            format!("{:.1}", open.p50),
            scrub.map_or(String::new(), |s| format!("{s:.0}")),
        ]);
    }
    out += &format!(
        "restart: one agent (1 rank, its own Redis; new epoch → agent start → ready) with a {:.1} GiB disk tier of {} KiB shards, full ({fill:?} fill, {:.0} s to write; disk free {}) against empty, {} trials each\n{}",
        gib(restart.full.slab_bytes),
        restart.shard_bytes >> 10,
        restart.full.seconds,
        free.map_or("unknown".into(), |f| format!("{:.1} GiB", gib(f))),
        restart.agent_full_ms.n,
        t.render()
    );
    out += &format!(
        "ratio full / empty (agent p50): {:.2} {} (target ≤ {RESTART_TARGET}), {:+.1} ms; reading every shard back would add {:.0} ms ({} shards)\n\n",
        restart.agent_ratio,
        mark(restart.agent_ratio <= RESTART_TARGET),
        restart.agent_full_ms.p50 - restart.agent_empty_ms.p50,
        restart.open_and_scrub_full_ms - restart.open_full_ms.p50,
        restart.scrub_verified
    );

    let mut t = Table::new(&[
        "blocks",
        "bytes/block",
        "HashSet bytes/block",
        "lookup ns",
        "HashSet lookup ns",
        "lookup growth",
        "log growth",
        "insert ns",
        "evict ns",
        "rebuild ms",
        "decode ms",
        "manifest MiB/rank",
    ]);
    let base = index.first();
    for r in index {
        let (g, lg) = growth(base, r);
        t.row(vec![
            r.blocks.to_string(),
            format!("{:.1}", r.bytes_per_block),
            format!("{:.1}", r.hashset_bytes_per_block),
            format!("{:.0}", r.lookup_ns),
            format!("{:.0}", r.hashset_lookup_ns),
            format!("{g:.2} {}", mark(g <= lg)),
            format!("{lg:.2}"),
            format!("{:.0}", r.insert_ns),
            format!("{:.0}", r.evict_ns),
            format!("{:.0}", r.rebuild_ms),
            format!("{:.0}", r.rebuild_decode_ms),
            format!("{:.1}", r.manifest_bytes as f64 / (1u64 << 20) as f64),
        ]);
    }
    let last = index.last();
    out += &format!(
        "index: GroupIndex (random 128-bit hashes) against a HashSet of the same hashes; rebuild from {REBUILD_RANKS} ranks' manifests (postcard, as published) including decoding\n{}bytes per block at {} blocks: {:.1} {} (target ≤ {BYTES_TARGET}); lookup growth = lookup ns / lookup ns at {} blocks (target ≤ log growth)\n\n",
        t.render(),
        last.map_or(0, |r| r.blocks),
        last.map_or(f64::NAN, |r| r.bytes_per_block),
        mark(last.is_some_and(|r| r.bytes_per_block <= BYTES_TARGET)),
        base.map_or(0, |r| r.blocks),
    );

    let mut t = Table::new(&["command", "calls/step"]);
    for (name, per) in &ops.by_command {
        t.row(vec![name.clone(), format!("{per:.2}")]);
    }
    out += &format!(
        "redis ops: a {}-rank group replaying {} synthetic requests ({} steps, {:.1} s), every process of the group counted by Redis: {:.2} commands/step\n{}stream: {} entries retained, {} bytes ({:.0} bytes/entry)\n\n",
        ops.ranks,
        ops.requests,
        ops.steps,
        ops.seconds,
        ops.commands_per_step,
        t.render(),
        ops.stream_entries,
        ops.stream_bytes,
        ops.stream_bytes as f64 / ops.stream_entries.max(1) as f64
    );

    let mut t = Table::new(&[
        "groups",
        "offered steps/s",
        "achieved steps/s",
        "ratio",
        "redis CPU cores",
        "generator CPU cores",
        "commands/s",
        "commands/step",
        "redis CPU µs/step",
        "append p50 µs",
        "p99 µs",
        "errors",
    ]);
    for r in &groups.levels {
        t.row(vec![
            r.groups.to_string(),
            format!("{:.0}", r.offered_steps_per_s * f64::from(r.groups)),
            format!("{:.0}", r.achieved_steps_per_s),
            format!("{:.2}", r.achieved_ratio),
            format!("{:.2}", r.redis_cpu_cores),
            format!("{:.2}", r.generator_cpu_cores),
            format!("{:.0}", r.redis_commands_per_s),
            format!("{:.1}", r.commands_per_step),
            format!("{:.1}", r.redis_cpu_us_per_step),
            format!("{:.0}", r.append_p50_us),
            format!("{:.0}", r.append_p99_us),
            r.errors.to_string(),
        ]);
    }
    out += &format!(
        "redis groups: synthetic 2-rank groups at {} steps/s each against one redis-server (append-only file on), same client code and cadence as agents and supervisors\n{}carried: {} groups at ≥ 95% of their steps (redis at {:.2} cores)\n",
        redis::STEPS_PER_S,
        t.render(),
        groups.carried,
        groups.carried_cpu_cores
    );
    out
}
