//! The expected prefix-cache hit ratios of a request stream: the definition `tandem replay`
//! reports and cross-checks the cluster against.
//!
//! For each request, in arrival order:
//! 1. its hit blocks are the leading run of its `hash_ids` already cached (prefix semantics:
//!    counting stops at the first miss, even if later blocks happen to be cached);
//! 2. its hit tokens are the tokens of those blocks, the partial last block counted by its
//!    tokens (`input_length − 512·(n−1)`), so hit tokens are `min(512·hits, input_length)`;
//! 3. then every one of its blocks becomes cached, in `hash_ids` order: a cached block is
//!    touched, a missing one is inserted (evicting the least recently used block when the
//!    capacity is full). So after a request its head block is the least recently used of its
//!    blocks; a cluster index that evicts the same way reproduces these figures exactly.
//!
//! `token_prefix_hit_ratio = Σ hit tokens / Σ input tokens` and
//! `block_prefix_hit_ratio = Σ hit blocks / Σ blocks`, over all requests.
//!
//! The model assumes a request's blocks are cached before the next request arrives (prefill
//! is instantaneous and every store succeeds), so two requests with the same timestamp share
//! blocks in file order. This module is pure: no IO, no clocks; arrival order is decided by
//! the caller or by [`ArrivalOrder`].

use crate::lru::LruBlockSet;
use crate::record::TraceRecord;

/// How many blocks the simulated cache holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Capacity {
    /// Every block ever seen stays cached.
    #[default]
    Unlimited,
    /// At most this many blocks; inserting beyond it evicts the least recently used.
    Blocks(u64),
}

/// The order in which [`PrefixCacheSim::simulate`] feeds requests to the cache.
///
/// [`ArrivalOrder::File`] is the default because `tandem replay` streams requests in file
/// order (it cannot sort a stream without reading it whole), and the expected figures must be
/// computed in the order the cluster saw. Both published Mooncake traces have non-decreasing
/// timestamps, so both orders give identical figures on them (tested).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArrivalOrder {
    /// Lines in file order.
    #[default]
    File,
    /// Stable sort by `timestamp` (ms); requests with equal timestamps keep file order.
    Timestamp,
}

/// What one request hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestHits {
    /// Leading blocks of the request already cached on arrival.
    pub hit_blocks: u64,
    /// Blocks of the request (`hash_ids.len()`).
    pub blocks: u64,
    /// Tokens covered by the hit blocks (partial last block by its tokens).
    pub hit_tokens: u64,
    /// Prompt tokens of the request (`input_length`).
    pub input_tokens: u64,
}

/// Hit totals over the requests observed so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HitTotals {
    /// Requests observed.
    pub requests: u64,
    /// Σ hit blocks.
    pub hit_blocks: u64,
    /// Σ blocks.
    pub blocks: u64,
    /// Σ hit tokens.
    pub hit_tokens: u64,
    /// Σ input tokens.
    pub input_tokens: u64,
    /// Blocks evicted by the LRU (0 with unlimited capacity).
    pub evictions: u64,
}

impl HitTotals {
    /// Adds one request's hits.
    pub fn add(&mut self, hits: RequestHits) {
        self.requests += 1;
        self.hit_blocks += hits.hit_blocks;
        self.blocks += hits.blocks;
        self.hit_tokens += hits.hit_tokens;
        self.input_tokens += hits.input_tokens;
    }

    /// Σ hit tokens / Σ input tokens, in `[0, 1]`; 0 when no token was seen.
    pub fn token_prefix_hit_ratio(&self) -> f64 {
        ratio(self.hit_tokens, self.input_tokens)
    }

    /// Σ hit blocks / Σ blocks, in `[0, 1]`; 0 when no block was seen.
    pub fn block_prefix_hit_ratio(&self) -> f64 {
        ratio(self.hit_blocks, self.blocks)
    }
}

fn ratio(numerator: u64, denominator: u64) -> f64 {
    if denominator == 0 {
        0.0
    } else {
        numerator as f64 / denominator as f64
    }
}

/// A simulated prefix cache fed one request at a time, in arrival order.
#[derive(Debug, Clone, Default)]
pub struct PrefixCacheSim {
    capacity: Capacity,
    cache: LruBlockSet,
    totals: HitTotals,
}

impl PrefixCacheSim {
    /// An empty cache of the given capacity.
    pub fn new(capacity: Capacity) -> Self {
        let cache = match capacity {
            Capacity::Unlimited => LruBlockSet::unbounded(),
            Capacity::Blocks(blocks) => LruBlockSet::with_capacity(blocks),
        };
        PrefixCacheSim {
            capacity,
            cache,
            totals: HitTotals::default(),
        }
    }

    /// The capacity this cache was built with.
    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// Leading blocks of `hash_ids` cached now, without changing recency or totals.
    pub fn matched_blocks(&self, hash_ids: &[u64]) -> u64 {
        hash_ids
            .iter()
            .take_while(|&&hash| self.cache.contains(hash))
            .count() as u64
    }

    /// Counts `record`'s hits against the current cache, then caches all of its blocks
    /// (touching or inserting in `hash_ids` order). Returns the request's hits, which are
    /// also added to [`PrefixCacheSim::totals`].
    pub fn observe(&mut self, record: &TraceRecord) -> RequestHits {
        let hit_blocks = self.matched_blocks(&record.hash_ids);
        let hits = RequestHits {
            hit_blocks,
            blocks: record.blocks(),
            hit_tokens: record.prefix_tokens(hit_blocks),
            input_tokens: record.input_length,
        };
        for &hash in &record.hash_ids {
            self.cache.insert(hash);
        }
        self.totals.add(hits);
        self.totals.evictions = self.cache.evictions();
        hits
    }

    /// Totals over every request observed so far.
    pub fn totals(&self) -> HitTotals {
        self.totals
    }

    /// Blocks cached now.
    pub fn cached_blocks(&self) -> u64 {
        self.cache.len()
    }

    /// Feeds `records` to a fresh cache of `capacity` in `order` and returns the totals.
    pub fn simulate(records: &[TraceRecord], capacity: Capacity, order: ArrivalOrder) -> HitTotals {
        let mut sim = PrefixCacheSim::new(capacity);
        match order {
            ArrivalOrder::File => records.iter().for_each(|r| {
                sim.observe(r);
            }),
            ArrivalOrder::Timestamp => {
                let mut sorted: Vec<&TraceRecord> = records.iter().collect();
                sorted.sort_by_key(|r| r.timestamp);
                sorted.into_iter().for_each(|r| {
                    sim.observe(r);
                });
            }
        }
        sim.totals()
    }
}

#[cfg(test)]
#[path = "hit_tests.rs"]
mod tests;
