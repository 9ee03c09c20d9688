//! The tier benchmark behind `tandem bench tiers`: store and load throughput of the host and
//! disk tiers against plain copies of the same sizes measured in the same run.
//!
//! Owns [`run_tier_bench`], its options and its report (a table via `Display`, JSON via
//! serde). Every figure is a ratio against a baseline from the same run, because the machines
//! are shared and noisy; nothing here asserts a time. It must never be called from a test.
//!
//! Baselines (the floor each tier is held to):
//! - **memcpy**: `copy_from_slice` of one shard between the same engine pages and a pool of the
//!   same size as the host slab, visiting slots in the same order. Host store and load copy
//!   the same bytes and also checksum them, plus the store's bookkeeping.
//! - **pwrite / pread**: `write_all_at` / `read_exact_at` of one shard per call between the same
//!   engine pages and a file of the same size, preallocated the same way, on the same file
//!   system, same slot order. The
//!   disk tier does the same I/O plus the checksum and its bookkeeping.
//! - **O_DIRECT**: the same plain calls on a file opened with O_DIRECT, next to the disk tier in
//!   direct mode; both are compared with the buffered baselines, which is the question "does
//!   O_DIRECT help here".

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use tandem_proto::ids::Rank;

use crate::block::BlockHash;
use crate::buffer::{EngineBuffers, PageId, RegionSpec};
use crate::disk::{preallocate, IoMode};
use crate::shm::ShmFile;
use crate::store::{Store, StoreConfig, StoreError};
use crate::tier::{TierError, TierKind};

/// Shard sizes measured, in bytes.
pub const SHARD_SIZES: [usize; 3] = [64 << 10, 1 << 20, 8 << 20];

/// Where and how long to run.
#[derive(Clone, Debug)]
pub struct TierBenchOptions {
    /// Directory for the disk files (tier and baseline share its file system).
    pub disk_dir: PathBuf,
    /// Directory for the host slab and the engine region (normally under /dev/shm).
    pub shm_dir: PathBuf,
    /// Smaller pools and fewer bytes per figure (a few seconds).
    pub quick: bool,
}

/// Throughputs for one shard size, in GB/s (10^9 bytes per second): bytes moved over the
/// summed time of that operation's bursts.
#[derive(Clone, Debug, Serialize)]
pub struct TierBenchRow {
    /// Shard size in bytes.
    pub shard_bytes: usize,
    /// Baseline: plain copy engine page → pool slot.
    pub memcpy_store_gbps: f64,
    /// Host tier store (copy + checksum + bookkeeping).
    pub host_store_gbps: f64,
    /// `host_store_gbps / memcpy_store_gbps` (target ≥ 0.8).
    pub host_store_ratio: f64,
    /// Baseline: plain copy pool slot → engine page.
    pub memcpy_load_gbps: f64,
    /// Host tier load (copy + checksum verification).
    pub host_load_gbps: f64,
    /// `host_load_gbps / memcpy_load_gbps` (target ≥ 0.8).
    pub host_load_ratio: f64,
    /// Baseline: buffered positional write of one shard.
    pub pwrite_gbps: f64,
    /// Disk tier store, buffered mode.
    pub disk_store_gbps: f64,
    /// `disk_store_gbps / pwrite_gbps` (target ≥ 0.7).
    pub disk_store_ratio: f64,
    /// Baseline: buffered positional read of one shard.
    pub pread_gbps: f64,
    /// Disk tier load, buffered mode.
    pub disk_load_gbps: f64,
    /// `disk_load_gbps / pread_gbps` (target ≥ 0.7).
    pub disk_load_ratio: f64,
    /// The O_DIRECT figures, when the file system supports it.
    pub direct: Option<DirectRow>,
}

/// O_DIRECT figures for one shard size, in GB/s.
#[derive(Clone, Debug, Serialize)]
pub struct DirectRow {
    /// Plain O_DIRECT positional write.
    pub pwrite_gbps: f64,
    /// Plain O_DIRECT positional read.
    pub pread_gbps: f64,
    /// Disk tier store in direct mode.
    pub disk_store_gbps: f64,
    /// Disk tier load in direct mode.
    pub disk_load_gbps: f64,
}

/// The whole benchmark.
#[derive(Clone, Debug, Serialize)]
pub struct TierBenchReport {
    /// Whether `--quick` sizes were used.
    pub quick: bool,
    /// Bytes of the host slab, the memcpy pool and each disk file, per shard size.
    pub pool_bytes: u64,
    /// Bytes moved per figure per repetition.
    pub bytes_per_figure: u64,
    /// Bytes per burst: each tier alternates with its baseline in bursts of this size.
    pub burst_bytes: u64,
    /// One row per shard size.
    pub rows: Vec<TierBenchRow>,
    /// Why the O_DIRECT figures are missing, if they are.
    pub direct_unsupported: Option<String>,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Setting up or driving a tier failed.
    #[error("tier benchmark: {0}")]
    Store(#[from] StoreError),
    /// A baseline file or the engine region could not be used.
    #[error("tier benchmark: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

/// Runs the tier benchmark for [`SHARD_SIZES`]; prints nothing.
///
/// Errors: [`BenchError`] when a file cannot be created or a tier fails.
pub fn run_tier_bench(opts: &TierBenchOptions) -> Result<TierBenchReport, BenchError> {
    let (pool_bytes, bytes_per_figure, burst_bytes) = if opts.quick {
        (32u64 << 20, 256u64 << 20, 16u64 << 20)
    } else {
        (256u64 << 20, 2u64 << 30, 32u64 << 20)
    };
    let work = tempfile::Builder::new()
        .prefix("tandem-bench-")
        .tempdir_in(&opts.disk_dir)
        .map_err(io("disk dir"))?;
    let shm = tempfile::Builder::new()
        .prefix("tandem-bench-")
        .tempdir_in(&opts.shm_dir)
        .map_err(io("shm dir"))?;
    let mut rows = Vec::new();
    let mut direct_unsupported = None;
    for &shard in &SHARD_SIZES {
        // Per-size directories, removed after the size is measured (declared before the bench
        // so that they outlive it): /dev/shm never holds more than one size's files.
        let size_work = tempfile::tempdir_in(work.path()).map_err(io("disk dir"))?;
        let size_shm = tempfile::tempdir_in(shm.path()).map_err(io("shm dir"))?;
        let mut bench = SizeBench::new(
            shard,
            pool_bytes,
            bytes_per_figure,
            burst_bytes,
            size_work.path(),
            size_shm.path(),
        )?;
        let best = bench.measure(&mut direct_unsupported)?;
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        rows.push(TierBenchRow {
            shard_bytes: shard,
            memcpy_store_gbps: best[0],
            host_store_gbps: best[1],
            host_store_ratio: ratio(best[1], best[0]),
            memcpy_load_gbps: best[2],
            host_load_gbps: best[3],
            host_load_ratio: ratio(best[3], best[2]),
            pwrite_gbps: best[4],
            disk_store_gbps: best[5],
            disk_store_ratio: ratio(best[5], best[4]),
            pread_gbps: best[6],
            disk_load_gbps: best[7],
            disk_load_ratio: ratio(best[7], best[6]),
            direct: direct_unsupported.is_none().then_some(DirectRow {
                pwrite_gbps: best[8],
                pread_gbps: best[9],
                disk_store_gbps: best[10],
                disk_load_gbps: best[11],
            }),
        });
    }
    Ok(TierBenchReport {
        quick: opts.quick,
        pool_bytes,
        bytes_per_figure,
        burst_bytes,
        rows,
        direct_unsupported,
    })
}

/// Everything one shard size needs: engine region, stores, baseline pool and files.
struct SizeBench {
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
    fn new(
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
                    TierKind::Host
                } else {
                    TierKind::Disk
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
    fn measure(
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
                        TierKind::Host,
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
                            TierKind::Disk,
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

impl std::fmt::Display for TierBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "tiers: GB/s over {} MiB per figure in {} MiB bursts alternating with the baseline, pools of {} MiB{}",
            self.bytes_per_figure >> 20,
            self.burst_bytes >> 20,
            self.pool_bytes >> 20,
            if self.quick { " (quick)" } else { "" }
        )?;
        writeln!(
            f,
            "{:>6} | {:>6} {:>6} {:>5} | {:>6} {:>6} {:>5} | {:>6} {:>6} {:>5} | {:>6} {:>6} {:>5}",
            "shard",
            "memcpy",
            "host-w",
            "×",
            "memcpy",
            "host-r",
            "×",
            "pwrite",
            "disk-w",
            "×",
            "pread",
            "disk-r",
            "×"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:>6} | {:>6.2} {:>6.2} {:>5.2} | {:>6.2} {:>6.2} {:>5.2} | {:>6.2} {:>6.2} {:>5.2} | {:>6.2} {:>6.2} {:>5.2}",
                size_label(r.shard_bytes),
                r.memcpy_store_gbps,
                r.host_store_gbps,
                r.host_store_ratio,
                r.memcpy_load_gbps,
                r.host_load_gbps,
                r.host_load_ratio,
                r.pwrite_gbps,
                r.disk_store_gbps,
                r.disk_store_ratio,
                r.pread_gbps,
                r.disk_load_gbps,
                r.disk_load_ratio
            )?;
        }
        match &self.direct_unsupported {
            Some(why) => writeln!(f, "O_DIRECT: not measured ({why})"),
            None => {
                writeln!(
                    f,
                    "O_DIRECT (GB/s; × is against the buffered baseline above)"
                )?;
                writeln!(
                    f,
                    "{:>6} | {:>6} {:>6} {:>5} | {:>6} {:>6} {:>5}",
                    "shard", "pwrite", "disk-w", "×", "pread", "disk-r", "×"
                )?;
                for r in &self.rows {
                    if let Some(d) = &r.direct {
                        writeln!(
                            f,
                            "{:>6} | {:>6.2} {:>6.2} {:>5.2} | {:>6.2} {:>6.2} {:>5.2}",
                            size_label(r.shard_bytes),
                            d.pwrite_gbps,
                            d.disk_store_gbps,
                            d.disk_store_gbps / r.pwrite_gbps.max(f64::MIN_POSITIVE),
                            d.pread_gbps,
                            d.disk_load_gbps,
                            d.disk_load_gbps / r.pread_gbps.max(f64::MIN_POSITIVE)
                        )?;
                    }
                }
                Ok(())
            }
        }
    }
}

fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{}M", bytes >> 20)
    } else {
        format!("{}K", bytes >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_and_labels() {
        let e = BenchError::Io {
            what: "pwrite".into(),
            source: std::io::Error::other("x"),
        };
        assert_eq!(e.to_string(), "tier benchmark: pwrite: x");
        let e: BenchError = StoreError::ZeroShard.into();
        assert_eq!(
            e.to_string(),
            "tier benchmark: store: shard size must be at least one byte"
        );
        assert_eq!(size_label(64 << 10), "64K");
        assert_eq!(size_label(8 << 20), "8M");
    }
}
