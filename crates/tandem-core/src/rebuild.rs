//! Rebuilding the group index after a restart, from every rank's manifest.
//!
//! Owns [`GroupIndex::rebuild`], from one [`RankBlocks`] per rank (what each reports from its
//! manifest after opening its tiers, `tandem_proto::manifest`). A block survives only if every
//! rank holds its shard; all others are dropped on every rank. The leader only intersects;
//! the shards' bytes are checked where they are read (every load verifies its checksum; a
//! shard that fails leaves the rank, and the failed load makes the leader drop the block from
//! the group).

use std::borrow::Cow;

use tandem_proto::{BlockHash, Rank, RankBlocks, Tier, TierOp};

use crate::index::{GroupIndex, IndexConfig, IndexError};

/// The outcome of a rebuild.
#[derive(Debug)]
pub struct Rebuild {
    /// The new index: every kept block complete and unpinned.
    pub index: GroupIndex,
    /// Moves every rank applies (drops of blocks missing somewhere or over capacity, demotions
    /// of blocks that some rank holds on host and another on disk, or that spill to disk),
    /// in order.
    pub moves: Vec<TierOp>,
    /// Blocks kept, in blocks.
    pub kept: usize,
    /// Blocks dropped because some rank lacked them or there was no room, sorted.
    pub dropped: Vec<BlockHash>,
}

impl GroupIndex {
    /// Rebuilds the index from one [`RankBlocks`] per rank `0..world_size`: the intersection
    /// of their blocks, on host when every rank has the shard on host and on disk otherwise.
    /// Blocks beyond a tier's capacity go to disk, then are dropped. LRU order starts in block
    /// hash order (manifests do not record use). A block a rank lists twice counts once.
    /// One pass over the union of the ranks' lists in hash order (lists not in hash order
    /// are sorted first): `O(blocks × ranks)`, no map of every block.
    ///
    /// Errors: [`IndexError::EmptyGroup`], [`IndexError::RankOutOfRange`],
    /// [`IndexError::DuplicateRank`], [`IndexError::MissingRank`].
    pub fn rebuild(config: IndexConfig, ranks: &[RankBlocks]) -> Result<Rebuild, IndexError> {
        let mut index = GroupIndex::new(config)?;
        let mut seen = vec![false; config.world_size as usize];
        for r in ranks {
            let slot = seen
                .get_mut(r.rank.0 as usize)
                .ok_or(IndexError::RankOutOfRange {
                    rank: r.rank,
                    world_size: config.world_size,
                })?;
            if std::mem::replace(slot, true) {
                return Err(IndexError::DuplicateRank { rank: r.rank });
            }
        }
        if let Some(missing) = seen.iter().position(|&s| !s) {
            return Err(IndexError::MissingRank {
                rank: Rank(missing as u32),
            });
        }
        // Every rank's list in hash order, each block once (a manifest from
        // `Store::rank_blocks` already is; any other is sorted here, that rank only), then one
        // pass over their union in hash order: no map of every block on every rank.
        let lists: Vec<Cow<'_, [(BlockHash, Tier)]>> = ranks
            .iter()
            .map(|r| {
                if r.blocks.windows(2).all(|w| w[0].0 < w[1].0) {
                    Cow::Borrowed(r.blocks.as_slice())
                } else {
                    let mut sorted = r.blocks.clone();
                    sorted.sort_by_key(|&(h, _)| h);
                    sorted.dedup_by_key(|&mut (h, _)| h);
                    Cow::Owned(sorted)
                }
            })
            .collect();
        // At most the shortest list survives the intersection.
        index.reserve(lists.iter().map(|l| l.len() as u64).min().unwrap_or(0));
        let mut at = vec![0usize; lists.len()];
        let mut moves = Vec::new();
        let mut dropped = Vec::new();
        let mut kept = 0;
        loop {
            let next = lists
                .iter()
                .zip(&at)
                .filter_map(|(l, &i)| l.get(i).map(|&(h, _)| h))
                .min();
            let Some(hash) = next else { break };
            // Ranks holding it, and how many of them on disk.
            let (mut count, mut disk_count) = (0u32, 0u32);
            for (l, i) in lists.iter().zip(at.iter_mut()) {
                if let Some(&(h, tier)) = l.get(*i) {
                    if h == hash {
                        count += 1;
                        disk_count += u32::from(tier != Tier::Host);
                        *i += 1;
                    }
                }
            }
            let on_disk = disk_count > 0;
            let host_room = index.occupancy(Tier::Host) < config.host_capacity_blocks;
            let disk_room = index.occupancy(Tier::Disk) < config.disk_capacity_blocks;
            if count < config.world_size {
                moves.push(TierOp::Evict(hash));
                dropped.push(hash);
            } else if !on_disk && host_room {
                index.insert_complete(hash, Tier::Host);
                kept += 1;
            } else if disk_room {
                // Only the ranks that hold it on host move it; when every rank has it on
                // disk already there is nothing to move (a restart of a full disk tier would
                // otherwise plan one no-op per block).
                if disk_count < count {
                    moves.push(TierOp::Demote(hash));
                }
                index.insert_complete(hash, Tier::Disk);
                kept += 1;
            } else {
                moves.push(TierOp::Evict(hash));
                dropped.push(hash);
            }
        }
        Ok(Rebuild {
            index,
            moves,
            kept,
            dropped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(world: u32, host: u64, disk: u64) -> IndexConfig {
        IndexConfig {
            world_size: world,
            host_capacity_blocks: host,
            disk_capacity_blocks: disk,
        }
    }

    fn rank(r: u32, blocks: &[(u64, Tier)]) -> RankBlocks {
        RankBlocks {
            rank: Rank(r),
            blocks: blocks
                .iter()
                .map(|&(h, t)| (BlockHash::from(h), t))
                .collect(),
        }
    }

    #[test]
    fn keeps_the_intersection_and_reconciles_tiers() {
        use Tier::{Disk, Host};
        let ranks = [
            rank(0, &[(1, Host), (2, Host), (3, Disk), (4, Host)]),
            rank(1, &[(1, Host), (2, Disk), (3, Disk)]),
        ];
        let r = GroupIndex::rebuild(cfg(2, 4, 4), &ranks).unwrap();
        assert_eq!(r.kept, 3);
        assert_eq!(r.dropped, vec![BlockHash(4)]);
        assert_eq!(
            r.moves,
            vec![TierOp::Demote(BlockHash(2)), TierOp::Evict(BlockHash(4))],
            "block 3 is on disk on every rank already: nothing to move"
        );
        assert_eq!(r.index.tier_of(BlockHash(1)), Some(Host));
        assert_eq!(r.index.tier_of(BlockHash(2)), Some(Disk));
        assert!(!r.index.contains(BlockHash(4)));
        assert_eq!(
            r.index
                .lookup_prefix(&[BlockHash(1), BlockHash(2), BlockHash(3), BlockHash(4)]),
            3
        );
    }

    #[test]
    fn over_capacity_spills_to_disk_then_drops() {
        use Tier::Host;
        let ranks = [rank(0, &[(1, Host), (2, Host), (3, Host)])];
        let r = GroupIndex::rebuild(cfg(1, 1, 1), &ranks).unwrap();
        assert_eq!(
            r.moves,
            vec![TierOp::Demote(BlockHash(2)), TierOp::Evict(BlockHash(3))]
        );
        assert_eq!(r.dropped, vec![BlockHash(3)]);
    }

    #[test]
    fn unsorted_lists_and_repeats_give_the_same_rebuild() {
        use Tier::{Disk, Host};
        let sorted = [
            rank(0, &[(1, Host), (2, Host), (3, Disk), (4, Host)]),
            rank(1, &[(1, Host), (2, Disk), (3, Disk)]),
        ];
        let shuffled = [
            rank(1, &[(3, Disk), (1, Host), (2, Disk), (3, Disk)]),
            rank(0, &[(4, Host), (2, Host), (1, Host), (3, Disk)]),
        ];
        let a = GroupIndex::rebuild(cfg(2, 4, 4), &sorted).unwrap();
        let b = GroupIndex::rebuild(cfg(2, 4, 4), &shuffled).unwrap();
        assert_eq!((a.moves, a.kept, a.dropped), (b.moves, b.kept, b.dropped));
        assert_eq!(a.index, b.index, "the same index, however built");
        // Rank 0 listing block 4 twice does not stand in for rank 1.
        let twice = [rank(0, &[(4, Host), (4, Host)]), rank(1, &[])];
        let r = GroupIndex::rebuild(cfg(2, 4, 4), &twice).unwrap();
        assert_eq!(r.dropped, vec![BlockHash(4)]);
    }

    #[test]
    fn rank_set_must_be_exact() {
        let e = GroupIndex::rebuild(cfg(2, 1, 1), &[rank(0, &[])]).unwrap_err();
        assert_eq!(e.to_string(), "rebuild: no manifest from rank 1");
        let e = GroupIndex::rebuild(cfg(2, 1, 1), &[rank(0, &[]), rank(0, &[])]).unwrap_err();
        assert_eq!(e.to_string(), "rebuild: rank 0 sent two manifests");
        let e = GroupIndex::rebuild(cfg(2, 1, 1), &[rank(2, &[])]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rebuild: rank 2 is outside the group of 2 ranks"
        );
    }
}
