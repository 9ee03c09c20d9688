//! A disk tier full of blocks, and what opening it costs: the part of an agent's restart that
//! grows with the tier.
//!
//! Owns [`fill_disk_tier`] (a rank's disk tier with every slot holding a block and a
//! manifest listing them, written through `tandem_store`'s public file layout:
//! [`DiskTier::file_bytes`], [`DiskTier::slot_offset`], [`checksum`], [`Manifest`]) and
//! [`time_open`] / [`time_scrub`]. An empty tier of the same geometry is the baseline: its
//! slab file exists at full size (sparse), so neither open allocates anything.
//!
//! Two fills: **real** writes every shard's bytes (pseudo-random, checksummed) and syncs
//! them, then drops the slab from the page cache (`POSIX_FADV_DONTNEED`), so later reads
//! come from the device; **sparse** writes no shard (the slab is a hole, every shard reads
//! as zeros and the manifest holds the checksums of zero shards, so every block is valid),
//! for a disk without room for the tier. Open reads no shard either way; a scrub of a sparse
//! tier reads holes and understates a real one.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use tandem_store::checksum::checksum;
use tandem_store::disk::{DiskTier, DISK_SLAB_FILE};
use tandem_store::manifest::{Manifest, MANIFEST_FILE};
use tandem_store::store::{Store, StoreConfig, StoreError};
use tandem_store::{BlockHash, Location, Tier};

/// How a tier was filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fill {
    /// Every shard written and synced.
    Real,
    /// No shard written: a sparse slab of zero shards.
    Sparse,
    /// Nothing: an empty manifest (the baseline).
    Empty,
}

/// What [`fill_disk_tier`] made.
#[derive(Clone, Debug, Serialize)]
pub struct Filled {
    /// How.
    pub fill: Fill,
    /// Blocks the manifest lists.
    pub blocks: u64,
    /// Bytes of the slab file (its size; a sparse one takes no room).
    pub slab_bytes: u64,
    /// Bytes of the manifest file.
    pub manifest_bytes: u64,
    /// Seconds the fill took.
    pub seconds: f64,
}

/// Why a fill or an open failed.
#[derive(Debug, thiserror::Error)]
pub enum RestartBenchError {
    /// A file could not be written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being written.
        what: &'static str,
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The geometry overflows.
    #[error("a disk tier of {blocks} blocks of {shard_bytes} bytes is too large")]
    Geometry {
        /// Blocks.
        blocks: u64,
        /// Shard bytes.
        shard_bytes: usize,
    },
    /// The store refused to open.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The manifest could not be written.
    #[error(transparent)]
    Manifest(#[from] tandem_store::manifest::ManifestError),
}

/// Fills `config`'s disk tier (which must be empty: a fresh directory) with
/// `config.disk_capacity_blocks` blocks (or none, for [`Fill::Empty`]) and writes the
/// manifest. Block hashes are pseudo-random from `seed`.
///
/// # Errors
/// [`RestartBenchError`] when a file cannot be written.
pub fn fill_disk_tier(
    config: &StoreConfig,
    fill: Fill,
    seed: u64,
) -> Result<Filled, RestartBenchError> {
    let started = Instant::now();
    let blocks = config.disk_capacity_blocks;
    let shard = config.shard_bytes;
    let io = |what, path: &Path| {
        let path = path.display().to_string();
        move |source| RestartBenchError::Io { what, path, source }
    };
    let size = DiskTier::file_bytes(shard, blocks).ok_or(RestartBenchError::Geometry {
        blocks,
        shard_bytes: shard,
    })?;
    std::fs::create_dir_all(&config.disk_dir).map_err(io("create", &config.disk_dir))?;
    let slab_path = config.disk_dir.join(DISK_SLAB_FILE);
    let slab = File::create(&slab_path).map_err(io("create", &slab_path))?;
    slab.set_len(size).map_err(io("size", &slab_path))?;
    let mut manifest = Manifest::new(config.rank, config.geometry(), config.layout.clone());
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut buf = vec![0u8; shard];
    if fill != Fill::Empty {
        for slot in 0..blocks {
            let hash = BlockHash((u128::from(next()) << 64) | u128::from(next()));
            if fill == Fill::Real {
                for chunk in buf.chunks_mut(8) {
                    let word = next().to_le_bytes();
                    chunk.copy_from_slice(&word[..chunk.len()]);
                }
                slab.write_all_at(&buf, DiskTier::slot_offset(shard, slot))
                    .map_err(io("write", &slab_path))?;
            }
            manifest.entries.insert(
                hash,
                Location {
                    tier: Tier::Disk,
                    slot,
                    checksum: checksum(hash, &buf),
                },
            );
        }
    }
    if fill == Fill::Real {
        slab.sync_all().map_err(io("sync", &slab_path))?;
        drop_cache(&slab);
    }
    let manifest_path = config.disk_dir.join(MANIFEST_FILE);
    manifest.save(&manifest_path)?;
    let manifest_bytes = std::fs::metadata(&manifest_path)
        .map(|m| m.len())
        .unwrap_or(0);
    Ok(Filled {
        fill,
        blocks: manifest.entries.len() as u64,
        slab_bytes: size,
        manifest_bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Asks the kernel to drop `file`'s pages from the page cache (after a sync they are clean).
fn drop_cache(file: &File) {
    // SAFETY: plain syscall on an open descriptor; advice only.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

/// Drops the disk tier's slab of `config` from the page cache (so the next reads of a real
/// tier come from the device).
pub fn drop_tier_cache(config: &StoreConfig) {
    if let Ok(f) = File::open(config.disk_dir.join(DISK_SLAB_FILE)) {
        drop_cache(&f);
    }
}

/// Opens the store of `config` and returns the ms it took and the blocks it took over.
///
/// # Errors
/// The store's error.
pub fn time_open(config: &StoreConfig) -> Result<(f64, usize), RestartBenchError> {
    let t = Instant::now();
    let (store, report) = Store::open(config.clone())?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    drop(store);
    Ok((ms, report.adopted))
}

/// Opens the store of `config` and reads every shard back against its checksum (what an
/// open did before it trusted the manifest); ms, and the shards verified.
///
/// # Errors
/// The store's error.
pub fn time_scrub(config: &StoreConfig) -> Result<(f64, usize), RestartBenchError> {
    drop_tier_cache(config);
    let t = Instant::now();
    let (mut store, _) = Store::open(config.clone())?;
    let report = store.scrub()?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    Ok((ms, report.verified))
}
