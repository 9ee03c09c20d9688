//! The group index: the leader's view of which blocks are complete on every rank.
//!
//! Owns [`GroupIndex`]: block membership per tier, one LRU order over every tier, capacity in
//! blocks, pins, and the [`TierOp`]s (evictions; a rebuild's demotions) that every rank applies
//! to stay in step.
//! It is sans-IO: inputs are method calls, outputs are plans; it never touches bytes, files or
//! clocks (LRU age is a counter of index operations), and only the leader runs it. Ranks
//! never evict on their own: they apply the moves of the plans, in order (docs/DESIGN.md invariant 2).
//!
//! # Life of a block
//! [`GroupIndex::begin_store`] reserves a place and returns the moves that make room plus a
//! store [`Pin`]; the block is pending and invisible to lookups. Once every rank has stored
//! its shard (the protocol's quorum) the leader calls [`GroupIndex::finish_store`] and the
//! block is complete; or [`GroupIndex::abort_store`] and it is gone. [`GroupIndex::begin_load`]
//! pins a complete block where it is; [`GroupIndex::finish_load`] hands the pin back.
//!
//! # Placement: a block stays where it was written
//! A new block goes to the host tier while it has a free place, else to the disk tier while it
//! has one; when both are full, the least recently used unpinned block of the whole index is
//! evicted and the new block takes its tier. A load reads the block from the tier it is in and
//! never moves it. So the blocks the group keeps are those of one LRU over host and disk
//! capacity together (the same set as when stores went to host and pushed the host's LRU
//! block down to disk, and loads pulled disk blocks back up), while every byte is moved once
//! on the data path: a disk store is one write, a disk load one read, verified. Moving blocks
//! between tiers cost a disk load 3–4 copies and two checksums on the data path (promotion,
//! the demotion of a victim to make host room, then the copy into the engine's pages) and a
//! store one demotion once the host tier was full; the page cache already keeps the disk
//! slots that are read often in memory, which is what promotion bought (docs/BENCHMARKS.md,
//! Datapath). Only a rebuild moves blocks ([`TierOp::Demote`] of a block some rank holds on
//! disk and another on host); ranks still apply promotions and demotions of older leaders.
//!
//! # Storage
//! `entries` keeps each block's entry (40 bytes) in a slab, a hash table of 4-byte slot
//! numbers, and one doubly linked LRU list per tier through the entries: about 50 bytes per
//! block at 10^7 blocks, a lookup one table probe and one entry read, a use or an eviction a
//! few link updates (figures: `tandem bench scale`, docs/SCALE.md).
//!
//! # Pins
//! A [`Pin`] is a move-only token: it cannot be copied, so it is handed back exactly once,
//! and pinned blocks are never chosen for eviction. When the group enters a new epoch,
//! [`GroupIndex::release_all_pins`] clears every pin and aborts pending stores; pins from the
//! old generation are then refused with [`IndexError::StalePin`].

mod entries;

use tandem_proto::{BlockHash, Rank, Tier, TierOp};

pub use entries::MAX_ENTRIES;
use entries::{Entries, Entry};

/// Capacities of the group's tiers, in blocks (each rank holds one shard per block), and the
/// number of ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IndexConfig {
    /// Ranks in the group (`pp_size × tp_size`).
    pub world_size: u32,
    /// Host tier capacity, in blocks.
    pub host_capacity_blocks: u64,
    /// Disk tier capacity, in blocks (0: no disk tier; host evictions drop blocks).
    pub disk_capacity_blocks: u64,
}

/// What a pin protects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PinPurpose {
    /// A store in flight: the block is pending until the pin is handed back.
    Store,
    /// A load in flight: the block is complete and must not be evicted.
    Load,
}

impl std::fmt::Display for PinPurpose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PinPurpose::Store => "store",
            PinPurpose::Load => "load",
        })
    }
}

/// A pin on one block; while it is held the block cannot be evicted. Not `Clone`: it goes back
/// to the index exactly once.
#[must_use = "a pin must be handed back with finish_store, abort_store or finish_load"]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Pin {
    hash: BlockHash,
    generation: u64,
    purpose: PinPurpose,
    /// The id of the index entry pinned, so that a pin outliving its block never touches a
    /// later block of the same hash.
    entry: u64,
}

impl Pin {
    /// The pinned block.
    pub fn hash(&self) -> BlockHash {
        self.hash
    }

    /// Store or load.
    pub fn purpose(&self) -> PinPurpose {
        self.purpose
    }

    /// The same pin again, for a copy of the whole state that holds it (a core cloned by the
    /// model checker or the simulator, index included). Crate-private so that outside this
    /// crate a pin stays move-only.
    pub(crate) fn duplicate(&self) -> Pin {
        Pin { ..*self }
    }
}

/// The leader's decision for one store.
#[derive(Debug)]
pub struct StorePlan {
    /// The tier every rank writes its shard to.
    pub tier: Tier,
    /// Moves every rank applies, in order, before writing.
    pub moves: Vec<TierOp>,
    /// The store pin, handed back with [`GroupIndex::finish_store`] or [`GroupIndex::abort_store`].
    pub pin: Pin,
}

/// The leader's decision for one load.
#[derive(Debug)]
pub struct LoadPlan {
    /// The tier the shard is read from (the block's own: loads never move a block).
    pub tier: Tier,
    /// Moves every rank applies, in order, before reading (none: a load never moves a block).
    pub moves: Vec<TierOp>,
    /// The load pin, handed back with [`GroupIndex::finish_load`].
    pub pin: Pin,
}

/// Why the index refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// Every block in the tier is pinned: nothing can be evicted to make room.
    #[error("{tier} tier full: {capacity_blocks} blocks, {pinned} pinned, nothing can be evicted")]
    TierFull {
        /// The full tier.
        tier: Tier,
        /// Its capacity, in blocks.
        capacity_blocks: u64,
        /// Blocks pinned in it.
        pinned: u64,
    },
    /// The block is already stored or being stored.
    #[error("block {hash} is already in the index")]
    AlreadyPresent {
        /// The block.
        hash: BlockHash,
    },
    /// The block is not in the index.
    #[error("block {hash} is not in the index")]
    NotPresent {
        /// The block.
        hash: BlockHash,
    },
    /// The block is still being stored; it cannot be loaded yet.
    #[error("block {hash} is still being stored")]
    NotComplete {
        /// The block.
        hash: BlockHash,
    },
    /// The pin predates the last [`GroupIndex::release_all_pins`].
    #[error("pin on block {hash} is from generation {pin_generation}, the index is at generation {generation}")]
    StalePin {
        /// The block.
        hash: BlockHash,
        /// The pin's generation.
        pin_generation: u64,
        /// The index's generation.
        generation: u64,
    },
    /// A load pin handed to a store call or the other way round.
    #[error("pin on block {hash} is a {got} pin, expected a {expected} pin")]
    WrongPin {
        /// The block.
        hash: BlockHash,
        /// The pin's purpose.
        got: PinPurpose,
        /// The purpose the call needs.
        expected: PinPurpose,
    },
    /// The block was dropped (for example, a corrupt shard) while its store was in flight.
    #[error("block {hash} was dropped while its store was in flight")]
    Dropped {
        /// The block.
        hash: BlockHash,
    },
    /// A group of zero ranks.
    #[error("world size must be at least 1")]
    EmptyGroup,
    /// A rebuild got a rank outside `0..world_size`.
    #[error("rebuild: rank {rank} is outside the group of {world_size} ranks")]
    RankOutOfRange {
        /// The rank.
        rank: Rank,
        /// Ranks in the group.
        world_size: u32,
    },
    /// A rebuild got two manifests of one rank.
    #[error("rebuild: rank {rank} sent two manifests")]
    DuplicateRank {
        /// The rank.
        rank: Rank,
    },
    /// The tiers together hold more blocks than the index can number.
    #[error("the tiers hold {blocks} blocks together, more than the index's {max}")]
    TooLarge {
        /// Host plus disk capacity, in blocks.
        blocks: u64,
        /// The most the index holds.
        max: u64,
    },
    /// A rebuild is missing a rank's manifest.
    #[error("rebuild: no manifest from rank {rank}")]
    MissingRank {
        /// The rank.
        rank: Rank,
    },
}

/// The leader's group index (see the module docs). Cloned, compared and hashed by content (the
/// tiers' blocks in use order with their ids, pins and state, the clock and the generation),
/// so that a core holding it can be a model checker's state; how the entries are laid out in
/// memory does not count.
#[derive(Clone, Debug)]
pub struct GroupIndex {
    config: IndexConfig,
    entries: Entries,
    clock: u64,
    generation: u64,
}

impl GroupIndex {
    /// An empty index.
    ///
    /// Errors: [`IndexError::EmptyGroup`] when `world_size` is 0;
    /// [`IndexError::TooLarge`] when the tiers together hold more than
    /// [`MAX_ENTRIES`] blocks.
    pub fn new(config: IndexConfig) -> Result<Self, IndexError> {
        if config.world_size == 0 {
            return Err(IndexError::EmptyGroup);
        }
        let blocks = config
            .host_capacity_blocks
            .saturating_add(config.disk_capacity_blocks);
        if blocks > MAX_ENTRIES {
            return Err(IndexError::TooLarge {
                blocks,
                max: MAX_ENTRIES,
            });
        }
        Ok(GroupIndex {
            config,
            entries: Entries::new(),
            clock: 0,
            generation: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> IndexConfig {
        self.config
    }

    /// The pin generation (increases on every [`GroupIndex::release_all_pins`]).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Capacity of a tier, in blocks (0 for tiers the index does not manage).
    pub fn capacity(&self, tier: Tier) -> u64 {
        match tier {
            Tier::Host => self.config.host_capacity_blocks,
            Tier::Disk => self.config.disk_capacity_blocks,
            #[allow(unreachable_patterns)]
            _ => 0,
        }
    }

    /// Blocks (complete or pending) in a tier.
    pub fn occupancy(&self, tier: Tier) -> u64 {
        self.entries.tier_len(tier)
    }

    /// Blocks (complete or pending) in the index.
    pub fn len(&self) -> u64 {
        self.entries.len()
    }

    /// Whether the index holds no block.
    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }

    /// Pinned blocks in a tier (walks the tier).
    pub fn pinned(&self, tier: Tier) -> u64 {
        self.entries
            .iter_tier(tier)
            .filter(|&s| self.entries.get(s).pins > 0)
            .count() as u64
    }

    /// Every block with its tier, from least to most recently used (the order evictions
    /// follow, over every tier).
    pub fn use_order(&self) -> Vec<(BlockHash, Tier)> {
        self.entries
            .iter_used()
            .map(|s| {
                let e = self.entries.get(s);
                (e.hash(), e.tier)
            })
            .collect()
    }

    /// Blocks of a tier from least to most recently used.
    pub fn lru_order(&self, tier: Tier) -> Vec<BlockHash> {
        self.entries
            .iter_tier(tier)
            .map(|s| self.entries.get(s).hash())
            .collect()
    }

    /// Whether the block is complete on every rank (and so may be served).
    pub fn contains(&self, hash: BlockHash) -> bool {
        self.entry(hash).is_some_and(|e| e.complete)
    }

    /// The tier of a complete block.
    pub fn tier_of(&self, hash: BlockHash) -> Option<Tier> {
        self.entry(hash).filter(|e| e.complete).map(|e| e.tier)
    }

    /// Whether the block is pinned.
    pub fn is_pinned(&self, hash: BlockHash) -> bool {
        self.entry(hash).is_some_and(|e| e.pins > 0)
    }

    /// Number of leading `hashes` that are complete: the longest cached prefix, in blocks.
    /// Does not touch LRU order (a lookup is not a use; the load that follows is).
    pub fn lookup_prefix(&self, hashes: &[BlockHash]) -> usize {
        hashes.iter().take_while(|&&h| self.contains(h)).count()
    }

    /// Reserves a place for a new block and pins it as pending: a free place on host, else on
    /// disk, else the place of the least recently used unpinned block, evicted (see the
    /// module docs).
    ///
    /// Errors: [`IndexError::AlreadyPresent`]; [`IndexError::TierFull`] when both tiers are
    /// full and every block in them is pinned (or neither has capacity), naming the host tier
    /// when it is the only one, the disk tier otherwise.
    pub fn begin_store(&mut self, hash: BlockHash) -> Result<StorePlan, IndexError> {
        if self.entries.find(hash).is_some() {
            return Err(IndexError::AlreadyPresent { hash });
        }
        let (tier, moves) = self.place()?;
        let id = self.tick();
        self.entries.insert(hash, tier, false, 1, id);
        Ok(StorePlan {
            tier,
            moves,
            pin: self.pin(hash, PinPurpose::Store, id),
        })
    }

    /// Marks a pending block complete on every rank and releases its store pin.
    ///
    /// Errors: [`IndexError::StalePin`], [`IndexError::WrongPin`], [`IndexError::Dropped`]
    /// (the block left the index meanwhile: report the store failed).
    pub fn finish_store(&mut self, pin: Pin) -> Result<(), IndexError> {
        self.check_pin(&pin, PinPurpose::Store)?;
        self.tick();
        let hash = pin.hash;
        let slot = self
            .entries
            .find(hash)
            .filter(|&s| {
                let e = self.entries.get(s);
                !e.complete && e.id == pin.entry
            })
            .ok_or(IndexError::Dropped { hash })?;
        let e = self.entries.get_mut(slot);
        e.complete = true;
        e.pins = e.pins.saturating_sub(1);
        let tier = e.tier;
        self.entries.move_to_tail(slot, tier);
        Ok(())
    }

    /// Forgets a pending block whose store failed; returns the move that makes every rank
    /// forget whatever it wrote.
    ///
    /// Errors: [`IndexError::StalePin`], [`IndexError::WrongPin`].
    pub fn abort_store(&mut self, pin: Pin) -> Result<Vec<TierOp>, IndexError> {
        self.check_pin(&pin, PinPurpose::Store)?;
        if let Some(slot) = self.entries.find(pin.hash).filter(|&s| {
            let e = self.entries.get(s);
            !e.complete && e.id == pin.entry
        }) {
            self.entries.remove(slot);
        }
        Ok(vec![TierOp::Evict(pin.hash)])
    }

    /// Pins a complete block for a load and marks it used; it is read from the tier it is in
    /// (no move: see the module docs).
    ///
    /// Errors: [`IndexError::NotPresent`], [`IndexError::NotComplete`].
    pub fn begin_load(&mut self, hash: BlockHash) -> Result<LoadPlan, IndexError> {
        let slot = self
            .entries
            .find(hash)
            .ok_or(IndexError::NotPresent { hash })?;
        let entry = *self.entries.get(slot);
        if !entry.complete {
            return Err(IndexError::NotComplete { hash });
        }
        self.tick();
        self.entries.get_mut(slot).pins += 1;
        self.entries.move_to_tail(slot, entry.tier);
        Ok(LoadPlan {
            tier: entry.tier,
            moves: Vec::new(),
            pin: self.pin(hash, PinPurpose::Load, entry.id),
        })
    }

    /// Hands back a load pin. A pin on a block dropped meanwhile is consumed quietly.
    ///
    /// Errors: [`IndexError::StalePin`], [`IndexError::WrongPin`].
    pub fn finish_load(&mut self, pin: Pin) -> Result<(), IndexError> {
        self.check_pin(&pin, PinPurpose::Load)?;
        if let Some(slot) = self.entries.find(pin.hash) {
            let e = self.entries.get_mut(slot);
            if e.id == pin.entry {
                e.pins = e.pins.saturating_sub(1);
            }
        }
        Ok(())
    }

    /// Removes a block whatever its state (a rank found its shard corrupt, or a store failed
    /// on some rank); returns the move every rank applies, or `None` if it was not indexed.
    /// Outstanding pins on it become harmless.
    pub fn drop_block(&mut self, hash: BlockHash) -> Option<TierOp> {
        let slot = self.entries.find(hash)?;
        self.entries.remove(slot);
        Some(TierOp::Evict(hash))
    }

    /// New epoch: clears every pin, forgets pending stores (returned, so that ranks drop
    /// whatever they wrote) and makes every earlier pin stale.
    pub fn release_all_pins(&mut self) -> Vec<BlockHash> {
        self.generation += 1;
        let live: Vec<_> = self.entries.iter_live().collect();
        let mut pending = Vec::new();
        for slot in live {
            let e = self.entries.get_mut(slot);
            e.pins = 0;
            if !e.complete {
                pending.push((e.hash(), slot));
            }
        }
        for &(_, slot) in &pending {
            self.entries.remove(slot);
        }
        let mut pending: Vec<BlockHash> = pending.into_iter().map(|(h, _)| h).collect();
        pending.sort_unstable();
        pending
    }

    /// Makes room for `blocks` more blocks at once (rebuild only: one table allocation
    /// instead of one per doubling).
    pub(crate) fn reserve(&mut self, blocks: u64) {
        let room = blocks.min(self.config.host_capacity_blocks + self.config.disk_capacity_blocks);
        self.entries
            .reserve(usize::try_from(room).unwrap_or(usize::MAX));
    }

    /// Inserts a complete, unpinned block as the most recently used of `tier` (rebuild only;
    /// the caller keeps occupancy within capacity).
    pub(crate) fn insert_complete(&mut self, hash: BlockHash, tier: Tier) {
        let id = self.tick();
        self.entries.insert(hash, tier, true, 0, id);
    }

    /// The tier a new block goes to and the moves that make its place: a free place on
    /// host, else on disk, else the place of the least recently used unpinned block of the
    /// whole index, evicted. On error nothing has changed.
    fn place(&mut self) -> Result<(Tier, Vec<TierOp>), IndexError> {
        for tier in [Tier::Host, Tier::Disk] {
            if self.occupancy(tier) < self.capacity(tier) {
                return Ok((tier, Vec::new()));
            }
        }
        let Some(victim) = self
            .entries
            .iter_used()
            .find(|&s| self.entries.get(s).pins == 0)
        else {
            // Counting the pinned blocks walks the tier: only here, when it really is full of
            // pins.
            let tier =
                if self.config.host_capacity_blocks > 0 && self.config.disk_capacity_blocks == 0 {
                    Tier::Host
                } else {
                    Tier::Disk
                };
            return Err(IndexError::TierFull {
                tier,
                capacity_blocks: self.capacity(tier),
                pinned: self.pinned(tier),
            });
        };
        let e = *self.entries.get(victim);
        self.entries.remove(victim);
        Ok((e.tier, vec![TierOp::Evict(e.hash())]))
    }

    fn entry(&self, hash: BlockHash) -> Option<&Entry> {
        self.entries.find(hash).map(|s| self.entries.get(s))
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn pin(&self, hash: BlockHash, purpose: PinPurpose, entry: u64) -> Pin {
        Pin {
            hash,
            generation: self.generation,
            purpose,
            entry,
        }
    }

    fn check_pin(&self, pin: &Pin, expected: PinPurpose) -> Result<(), IndexError> {
        if pin.generation != self.generation {
            return Err(IndexError::StalePin {
                hash: pin.hash,
                pin_generation: pin.generation,
                generation: self.generation,
            });
        }
        if pin.purpose != expected {
            return Err(IndexError::WrongPin {
                hash: pin.hash,
                got: pin.purpose,
                expected,
            });
        }
        Ok(())
    }
}

impl GroupIndex {
    /// What equality and hashing look at: in use order (over every tier: it decides which
    /// block is evicted next), each block with its tier and what decides the index's future
    /// answers.
    fn content(&self) -> impl Iterator<Item = (Tier, BlockHash, u64, u32, bool)> + '_ {
        self.entries.iter_used().map(move |s| {
            let e = self.entries.get(s);
            (e.tier, e.hash(), e.id, e.pins, e.complete)
        })
    }
}

impl PartialEq for GroupIndex {
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config
            && self.clock == other.clock
            && self.generation == other.generation
            && self.entries.len() == other.entries.len()
            && self.content().eq(other.content())
    }
}

impl Eq for GroupIndex {}

impl std::hash::Hash for GroupIndex {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.config.hash(state);
        self.clock.hash(state);
        self.generation.hash(state);
        self.entries.len().hash(state);
        for item in self.content() {
            item.hash(state);
        }
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
