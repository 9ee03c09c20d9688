//! The set of cached prefix block hashes, optionally bounded with least-recently-used eviction.
//!
//! Owns recency bookkeeping only: [`LruBlockSet::touch`] makes a cached block the most recently
//! used, [`LruBlockSet::insert`] adds one and, when the set is full, evicts the least recently
//! used. It knows nothing of requests, prefixes or tokens (that is [`crate::hit`]).
//!
//! Recency is a logical counter bumped on every touch or insert (no clocks): a map from hash to
//! its last-use stamp and an ordered map from stamp to hash, so touch, insert and evict are
//! `O(log n)` in the number of cached blocks.

use std::collections::{BTreeMap, HashMap};

/// Cached block hashes with LRU eviction when a capacity (in blocks) is set.
#[derive(Debug, Clone, Default)]
pub struct LruBlockSet {
    capacity: Option<u64>,
    stamp_of: HashMap<u64, u64>,
    by_stamp: BTreeMap<u64, u64>,
    clock: u64,
    evictions: u64,
}

impl LruBlockSet {
    /// A set that never evicts.
    pub fn unbounded() -> Self {
        LruBlockSet::default()
    }

    /// A set of at most `blocks` blocks. With `blocks == 0` nothing is ever cached.
    pub fn with_capacity(blocks: u64) -> Self {
        LruBlockSet {
            capacity: Some(blocks),
            ..LruBlockSet::default()
        }
    }

    /// Capacity in blocks (`None` when unbounded).
    pub fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    /// Number of cached blocks.
    pub fn len(&self) -> u64 {
        self.stamp_of.len() as u64
    }

    /// Whether no block is cached.
    pub fn is_empty(&self) -> bool {
        self.stamp_of.is_empty()
    }

    /// Whether `hash` is cached (does not change recency).
    pub fn contains(&self, hash: u64) -> bool {
        self.stamp_of.contains_key(&hash)
    }

    /// Blocks evicted so far.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Makes `hash` the most recently used block if it is cached; returns whether it was.
    pub fn touch(&mut self, hash: u64) -> bool {
        let Some(old) = self.stamp_of.get(&hash).copied() else {
            return false;
        };
        self.by_stamp.remove(&old);
        let stamp = self.next_stamp();
        self.by_stamp.insert(stamp, hash);
        self.stamp_of.insert(hash, stamp);
        true
    }

    /// Caches `hash` as the most recently used block (a touch if already cached). When the
    /// set is full, first evicts the least recently used block and returns its hash. With a
    /// capacity of 0 this does nothing and returns `None`.
    pub fn insert(&mut self, hash: u64) -> Option<u64> {
        if self.touch(hash) || self.capacity == Some(0) {
            return None;
        }
        let evicted = match self.capacity {
            Some(capacity) if self.len() >= capacity => self.evict_lru(),
            _ => None,
        };
        let stamp = self.next_stamp();
        self.by_stamp.insert(stamp, hash);
        self.stamp_of.insert(hash, stamp);
        evicted
    }

    /// Cached hashes from least to most recently used.
    pub fn iter_lru(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_stamp.values().copied()
    }

    fn evict_lru(&mut self) -> Option<u64> {
        let (_, hash) = self.by_stamp.pop_first()?;
        self.stamp_of.remove(&hash);
        self.evictions += 1;
        Some(hash)
    }

    fn next_stamp(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_block() {
        let mut set = LruBlockSet::with_capacity(2);
        assert_eq!(set.insert(1), None);
        assert_eq!(set.insert(2), None);
        assert!(set.touch(1));
        assert_eq!(set.insert(3), Some(2));
        assert_eq!(set.iter_lru().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(set.insert(3), None, "re-insert is a touch");
        assert_eq!(set.insert(4), Some(1));
        assert_eq!(set.evictions(), 2);
        assert_eq!(set.len(), 2);
        assert!(!set.contains(1) && set.contains(3) && set.contains(4));
    }

    #[test]
    fn unbounded_never_evicts_and_zero_capacity_caches_nothing() {
        let mut set = LruBlockSet::unbounded();
        for hash in 0..1000 {
            assert_eq!(set.insert(hash), None);
        }
        assert_eq!(set.len(), 1000);
        assert_eq!(set.capacity(), None);
        let mut none = LruBlockSet::with_capacity(0);
        assert_eq!(none.insert(7), None);
        assert!(none.is_empty());
        assert!(!none.touch(7));
    }
}
