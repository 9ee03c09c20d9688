//! Tests of the group index: LRU order, pins, full tiers, placement, and a property test
//! against a plain model.

use super::*;
use proptest::prelude::*;
use Tier::{Disk, Host};

fn index(host: u64, disk: u64) -> GroupIndex {
    GroupIndex::new(IndexConfig {
        world_size: 2,
        host_capacity_blocks: host,
        disk_capacity_blocks: disk,
    })
    .unwrap()
}

fn h(n: u64) -> BlockHash {
    BlockHash::from(n)
}

fn store(ix: &mut GroupIndex, n: u64) -> Vec<TierOp> {
    let plan = ix.begin_store(h(n)).unwrap();
    ix.finish_store(plan.pin).unwrap();
    plan.moves
}

#[test]
fn lru_evicts_oldest_and_loads_refresh() {
    let mut ix = index(3, 0);
    for n in 1..=3 {
        assert!(store(&mut ix, n).is_empty());
    }
    let load = ix.begin_load(h(1)).unwrap();
    ix.finish_load(load.pin).unwrap();
    assert_eq!(ix.lru_order(Host), vec![h(2), h(3), h(1)]);
    assert_eq!(
        store(&mut ix, 4),
        vec![TierOp::Evict(h(2))],
        "no disk tier: the oldest is dropped"
    );
    assert_eq!(store(&mut ix, 5), vec![TierOp::Evict(h(3))]);
    assert_eq!(ix.lru_order(Host), vec![h(1), h(4), h(5)]);
    assert_eq!(ix.lookup_prefix(&[h(1), h(4), h(2), h(5)]), 2);
}

#[test]
fn blocks_stay_in_the_tier_they_were_written_to_and_evictions_follow_one_lru() {
    let mut ix = index(2, 2);
    // Host while it has room, then disk: no moves.
    for n in 1..=4 {
        let plan = ix.begin_store(h(n)).unwrap();
        assert_eq!(plan.tier, if n <= 2 { Host } else { Disk }, "block {n}");
        assert!(plan.moves.is_empty(), "block {n}: {:?}", plan.moves);
        ix.finish_store(plan.pin).unwrap();
    }
    // A load of a disk block reads it where it is: no promotion, no demotion.
    let load = ix.begin_load(h(3)).unwrap();
    assert_eq!((load.tier, load.moves.len()), (Disk, 0));
    ix.finish_load(load.pin).unwrap();
    let load = ix.begin_load(h(1)).unwrap();
    assert_eq!((load.tier, load.moves.len()), (Host, 0));
    ix.finish_load(load.pin).unwrap();
    assert_eq!(
        ix.use_order(),
        vec![(h(2), Host), (h(4), Disk), (h(3), Disk), (h(1), Host)]
    );
    // Both tiers full: the least recently used block of the whole index goes, and the new
    // block takes its tier.
    let plan = ix.begin_store(h(5)).unwrap();
    assert_eq!((plan.tier, plan.moves), (Host, vec![TierOp::Evict(h(2))]));
    ix.finish_store(plan.pin).unwrap();
    // A pinned least recently used block is passed over.
    let pinned = ix.begin_load(h(4)).unwrap();
    let plan = ix.begin_store(h(6)).unwrap();
    assert_eq!((plan.tier, plan.moves), (Disk, vec![TierOp::Evict(h(3))]));
    ix.finish_store(plan.pin).unwrap();
    ix.finish_load(pinned.pin).unwrap();
    assert_eq!(ix.lru_order(Host), vec![h(1), h(5)]);
    assert_eq!(ix.lru_order(Disk), vec![h(4), h(6)]);
}

#[test]
fn the_blocks_kept_are_those_of_one_lru_over_both_tiers() {
    // Without pins, the index keeps exactly what an LRU cache of host + disk blocks keeps,
    // whatever the split between the tiers.
    for (host, disk) in [(0, 5), (1, 4), (2, 3), (5, 0)] {
        let mut ix = index(host, disk);
        let mut lru: Vec<u64> = Vec::new();
        for step in 0..200u64 {
            let n = (step * 7 + step / 3) % 11;
            if let Some(i) = lru.iter().position(|&x| x == n) {
                lru.remove(i);
                let load = ix.begin_load(h(n)).unwrap();
                ix.finish_load(load.pin).unwrap();
            } else {
                if lru.len() == 5 {
                    lru.remove(0);
                }
                store(&mut ix, n);
            }
            lru.push(n);
            let kept: Vec<BlockHash> = ix.use_order().into_iter().map(|(b, _)| b).collect();
            assert_eq!(kept, lru.iter().map(|&n| h(n)).collect::<Vec<_>>());
        }
    }
}

#[test]
fn pinned_blocks_are_never_evicted_and_all_pinned_is_tier_full() {
    let mut ix = index(2, 0);
    store(&mut ix, 1);
    store(&mut ix, 2);
    let p1 = ix.begin_load(h(1)).unwrap().pin;
    // 1 is pinned and now most recent anyway; pin 2 too by loading it.
    let p2 = ix.begin_load(h(2)).unwrap().pin;
    let e = ix.begin_store(h(3)).unwrap_err();
    assert_eq!(
        e,
        IndexError::TierFull {
            tier: Host,
            capacity_blocks: 2,
            pinned: 2
        }
    );
    assert_eq!(
        e.to_string(),
        "host tier full: 2 blocks, 2 pinned, nothing can be evicted"
    );
    assert!(
        ix.contains(h(1)) && ix.contains(h(2)),
        "a refused store changes nothing"
    );
    ix.finish_load(p2).unwrap();
    assert_eq!(
        ix.begin_store(h(3)).unwrap().moves,
        vec![TierOp::Evict(h(2))],
        "only the unpinned one goes"
    );
    ix.finish_load(p1).unwrap();
}

#[test]
fn pending_blocks_are_pinned_and_invisible() {
    let mut ix = index(1, 0);
    let plan = ix.begin_store(h(1)).unwrap();
    assert!(!ix.contains(h(1)));
    assert_eq!(ix.lookup_prefix(&[h(1)]), 0);
    assert_eq!(
        ix.begin_load(h(1)).unwrap_err(),
        IndexError::NotComplete { hash: h(1) }
    );
    assert_eq!(
        ix.begin_store(h(1)).unwrap_err(),
        IndexError::AlreadyPresent { hash: h(1) }
    );
    assert!(matches!(
        ix.begin_store(h(2)),
        Err(IndexError::TierFull { pinned: 1, .. })
    ));
    assert_eq!(ix.abort_store(plan.pin).unwrap(), vec![TierOp::Evict(h(1))]);
    assert_eq!(ix.occupancy(Host), 0);
}

#[test]
fn dropped_blocks_fail_their_store_and_release_quietly() {
    let mut ix = index(2, 0);
    let plan = ix.begin_store(h(1)).unwrap();
    assert_eq!(ix.drop_block(h(1)), Some(TierOp::Evict(h(1))));
    assert_eq!(
        ix.finish_store(plan.pin).unwrap_err(),
        IndexError::Dropped { hash: h(1) }
    );
    store(&mut ix, 2);
    let load = ix.begin_load(h(2)).unwrap();
    assert_eq!(
        ix.drop_block(h(2)),
        Some(TierOp::Evict(h(2))),
        "a corrupt block goes even when pinned"
    );
    assert_eq!(ix.drop_block(h(2)), None);
    ix.finish_load(load.pin).unwrap();
    assert!(!ix.contains(h(2)));
}

#[test]
fn new_epoch_releases_pins_and_aborts_pending_stores() {
    let mut ix = index(2, 0);
    store(&mut ix, 1);
    let load = ix.begin_load(h(1)).unwrap();
    let pending = ix.begin_store(h(2)).unwrap();
    assert_eq!(ix.release_all_pins(), vec![h(2)]);
    assert!(!ix.is_pinned(h(1)));
    let e = ix.finish_load(load.pin).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "pin on block {} is from generation 0, the index is at generation 1",
            h(1)
        )
    );
    assert!(matches!(
        ix.finish_store(pending.pin),
        Err(IndexError::StalePin { .. })
    ));
    assert_eq!(ix.generation(), 1);
}

#[test]
fn error_messages() {
    let e = IndexError::WrongPin {
        hash: h(1),
        got: PinPurpose::Load,
        expected: PinPurpose::Store,
    };
    assert_eq!(
        e.to_string(),
        format!("pin on block {} is a load pin, expected a store pin", h(1))
    );
    assert_eq!(
        IndexError::NotPresent { hash: h(1) }.to_string(),
        format!("block {} is not in the index", h(1))
    );
    assert_eq!(
        IndexError::NotComplete { hash: h(1) }.to_string(),
        format!("block {} is still being stored", h(1))
    );
    assert_eq!(
        IndexError::AlreadyPresent { hash: h(1) }.to_string(),
        format!("block {} is already in the index", h(1))
    );
    assert_eq!(
        IndexError::Dropped { hash: h(1) }.to_string(),
        format!("block {} was dropped while its store was in flight", h(1))
    );
    assert_eq!(
        IndexError::EmptyGroup.to_string(),
        "world size must be at least 1"
    );
    assert_eq!(
        GroupIndex::new(IndexConfig {
            world_size: 0,
            host_capacity_blocks: 1,
            disk_capacity_blocks: 0
        })
        .unwrap_err(),
        IndexError::EmptyGroup
    );
    let mut ix = index(1, 0);
    let plan = ix.begin_store(h(1)).unwrap();
    assert!(matches!(
        ix.finish_load(plan.pin),
        Err(IndexError::WrongPin { .. })
    ));
    let e = index(0, 0).begin_store(h(1)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "disk tier full: 0 blocks, 0 pinned, nothing can be evicted"
    );
}

#[test]
fn disk_only_group_stores_to_disk() {
    let mut ix = index(0, 2);
    let plan = ix.begin_store(h(1)).unwrap();
    assert_eq!(plan.tier, Disk);
    ix.finish_store(plan.pin).unwrap();
    let load = ix.begin_load(h(1)).unwrap();
    assert_eq!(
        (load.tier, load.moves.len()),
        (Disk, 0),
        "no host tier: no promotion"
    );
    ix.finish_load(load.pin).unwrap();
}

/// A plain model of the index: one Vec in use order (oldest first), every tier together.
#[derive(Default, Debug)]
struct Model {
    cap: [u64; 2],
    blocks: Vec<(u64, usize, bool, u32, u64)>, // (hash, tier, complete, pins, entry id)
    next_id: u64,
}

impl Model {
    fn find(&self, n: u64) -> Option<usize> {
        self.blocks.iter().position(|e| e.0 == n)
    }

    fn count(&self, t: usize) -> u64 {
        self.blocks.iter().filter(|e| e.1 == t).count() as u64
    }

    fn begin_store(&mut self, n: u64) -> Option<(Vec<TierOp>, u64)> {
        if self.find(n).is_some() {
            return None;
        }
        let (t, moves) = match (0..2).find(|&t| self.count(t) < self.cap[t]) {
            Some(t) => (t, vec![]),
            None => {
                let i = self.blocks.iter().position(|e| e.3 == 0)?;
                let e = self.blocks.remove(i);
                (e.1, vec![TierOp::Evict(h(e.0))])
            }
        };
        self.next_id += 1;
        self.blocks.push((n, t, false, 1, self.next_id));
        Some((moves, self.next_id))
    }

    fn begin_load(&mut self, n: u64) -> Option<(Tier, u64)> {
        let i = self.find(n)?;
        if !self.blocks[i].2 {
            return None;
        }
        let mut e = self.blocks.remove(i);
        e.3 += 1;
        self.blocks.push(e);
        Some(([Host, Disk][e.1], e.4))
    }

    /// Hands back a pin; returns false when its entry is gone (a dropped store).
    fn finish(&mut self, n: u64, id: u64, store: bool) -> bool {
        let Some(i) = self.find(n).filter(|&i| self.blocks[i].4 == id) else {
            return false;
        };
        if store && self.blocks[i].2 {
            return false;
        }
        let mut e = self.blocks.remove(i);
        e.3 = e.3.saturating_sub(1);
        if store {
            e.2 = true;
            self.blocks.push(e);
        } else {
            self.blocks.insert(i, e);
        }
        true
    }

    fn order(&self) -> Vec<(BlockHash, Tier)> {
        self.blocks
            .iter()
            .map(|e| (h(e.0), [Host, Disk][e.1]))
            .collect()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Store(u64),
    Load(u64),
    Finish(usize),
    Drop(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..12).prop_map(Op::Store),
        2 => (0u64..12).prop_map(Op::Load),
        3 => (0usize..8).prop_map(Op::Finish),
        1 => (0u64..12).prop_map(Op::Drop),
    ]
}

proptest! {
    #[test]
    fn index_matches_model(host in 0u64..4, disk in 0u64..4, ops in proptest::collection::vec(op(), 1..60)) {
        let mut ix = index(host, disk);
        let mut model = Model { cap: [host, disk], ..Model::default() };
        let mut pins: Vec<(Pin, u64)> = Vec::new();
        for op in ops {
            match op {
                Op::Store(n) => {
                    let got = ix.begin_store(h(n));
                    let want = model.begin_store(n);
                    prop_assert_eq!(got.is_ok(), want.is_some(), "store {}", n);
                    if let (Ok(plan), Some((moves, id))) = (got, want) {
                        prop_assert_eq!(&plan.moves, &moves);
                        pins.push((plan.pin, id));
                    }
                }
                Op::Load(n) => {
                    let got = ix.begin_load(h(n));
                    let want = model.begin_load(n);
                    prop_assert_eq!(got.is_ok(), want.is_some(), "load {}", n);
                    if let (Ok(plan), Some((tier, id))) = (got, want) {
                        prop_assert_eq!(plan.tier, tier);
                        prop_assert!(plan.moves.is_empty(), "a load moves nothing");
                        pins.push((plan.pin, id));
                    }
                }
                Op::Finish(i) if !pins.is_empty() => {
                    let (pin, id) = pins.remove(i % pins.len());
                    let n = pin.hash().low64();
                    match pin.purpose() {
                        PinPurpose::Store => {
                            let live = model.finish(n, id, true);
                            prop_assert_eq!(ix.finish_store(pin).is_ok(), live);
                        }
                        PinPurpose::Load => {
                            ix.finish_load(pin).unwrap();
                            model.finish(n, id, false);
                        }
                    }
                }
                Op::Finish(_) => {}
                Op::Drop(n) => {
                    let was = model.find(n);
                    if let Some(i) = was {
                        model.blocks.remove(i);
                    }
                    prop_assert_eq!(ix.drop_block(h(n)).is_some(), was.is_some());
                }
            }
            prop_assert_eq!(ix.use_order(), model.order());
            prop_assert!(ix.occupancy(Host) <= host && ix.occupancy(Disk) <= disk);
        }
    }
}
