//! One shard size of the tier benchmark: the engine region, the host, disk and O_DIRECT
//! stores, the memcpy pool and the baseline files, and the timed bursts over them. It owns no
//! figure's meaning (that is the parent module's report) and prints nothing.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use tandem_proto::ids::Rank;
use tandem_store::block::BlockHash;
use tandem_store::buffer::{EngineBuffers, PageId, RegionSpec};
use tandem_store::disk::{preallocate, IoMode};
use tandem_store::shm::ShmFile;
use tandem_store::store::{Store, StoreConfig, StoreError};
use tandem_store::tier::{Tier, TierError};

use super::{io, BenchError};

/// Everything one shard size needs: engine region, stores, baseline pool and files.
pub(super) struct SizeBench {
    shard: usize,
    slots: u64,
    pages: u32,
    ops: u64,
    burst: u64,
    bufs: EngineBuffers,
    pool: Vec<u8>,
    host: Store,
    disk: Store,
    direct: Option<Store>,
    plain: std::fs::File,
    plain_direct: Option<std::fs::File>,
    _engine: ShmFile,
}

const REGION: &str = "bench-engine";

impl SizeBench {
    pub(super) fn new(
        shard: usize,
        pool_bytes: u64,
        bytes: u64,
        burst: u64,
        work: &Path,
        shm: &Path,
    ) -> Result<SizeBench, BenchError> {
        let slots = (pool_bytes / shard as u64).max(2);
        // The engine region is as large as the pool: real page pools are GBs, so neither the
        // baseline nor the tier finds its source or destination pages in cache.
        let pages = u32::try_from(slots).unwrap_or(u32::MAX);
        let region = shm.join(format!("engine-{shard}"));
        let mut engine =
            ShmFile::create(&region, u64::from(pages) * shard as u64).map_err(|e| {
                BenchError::Io {
                    what: "engine region".into(),
                    source: std::io::Error::other(e.to_string()),
                }
            })?;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for chunk in engine.bytes_mut().chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes());
        }
        let mut bufs = EngineBuffers::new();
        let spec = RegionSpec {
            name: REGION.into(),
            size_bytes: u64::from(pages) * shard as u64,
            page_size_bytes: shard as u64,
        };
        bufs.register(spec).map_err(StoreError::from)?;
        bufs.map(REGION, &region).map_err(StoreError::from)?;
        let store = |name: &str, host: u64, disk: u64, mode: IoMode| {
            let cfg = StoreConfig {
                rank: Rank(0),
                shard_bytes: shard,
                host_capacity_blocks: host,
                disk_capacity_blocks: disk,
                host_dir: shm.join(format!("{name}-{shard}")),
                disk_dir: work.join(format!("{name}-{shard}")),
                disk_io: mode,
                layout: Default::default(),
            };
            Store::open(cfg).map(|(s, _)| s)
        };
        let host = store("host", slots, 0, IoMode::Buffered)?;
        let disk = store("disk", 0, slots, IoMode::Buffered)?;
        let direct = match store("direct", 0, slots, IoMode::Direct) {
            Ok(s) => Some(s),
            Err(StoreError::Tier(TierError::DirectUnsupported { .. })) => None,
            Err(e) => return Err(e.into()),
        };
        let plain_path = work.join(format!("plain-{shard}"));
        let plain = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&plain_path)
            .map_err(io("baseline file"))?;
        preallocate(&plain, slots * shard as u64).map_err(io("baseline file"))?;
        let plain_direct = if direct.is_some() {
            let p = work.join(format!("plain-direct-{shard}"));
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_DIRECT)
                .open(&p)
                .map_err(io("O_DIRECT baseline file"))?;
            preallocate(&f, slots * shard as u64).map_err(io("O_DIRECT baseline file"))?;
            Some(f)
        } else {
            None
        };
        let pool = vec![1u8; (slots as usize) * shard];
        let ops = (bytes / shard as u64).max(slots);
        let burst = (burst / shard as u64).max(1);
        let mut bench = SizeBench {
            shard,
            slots,
            pages,
            ops,
            burst,
            bufs,
            pool,
            host,
            disk,
            direct,
            plain,
            plain_direct,
            _engine: engine,
        };
        bench.fill()?;
        Ok(bench)
    }

    /// First pass: every slot of every tier holds a block and every baseline file is written
    /// once, so that tiers and baselines start from the same page-cache state.
    fn fill(&mut self) -> Result<(), BenchError> {
        for s in 0..self.slots {
            let page = [PageId((s % u64::from(self.pages)) as u32)];
            let src = self
                .bufs
                .pages(REGION, &page, self.shard as u64)
                .map_err(StoreError::from)?;
            for file in [Some(&self.plain), self.plain_direct.as_ref()]
                .into_iter()
                .flatten()
            {
                file.write_all_at(src[0], s * self.shard as u64)
                    .map_err(io("baseline fill"))?;
            }
            for store in [
                Some(&mut self.host),
                Some(&mut self.disk),
                self.direct.as_mut(),
            ]
            .into_iter()
            .flatten()
            {
                let tier = if store.config().host_capacity_blocks > 0 {
                    Tier::Host
                } else {
                    Tier::Disk
                };
                store.store_pages(BlockHash::from(s), tier, &self.bufs, REGION, &page)?;
            }
        }
        Ok(())
    }

    fn page(&self, i: u64) -> PageId {
        PageId((i % u64::from(self.pages)) as u32)
    }

    /// Every figure, in GB/s, in the row's order. Each tier runs in bursts alternating with its
    /// baseline, so that load from other processes falls on both alike.
    pub(super) fn measure(
        &mut self,
        direct_unsupported: &mut Option<String>,
    ) -> Result<[f64; 12], BenchError> {
        let mut f = [0f64; 12];
        let pairs = [
            (Op::MemcpyStore, Op::HostStore),
            (Op::MemcpyLoad, Op::HostLoad),
            (Op::Pwrite(false), Op::DiskStore(false)),
            (Op::Pread(false), Op::DiskLoad(false)),
            (Op::Pwrite(true), Op::DiskStore(true)),
            (Op::Pread(true), Op::DiskLoad(true)),
        ];
        for (k, (base, tier)) in pairs.into_iter().enumerate() {
            if k >= 4 && self.direct.is_none() {
                *direct_unsupported = Some("the file system refused O_DIRECT".into());
                break;
            }
            let (b, t) = self.paired(base, tier)?;
            f[2 * k] = b;
            f[2 * k + 1] = t;
        }
        // Row order for the direct figures: pwrite, pread, disk store, disk load.
        f.swap(9, 10);
        Ok(f)
    }

    /// Alternates bursts of `base` and `tier` until each has moved `ops` shards; GB/s of each.
    fn paired(&mut self, base: Op, tier: Op) -> Result<(f64, f64), BenchError> {
        let (mut tb, mut tt) = (0f64, 0f64);
        let mut i = 0;
        let mut turn = false;
        while i < self.ops {
            let n = self.burst.min(self.ops - i);
            // ABBA order, so that whatever the first of a pair leaves behind (dirty pages,
            // cache state) falls on both sides alike.
            if turn {
                tt += self.run(tier, i, n)?;
                tb += self.run(base, i, n)?;
            } else {
                tb += self.run(base, i, n)?;
                tt += self.run(tier, i, n)?;
            }
            turn = !turn;
            i += n;
        }
        let bytes = (self.ops * self.shard as u64) as f64;
        Ok((bytes / tb / 1e9, bytes / tt / 1e9))
    }

    /// Runs `n` operations of one kind starting at operation `first`; seconds taken.
    fn run(&mut self, op: Op, first: u64, n: u64) -> Result<f64, BenchError> {
        let shard = self.shard;
        let len = shard as u64;
        let t = Instant::now();
        for i in first..first + n {
            let slot = i % self.slots;
            let page = self.page(i);
            match op {
                Op::MemcpyStore => {
                    let src = self
                        .bufs
                        .pages(REGION, &[page], len)
                        .map_err(StoreError::from)?;
                    let s = slot as usize;
                    self.pool[s * shard..(s + 1) * shard].copy_from_slice(src[0]);
                }
                Op::MemcpyLoad => {
                    let mut dst = self
                        .bufs
                        .pages_mut(REGION, &[page], len)
                        .map_err(StoreError::from)?;
                    let s = slot as usize;
                    dst[0].copy_from_slice(&self.pool[s * shard..(s + 1) * shard]);
                }
                Op::HostStore => {
                    self.host.evict(BlockHash::from(slot));
                    self.host.store_pages(
                        BlockHash::from(slot),
                        Tier::Host,
                        &self.bufs,
                        REGION,
                        &[page],
                    )?;
                }
                Op::HostLoad => {
                    self.host
                        .load_pages(BlockHash::from(slot), &mut self.bufs, REGION, &[page])?;
                }
                Op::Pwrite(direct) => {
                    let file = if direct {
                        self.plain_direct.as_ref()
                    } else {
                        Some(&self.plain)
                    };
                    let src = self
                        .bufs
                        .pages(REGION, &[page], len)
                        .map_err(StoreError::from)?;
                    if let Some(file) = file {
                        file.write_all_at(src[0], slot * len)
                            .map_err(io("pwrite"))?;
                    }
                }
                Op::Pread(direct) => {
                    let file = if direct {
                        self.plain_direct.as_ref()
                    } else {
                        Some(&self.plain)
                    };
                    let mut dst = self
                        .bufs
                        .pages_mut(REGION, &[page], len)
                        .map_err(StoreError::from)?;
                    if let Some(file) = file {
                        file.read_exact_at(dst[0], slot * len)
                            .map_err(io("pread"))?;
                    }
                }
                Op::DiskStore(direct) => {
                    let store = if direct {
                        self.direct.as_mut()
                    } else {
                        Some(&mut self.disk)
                    };
                    if let Some(store) = store {
                        store.evict(BlockHash::from(slot));
                        store.store_pages(
                            BlockHash::from(slot),
                            Tier::Disk,
                            &self.bufs,
                            REGION,
                            &[page],
                        )?;
                    }
                }
                Op::DiskLoad(direct) => {
                    let store = if direct {
                        self.direct.as_mut()
                    } else {
                        Some(&mut self.disk)
                    };
                    if let Some(store) = store {
                        store.load_pages(BlockHash::from(slot), &mut self.bufs, REGION, &[page])?;
                    }
                }
            }
        }
        Ok(t.elapsed().as_secs_f64())
    }
}

/// One kind of timed operation; `bool` is O_DIRECT.
#[derive(Clone, Copy, Debug)]
enum Op {
    MemcpyStore,
    HostStore,
    MemcpyLoad,
    HostLoad,
    Pwrite(bool),
    DiskStore(bool),
    Pread(bool),
    DiskLoad(bool),
}
