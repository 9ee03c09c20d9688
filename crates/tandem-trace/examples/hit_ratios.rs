//! Prints the prefix-cache hit ratios of the published Mooncake traces (and of the default
//! synthetic workload) with unlimited capacity and with LRU host capacities, as the Markdown
//! tables of docs/HIT_RATIOS.md.
//!
//! ```text
//! cargo run --release -p tandem-trace --example hit_ratios [TRACE_DIR]
//! ```
//! `TRACE_DIR` defaults to the repository's `data/traces` (the traces ship there gzip; plain
//! `.jsonl` files are read where no `.jsonl.gz` is).

use std::path::PathBuf;
use tandem_trace::{
    read_trace_file, ArrivalOrder, Capacity, HitTotals, MalformedPolicy, PrefixCacheSim,
    SynthWorkload, TraceRecord,
};

/// Host capacities for the published traces.
const TRACE_CAPACITIES: [Capacity; 6] = [
    Capacity::Blocks(256),
    Capacity::Blocks(1024),
    Capacity::Blocks(4096),
    Capacity::Blocks(16_384),
    Capacity::Blocks(65_536),
    Capacity::Unlimited,
];

/// Host capacities for the small synthetic workload (its working set is about 100 blocks).
const SYNTH_CAPACITIES: [Capacity; 6] = [
    Capacity::Blocks(16),
    Capacity::Blocks(32),
    Capacity::Blocks(64),
    Capacity::Blocks(128),
    Capacity::Blocks(256),
    Capacity::Unlimited,
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/traces"));
    let mut workloads: Vec<(String, Vec<TraceRecord>)> = Vec::new();
    for (label, file) in [
        ("conversation", "mooncake_conversation_trace.jsonl"),
        ("synthetic", "mooncake_synthetic_trace.jsonl"),
    ] {
        let gz = dir.join(format!("{file}.gz"));
        let path = if gz.exists() { gz } else { dir.join(file) };
        let trace = read_trace_file(&path, MalformedPolicy::Skip)?;
        let report = &trace.report;
        println!(
            "{label}: {} records from {} lines ({} blank, {} malformed, {} missing output_length, \
             {} out-of-order timestamps)",
            report.records,
            report.lines,
            report.blank_lines,
            report.malformed.len(),
            report.missing_output_length,
            report.out_of_order_timestamps
        );
        workloads.push((label.to_string(), trace.records));
    }
    let synth: Vec<TraceRecord> = SynthWorkload::new(SynthWorkload::DEFAULT_REQUESTS, 0).collect();
    workloads.push((format!("tandem synth ({} req, seed 0)", synth.len()), synth));

    println!("\n## Unlimited capacity\n");
    println!("| workload | requests | hit tokens / input tokens | token ratio | hit blocks / blocks | block ratio | file vs timestamp order |");
    println!("|---|---:|---:|---:|---:|---:|---|");
    for (label, records) in &workloads {
        let file = PrefixCacheSim::simulate(records, Capacity::Unlimited, ArrivalOrder::File);
        let by_time =
            PrefixCacheSim::simulate(records, Capacity::Unlimited, ArrivalOrder::Timestamp);
        println!(
            "| {label} | {} | {} / {} | {:.2}% | {} / {} | {:.2}% | {} |",
            file.requests,
            file.hit_tokens,
            file.input_tokens,
            100.0 * file.token_prefix_hit_ratio(),
            file.hit_blocks,
            file.blocks,
            100.0 * file.block_prefix_hit_ratio(),
            if file == by_time {
                "identical"
            } else {
                "differ"
            },
        );
    }

    let (traces, synthetic) = workloads.split_at(2);
    println!("\n## Hit ratio against host capacity (LRU, blocks of 512 tokens)\n");
    capacity_table(traces, &TRACE_CAPACITIES);
    println!("\n## The synthetic workload against small host capacities\n");
    capacity_table(synthetic, &SYNTH_CAPACITIES);
    Ok(())
}

/// One Markdown row per capacity, two columns (ratios, evictions) per workload.
fn capacity_table(workloads: &[(String, Vec<TraceRecord>)], capacities: &[Capacity]) {
    print!("| capacity (blocks) |");
    for (label, _) in workloads {
        print!(" {label}: token / block ratio | evictions |");
    }
    println!();
    println!("|---:|{}", "---:|---:|".repeat(workloads.len()));
    for &capacity in capacities {
        let name = match capacity {
            Capacity::Blocks(blocks) => blocks.to_string(),
            Capacity::Unlimited => "unlimited".to_string(),
        };
        print!("| {name} |");
        for (_, records) in workloads {
            let totals: HitTotals = PrefixCacheSim::simulate(records, capacity, ArrivalOrder::File);
            print!(
                " {:.2}% / {:.2}% | {} |",
                100.0 * totals.token_prefix_hit_ratio(),
                100.0 * totals.block_prefix_hit_ratio(),
                totals.evictions
            );
        }
        println!();
    }
}
