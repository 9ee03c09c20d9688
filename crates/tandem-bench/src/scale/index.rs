//! The group index at scale: memory per block and the cost of a lookup, an insert and an
//! eviction with 10^5, 10^6 and 10^7 blocks in it, and the leader's rebuild from every rank's
//! manifest at that size. Uses only the public API (`tandem_core::index::GroupIndex`,
//! `tandem_proto::RankBlocks`).
//!
//! Owns [`bench_index`] and its rows. Block hashes are uniformly random 128-bit values (as an
//! engine's digests are), drawn from a fixed seed. Each figure is a mean over a batch of
//! operations on an index of exactly the size named (inserts and evictions are measured at
//! that size and undone outside the timing); the baseline beside each is a `HashSet` of the
//! same hashes, the least a hash-keyed index can cost. Nothing is asserted.

use std::collections::HashSet;
use std::time::Instant;

use serde::Serialize;
use tandem_core::index::{GroupIndex, IndexConfig};
use tandem_proto::{BlockHash, Rank, RankBlocks, Tier};

use super::heap::heap_in_use;

/// One index size's figures.
#[derive(Clone, Debug, Serialize)]
pub struct IndexRow {
    /// Blocks in the index.
    pub blocks: u64,
    /// Heap bytes per block of the index built by `begin_store` + `finish_store`.
    pub bytes_per_block: f64,
    /// Heap bytes per block of a `HashSet<BlockHash>` of the same blocks (baseline).
    pub hashset_bytes_per_block: f64,
    /// Mean ns per `lookup_prefix` of one present block (random order).
    pub lookup_ns: f64,
    /// Mean ns per `HashSet::contains` of the same blocks (baseline).
    pub hashset_lookup_ns: f64,
    /// Mean ns per insert (`begin_store` + `finish_store`) with room in the tier.
    pub insert_ns: f64,
    /// Mean ns per insert into a full tier: the least recently used block is evicted (one
    /// `Move::Drop` planned).
    pub evict_ns: f64,
    /// ms to rebuild the index from `world_size` manifests of these blocks (every rank holds
    /// every block), decoding included: each manifest goes through postcard as the leader
    /// reads it from Redis.
    pub rebuild_ms: f64,
    /// The part of `rebuild_ms` spent decoding the manifests.
    pub rebuild_decode_ms: f64,
    /// Ranks whose manifests the rebuild intersects.
    pub world_size: u32,
    /// Bytes of one rank's manifest as published (postcard `RankBlocks`).
    pub manifest_bytes: u64,
}

/// A small xorshift generator: fast, seeded, good enough for spreading hashes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn hash(&mut self) -> BlockHash {
        BlockHash((u128::from(self.next()) << 64) | u128::from(self.next()))
    }
}

/// Runs the figures for each size in `sizes` (blocks), rebuilding from `world_size`
/// manifests; `batch` operations per timed figure.
pub fn bench_index(sizes: &[u64], world_size: u32, batch: usize) -> Vec<IndexRow> {
    sizes
        .iter()
        .map(|&n| one_size(n, world_size, batch))
        .collect()
}

fn one_size(n: u64, world_size: u32, batch: usize) -> IndexRow {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ n);
    let hashes: Vec<BlockHash> = (0..n).map(|_| rng.hash()).collect();
    let probes: Vec<BlockHash> = (0..batch)
        .map(|_| hashes[(rng.next() % n) as usize])
        .collect();
    let fresh: Vec<BlockHash> = (0..batch).map(|_| rng.hash()).collect();

    // Memory: the index with room for `n + batch` blocks, filled with `n`.
    let config = IndexConfig {
        world_size: 1,
        host_capacity_blocks: n + batch as u64,
        disk_capacity_blocks: 0,
    };
    let before = heap_in_use();
    let mut index = GroupIndex::new(config).expect("one rank");
    for &h in &hashes {
        let plan = index.begin_store(h).expect("room");
        index.finish_store(plan.pin).expect("finish");
    }
    let after = heap_in_use();
    let bytes_per_block = per_block(before, after, n);

    // Lookup: present blocks in random order.
    let t = Instant::now();
    let mut found = 0usize;
    for h in &probes {
        found += index.lookup_prefix(std::slice::from_ref(h));
    }
    let lookup_ns = ns_per(t, batch);
    assert_eq!(found, batch, "every probe is present");

    // Insert with room: `batch` new blocks, then dropped again outside the timing.
    let t = Instant::now();
    for &h in &fresh {
        let plan = index.begin_store(h).expect("room");
        index.finish_store(plan.pin).expect("finish");
    }
    let insert_ns = ns_per(t, batch);
    for &h in &fresh {
        index.drop_block(h);
    }
    drop(index);

    // Eviction: an index whose tier is exactly full; each insert evicts the oldest block.
    let full = IndexConfig {
        world_size: 1,
        host_capacity_blocks: n,
        disk_capacity_blocks: 0,
    };
    let mut index = GroupIndex::new(full).expect("one rank");
    for &h in &hashes {
        let plan = index.begin_store(h).expect("room");
        index.finish_store(plan.pin).expect("finish");
    }
    let t = Instant::now();
    let mut evicted = 0usize;
    for &h in &fresh {
        let plan = index.begin_store(h).expect("an unpinned block to evict");
        evicted += plan.moves.len();
        index.finish_store(plan.pin).expect("finish");
    }
    let evict_ns = ns_per(t, batch);
    assert_eq!(evicted, batch, "one eviction per insert");
    drop(index);

    // Baseline: a HashSet of the same hashes.
    let before = heap_in_use();
    let set: HashSet<BlockHash> = hashes.iter().copied().collect();
    let after = heap_in_use();
    let hashset_bytes_per_block = per_block(before, after, n);
    let t = Instant::now();
    let hits = probes.iter().filter(|h| set.contains(h)).count();
    let hashset_lookup_ns = ns_per(t, batch);
    assert_eq!(hits, batch);
    drop(set);

    // Rebuild: every rank's manifest, encoded as published, decoded and intersected.
    // In hash order, as `Store::rank_blocks` lists a rank's manifest.
    let mut sorted = hashes.clone();
    sorted.sort_unstable();
    let manifest = RankBlocks {
        rank: Rank(0),
        blocks: sorted.iter().map(|&h| (h, Tier::Host)).collect(),
    };
    drop(sorted);
    let encoded: Vec<Vec<u8>> = (0..world_size)
        .map(|r| {
            let mut m = manifest.clone();
            m.rank = Rank(r);
            postcard::to_allocvec(&m).expect("encode")
        })
        .collect();
    drop(manifest);
    let manifest_bytes = encoded.first().map_or(0, |b| b.len() as u64);
    let config = IndexConfig {
        world_size,
        host_capacity_blocks: n,
        disk_capacity_blocks: 0,
    };
    let t = Instant::now();
    let ranks: Vec<RankBlocks> = encoded
        .iter()
        .map(|b| postcard::from_bytes(b).expect("decode"))
        .collect();
    let rebuild_decode_ms = t.elapsed().as_secs_f64() * 1e3;
    let rebuilt = GroupIndex::rebuild(config, &ranks).expect("rebuild");
    let rebuild_ms = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(rebuilt.kept as u64, n);

    IndexRow {
        blocks: n,
        bytes_per_block,
        hashset_bytes_per_block,
        lookup_ns,
        hashset_lookup_ns,
        insert_ns,
        evict_ns,
        rebuild_ms,
        rebuild_decode_ms,
        world_size,
        manifest_bytes,
    }
}

fn per_block(before: Option<u64>, after: Option<u64>, n: u64) -> f64 {
    match (before, after) {
        (Some(b), Some(a)) => a.saturating_sub(b) as f64 / n as f64,
        _ => f64::NAN,
    }
}

fn ns_per(t: Instant, ops: usize) -> f64 {
    t.elapsed().as_nanos() as f64 / ops.max(1) as f64
}
