//! Invariant 8 (README): one process per rank's tiers, and a stale writer changes nothing.
//! On real files: a second open of the same tiers is refused before it touches anything, and
//! a store that lost its lock (another holder took the tiers over) can change no slot, no
//! manifest and serve no load. The process-level version (an agent SIGSTOPped mid-copy, a
//! second agent for the same rank) is the workspace's `tests/promises.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tandem_proto::ids::Rank;
use tandem_store::disk::{IoMode, DISK_SLAB_FILE};
use tandem_store::fence::{Fenced, FENCE_FILE};
use tandem_store::host::HOST_SLAB_FILE;
use tandem_store::lock::{LockError, TierLock, LOCK_FILE};
use tandem_store::manifest::{ManifestError, MANIFEST_FILE};
use tandem_store::store::{Store, StoreConfig, StoreError};
use tandem_store::{BlockHash, Tier};

const SHARD: usize = 4096 + 8;

fn config(root: &Path) -> StoreConfig {
    StoreConfig {
        rank: Rank(1),
        shard_bytes: SHARD,
        host_capacity_blocks: 4,
        disk_capacity_blocks: 4,
        host_dir: root.join("host"),
        disk_dir: root.join("disk"),
        disk_io: IoMode::Buffered,
        layout: Default::default(),
    }
}

/// Every file under `root` with its bytes.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn shard(byte: u8) -> Vec<u8> {
    vec![byte; SHARD]
}

#[test]
fn a_second_open_of_the_same_tiers_is_refused_and_touches_nothing() {
    let root = tempfile::tempdir().unwrap();
    let cfg = config(root.path());
    let (mut store, _) = Store::open(cfg.clone()).unwrap();
    store
        .store_shard(BlockHash(1), Tier::Host, &shard(1))
        .unwrap();
    store.flush_manifest().unwrap();
    let before = snapshot(root.path());
    match Store::open(cfg.clone()) {
        Err(StoreError::Lock(LockError::Held { path, pid })) => {
            assert_eq!(path, cfg.disk_dir.join(LOCK_FILE));
            assert_eq!(pid, Some(std::process::id()));
        }
        other => panic!("a second open: {:?}", other.map(|(_, r)| r)),
    }
    assert_eq!(
        snapshot(root.path()),
        before,
        "the refused open changed files"
    );
    let mut out = shard(0);
    store.load_shard(BlockHash(1), &mut out).unwrap();
    assert_eq!(out, shard(1));
}

#[test]
fn a_writer_that_lost_the_lock_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let cfg = config(root.path());
    let lock_a = TierLock::acquire(&cfg, &[]).unwrap();
    let (mut a, _) = Store::open_locked(cfg.clone(), &lock_a).unwrap();
    a.begin_epoch(3).unwrap();
    a.store_shard(BlockHash(1), Tier::Host, &shard(1)).unwrap();
    a.store_shard(BlockHash(2), Tier::Disk, &shard(2)).unwrap();
    a.flush_manifest().unwrap();
    // A loses the lock (as a process stopped while another took over would, had the lock
    // failed); B takes the tiers over, in a later epoch, and rewrites slots.
    drop(lock_a);
    let lock_b = TierLock::acquire(&cfg, &[]).unwrap();
    let (mut b, report) = Store::open_locked(cfg.clone(), &lock_b).unwrap();
    assert_eq!(report.adopted, 2);
    b.begin_epoch(4).unwrap();
    b.evict(BlockHash(1));
    b.store_shard(BlockHash(3), Tier::Host, &shard(3)).unwrap();
    b.flush_manifest().unwrap();
    let before = snapshot(root.path());

    // Every write, move, load and manifest save of A is refused, typed, naming both writers.
    let e = a
        .store_shard(BlockHash(9), Tier::Host, &shard(9))
        .unwrap_err();
    match &e {
        StoreError::Fenced(Fenced::Overtaken { ours, current, .. }) => {
            assert_eq!(ours.epoch, 3);
            assert_eq!(current.epoch, 4);
            assert_eq!(current.incarnation, ours.incarnation + 1);
        }
        other => panic!("{other}"),
    }
    assert!(
        e.to_string()
            .starts_with("fenced: the rank's tiers belong to"),
        "{e}"
    );
    assert!(matches!(a.demote(BlockHash(1)), Err(StoreError::Fenced(_))));
    let mut out = shard(0);
    assert!(matches!(
        a.load_shard(BlockHash(2), &mut out),
        Err(StoreError::Fenced(_))
    ));
    a.evict(BlockHash(2));
    assert!(matches!(
        a.flush_manifest(),
        Err(StoreError::Manifest(ManifestError::Fenced { .. }))
    ));
    assert!(matches!(a.begin_epoch(5), Err(StoreError::Fenced(_))));
    assert_eq!(
        snapshot(root.path()),
        before,
        "the stale writer changed files"
    );

    // B still serves what it holds, and its manifest is the one on disk.
    b.load_shard(BlockHash(3), &mut out).unwrap();
    assert_eq!(out, shard(3));
    b.load_shard(BlockHash(2), &mut out).unwrap();
    assert_eq!(out, shard(2));
    drop((a, b, lock_b));
    let (mut c, report) = Store::open(cfg).unwrap();
    assert_eq!((report.adopted, report.invalid), (2, 0));
    // Nothing the stale writer did reached a slot: every shard reads back intact.
    let scrub = c.scrub().unwrap();
    assert_eq!((scrub.verified, scrub.corrupt.len()), (2, 0));
    assert!(c.contains(BlockHash(2)) && c.contains(BlockHash(3)) && !c.contains(BlockHash(1)));
    for f in [
        root.path().join("disk").join(MANIFEST_FILE),
        root.path().join("disk").join(DISK_SLAB_FILE),
        root.path().join("disk").join(FENCE_FILE),
        root.path().join("host").join(HOST_SLAB_FILE),
        root.path().join("host").join(LOCK_FILE),
    ] {
        assert!(f.exists(), "{}", f.display());
    }
}
