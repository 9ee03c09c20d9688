//! Batched copies (`tandem_store::batch`) on real files: a batch stores and loads exactly what
//! the single-shard calls would, with its copies run on other threads; corruption is still
//! caught per shard; a runner that copies nothing records nothing.

use std::os::unix::fs::FileExt;
use std::path::Path;

use tandem_proto::ids::Rank;
use tandem_store::batch::{CopyJob, CopyRunner, InlineRunner};
use tandem_store::buffer::{EngineBuffers, PageId, RegionSpec};
use tandem_store::disk::IoMode;
use tandem_store::host::HOST_SLAB_FILE;
use tandem_store::shm::ShmFile;
use tandem_store::store::{Store, StoreConfig, StoreError};
use tandem_store::{BlockHash, Tier};

/// Odd on purpose: not a multiple of the checksum group.
const SHARD: usize = 32 * 1024 + 24;
const PAGES: usize = 12;

/// Runs every job on a thread of its own, and checks it is not the caller's.
struct ThreadPerJob;

impl CopyRunner for ThreadPerJob {
    fn run_all(&self, jobs: &mut [CopyJob<'_>]) {
        let caller = std::thread::current().id();
        std::thread::scope(|s| {
            for job in jobs.iter_mut() {
                s.spawn(move || {
                    assert_ne!(std::thread::current().id(), caller);
                    job.run();
                });
            }
        });
    }
}

/// Runs nothing.
struct Lazy;

impl CopyRunner for Lazy {
    fn run_all(&self, _: &mut [CopyJob<'_>]) {}
}

struct Fixture {
    host: tempfile::TempDir,
    _disk: tempfile::TempDir,
    engine: ShmFile,
    bufs: EngineBuffers,
    store: Store,
}

fn fixture() -> Fixture {
    let base = Path::new("/dev/shm");
    let host = if base.is_dir() {
        tempfile::tempdir_in(base).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let disk = tempfile::tempdir().unwrap();
    let region = host.path().join("engine");
    let mut engine = ShmFile::create(&region, (PAGES * SHARD) as u64).unwrap();
    for (i, b) in engine.bytes_mut().iter_mut().enumerate() {
        *b = (i * 7 + i / SHARD) as u8;
    }
    let mut bufs = EngineBuffers::new();
    bufs.register(RegionSpec {
        name: "eng".into(),
        size_bytes: (PAGES * SHARD) as u64,
        page_size_bytes: SHARD as u64,
    })
    .unwrap();
    bufs.map("eng", &region).unwrap();
    let (store, _) = Store::open(StoreConfig {
        rank: Rank(0),
        shard_bytes: SHARD,
        host_capacity_blocks: 6,
        disk_capacity_blocks: 2,
        host_dir: host.path().to_path_buf(),
        disk_dir: disk.path().to_path_buf(),
        disk_io: IoMode::Buffered,
        layout: Default::default(),
    })
    .unwrap();
    Fixture {
        host,
        _disk: disk,
        engine,
        bufs,
        store,
    }
}

fn page(engine: &ShmFile, p: u32) -> Vec<u8> {
    engine.bytes()[p as usize * SHARD..(p as usize + 1) * SHARD].to_vec()
}

#[test]
fn a_batch_round_trips_on_other_threads_like_the_single_calls() {
    let mut f = fixture();
    let items = [
        (BlockHash(1), Tier::Host, PageId(0)),
        (BlockHash(2), Tier::Host, PageId(3)),
        (BlockHash(3), Tier::Disk, PageId(4)),
        (BlockHash(2), Tier::Host, PageId(5)),
        (BlockHash(4), Tier::Host, PageId(PAGES as u32)),
        (BlockHash(5), Tier::Host, PageId(7)),
    ];
    let stored: Vec<(u32, Vec<u8>)> = [0, 3, 4, 7]
        .iter()
        .map(|&p| (p, page(&f.engine, p)))
        .collect();
    let results = f
        .store
        .store_pages_batch(&items, &f.bufs, "eng", &ThreadPerJob);
    assert_eq!(results.len(), items.len());
    assert_eq!(results[0].as_ref().unwrap().tier, Tier::Host);
    assert_eq!(results[1].as_ref().unwrap().tier, Tier::Host);
    assert_eq!(results[2].as_ref().unwrap().tier, Tier::Disk);
    assert!(
        matches!(results[3], Err(StoreError::AlreadyStored { .. })),
        "{:?}",
        results[3]
    );
    assert!(
        matches!(results[4], Err(StoreError::Buffer(_))),
        "{:?}",
        results[4]
    );
    assert!(results[5].is_ok());
    assert_eq!(f.store.len(), 4);
    assert_eq!(f.store.free_slots(Tier::Host), 3);
    // Load every block back into zeroed pages elsewhere, then check every byte.
    f.engine.bytes_mut().fill(0);
    let loads = [
        (BlockHash(1), PageId(8)),
        (BlockHash(2), PageId(9)),
        (BlockHash(3), PageId(10)),
        (BlockHash(5), PageId(11)),
        (BlockHash(9), PageId(1)),
    ];
    let results = f
        .store
        .load_pages_batch(&loads, &mut f.bufs, "eng", &ThreadPerJob);
    for r in &results[..4] {
        assert!(r.is_ok(), "{r:?}");
    }
    assert!(matches!(results[4], Err(StoreError::UnknownBlock { .. })));
    for ((_, want), dst) in stored.iter().zip([8, 9, 10, 11]) {
        assert!(page(&f.engine, dst) == *want, "page {dst}");
    }
    // The single call reads what the batch wrote.
    let mut out = vec![0u8; SHARD];
    f.store.load_shard(BlockHash(5), &mut out).unwrap();
    assert!(out == stored[3].1);
}

#[test]
fn a_corrupt_slot_fails_its_item_only_and_is_dropped() {
    let mut f = fixture();
    let items: Vec<_> = (0..3u32)
        .map(|i| (BlockHash(u128::from(i) + 10), Tier::Host, PageId(i)))
        .collect();
    for r in f
        .store
        .store_pages_batch(&items, &f.bufs, "eng", &InlineRunner)
    {
        r.unwrap();
    }
    let slot = f.store.location(BlockHash(11)).unwrap().slot;
    let slab = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(f.host.path().join(HOST_SLAB_FILE))
        .unwrap();
    let mut b = [0u8; 1];
    let at = slot * SHARD as u64 + 77;
    slab.read_exact_at(&mut b, at).unwrap();
    slab.write_all_at(&[b[0] ^ 1], at).unwrap();
    let loads: Vec<_> = (0..3u32)
        .map(|i| (BlockHash(u128::from(i) + 10), PageId(i + 4)))
        .collect();
    let results = f
        .store
        .load_pages_batch(&loads, &mut f.bufs, "eng", &ThreadPerJob);
    assert!(results[0].is_ok() && results[2].is_ok());
    assert!(
        matches!(results[1], Err(StoreError::ChecksumMismatch { .. })),
        "{:?}",
        results[1]
    );
    assert!(!f.store.contains(BlockHash(11)));
    assert!(f.store.contains(BlockHash(10)));
}

#[test]
fn a_runner_that_copies_nothing_records_nothing() {
    let mut f = fixture();
    let items: Vec<_> = (0..3u32)
        .map(|i| (BlockHash(u128::from(i) + 20), Tier::Host, PageId(i)))
        .collect();
    for r in f.store.store_pages_batch(&items, &f.bufs, "eng", &Lazy) {
        assert!(matches!(r, Err(StoreError::Tier(_))), "{r:?}");
    }
    assert_eq!(f.store.len(), 0);
    assert_eq!(f.store.free_slots(Tier::Host), 6);
    for r in f
        .store
        .store_pages_batch(&items, &f.bufs, "eng", &InlineRunner)
    {
        r.unwrap();
    }
    let before = page(&f.engine, 6);
    let loads = [(BlockHash(20), PageId(6))];
    assert!(matches!(
        f.store.load_pages_batch(&loads, &mut f.bufs, "eng", &Lazy)[0],
        Err(StoreError::Tier(_))
    ));
    assert!(page(&f.engine, 6) == before, "an unrun load wrote nothing");
    assert!(
        f.store.contains(BlockHash(20)),
        "an unrun load drops nothing"
    );
}

#[test]
fn a_load_batch_naming_one_page_twice_runs_item_by_item() {
    let mut f = fixture();
    let items = [
        (BlockHash(30), Tier::Host, PageId(0)),
        (BlockHash(31), Tier::Host, PageId(1)),
    ];
    for r in f
        .store
        .store_pages_batch(&items, &f.bufs, "eng", &InlineRunner)
    {
        r.unwrap();
    }
    let want = page(&f.engine, 1);
    let loads = [(BlockHash(30), PageId(5)), (BlockHash(31), PageId(5))];
    for r in f
        .store
        .load_pages_batch(&loads, &mut f.bufs, "eng", &ThreadPerJob)
    {
        r.unwrap();
    }
    assert!(
        page(&f.engine, 5) == want,
        "the later item's bytes are last"
    );
}

#[test]
fn disk_items_go_as_one_batch_verified_per_shard() {
    let mut f = fixture();
    // Disk room for 2: the third disk item finds no free slot, the repeat is refused.
    let items = [
        (BlockHash(40), Tier::Disk, PageId(0)),
        (BlockHash(41), Tier::Host, PageId(1)),
        (BlockHash(42), Tier::Disk, PageId(2)),
        (BlockHash(40), Tier::Disk, PageId(3)),
        (BlockHash(43), Tier::Disk, PageId(4)),
    ];
    let stored: Vec<Vec<u8>> = (0..5).map(|p| page(&f.engine, p)).collect();
    let results = f
        .store
        .store_pages_batch(&items, &f.bufs, "eng", &InlineRunner);
    assert_eq!(results[0].as_ref().unwrap().tier, Tier::Disk);
    assert_eq!(results[1].as_ref().unwrap().tier, Tier::Host);
    assert_eq!(results[2].as_ref().unwrap().tier, Tier::Disk);
    assert!(
        matches!(results[3], Err(StoreError::AlreadyStored { .. })),
        "{:?}",
        results[3]
    );
    assert!(
        matches!(results[4], Err(StoreError::NoFreeSlot { .. })),
        "{:?}",
        results[4]
    );
    assert_eq!(f.store.free_slots(Tier::Disk), 0);
    // Corrupt one byte of block 42's disk slot: its load fails and drops it, the other
    // disk item of the same batch loads.
    let slot = f.store.location(BlockHash(42)).unwrap().slot;
    let slab = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(f._disk.path().join(tandem_store::disk::DISK_SLAB_FILE))
        .unwrap();
    let at = tandem_store::disk::DiskTier::slot_offset(SHARD, slot) + SHARD as u64 - 1;
    let mut b = [0u8; 1];
    slab.read_exact_at(&mut b, at).unwrap();
    slab.write_all_at(&[b[0] ^ 0x10], at).unwrap();
    f.engine.bytes_mut().fill(0);
    let loads = [
        (BlockHash(42), PageId(6)),
        (BlockHash(41), PageId(7)),
        (BlockHash(40), PageId(8)),
    ];
    let results = f
        .store
        .load_pages_batch(&loads, &mut f.bufs, "eng", &InlineRunner);
    assert!(
        matches!(results[0], Err(StoreError::ChecksumMismatch { .. })),
        "{:?}",
        results[0]
    );
    assert_eq!(results[1].as_ref().unwrap().tier, Tier::Host);
    assert_eq!(results[2].as_ref().unwrap().tier, Tier::Disk);
    assert!(page(&f.engine, 7) == stored[1]);
    assert!(page(&f.engine, 8) == stored[0]);
    assert!(!f.store.contains(BlockHash(42)));
    assert_eq!(
        f.store.free_slots(Tier::Disk),
        1,
        "the corrupt shard's slot is free"
    );
}

#[test]
fn disk_loads_take_cached_bytes_on_the_runners_threads_and_the_rest_through_the_io() {
    let mut f = fixture();
    let items = [
        (BlockHash(50), Tier::Disk, PageId(0)),
        (BlockHash(51), Tier::Disk, PageId(1)),
    ];
    let stored: Vec<Vec<u8>> = (0..2).map(|p| page(&f.engine, p)).collect();
    for r in f
        .store
        .store_pages_batch(&items, &f.bufs, "eng", &InlineRunner)
    {
        assert_eq!(r.unwrap().tier, Tier::Disk);
    }
    // Page-cache hits: read on the runner's threads (ThreadPerJob checks it is not the
    // caller's), straight into the engine's pages, verified.
    let loads = [(BlockHash(50), PageId(4)), (BlockHash(51), PageId(5))];
    for r in f
        .store
        .load_pages_batch(&loads, &mut f.bufs, "eng", &ThreadPerJob)
    {
        assert_eq!(r.unwrap().tier, Tier::Disk);
    }
    assert!(page(&f.engine, 4) == stored[0] && page(&f.engine, 5) == stored[1]);
    // A runner that reads nothing: every shard comes through the tier's I/O instead.
    let loads = [(BlockHash(51), PageId(8)), (BlockHash(50), PageId(9))];
    for r in f.store.load_pages_batch(&loads, &mut f.bufs, "eng", &Lazy) {
        assert_eq!(r.unwrap().tier, Tier::Disk);
    }
    assert!(page(&f.engine, 8) == stored[1] && page(&f.engine, 9) == stored[0]);
}
