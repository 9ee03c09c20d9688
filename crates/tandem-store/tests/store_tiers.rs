//! The per-rank store on real files: round trips through both tiers, corruption detection,
//! and the engine-buffer checks (each refusal leaves every byte where it was).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rand::{rngs::StdRng, Rng, SeedableRng};
use tandem_proto::ids::Rank;
use tandem_proto::LayoutFingerprint;
use tandem_store::buffer::{BufferError, EngineBuffers, PageId, RegionSpec};
use tandem_store::disk::{IoMode, DISK_SLAB_FILE};
use tandem_store::host::HOST_SLAB_FILE;
use tandem_store::shm::ShmFile;
use tandem_store::store::{Store, StoreConfig, StoreError};
use tandem_store::{BlockHash, Tier};

/// Odd on purpose: not a multiple of the checksum group or of the disk alignment.
const SHARD: usize = 64 * 1024 + 40;

/// A directory under /dev/shm when there is one (real shared memory), else the temp dir.
fn shm_dir() -> tempfile::TempDir {
    let base = Path::new("/dev/shm");
    if base.is_dir() {
        tempfile::tempdir_in(base).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

fn config(host: &Path, disk: &Path, shard: usize) -> StoreConfig {
    StoreConfig {
        rank: Rank(0),
        shard_bytes: shard,
        host_capacity_blocks: 4,
        disk_capacity_blocks: 4,
        host_dir: host.to_path_buf(),
        disk_dir: disk.to_path_buf(),
        disk_io: IoMode::Buffered,
        layout: Default::default(),
    }
}

fn random(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

fn flip_byte(path: &Path, offset: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= 0x40;
    f.write_all_at(&b, offset).unwrap();
}

#[test]
fn random_shards_round_trip_through_both_tiers_and_modes() {
    let mut rng = StdRng::seed_from_u64(1);
    for mode in [IoMode::Buffered, IoMode::Direct] {
        let host = shm_dir();
        let disk = tempfile::tempdir().unwrap();
        let mut cfg = config(host.path(), disk.path(), SHARD);
        cfg.disk_io = mode;
        let (mut store, report) = match Store::open(cfg) {
            Err(StoreError::Tier(tandem_store::tier::TierError::DirectUnsupported { .. })) => {
                continue
            }
            other => other.unwrap(),
        };
        assert_eq!(report.adopted, 0);
        let mut shards = Vec::new();
        for n in 0..8u64 {
            let tier = if n % 2 == 0 { Tier::Host } else { Tier::Disk };
            let data = random(&mut rng, SHARD);
            let loc = store.store_shard(BlockHash::from(n), tier, &data).unwrap();
            assert_eq!(loc.tier, tier);
            shards.push(data);
        }
        assert_eq!(
            (store.free_slots(Tier::Host), store.free_slots(Tier::Disk)),
            (0, 0)
        );
        for (n, data) in shards.iter().enumerate() {
            let mut out = vec![0u8; SHARD];
            store
                .load_shard(BlockHash::from(n as u64), &mut out)
                .unwrap();
            assert!(out == *data, "block {n} in {mode:?}");
        }
        // Demote a host shard, promote a disk shard, and read both back.
        store.evict(BlockHash(1));
        store.demote(BlockHash(0)).unwrap();
        store.evict(BlockHash(2));
        store.promote(BlockHash(3)).unwrap();
        assert_eq!(store.location(BlockHash(0)).unwrap().tier, Tier::Disk);
        assert_eq!(store.location(BlockHash(3)).unwrap().tier, Tier::Host);
        for n in [0usize, 3] {
            let mut out = vec![0u8; SHARD];
            store
                .load_shard(BlockHash::from(n as u64), &mut out)
                .unwrap();
            assert!(out == shards[n], "block {n} after moving");
        }
    }
}

#[test]
fn pages_in_and_out_of_an_engine_region() {
    let mut rng = StdRng::seed_from_u64(2);
    let host = shm_dir();
    let disk = tempfile::tempdir().unwrap();
    let page = 16 * 1024;
    let shard = 4 * page;
    let region_path = host.path().join("engine-pages");
    let mut engine = ShmFile::create(&region_path, (16 * page) as u64).unwrap();
    let source = random(&mut rng, 16 * page);
    engine.bytes_mut().copy_from_slice(&source);
    let mut bufs = EngineBuffers::new();
    bufs.register(RegionSpec {
        name: "eng".into(),
        size_bytes: (16 * page) as u64,
        page_size_bytes: page as u64,
    })
    .unwrap();
    bufs.map("eng", &region_path).unwrap();
    let (mut store, _) = Store::open(config(host.path(), disk.path(), shard)).unwrap();
    let src_pages = [PageId(5), PageId(1), PageId(9), PageId(2)];
    for (tier, hash) in [(Tier::Host, BlockHash(10)), (Tier::Disk, BlockHash(11))] {
        store
            .store_pages(hash, tier, &bufs, "eng", &src_pages)
            .unwrap();
    }
    let dst_pages = [PageId(12), PageId(15), PageId(13), PageId(0)];
    for hash in [BlockHash(10), BlockHash(11)] {
        engine.bytes_mut().fill(0);
        store
            .load_pages(hash, &mut bufs, "eng", &dst_pages)
            .unwrap();
        for (s, d) in src_pages.iter().zip(dst_pages) {
            let want = &source[s.0 as usize * page..(s.0 as usize + 1) * page];
            let got = &engine.bytes()[d.0 as usize * page..(d.0 as usize + 1) * page];
            assert!(want == got, "page {s} → {d} of {hash}");
        }
    }
}

#[test]
fn corrupt_slots_are_detected_dropped_and_never_served() {
    let mut rng = StdRng::seed_from_u64(3);
    let host = shm_dir();
    let disk = tempfile::tempdir().unwrap();
    let (mut store, _) = Store::open(config(host.path(), disk.path(), SHARD)).unwrap();
    let a = BlockHash(0xa);
    let b = BlockHash(0xb);
    for (hash, tier) in [(a, Tier::Host), (b, Tier::Disk)] {
        store
            .store_shard(hash, tier, &random(&mut rng, SHARD))
            .unwrap();
    }
    let host_slot = store.location(a).unwrap().slot;
    flip_byte(
        &host.path().join(HOST_SLAB_FILE),
        host_slot * SHARD as u64 + 1234,
    );
    let disk_slot = store.location(b).unwrap().slot;
    let stride = (SHARD as u64).div_ceil(4096) * 4096;
    flip_byte(
        &disk.path().join(DISK_SLAB_FILE),
        disk_slot * stride + SHARD as u64 - 1,
    );
    for (hash, tier) in [(a, Tier::Host), (b, Tier::Disk)] {
        let mut out = vec![0u8; SHARD];
        match store.load_shard(hash, &mut out) {
            Err(StoreError::ChecksumMismatch {
                hash: h, tier: t, ..
            }) => assert_eq!((h, t), (hash, tier)),
            other => panic!("expected a checksum mismatch for {hash}, got {other:?}"),
        }
        // The agent reports the failed load; the leader's group index (tandem-core) then
        // drops the block for the whole group.
        assert!(!store.contains(hash));
        assert!(matches!(
            store.load_shard(hash, &mut out),
            Err(StoreError::UnknownBlock { .. })
        ));
    }
    assert_eq!(
        store.free_slots(Tier::Host),
        4,
        "the corrupt slot is free again"
    );
}

/// Snapshot of everything a refused request must leave alone.
fn snapshot(store: &Store, host: &Path, engine: &ShmFile) -> (Vec<u8>, Vec<u8>, usize) {
    (
        std::fs::read(host.join(HOST_SLAB_FILE)).unwrap(),
        engine.bytes().to_vec(),
        store.len(),
    )
}

#[test]
fn engine_buffer_refusals_write_nothing() {
    let mut rng = StdRng::seed_from_u64(4);
    let host = shm_dir();
    let disk = tempfile::tempdir().unwrap();
    let page = 4096;
    let region_path: PathBuf = host.path().join("engine-pages");
    let mut engine = ShmFile::create(&region_path, (8 * page) as u64).unwrap();
    engine
        .bytes_mut()
        .copy_from_slice(&random(&mut rng, 8 * page));
    let mut bufs = EngineBuffers::new();
    bufs.register(RegionSpec {
        name: "eng".into(),
        size_bytes: (8 * page) as u64,
        page_size_bytes: page as u64,
    })
    .unwrap();
    bufs.register(RegionSpec {
        name: "cold".into(),
        size_bytes: page as u64,
        page_size_bytes: page as u64,
    })
    .unwrap();
    bufs.map("eng", &region_path).unwrap();
    let (mut store, _) = Store::open(config(host.path(), disk.path(), 2 * page)).unwrap();
    let kept = BlockHash(1);
    store
        .store_pages(kept, Tier::Host, &bufs, "eng", &[PageId(0), PageId(1)])
        .unwrap();
    let before = snapshot(&store, host.path(), &engine);
    let fresh = BlockHash(2);

    type Case = (&'static str, Vec<PageId>, fn(&StoreError) -> bool);
    let cases: Vec<Case> = vec![
        ("nope", vec![PageId(0), PageId(1)], |e| {
            matches!(e, StoreError::Buffer(BufferError::Unregistered { .. }))
        }),
        ("cold", vec![PageId(0), PageId(1)], |e| {
            matches!(e, StoreError::Buffer(BufferError::Unmapped { .. }))
        }),
        ("eng", vec![PageId(0), PageId(8)], |e| {
            matches!(
                e,
                StoreError::Buffer(BufferError::PageOutOfRange {
                    page: PageId(8),
                    ..
                })
            )
        }),
        ("eng", vec![PageId(0)], |e| {
            matches!(e, StoreError::Buffer(BufferError::WrongLength { .. }))
        }),
        ("eng", vec![PageId(0), PageId(1), PageId(2)], |e| {
            matches!(e, StoreError::Buffer(BufferError::WrongLength { .. }))
        }),
    ];
    for (region, pages, is_expected) in &cases {
        let e = store
            .store_pages(fresh, Tier::Host, &bufs, region, pages)
            .unwrap_err();
        assert!(is_expected(&e), "store {region} {pages:?}: {e}");
        let e = store
            .load_pages(kept, &mut bufs, region, pages)
            .unwrap_err();
        assert!(is_expected(&e), "load {region} {pages:?}: {e}");
        assert!(
            snapshot(&store, host.path(), &engine) == before,
            "refused {region} {pages:?} wrote something"
        );
    }
    let e = store
        .load_pages(kept, &mut bufs, "eng", &[PageId(3), PageId(3)])
        .unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::Buffer(BufferError::DuplicatePage {
                page: PageId(3),
                ..
            })
        ),
        "{e}"
    );
    let e = store
        .load_pages(fresh, &mut bufs, "eng", &[PageId(3), PageId(4)])
        .unwrap_err();
    assert!(matches!(e, StoreError::UnknownBlock { .. }), "{e}");
    let e = store
        .store_pages(kept, Tier::Host, &bufs, "eng", &[PageId(3), PageId(4)])
        .unwrap_err();
    assert!(matches!(e, StoreError::AlreadyStored { .. }), "{e}");
    let e = store
        .store_shard(fresh, Tier::Host, &[0u8; 10])
        .unwrap_err();
    assert!(matches!(e, StoreError::WrongLength { got: 10, .. }), "{e}");
    let mut short = [0u8; 10];
    let e = store.load_shard(kept, &mut short).unwrap_err();
    assert!(matches!(e, StoreError::WrongLength { got: 10, .. }), "{e}");
    assert!(short.iter().all(|&b| b == 0));
    assert!(
        snapshot(&store, host.path(), &engine) == before,
        "a refusal wrote something"
    );
    assert!(!store.contains(fresh));
}

#[test]
fn full_and_disabled_tiers_are_typed_refusals() {
    let host = shm_dir();
    let disk = tempfile::tempdir().unwrap();
    let mut cfg = config(host.path(), disk.path(), 64);
    cfg.host_capacity_blocks = 1;
    cfg.disk_capacity_blocks = 0;
    let (mut store, _) = Store::open(cfg).unwrap();
    store
        .store_shard(BlockHash(1), Tier::Host, &[1u8; 64])
        .unwrap();
    let e = store
        .store_shard(BlockHash(2), Tier::Host, &[2u8; 64])
        .unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::NoFreeSlot {
                tier: Tier::Host,
                capacity_blocks: 1
            }
        ),
        "{e}"
    );
    let e = store
        .store_shard(BlockHash(2), Tier::Disk, &[2u8; 64])
        .unwrap_err();
    assert!(
        matches!(e, StoreError::TierDisabled { tier: Tier::Disk }),
        "{e}"
    );
    let e = store.demote(BlockHash(1)).unwrap_err();
    assert!(
        matches!(e, StoreError::TierDisabled { tier: Tier::Disk }),
        "{e}"
    );
    assert_eq!(store.len(), 1);
}

#[test]
fn reopening_keeps_the_manifest_s_shards_and_discards_another_geometry() {
    let mut rng = StdRng::seed_from_u64(5);
    let host = shm_dir();
    let disk = tempfile::tempdir().unwrap();
    let cfg = config(host.path(), disk.path(), SHARD);
    let (mut store, _) = Store::open(cfg.clone()).unwrap();
    let a = random(&mut rng, SHARD);
    let b = random(&mut rng, SHARD);
    store.store_shard(BlockHash(1), Tier::Host, &a).unwrap();
    store.store_shard(BlockHash(2), Tier::Disk, &b).unwrap();
    assert!(store.flush_manifest().unwrap());
    assert!(!store.flush_manifest().unwrap(), "nothing changed since");
    drop(store);

    let (mut store, report) = Store::open(cfg.clone()).unwrap();
    assert_eq!((report.adopted, report.invalid), (2, 0));
    let mut out = vec![0u8; SHARD];
    store.load_shard(BlockHash(1), &mut out).unwrap();
    assert!(out == a, "the host slab survived the restart");
    store.load_shard(BlockHash(2), &mut out).unwrap();
    assert!(out == b);
    drop(store);

    let mut bigger = cfg;
    bigger.host_capacity_blocks = 8;
    let (store, report) = Store::open(bigger).unwrap();
    assert!(
        report
            .discarded_manifest
            .as_deref()
            .unwrap_or("")
            .starts_with("written for geometry"),
        "{report:?}"
    );
    assert!(store.is_empty());
}

/// A layout of the given element size and head count whose shards are `SHARD` bytes for any
/// `dtype_bytes × heads` product: the shard size alone cannot tell the two apart.
fn layout(model: &str, dtype_bytes: u32, kv_heads: u32) -> LayoutFingerprint {
    LayoutFingerprint {
        model_id: model.into(),
        pp_size: 1,
        tp_size: 1,
        tokens_per_block: 16,
        num_layers: 8,
        num_kv_heads: kv_heads,
        head_dim: 16,
        dtype_bytes,
        shard_bytes: SHARD as u64,
    }
}

#[test]
fn a_changed_model_layout_drops_every_persisted_shard_and_the_same_layout_keeps_them() {
    let mut rng = StdRng::seed_from_u64(6);
    let host = shm_dir();
    let disk = tempfile::tempdir().unwrap();
    let mut cfg = config(host.path(), disk.path(), SHARD);
    cfg.layout = layout("m", 2, 8);
    let (mut store, _) = Store::open(cfg.clone()).unwrap();
    let a = random(&mut rng, SHARD);
    let b = random(&mut rng, SHARD);
    store.store_shard(BlockHash(1), Tier::Host, &a).unwrap();
    store.store_shard(BlockHash(2), Tier::Disk, &b).unwrap();
    assert!(store.flush_manifest().unwrap());
    drop(store);

    // The identical layout: both shards are taken over and load byte for byte.
    let (mut store, report) = Store::open(cfg.clone()).unwrap();
    assert_eq!((report.adopted, report.layout_changed), (2, None));
    let mut out = vec![0u8; SHARD];
    store.load_shard(BlockHash(1), &mut out).unwrap();
    assert!(out == a);
    store.load_shard(BlockHash(2), &mut out).unwrap();
    assert!(out == b);
    drop(store);

    // fp8 with twice the heads: the same shard size and geometry, another meaning.
    let mut fp8 = cfg.clone();
    fp8.layout = layout("m", 1, 16);
    assert_eq!(fp8.geometry(), cfg.geometry());
    let (mut store, report) = Store::open(fp8.clone()).unwrap();
    let change = report
        .layout_changed
        .clone()
        .expect("the layout change is reported");
    assert_eq!(change.written_under, cfg.layout);
    assert_eq!(change.opened_under, fp8.layout);
    assert_eq!((change.dropped, report.adopted), (2, 0));
    let why = report.discarded_manifest.unwrap();
    assert!(
        why.contains("dtype_bytes=2") && why.contains("dtype_bytes=1"),
        "both layouts are named: {why}"
    );
    assert!(store.is_empty());
    assert!(matches!(
        store.load_shard(BlockHash(1), &mut out),
        Err(StoreError::UnknownBlock { .. })
    ));
    // The slots are free again: the new layout fills the tiers from the start.
    for n in 10..14 {
        store.store_shard(BlockHash(n), Tier::Disk, &b).unwrap();
    }
    store.flush_manifest().unwrap();
    drop(store);

    // Going back does not resurrect the old shards: the manifest now names the new layout.
    let (store, report) = Store::open(cfg.clone()).unwrap();
    assert_eq!(report.layout_changed.map(|c| c.dropped), Some(4));
    assert!(store.is_empty());
    drop(store);

    // Another model id of the same shape is another layout too.
    let mut other = cfg.clone();
    other.layout.model_id = "other".into();
    let (store, report) = Store::open(other).unwrap();
    assert!(report.layout_changed.is_some(), "{report:?}");
    assert!(store.is_empty());
}

#[test]
fn open_reads_no_shard_and_a_shard_that_rotted_meanwhile_fails_its_first_read() {
    let mut rng = StdRng::seed_from_u64(9);
    let host = shm_dir();
    let disk = tempfile::tempdir().unwrap();
    let cfg = config(host.path(), disk.path(), SHARD);
    let (mut store, _) = Store::open(cfg.clone()).unwrap();
    let shards: Vec<Vec<u8>> = (0..4).map(|_| random(&mut rng, SHARD)).collect();
    for (n, data) in shards.iter().enumerate() {
        let tier = if n % 2 == 0 { Tier::Host } else { Tier::Disk };
        store
            .store_shard(BlockHash::from(n as u64), tier, data)
            .unwrap();
    }
    store.flush_manifest().unwrap();
    let rotten_host = store.location(BlockHash::from(0)).unwrap().slot;
    let rotten_disk = store.location(BlockHash::from(1)).unwrap().slot;
    drop(store);
    // Both shards rot while the agent is down.
    flip_byte(
        &host.path().join(HOST_SLAB_FILE),
        rotten_host * SHARD as u64 + 10,
    );
    let stride = (SHARD as u64).div_ceil(4096) * 4096;
    flip_byte(&disk.path().join(DISK_SLAB_FILE), rotten_disk * stride + 10);

    // Open trusts the manifest: every entry is taken over, nothing is read.
    let (mut store, report) = Store::open(cfg.clone()).unwrap();
    assert_eq!((report.adopted, report.invalid), (4, 0));
    assert_eq!(store.len(), 4);
    // The first read of each rotten shard fails its checksum and drops it; the others load.
    let mut out = vec![0u8; SHARD];
    for n in 0..4u64 {
        let hash = BlockHash::from(n);
        match store.load_shard(hash, &mut out) {
            Ok(_) => {
                assert!(n >= 2, "block {n} should have failed");
                assert!(out == shards[n as usize]);
            }
            Err(StoreError::ChecksumMismatch { hash: h, .. }) => {
                assert!(n < 2, "block {n} should have loaded");
                assert_eq!(h, hash);
                assert!(!store.contains(hash), "dropped at once");
            }
            Err(other) => panic!("block {n}: {other}"),
        }
    }
    assert_eq!(store.len(), 2);
    store.flush_manifest().unwrap();
    drop(store);
    let (_, report) = Store::open(cfg.clone()).unwrap();
    assert_eq!(report.adopted, 2, "the drops reached the manifest");

    // A scrub reads everything up front instead.
    let (mut store, _) = Store::open(cfg).unwrap();
    flip_byte(
        &host.path().join(HOST_SLAB_FILE),
        store.location(BlockHash::from(2)).unwrap().slot * SHARD as u64 + 3,
    );
    let scrub = store.scrub().unwrap();
    assert_eq!(scrub.verified, 1);
    assert_eq!(scrub.corrupt, vec![BlockHash::from(2)]);
    assert!(!store.contains(BlockHash::from(2)));
    assert!(store.contains(BlockHash::from(3)));
}
