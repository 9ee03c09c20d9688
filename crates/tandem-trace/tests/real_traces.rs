//! The published Mooncake FAST'25 traces as the repository ships them (gzip, in
//! `data/traces/`, see its README): they decompress and parse fully, and their hit ratios
//! under the simulator match figures computed independently (a separate script, same
//! definition).
//!
//! Set `TANDEM_TRACE_DIR` to read the traces from elsewhere (plain `.jsonl` files there are
//! read when the `.jsonl.gz` ones are absent).

use std::path::PathBuf;
use tandem_trace::{
    open_trace, read_trace_file, ArrivalOrder, Capacity, Compression, HitTotals, MalformedPolicy,
    PrefixCacheSim, Trace, TraceFile,
};

const CONVERSATION: &str = "mooncake_conversation_trace.jsonl";
const SYNTHETIC: &str = "mooncake_synthetic_trace.jsonl";

fn trace_path(name: &str) -> PathBuf {
    let dir = std::env::var_os("TANDEM_TRACE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/traces"));
    let gz = dir.join(format!("{name}.gz"));
    if gz.exists() {
        gz
    } else {
        dir.join(name)
    }
}

fn load(name: &str) -> Trace {
    let path = trace_path(name);
    read_trace_file(&path, MalformedPolicy::Fail)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn print_figures(name: &str, totals: &HitTotals) {
    println!(
        "{name}: {} requests, token_prefix_hit_ratio {:.4} ({}/{} tokens), \
         block_prefix_hit_ratio {:.4} ({}/{} blocks)",
        totals.requests,
        totals.token_prefix_hit_ratio(),
        totals.hit_tokens,
        totals.input_tokens,
        totals.block_prefix_hit_ratio(),
        totals.hit_blocks,
        totals.blocks,
    );
}

#[test]
fn both_traces_parse_fully_and_cleanly() {
    for (name, count) in [(CONVERSATION, 12_031), (SYNTHETIC, 3_993)] {
        let trace = load(name);
        assert_eq!(trace.records.len(), count, "{name}");
        let report = &trace.report;
        assert_eq!(
            (report.records, report.lines),
            (count as u64, count as u64),
            "{name}"
        );
        assert_eq!(report.blank_lines, 0);
        assert_eq!(report.missing_output_length, 0);
        assert_eq!(report.out_of_order_timestamps, 0);
        assert_eq!(report.extra_field_lines, 0);
        assert!(report.malformed.is_empty());
        assert!(trace.records.iter().all(|r| r.is_consistent()));
    }
}

#[test]
fn the_shipped_traces_are_gzip() {
    if std::env::var_os("TANDEM_TRACE_DIR").is_some() {
        return; // Only the repository's own copies are known to be gzip.
    }
    for name in [CONVERSATION, SYNTHETIC] {
        let path = trace_path(name);
        let file = TraceFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(file.compression(), Compression::Gzip, "{}", path.display());
    }
}

#[test]
fn streaming_reader_counts_the_same_records() {
    let path = trace_path(SYNTHETIC);
    let mut reader = open_trace(&path, MalformedPolicy::Fail)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut input_tokens = 0u64;
    for record in reader.by_ref() {
        input_tokens += record.expect("clean trace").input_length;
    }
    assert_eq!(reader.report().records, 3_993);
    assert_eq!(reader.line(), 3_993);
    assert_eq!(input_tokens, 61_194_628);
}

#[test]
fn unlimited_capacity_figures_near_the_papers_table_2() {
    let conversation = load(CONVERSATION);
    let synthetic = load(SYNTHETIC);
    let conv = PrefixCacheSim::simulate(
        &conversation.records,
        Capacity::Unlimited,
        ArrivalOrder::File,
    );
    let synth =
        PrefixCacheSim::simulate(&synthetic.records, Capacity::Unlimited, ArrivalOrder::File);
    print_figures("conversation", &conv);
    print_figures("synthetic", &synth);

    assert_eq!(
        (conv.hit_tokens, conv.input_tokens),
        (54_098_411, 144_793_823)
    );
    assert_eq!((conv.hit_blocks, conv.blocks), (105_710, 288_500));
    assert_eq!(
        (synth.hit_tokens, synth.input_tokens),
        (39_852_661, 61_194_628)
    );
    assert_eq!((synth.hit_blocks, synth.blocks), (77_953, 121_877));
    // Paper, Table 2: about 40% and about 66%.
    assert!((0.35..0.42).contains(&conv.token_prefix_hit_ratio()));
    assert!((0.62..0.69).contains(&synth.token_prefix_hit_ratio()));

    // Both files are sorted by timestamp, so both arrival orders agree.
    for (trace, totals) in [(&conversation, conv), (&synthetic, synth)] {
        let by_time =
            PrefixCacheSim::simulate(&trace.records, Capacity::Unlimited, ArrivalOrder::Timestamp);
        assert_eq!(by_time, totals);
    }
}

#[test]
fn bounded_capacity_lowers_hits_and_enough_capacity_equals_unlimited() {
    let conversation = load(CONVERSATION);
    let records = &conversation.records;
    let unlimited = PrefixCacheSim::simulate(records, Capacity::Unlimited, ArrivalOrder::File);
    let bounded = PrefixCacheSim::simulate(records, Capacity::Blocks(16_384), ArrivalOrder::File);
    print_figures("conversation, 16384 blocks", &bounded);
    assert_eq!(
        (bounded.hit_tokens, bounded.hit_blocks),
        (39_206_322, 76_613)
    );
    assert_eq!(bounded.evictions, 195_503);
    assert!(bounded.token_prefix_hit_ratio() < unlimited.token_prefix_hit_ratio());

    // 182,790 distinct blocks: a cache that large never evicts.
    let distinct = unlimited.blocks - unlimited.hit_blocks;
    assert_eq!(distinct, 182_790);
    let roomy = PrefixCacheSim::simulate(records, Capacity::Blocks(distinct), ArrivalOrder::File);
    assert_eq!(roomy, unlimited);
}
