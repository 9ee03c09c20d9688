//! Unit tests of the hit-ratio definition on hand-computed traces.

use super::*;

fn rec(timestamp: u64, input_length: u64, hash_ids: &[u64]) -> TraceRecord {
    TraceRecord {
        timestamp,
        input_length,
        output_length: 1,
        hash_ids: hash_ids.to_vec(),
    }
}

/// Five requests; per-request hits worked out by hand in the comments.
fn tiny_trace() -> Vec<TraceRecord> {
    vec![
        rec(0, 1300, &[1, 2, 3]), // cold: 0 blocks, 0 tokens
        rec(1, 1100, &[1, 2, 4]), // 1,2 hit, 4 misses: 2 blocks, 1024 tokens
        rec(2, 1300, &[1, 2, 3]), // full hit, partial last block of 276: 3 blocks, 1300 tokens
        rec(3, 600, &[5, 2]),     // 5 misses first: 0 (2 is cached but not a prefix)
        rec(4, 300, &[5]),        // partial single block of 300 tokens: 1 block, 300 tokens
    ]
}

#[test]
fn hand_computed_tiny_trace_with_unlimited_capacity() {
    let mut sim = PrefixCacheSim::new(Capacity::Unlimited);
    let per_request: Vec<(u64, u64)> = tiny_trace()
        .iter()
        .map(|r| {
            let hits = sim.observe(r);
            (hits.hit_blocks, hits.hit_tokens)
        })
        .collect();
    assert_eq!(
        per_request,
        vec![(0, 0), (2, 1024), (3, 1300), (0, 0), (1, 300)]
    );
    let totals = sim.totals();
    assert_eq!(
        totals,
        HitTotals {
            requests: 5,
            hit_blocks: 6,
            blocks: 12,
            hit_tokens: 2624,
            input_tokens: 4600,
            evictions: 0,
        }
    );
    assert_eq!(totals.block_prefix_hit_ratio(), 0.5);
    assert_eq!(totals.token_prefix_hit_ratio(), 2624.0 / 4600.0);
    assert_eq!(sim.cached_blocks(), 5);
}

#[test]
fn lru_eviction_lowers_hits_on_a_crafted_trace() {
    // A, B, A again: with room for all four blocks the second A hits both of its blocks; with
    // three, inserting B's second block evicts A's head (block 1), so the second A hits none.
    let trace = vec![
        rec(0, 1024, &[1, 2]),
        rec(1, 1024, &[3, 4]),
        rec(2, 1024, &[1, 2]),
    ];
    let roomy = PrefixCacheSim::simulate(&trace, Capacity::Blocks(4), ArrivalOrder::File);
    let tight = PrefixCacheSim::simulate(&trace, Capacity::Blocks(3), ArrivalOrder::File);
    let unlimited = PrefixCacheSim::simulate(&trace, Capacity::Unlimited, ArrivalOrder::File);
    assert_eq!(roomy, unlimited);
    assert_eq!(
        (roomy.hit_blocks, roomy.hit_tokens, roomy.evictions),
        (2, 1024, 0)
    );
    // Evictions: 1 (by 4), then 2 (by 1) and 3 (by 2) when A comes back.
    assert_eq!(
        (tight.hit_blocks, tight.hit_tokens, tight.evictions),
        (0, 0, 3)
    );
    assert!(tight.token_prefix_hit_ratio() < roomy.token_prefix_hit_ratio());
}

#[test]
fn a_hit_touches_so_the_block_survives_the_next_eviction() {
    // Capacity 3: 1, 2, 3 fill it; 1 hits (and becomes most recent); 4 evicts 2, not 1.
    let trace = [
        rec(0, 512, &[1]),
        rec(1, 512, &[2]),
        rec(2, 512, &[3]),
        rec(3, 512, &[1]),
        rec(4, 512, &[4]),
        rec(5, 512, &[1]),
        rec(6, 512, &[2]),
    ];
    let mut sim = PrefixCacheSim::new(Capacity::Blocks(3));
    let hits: Vec<u64> = trace.iter().map(|r| sim.observe(r).hit_blocks).collect();
    assert_eq!(hits, vec![0, 0, 0, 1, 0, 1, 0]);
}

#[test]
fn zero_capacity_never_hits() {
    let totals = PrefixCacheSim::simulate(&tiny_trace(), Capacity::Blocks(0), ArrivalOrder::File);
    assert_eq!((totals.hit_blocks, totals.hit_tokens), (0, 0));
    assert_eq!(totals.input_tokens, 4600);
}

#[test]
fn matched_blocks_peeks_without_changing_anything() {
    let mut sim = PrefixCacheSim::new(Capacity::Blocks(2));
    sim.observe(&rec(0, 1024, &[1, 2]));
    assert_eq!(sim.matched_blocks(&[1, 2, 9]), 2);
    assert_eq!(sim.matched_blocks(&[2, 1]), 2);
    assert_eq!(sim.matched_blocks(&[9, 1]), 0);
    assert_eq!(sim.totals().requests, 1);
    assert_eq!(sim.capacity(), Capacity::Blocks(2));
}

#[test]
fn arrival_order_matters_only_through_partial_blocks_and_eviction() {
    // Same blocks, the later-in-file request is earlier in time and ends in a partial block.
    let trace = vec![rec(10, 1024, &[1, 2]), rec(5, 600, &[1, 2])];
    let file = PrefixCacheSim::simulate(&trace, Capacity::Unlimited, ArrivalOrder::File);
    let by_time = PrefixCacheSim::simulate(&trace, Capacity::Unlimited, ArrivalOrder::Timestamp);
    // Block hits do not depend on order with unlimited capacity (total − distinct blocks)...
    assert_eq!(file.hit_blocks, 2);
    assert_eq!(by_time.hit_blocks, 2);
    // ...but which copy of the block pays the miss does, when the copies differ in tokens.
    assert_eq!(file.hit_tokens, 600);
    assert_eq!(by_time.hit_tokens, 1024);
}

#[test]
fn empty_totals_have_zero_ratios() {
    let totals = HitTotals::default();
    assert_eq!(totals.token_prefix_hit_ratio(), 0.0);
    assert_eq!(totals.block_prefix_hit_ratio(), 0.0);
}
