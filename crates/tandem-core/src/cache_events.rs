//! The group's KV cache events, derived from sealed frames alone: what a router may trust.
//!
//! Owns [`CacheEventDeriver`], a pure fold of the leader's sealed frames (and, once per epoch,
//! the group index the epoch was rebuilt with) into [`CacheEvent`]s: a block is *stored* only
//! when the frame that reveals its store's `Ok` outcome is sealed (every rank finished its
//! shard, docs/DESIGN.md invariant 3, and the outcome is durable, invariant 5); it is *removed*
//! when a frame's tier operations evict it; a tier move (`Demote`, `Promote`) is a removal from
//! the old tier and a store in the new one, the tier named as the event's medium; a new epoch
//! starts with *all cleared*, then one store per tier for the blocks the rebuild kept.
//!
//! It must never read anything but frames and the rebuilt index, never do IO, and never
//! announce a block whose store has not finished on every rank: a failed or aborted store
//! produces no event, and a block evicted before its outcome was revealed is never announced.
//! The agent only publishes what this returns (`tandem-agent`'s `events` module).

use std::collections::HashMap;

use tandem_proto::{BlockHash, Epoch, Frame, OutcomeResult, TaskId, TaskKind, Tier, TierOp};

/// The most hashes one `Stored` of the rebuilt index carries: a large index is restated in
/// many events (and the agent publishes them in several batches), never in one huge message.
pub const MAX_HASHES_PER_EVENT: usize = 1024;

/// One change to the set of blocks the group holds, as a router sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CacheEvent {
    /// These blocks are now held on every rank, in `tier` (prefix order within one store).
    Stored {
        /// The blocks.
        hashes: Vec<BlockHash>,
        /// Where every rank keeps their shards.
        tier: Tier,
    },
    /// These blocks left `tier`.
    Removed {
        /// The blocks.
        hashes: Vec<BlockHash>,
        /// The tier they left.
        tier: Tier,
    },
    /// Forget every block announced before: the group restarted and rebuilt its index.
    AllCleared,
}

/// One block the deriver tracks: its tier, and whether a `Stored` announced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tracked {
    tier: Tier,
    announced: bool,
}

/// The fold of sealed frames into cache events. See the module docs.
///
/// Feed it [`CacheEventDeriver::begin_epoch`] when the leader's epoch is ready (its group
/// index rebuilt), then every frame the leader seals, in step order, with
/// [`CacheEventDeriver::apply_frame`]. Frames of any other epoch produce nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheEventDeriver {
    epoch: Option<Epoch>,
    /// Blocks started by a store, announced or not, with their current tier.
    blocks: HashMap<BlockHash, Tracked>,
    /// Stores started in this epoch whose outcome no frame revealed yet: their blocks.
    pending: HashMap<TaskId, Vec<BlockHash>>,
}

impl CacheEventDeriver {
    /// A deriver that has seen nothing (every frame is ignored until `begin_epoch`).
    pub fn new() -> Self {
        Self::default()
    }

    /// The epoch being followed, if any.
    pub fn epoch(&self) -> Option<Epoch> {
        self.epoch
    }

    /// The blocks announced and not removed since, with their tiers, sorted by hash: what a
    /// subscriber that applied every event holds.
    pub fn held(&self) -> Vec<(BlockHash, Tier)> {
        let mut v: Vec<_> = self
            .blocks
            .iter()
            .filter(|(_, t)| t.announced)
            .map(|(h, t)| (*h, t.tier))
            .collect();
        v.sort();
        v
    }

    /// A new epoch whose group index was rebuilt holding `kept` (block, tier): `AllCleared`,
    /// then `Stored` per tier for the kept blocks (in the order given, at most
    /// [`MAX_HASHES_PER_EVENT`] each), and the epoch's frames are followed from now on.
    pub fn begin_epoch(
        &mut self,
        epoch: Epoch,
        kept: impl IntoIterator<Item = (BlockHash, Tier)>,
    ) -> Vec<CacheEvent> {
        self.epoch = Some(epoch);
        self.blocks.clear();
        self.pending.clear();
        let mut by_tier: Vec<(Tier, Vec<BlockHash>)> = Vec::new();
        for (hash, tier) in kept {
            self.blocks.insert(
                hash,
                Tracked {
                    tier,
                    announced: true,
                },
            );
            match by_tier.iter_mut().find(|(t, _)| *t == tier) {
                Some((_, v)) => v.push(hash),
                None => by_tier.push((tier, vec![hash])),
            }
        }
        let mut out = vec![CacheEvent::AllCleared];
        for (tier, hashes) in by_tier {
            out.extend(
                hashes
                    .chunks(MAX_HASHES_PER_EVENT)
                    .map(|c| CacheEvent::Stored {
                        hashes: c.to_vec(),
                        tier,
                    }),
            );
        }
        out
    }

    /// The events one sealed frame causes, in order: stores it starts are remembered; outcomes
    /// it reveals (reconciliation first, as engines apply them) announce finished stores; then
    /// its tier operations remove or move blocks. Outcomes come before tier operations because
    /// a store's blocks stay pinned (never evicted or moved) until the store finished, so an
    /// operation in the same frame on such a block was decided after it finished.
    ///
    /// One exception to that order: a store may start a block this frame's tier operations
    /// evict, because the leader evicted it earlier in the same step (the index refuses to
    /// start a block it holds). Such a block is tracked anew only after the tier operations,
    /// and the outcomes of its store wait until then too, so its eviction is announced and
    /// its new store is announced when it finishes, as the index holds it.
    pub fn apply_frame(&mut self, frame: &Frame) -> Vec<CacheEvent> {
        if self.epoch != Some(frame.epoch) {
            return Vec::new();
        }
        // Started blocks the deriver still holds as announced: evicted earlier in this step.
        let mut restarted: Vec<(BlockHash, Tier)> = Vec::new();
        for start in &frame.stores {
            for (i, hash) in start.block_hashes.iter().enumerate() {
                let tier = start.tiers.get(i).copied().unwrap_or(Tier::Host);
                match self.blocks.get(hash) {
                    Some(t) if t.announced => restarted.push((*hash, tier)),
                    Some(_) => {}
                    None => {
                        self.blocks.insert(
                            *hash,
                            Tracked {
                                tier,
                                announced: false,
                            },
                        );
                    }
                }
            }
            self.pending.insert(start.task, start.block_hashes.clone());
        }
        let mut out = Vec::new();
        let mut later = Vec::new();
        for outcome in frame.outcomes() {
            if outcome.kind != TaskKind::Store {
                continue;
            }
            let touches_restarted = !restarted.is_empty()
                && self.pending.get(&outcome.task).is_some_and(|hashes| {
                    hashes.iter().any(|h| restarted.iter().any(|(r, _)| r == h))
                });
            if touches_restarted {
                later.push(outcome);
            } else {
                self.reveal(outcome, &mut out);
            }
        }
        for op in &frame.tier_ops {
            self.apply_op(*op, &mut out);
        }
        for (hash, tier) in restarted {
            self.blocks.entry(hash).or_insert(Tracked {
                tier,
                announced: false,
            });
        }
        for outcome in later {
            self.reveal(outcome, &mut out);
        }
        out
    }

    /// A store's revealed outcome: `Ok` announces its blocks, anything else forgets the ones
    /// never announced. Outcomes of stores this deriver did not see start produce nothing.
    fn reveal(&mut self, outcome: &tandem_proto::TaskOutcome, out: &mut Vec<CacheEvent>) {
        let Some(hashes) = self.pending.remove(&outcome.task) else {
            return;
        };
        if outcome.result == OutcomeResult::Ok {
            self.announce(&hashes, out);
        } else {
            for h in hashes {
                if self.blocks.get(&h).is_some_and(|t| !t.announced) {
                    self.blocks.remove(&h);
                }
            }
        }
    }

    /// `Stored` for the blocks of a finished store still tracked and not yet announced, one
    /// event per run of blocks in the same tier.
    fn announce(&mut self, hashes: &[BlockHash], out: &mut Vec<CacheEvent>) {
        let mut run: Option<(Tier, Vec<BlockHash>)> = None;
        for h in hashes {
            let Some(t) = self.blocks.get_mut(h).filter(|t| !t.announced) else {
                continue;
            };
            t.announced = true;
            match &mut run {
                Some((tier, v)) if *tier == t.tier => v.push(*h),
                _ => {
                    if let Some((tier, hashes)) = run.replace((t.tier, vec![*h])) {
                        out.push(CacheEvent::Stored { hashes, tier });
                    }
                }
            }
        }
        if let Some((tier, hashes)) = run {
            out.push(CacheEvent::Stored { hashes, tier });
        }
    }

    fn apply_op(&mut self, op: TierOp, out: &mut Vec<CacheEvent>) {
        match op {
            TierOp::Evict(h) => {
                if let Some(t) = self.blocks.remove(&h) {
                    if t.announced {
                        push_removed(out, h, t.tier);
                    }
                }
            }
            TierOp::Demote(h) => self.relocate(h, Tier::Disk, out),
            TierOp::Promote(h) => self.relocate(h, Tier::Host, out),
        }
    }

    fn relocate(&mut self, h: BlockHash, to: Tier, out: &mut Vec<CacheEvent>) {
        let Some(t) = self.blocks.get_mut(&h) else {
            return;
        };
        let from = std::mem::replace(&mut t.tier, to);
        if t.announced && from != to {
            push_removed(out, h, from);
            out.push(CacheEvent::Stored {
                hashes: vec![h],
                tier: to,
            });
        }
    }
}

/// Append a removal, merged into the previous event when that one removes from the same tier.
fn push_removed(out: &mut Vec<CacheEvent>, h: BlockHash, tier: Tier) {
    if let Some(CacheEvent::Removed { hashes, tier: t }) = out.last_mut() {
        if *t == tier {
            hashes.push(h);
            return;
        }
    }
    out.push(CacheEvent::Removed {
        hashes: vec![h],
        tier,
    });
}

#[cfg(test)]
#[path = "cache_events_tests.rs"]
mod tests;
