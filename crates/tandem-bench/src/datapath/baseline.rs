//! The floors a data-path case is held to, measured in the same run with the same bytes:
//! a plain memcpy between two shared-memory files of the working set's size (engine pages and
//! host slab are both such files), and plain positional writes and reads of one shard per call
//! to a preallocated file in the disk tier's directory. Owns these two measurements only.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use tandem_store::disk::preallocate;
use tandem_store::shm::ShmFile;

use super::{io, DatapathError};

/// A floor in both directions, GB/s (10^9 bytes per second).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Floor {
    /// Engine pages → tier (memcpy into the slab, or pwrite).
    pub store_gbps: f64,
    /// Tier → engine pages (memcpy out of the slab, or pread).
    pub load_gbps: f64,
}

/// Passes over the working set per direction; the best counts (the first pass also pays the
/// mapping's page faults, as a tier's first store does; later passes do not).
const PASSES: usize = 3;

fn gbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / 1e9
    } else {
        0.0
    }
}

fn shm(dir: &Path, name: &str, bytes: u64) -> Result<ShmFile, DatapathError> {
    ShmFile::create(&dir.join(name), bytes).map_err(|e| DatapathError::Io {
        what: format!("baseline buffer {name}"),
        source: std::io::Error::other(e.to_string()),
    })
}

/// memcpy of `blocks` shards of `shard_bytes`, one `copy_from_slice` per shard, between two
/// shared-memory files created in `dir` (removed afterwards): pages → slab for store, slab →
/// pages for load, best of three passes each.
///
/// # Errors
/// [`DatapathError::Io`] when a file cannot be created or mapped.
pub fn copy_floor(dir: &Path, shard_bytes: usize, blocks: usize) -> Result<Floor, DatapathError> {
    let bytes = (shard_bytes * blocks) as u64;
    let tmp = tempfile::Builder::new()
        .prefix("datapath-floor-")
        .tempdir_in(dir)
        .map_err(io("baseline dir"))?;
    let mut pages = shm(tmp.path(), "pages", bytes)?;
    let mut slab = shm(tmp.path(), "slab", bytes)?;
    pages.bytes_mut().fill(0x5a);
    let mut best = Floor::default();
    for _ in 0..PASSES {
        let t = Instant::now();
        for (d, s) in slab
            .bytes_mut()
            .chunks_exact_mut(shard_bytes)
            .zip(pages.bytes().chunks_exact(shard_bytes))
        {
            d.copy_from_slice(s);
        }
        best.store_gbps = best.store_gbps.max(gbps(bytes, t.elapsed().as_secs_f64()));
        let t = Instant::now();
        for (d, s) in pages
            .bytes_mut()
            .chunks_exact_mut(shard_bytes)
            .zip(slab.bytes().chunks_exact(shard_bytes))
        {
            d.copy_from_slice(s);
        }
        best.load_gbps = best.load_gbps.max(gbps(bytes, t.elapsed().as_secs_f64()));
    }
    Ok(best)
}

/// `write_all_at` then `read_exact_at` of one shard per call, `blocks` shards from a
/// shared-memory buffer to a preallocated file in `disk_dir` (the disk tier's file system) and
/// back, best of three passes each (buffered I/O, as the disk tier's default mode).
///
/// # Errors
/// [`DatapathError::Io`] when a file cannot be created, preallocated, written or read.
pub fn disk_floor(
    disk_dir: &Path,
    shm_dir: &Path,
    shard_bytes: usize,
    blocks: usize,
) -> Result<Floor, DatapathError> {
    let bytes = (shard_bytes * blocks) as u64;
    let shm_tmp = tempfile::Builder::new()
        .prefix("datapath-floor-")
        .tempdir_in(shm_dir)
        .map_err(io("baseline dir"))?;
    let mut pages = shm(shm_tmp.path(), "pages", bytes)?;
    pages.bytes_mut().fill(0xa5);
    let tmp = tempfile::Builder::new()
        .prefix("datapath-floor-")
        .tempdir_in(disk_dir)
        .map_err(io("baseline dir"))?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp.path().join("plain"))
        .map_err(io("baseline file"))?;
    preallocate(&file, bytes).map_err(io("baseline file"))?;
    let mut best = Floor::default();
    for _ in 0..PASSES {
        let t = Instant::now();
        for (i, s) in pages.bytes().chunks_exact(shard_bytes).enumerate() {
            file.write_all_at(s, (i * shard_bytes) as u64)
                .map_err(io("pwrite"))?;
        }
        best.store_gbps = best.store_gbps.max(gbps(bytes, t.elapsed().as_secs_f64()));
        let t = Instant::now();
        for (i, d) in pages.bytes_mut().chunks_exact_mut(shard_bytes).enumerate() {
            file.read_exact_at(d, (i * shard_bytes) as u64)
                .map_err(io("pread"))?;
        }
        best.load_gbps = best.load_gbps.max(gbps(bytes, t.elapsed().as_secs_f64()));
    }
    Ok(best)
}
