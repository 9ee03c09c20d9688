//! Tests of the group index: LRU order, pins, full tiers, promotions, and a property test
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
fn host_evictions_demote_and_disk_loads_promote() {
    let mut ix = index(2, 2);
    store(&mut ix, 1);
    store(&mut ix, 2);
    assert_eq!(store(&mut ix, 3), vec![TierOp::Demote(h(1))]);
    assert_eq!(ix.tier_of(h(1)), Some(Disk));
    assert_eq!(store(&mut ix, 4), vec![TierOp::Demote(h(2))]);
    // Disk full now: the next host eviction first drops the oldest disk block.
    assert_eq!(
        store(&mut ix, 5),
        vec![TierOp::Evict(h(1)), TierOp::Demote(h(3))]
    );
    assert_eq!(ix.lru_order(Disk), vec![h(2), h(3)]);
    // Loading a disk block promotes it, making host room by demoting (and so dropping on disk).
    let load = ix.begin_load(h(2)).unwrap();
    assert_eq!(load.tier, Host);
    assert_eq!(
        load.moves,
        vec![
            TierOp::Evict(h(3)),
            TierOp::Demote(h(4)),
            TierOp::Promote(h(2))
        ]
    );
    ix.finish_load(load.pin).unwrap();
    assert_eq!(ix.lru_order(Host), vec![h(5), h(2)]);
    assert_eq!(ix.lru_order(Disk), vec![h(4)]);
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

/// A plain model of the index: per tier a Vec in LRU order (oldest first).
#[derive(Default, Debug)]
struct Model {
    cap: [u64; 2],
    tiers: [Vec<(u64, bool, u32, u64)>; 2], // (hash, complete, pins, entry id)
    next_id: u64,
}

impl Model {
    fn find(&self, n: u64) -> Option<(usize, usize)> {
        (0..2).find_map(|t| self.tiers[t].iter().position(|e| e.0 == n).map(|i| (t, i)))
    }

    fn make_room(&mut self, t: usize) -> Option<Vec<TierOp>> {
        if (self.tiers[t].len() as u64) < self.cap[t] {
            return Some(vec![]);
        }
        let i = self.tiers[t].iter().position(|e| e.2 == 0)?;
        if t == 0 && self.cap[1] > 0 {
            if let Some(mut moves) = self.make_room(1) {
                let i = self.tiers[0].iter().position(|e| e.2 == 0)?;
                let e = self.tiers[0].remove(i);
                self.tiers[1].push(e);
                moves.push(TierOp::Demote(h(e.0)));
                return Some(moves);
            }
        }
        let e = self.tiers[t].remove(i);
        Some(vec![TierOp::Evict(h(e.0))])
    }

    fn begin_store(&mut self, n: u64) -> Option<(Vec<TierOp>, u64)> {
        if self.find(n).is_some() {
            return None;
        }
        let t = if self.cap[0] > 0 { 0 } else { 1 };
        let moves = self.make_room(t)?;
        self.next_id += 1;
        self.tiers[t].push((n, false, 1, self.next_id));
        Some((moves, self.next_id))
    }

    fn begin_load(&mut self, n: u64) -> Option<(Vec<TierOp>, u64)> {
        let (t, i) = self.find(n)?;
        if !self.tiers[t][i].1 {
            return None;
        }
        let mut e = self.tiers[t].remove(i);
        e.2 += 1;
        let id = e.3;
        self.tiers[t].push(e);
        if t == 1 && self.cap[0] > 0 {
            if let Some(mut moves) = self.make_room(0) {
                let i = self.tiers[1].iter().position(|x| x.0 == n)?;
                let e = self.tiers[1].remove(i);
                self.tiers[0].push(e);
                moves.push(TierOp::Promote(h(n)));
                return Some((moves, id));
            }
        }
        Some((vec![], id))
    }

    /// Hands back a pin; returns false when its entry is gone (a dropped store).
    fn finish(&mut self, n: u64, id: u64, store: bool) -> bool {
        let Some((t, i)) = self.find(n).filter(|&(t, i)| self.tiers[t][i].3 == id) else {
            return false;
        };
        if store && self.tiers[t][i].1 {
            return false;
        }
        {
            let mut e = self.tiers[t].remove(i);
            e.2 = e.2.saturating_sub(1);
            if store {
                e.1 = true;
                self.tiers[t].push(e);
            } else {
                self.tiers[t].insert(i, e);
            }
        }
        true
    }

    fn order(&self, t: usize) -> Vec<BlockHash> {
        self.tiers[t].iter().map(|e| h(e.0)).collect()
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
                    if let (Ok(plan), Some((moves, id))) = (got, want) {
                        prop_assert_eq!(&plan.moves, &moves);
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
                    if let Some((t, i)) = was {
                        model.tiers[t].remove(i);
                    }
                    prop_assert_eq!(ix.drop_block(h(n)).is_some(), was.is_some());
                }
            }
            prop_assert_eq!(ix.lru_order(Host), model.order(0));
            prop_assert_eq!(ix.lru_order(Disk), model.order(1));
            prop_assert!(ix.occupancy(Host) <= host && ix.occupancy(Disk) <= disk);
        }
    }
}
