//! The group index's storage: every block's entry in a slab of fixed-size chunks, a hash
//! table of 4-byte slot numbers keyed by the entries' block hashes, and one doubly linked
//! LRU list threaded through the entries: the use order of the whole index, every tier
//! together (each entry names its tier; each tier's count is kept beside the list).
//!
//! Owns [`Entries`]: lookup by hash, insertion at the most recently used end, moving an entry
//! to that end (in the same or another tier), removal, and walks from the least recently used
//! end (of the whole index or of one tier). It never decides anything (that is
//! [`super::GroupIndex`]'s).
//!
//! # Memory
//! An entry is 40 bytes (hash 16, insertion id 8, list links 2 × 4, pins 4, tier and state
//! 2, padding 2); the table holds a 4-byte slot number plus hashbrown's 1 control byte per
//! bucket, at most 8/7 buckets per entry rounded up to a power of two; chunks of 4096
//! entries grow the slab 160 KiB at a time. About 50 bytes per block at 10^7 blocks
//! (`tandem bench scale` measures it), where a `HashMap<BlockHash, Entry>` beside
//! `BTreeMap`s ordered by use took 135.
//!
//! Slots are `u32`: at most [`MAX_ENTRIES`] blocks.
//!
//! # Hashing
//! hashbrown's default hasher (foldhash, seeded per process): a block hash is already a
//! digest, so the table needs spreading, not cryptographic strength, and foldhash's seed
//! keeps engineered collisions impractical; it costs a few ns where SipHash costs tens, which
//! is most of an insert during a rebuild.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use tandem_proto::{BlockHash, Tier};

/// Most entries the index holds (slot numbers are 32-bit, one value marks "none").
pub const MAX_ENTRIES: u64 = u32::MAX as u64 - 1;
/// Entries per slab chunk.
const CHUNK: usize = 4096;
/// "No slot" in a link.
const NIL: u32 = u32::MAX;
/// Tiers the index can name (one count each).
const TIERS: usize = 3;

/// A slot number.
pub(super) type Slot = u32;

/// One block's entry. The hash is kept as two words so that the entry is 8-byte aligned
/// (a `u128` would pad it to 48 bytes).
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    lo: u64,
    hi: u64,
    /// Unique per insertion (the index's tick then): a pin names it.
    pub(super) id: u64,
    prev: Slot,
    next: Slot,
    /// Pins held on it.
    pub(super) pins: u32,
    /// The tier it is in (for a free slot: meaningless).
    pub(super) tier: Tier,
    /// Complete on every rank (false: a store in flight).
    pub(super) complete: bool,
    live: bool,
}

impl Entry {
    /// The block.
    pub(super) fn hash(&self) -> BlockHash {
        BlockHash((u128::from(self.hi) << 64) | u128::from(self.lo))
    }
}

/// The two ends of the use-order list.
#[derive(Clone, Copy, Debug)]
struct List {
    head: Slot,
    tail: Slot,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: NIL,
            tail: NIL,
        }
    }
}

/// Every entry of the index (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct Entries {
    chunks: Vec<Vec<Entry>>,
    table: HashTable<Slot>,
    state: hashbrown::DefaultHashBuilder,
    /// Use order of every entry, all tiers together.
    list: List,
    /// Entries per tier.
    counts: [u64; TIERS],
    free: Slot,
    live: u64,
}

fn count_of(tier: Tier) -> usize {
    match tier {
        Tier::Host => 0,
        Tier::Disk => 1,
        Tier::Device => 2,
    }
}

impl Entries {
    /// No entries.
    pub(super) fn new() -> Self {
        Entries {
            chunks: Vec::new(),
            table: HashTable::new(),
            state: hashbrown::DefaultHashBuilder::default(),
            list: List::default(),
            counts: [0; TIERS],
            free: NIL,
            live: 0,
        }
    }

    /// Makes room for `additional` more entries without growing the table meanwhile.
    pub(super) fn reserve(&mut self, additional: usize) {
        let (state, chunks) = (&self.state, &self.chunks);
        self.table
            .reserve(additional, |&s| state.hash_one(entry_in(chunks, s).hash()));
    }

    /// Entries held.
    pub(super) fn len(&self) -> u64 {
        self.live
    }

    /// Entries in `tier`.
    pub(super) fn tier_len(&self, tier: Tier) -> u64 {
        self.counts[count_of(tier)]
    }

    /// The slot of `hash`'s entry.
    pub(super) fn find(&self, hash: BlockHash) -> Option<Slot> {
        let chunks = &self.chunks;
        self.table
            .find(self.state.hash_one(hash), |&s| {
                entry_in(chunks, s).hash() == hash
            })
            .copied()
    }

    /// The entry in `slot`.
    pub(super) fn get(&self, slot: Slot) -> &Entry {
        entry_in(&self.chunks, slot)
    }

    /// The entry in `slot`, to change its pins or completeness (never its tier: that is
    /// [`Self::move_to_tail`]).
    pub(super) fn get_mut(&mut self, slot: Slot) -> &mut Entry {
        let (c, o) = split(slot);
        &mut self.chunks[c][o]
    }

    /// Inserts a new entry for `hash` (not present) in `tier`, the most recently used.
    /// The caller keeps the count within [`MAX_ENTRIES`].
    pub(super) fn insert(
        &mut self,
        hash: BlockHash,
        tier: Tier,
        complete: bool,
        pins: u32,
        id: u64,
    ) -> Slot {
        let entry = Entry {
            lo: hash.0 as u64,
            hi: (hash.0 >> 64) as u64,
            id,
            prev: NIL,
            next: NIL,
            pins,
            tier,
            complete,
            live: true,
        };
        let slot = if self.free != NIL {
            let slot = self.free;
            let e = self.get_mut(slot);
            let next_free = e.next;
            *e = entry;
            self.free = next_free;
            slot
        } else {
            if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
                self.chunks.push(Vec::with_capacity(CHUNK));
            }
            let c = self.chunks.len() - 1;
            let chunk = &mut self.chunks[c];
            let slot = (c * CHUNK + chunk.len()) as Slot;
            chunk.push(entry);
            slot
        };
        let (state, chunks) = (&self.state, &self.chunks);
        self.table.insert_unique(state.hash_one(hash), slot, |&s| {
            state.hash_one(entry_in(chunks, s).hash())
        });
        self.link_tail(slot);
        self.counts[count_of(tier)] += 1;
        self.live += 1;
        slot
    }

    /// Makes `slot`'s entry the most recently used, in `tier` (its own or another).
    pub(super) fn move_to_tail(&mut self, slot: Slot, tier: Tier) {
        self.unlink(slot);
        let old = self.get(slot).tier;
        self.counts[count_of(old)] -= 1;
        self.counts[count_of(tier)] += 1;
        self.get_mut(slot).tier = tier;
        self.link_tail(slot);
    }

    /// Removes `slot`'s entry.
    pub(super) fn remove(&mut self, slot: Slot) {
        let hash = self.get(slot).hash();
        if let Ok(found) = self
            .table
            .find_entry(self.state.hash_one(hash), |&s| s == slot)
        {
            found.remove();
        }
        self.unlink(slot);
        let tier = self.get(slot).tier;
        self.counts[count_of(tier)] -= 1;
        let free = self.free;
        let e = self.get_mut(slot);
        e.live = false;
        e.pins = 0;
        e.next = free;
        self.free = slot;
        self.live -= 1;
    }

    /// Every slot from least to most recently used.
    pub(super) fn iter_used(&self) -> impl Iterator<Item = Slot> + '_ {
        let mut at = self.list.head;
        std::iter::from_fn(move || {
            (at != NIL).then(|| {
                let slot = at;
                at = self.get(slot).next;
                slot
            })
        })
    }

    /// `tier`'s slots from least to most recently used (walks the whole list).
    pub(super) fn iter_tier(&self, tier: Tier) -> impl Iterator<Item = Slot> + '_ {
        self.iter_used().filter(move |&s| self.get(s).tier == tier)
    }

    /// Every live slot, in slab order.
    pub(super) fn iter_live(&self) -> impl Iterator<Item = Slot> + '_ {
        self.chunks.iter().enumerate().flat_map(|(c, chunk)| {
            chunk
                .iter()
                .enumerate()
                .filter(|(_, e)| e.live)
                .map(move |(o, _)| (c * CHUNK + o) as Slot)
        })
    }

    fn link_tail(&mut self, slot: Slot) {
        let tail = self.list.tail;
        {
            let e = self.get_mut(slot);
            e.prev = tail;
            e.next = NIL;
        }
        if tail == NIL {
            self.list.head = slot;
        } else {
            self.get_mut(tail).next = slot;
        }
        self.list.tail = slot;
    }

    fn unlink(&mut self, slot: Slot) {
        let (prev, next) = {
            let e = self.get(slot);
            (e.prev, e.next)
        };
        if prev == NIL {
            self.list.head = next;
        } else {
            self.get_mut(prev).next = next;
        }
        if next == NIL {
            self.list.tail = prev;
        } else {
            self.get_mut(next).prev = prev;
        }
        let e = self.get_mut(slot);
        e.prev = NIL;
        e.next = NIL;
    }
}

fn split(slot: Slot) -> (usize, usize) {
    (slot as usize / CHUNK, slot as usize % CHUNK)
}

fn entry_in(chunks: &[Vec<Entry>], slot: Slot) -> &Entry {
    let (c, o) = split(slot);
    &chunks[c][o]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_forty_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 40);
    }

    #[test]
    fn lists_keep_use_order_across_moves_removals_and_reuse() {
        let mut e = Entries::new();
        let h = |n: u64| BlockHash::from(n);
        let slots: Vec<Slot> = (0..5)
            .map(|n| e.insert(h(n), Tier::Host, true, 0, n))
            .collect();
        let order = |e: &Entries, t| e.iter_tier(t).map(|s| e.get(s).hash()).collect::<Vec<_>>();
        assert_eq!(order(&e, Tier::Host), (0..5).map(h).collect::<Vec<_>>());
        e.move_to_tail(slots[1], Tier::Host);
        e.move_to_tail(slots[3], Tier::Disk);
        e.remove(slots[0]);
        assert_eq!(order(&e, Tier::Host), vec![h(2), h(4), h(1)]);
        assert_eq!(order(&e, Tier::Disk), vec![h(3)]);
        assert_eq!(e.find(h(0)), None);
        assert_eq!(e.find(h(3)), Some(slots[3]));
        // The freed slot is reused.
        assert_eq!(e.insert(h(9), Tier::Disk, false, 1, 9), slots[0]);
        assert_eq!(order(&e, Tier::Disk), vec![h(3), h(9)]);
        assert_eq!(
            (e.len(), e.tier_len(Tier::Host), e.tier_len(Tier::Disk)),
            (5, 3, 2)
        );
        let mut live: Vec<Slot> = e.iter_live().collect();
        live.sort_unstable();
        assert_eq!(live, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn chunks_grow_and_lookups_find_every_entry() {
        let mut e = Entries::new();
        let n = CHUNK as u64 * 2 + 7;
        for i in 0..n {
            e.insert(
                BlockHash(u128::from(i) << 70 | u128::from(i)),
                Tier::Disk,
                true,
                0,
                i,
            );
        }
        for i in (0..n).step_by(97) {
            let s = e
                .find(BlockHash(u128::from(i) << 70 | u128::from(i)))
                .unwrap();
            assert_eq!(e.get(s).id, i);
        }
        assert_eq!(e.iter_tier(Tier::Disk).count() as u64, n);
    }
}
