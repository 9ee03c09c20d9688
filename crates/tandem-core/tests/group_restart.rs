//! A group of ranks driven by the leader's index: blocks that stay in the tier they were
//! written to, eviction in one LRU order over both tiers, a full tier when everything is pinned, and a rebuild after restart that keeps
//! only blocks every rank's manifest still lists (a shard that rotted meanwhile is dropped
//! from the group at its first load).

use std::os::unix::fs::FileExt;
use std::path::Path;

use tandem_core::index::{GroupIndex, IndexConfig, IndexError};
use tandem_proto::ids::Rank;
use tandem_proto::TierOp;
use tandem_store::disk::IoMode;
use tandem_store::host::HOST_SLAB_FILE;
use tandem_store::store::{Store, StoreConfig, StoreError};
use tandem_store::{BlockHash, Tier};

const SHARD: usize = 8 * 1024 + 8;

/// Deterministic bytes for (rank, block): every rank's shard differs.
fn shard(rank: usize, hash: BlockHash) -> Vec<u8> {
    let mut x = hash.low64().wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (rank as u64 + 1);
    (0..SHARD)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

struct Group {
    dirs: Vec<(tempfile::TempDir, tempfile::TempDir)>,
    ranks: Vec<Store>,
    index: GroupIndex,
    host: u64,
    disk: u64,
}

fn rank_config(
    r: usize,
    dirs: &(tempfile::TempDir, tempfile::TempDir),
    host: u64,
    disk: u64,
) -> StoreConfig {
    StoreConfig {
        rank: Rank(r as u32),
        shard_bytes: SHARD,
        host_capacity_blocks: host,
        disk_capacity_blocks: disk,
        host_dir: dirs.0.path().to_path_buf(),
        disk_dir: dirs.1.path().to_path_buf(),
        disk_io: IoMode::Buffered,
        layout: Default::default(),
    }
}

impl Group {
    fn new(world: usize, host: u64, disk: u64) -> Group {
        let shm = Path::new("/dev/shm");
        let dirs: Vec<_> = (0..world)
            .map(|_| {
                let h = if shm.is_dir() {
                    tempfile::tempdir_in(shm)
                } else {
                    tempfile::tempdir()
                };
                (h.unwrap(), tempfile::tempdir().unwrap())
            })
            .collect();
        let ranks = dirs
            .iter()
            .enumerate()
            .map(|(r, d)| Store::open(rank_config(r, d, host, disk)).unwrap().0)
            .collect();
        let index = GroupIndex::new(IndexConfig {
            world_size: world as u32,
            host_capacity_blocks: host,
            disk_capacity_blocks: disk,
        })
        .unwrap();
        Group {
            dirs,
            ranks,
            index,
            host,
            disk,
        }
    }

    fn apply(&mut self, moves: &[TierOp]) {
        for store in &mut self.ranks {
            for &mv in moves {
                store.apply(mv).unwrap();
            }
        }
    }

    fn store(&mut self, n: u64) -> Result<Vec<TierOp>, IndexError> {
        let hash = BlockHash::from(n);
        let plan = self.index.begin_store(hash)?;
        self.apply(&plan.moves);
        for (r, store) in self.ranks.iter_mut().enumerate() {
            store.store_shard(hash, plan.tier, &shard(r, hash)).unwrap();
        }
        self.index.finish_store(plan.pin).unwrap();
        Ok(plan.moves)
    }

    fn load(&mut self, n: u64) -> (Tier, Vec<TierOp>) {
        let hash = BlockHash::from(n);
        let plan = self.index.begin_load(hash).unwrap();
        self.apply(&plan.moves);
        for (r, store) in self.ranks.iter_mut().enumerate() {
            let mut out = vec![0u8; SHARD];
            let loc = store.load_shard(hash, &mut out).unwrap();
            assert_eq!(loc.tier, plan.tier, "rank {r} agrees with the plan");
            assert!(out == shard(r, hash), "rank {r} block {n} bytes");
        }
        self.index.finish_load(plan.pin).unwrap();
        (plan.tier, plan.moves)
    }

    /// Every rank holds exactly the index's blocks, in the index's tiers.
    fn assert_consistent(&self) {
        for (r, store) in self.ranks.iter().enumerate() {
            for tier in [Tier::Host, Tier::Disk] {
                let mut want = self.index.lru_order(tier);
                want.sort_unstable();
                let mut got: Vec<_> = store
                    .manifest()
                    .entries
                    .iter()
                    .filter(|(_, l)| l.tier == tier)
                    .map(|(&h, _)| h)
                    .collect();
                got.sort_unstable();
                assert_eq!(got, want, "rank {r} {tier} tier");
            }
        }
    }

    fn restart(mut self) -> (Group, Vec<tandem_store::store::OpenReport>) {
        for store in &mut self.ranks {
            store.flush_manifest().unwrap();
        }
        let Group {
            dirs,
            ranks,
            host,
            disk,
            ..
        } = self;
        drop(ranks);
        let mut reports = Vec::new();
        let mut stores = Vec::new();
        for (r, d) in dirs.iter().enumerate() {
            let (s, rep) = Store::open(rank_config(r, d, host, disk)).unwrap();
            stores.push(s);
            reports.push(rep);
        }
        let blocks: Vec<_> = stores.iter().map(|s| s.rank_blocks()).collect();
        let config = IndexConfig {
            world_size: dirs.len() as u32,
            host_capacity_blocks: host,
            disk_capacity_blocks: disk,
        };
        let rebuilt = GroupIndex::rebuild(config, &blocks).unwrap();
        let mut group = Group {
            dirs,
            ranks: stores,
            index: rebuilt.index,
            host,
            disk,
        };
        group.apply(&rebuilt.moves);
        (group, reports)
    }
}

#[test]
fn blocks_stay_where_they_were_written_and_eviction_follows_one_lru() {
    let mut g = Group::new(2, 2, 2);
    assert!(g.store(1).unwrap().is_empty());
    assert!(g.store(2).unwrap().is_empty());
    g.load(1); // 2 is now the least recently used
               // Host is full: the next blocks go to disk, nothing moves.
    assert!(g.store(3).unwrap().is_empty());
    assert!(g.store(4).unwrap().is_empty());
    g.assert_consistent();
    assert_eq!(
        g.index.lru_order(Tier::Host),
        vec![BlockHash(2), BlockHash(1)]
    );
    assert_eq!(
        g.index.lru_order(Tier::Disk),
        vec![BlockHash(3), BlockHash(4)]
    );
    // Both full: the least recently used block of the group goes, the new one takes its
    // place (on host here).
    assert_eq!(g.store(5).unwrap(), vec![TierOp::Evict(BlockHash(2))]);
    // A load from disk reads the disk slot on every rank (verified), and moves nothing.
    let (tier, moves) = g.load(3);
    assert_eq!((tier, moves), (Tier::Disk, vec![]));
    assert_eq!(g.store(6).unwrap(), vec![TierOp::Evict(BlockHash(1))]);
    g.assert_consistent();
    assert_eq!(
        g.index.lru_order(Tier::Host),
        vec![BlockHash(5), BlockHash(6)]
    );
    assert_eq!(
        g.index.lru_order(Tier::Disk),
        vec![BlockHash(4), BlockHash(3)]
    );
    assert_eq!(
        g.index
            .lookup_prefix(&[BlockHash(3), BlockHash(5), BlockHash(4), BlockHash(1)]),
        3
    );
}

#[test]
fn everything_pinned_is_tier_full_and_changes_nothing() {
    let mut g = Group::new(2, 2, 0);
    g.store(1).unwrap();
    g.store(2).unwrap();
    let p1 = g.index.begin_load(BlockHash(1)).unwrap().pin;
    let p2 = g.index.begin_load(BlockHash(2)).unwrap().pin;
    let e = g.store(3).unwrap_err();
    assert_eq!(
        e,
        IndexError::TierFull {
            tier: Tier::Host,
            capacity_blocks: 2,
            pinned: 2
        }
    );
    g.assert_consistent();
    assert!(g.ranks.iter().all(|s| !s.contains(BlockHash(3))));
    g.index.finish_load(p1).unwrap();
    g.index.finish_load(p2).unwrap();
    assert_eq!(g.store(3).unwrap(), vec![TierOp::Evict(BlockHash(1))]);
    g.assert_consistent();
}

#[test]
fn restart_rebuilds_from_the_intersection_of_the_manifests() {
    let mut g = Group::new(3, 4, 4);
    for n in 1..=6 {
        g.store(n).unwrap();
    }
    g.assert_consistent();
    // Rank 1 loses block 2 (evicted, manifest flushed) and rank 2's shard of block 4 rots.
    assert!(g.ranks[1].evict(BlockHash(2)));
    let loc = g.ranks[2].location(BlockHash(4)).unwrap();
    assert_eq!(loc.tier, Tier::Host);
    let slab = g.dirs[2].0.path().join(HOST_SLAB_FILE);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&slab)
        .unwrap();
    f.write_all_at(&[0xee], loc.slot * SHARD as u64 + 7)
        .unwrap();
    // Rank 0 had written block 7 but crashed before the others did: present on one rank only.
    g.ranks[0]
        .store_shard(BlockHash(7), Tier::Disk, &shard(0, BlockHash(7)))
        .unwrap();

    // Open reads no shard: every rank takes its manifest's word.
    let (mut g, reports) = g.restart();
    let adopted: Vec<usize> = reports.iter().map(|r| r.adopted).collect();
    assert_eq!(adopted, vec![7, 5, 6]);
    for gone in [2, 7] {
        assert!(!g.index.contains(BlockHash(gone)), "block {gone} dropped");
        assert!(
            g.ranks.iter().all(|s| !s.contains(BlockHash(gone))),
            "block {gone} dropped on every rank"
        );
    }
    g.assert_consistent();
    // The rotten shard is found by the first read of block 4 (here a load; a demotion reads
    // and verifies too): rank 2's read fails its checksum and drops the shard, the group's
    // load fails, and the leader drops the block on every rank, as for any corrupt block.
    let hash = BlockHash(4);
    let plan = g.index.begin_load(hash).unwrap();
    assert!(plan.moves.is_empty());
    let mut failed = Vec::new();
    for (r, store) in g.ranks.iter_mut().enumerate() {
        let mut out = vec![0u8; SHARD];
        match store.load_shard(hash, &mut out) {
            Ok(_) => assert!(out == shard(r, hash)),
            Err(StoreError::ChecksumMismatch { .. }) => failed.push(r),
            Err(e) => panic!("rank {r}: {e}"),
        }
    }
    assert_eq!(failed, vec![2]);
    let drop = g.index.drop_block(hash).unwrap();
    g.index.finish_load(plan.pin).unwrap();
    g.apply(&[drop]);
    assert!(g.ranks.iter().all(|s| !s.contains(hash)));
    g.assert_consistent();
    for n in [1, 3, 5, 6] {
        g.load(n);
    }
    // The freed slots are usable again after the rebuild.
    g.store(8).unwrap();
    g.assert_consistent();
}

#[test]
fn a_discarded_manifest_is_reported_and_drops_the_rank_s_blocks() {
    let mut g = Group::new(2, 2, 2);
    g.store(1).unwrap();
    for s in &mut g.ranks {
        s.flush_manifest().unwrap();
    }
    std::fs::write(g.ranks[1].manifest_path(), b"garbage").unwrap();
    let (g, reports) = g.restart();
    assert!(reports[1]
        .discarded_manifest
        .as_deref()
        .unwrap_or("")
        .contains("bad magic"));
    assert!(!g.index.contains(BlockHash(1)));
    g.assert_consistent();
}
