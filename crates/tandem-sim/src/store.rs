//! One rank's store, simulated: the shards it holds in its tiers (with their bytes reduced to
//! one number and a checksum), the tier operations frames order, and the copies between the
//! engine's pages and the tiers, each reported as a shard result.
//!
//! Owns [`RankStore`]. The store survives a crash of its agent (the host slab and the disk
//! file outlive the process) and takes its manifest's entries over without reading them, as
//! the real store does: a shard that rotted is found when it is first read. It never decides
//! placement: tiers come from the frames. Copies of an epoch older than the store's are
//! refused (work of older epochs stops at `BeginEpoch`).

use std::collections::BTreeMap;

use tandem_core::StoreCommand;
use tandem_proto::{BlockHash, Epoch, PageId, Rank, RankBlocks, TaskStart, Tier, TierOp};

/// The bytes of `hash`'s shard on `rank`, as one number (what every engine computes for
/// that block: the same on every run).
pub(crate) fn content(hash: BlockHash, rank: u32) -> u64 {
    (hash.low64() ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(u64::from(rank) * 2 + 1)
}

fn checksum(v: u64) -> u64 {
    v.rotate_left(17) ^ 0x5555
}

/// One shard in a tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shard {
    /// Its tier.
    pub(crate) tier: Tier,
    /// Its bytes.
    pub(crate) bytes: u64,
    /// The checksum written with them.
    pub(crate) sum: u64,
}

/// A copy to carry out later (a delayed shard result).
#[derive(Clone, Debug)]
pub(crate) struct Copy {
    /// Store (`true`) or load.
    pub(crate) store: bool,
    /// The epoch of the command.
    pub(crate) epoch: Epoch,
    /// The task.
    pub(crate) task: TaskStart,
}

/// One rank's store.
#[derive(Debug, Default)]
pub(crate) struct RankStore {
    /// The epoch whose work is accepted.
    pub(crate) epoch: Epoch,
    /// Shards held.
    pub(crate) shards: BTreeMap<BlockHash, Shard>,
    /// Until this time (virtual ms) every store copy fails: the tier is full (a disk filled by
    /// something else).
    pub(crate) full_until_ms: u64,
}

impl RankStore {
    /// Carry out `cmd`; the copies it asks for are returned, to be finished later.
    pub(crate) fn command(&mut self, cmd: StoreCommand) -> Vec<Copy> {
        match cmd {
            StoreCommand::BeginEpoch { epoch, wipe } => {
                self.epoch = epoch;
                if wipe {
                    self.shards.clear();
                }
                Vec::new()
            }
            StoreCommand::ApplyTierOps { epoch, ops } => {
                if epoch == self.epoch {
                    for op in ops {
                        self.apply(op);
                    }
                }
                Vec::new()
            }
            StoreCommand::CopyLoads { epoch, tasks } => tasks
                .into_iter()
                .map(|task| Copy {
                    store: false,
                    epoch,
                    task,
                })
                .collect(),
            // The simulator copies a layerwise load whole: its layers are all there at once.
            StoreCommand::CopyLayers { epoch, task, .. } => vec![Copy {
                store: false,
                epoch,
                task,
            }],
            StoreCommand::CopyStores { epoch, tasks } => tasks
                .into_iter()
                .map(|task| Copy {
                    store: true,
                    epoch,
                    task,
                })
                .collect(),
        }
    }

    fn apply(&mut self, op: TierOp) {
        match op {
            TierOp::Evict(h) => {
                self.shards.remove(&h);
            }
            TierOp::Demote(h) => {
                if let Some(s) = self.shards.get_mut(&h) {
                    s.tier = Tier::Disk;
                }
            }
            TierOp::Promote(h) => {
                if let Some(s) = self.shards.get_mut(&h) {
                    s.tier = Tier::Host;
                }
            }
        }
    }

    /// The shards this rank lists in its manifest (not read: taken over as they are).
    pub(crate) fn manifest(&self, rank: u32) -> RankBlocks {
        RankBlocks {
            rank: Rank(rank),
            blocks: self.shards.iter().map(|(h, s)| (*h, s.tier)).collect(),
        }
    }

    /// Rot one shard (the `n`th held, modulo): its bytes change, its checksum does not.
    pub(crate) fn corrupt(&mut self, n: usize) -> Option<BlockHash> {
        let len = self.shards.len();
        if len == 0 {
            return None;
        }
        let (h, s) = self.shards.iter_mut().nth(n % len)?;
        s.bytes ^= 0xdead;
        Some(*h)
    }

    /// Finish `copy` at `now_ms` between the tiers and `pages` (the engine's pool on this
    /// rank): the shard result. `Err` with `reused` set when a store found its page holding
    /// other bytes (the engine reused it too early).
    pub(crate) fn finish(
        &mut self,
        copy: &Copy,
        pages: &mut [u64],
        rank: u32,
        now_ms: u64,
    ) -> Result<Result<(), String>, String> {
        if copy.epoch != self.epoch {
            return Ok(Err(format!("epoch {} ended", copy.epoch)));
        }
        let t = &copy.task;
        if copy.store {
            if now_ms < self.full_until_ms {
                return Ok(Err("tier full: no space left".into()));
            }
            for (i, (h, p)) in t.block_hashes.iter().zip(&t.page_ids).enumerate() {
                let bytes = page(pages, *p);
                if bytes != content(*h, rank) {
                    return Err(format!(
                        "rank {rank}: store {} copies block {h} from page {} which holds other bytes",
                        t.task, p.0
                    ));
                }
                let tier = t.tiers.get(i).copied().unwrap_or(Tier::Host);
                let sum = checksum(bytes);
                self.shards.insert(*h, Shard { tier, bytes, sum });
            }
            Ok(Ok(()))
        } else {
            for (h, p) in t.block_hashes.iter().zip(&t.page_ids) {
                let Some(s) = self.shards.get(h) else {
                    return Ok(Err(format!("block {h} not held")));
                };
                if checksum(s.bytes) != s.sum {
                    // A corrupt shard leaves the rank.
                    self.shards.remove(h);
                    return Ok(Err(format!("block {h}: checksum mismatch")));
                }
                if let Some(slot) = pages.get_mut(p.0 as usize) {
                    *slot = s.bytes;
                }
            }
            Ok(Ok(()))
        }
    }
}

fn page(pages: &[u64], p: PageId) -> u64 {
    pages.get(p.0 as usize).copied().unwrap_or(0)
}
