//! The floors a data-path case is held to, measured in the same run with the same bytes:
//! a plain memcpy between two shared-memory files of the working set's size (engine pages and
//! host slab are both such files), alone or as N copies at once (one per rank of a group), and
//! plain positional writes and reads of one shard per call to a preallocated file in the disk
//! tier's directory, alone or as N such loops at once (one file per rank). Owns these
//! measurements only.

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
/// pages for load, best of three passes each. One thread, nothing else copying: the floor
/// issue 20's goal names.
///
/// # Errors
/// [`DatapathError::Io`] when a file cannot be created or mapped.
pub fn copy_floor(dir: &Path, shard_bytes: usize, blocks: usize) -> Result<Floor, DatapathError> {
    concurrent_copy_floor(dir, shard_bytes, blocks, 1)
}

/// The copy floor of a group of `copies` ranks on this machine: `copies` memcpys at once, one
/// thread each, every thread moving its own `blocks` shards of `shard_bytes` between its own
/// two shared-memory files (each rank's bytes, as every rank's agent copies its shard of the
/// same task at the same time). GB/s per copy = one copy's bytes over the wall time from the
/// first thread's start to the last one's end (the bench's per-rank figure is one rank's bytes
/// over the phase's wall time); best of three passes each way. With `copies` ≤ 1 this is
/// [`copy_floor`]. On a machine with fewer cores or less memory bandwidth than `copies` copies
/// need, it is below the single-thread floor; that difference is the machine's, not the path's.
///
/// # Errors
/// [`DatapathError::Io`] when a file cannot be created or mapped, or a thread not started.
pub fn concurrent_copy_floor(
    dir: &Path,
    shard_bytes: usize,
    blocks: usize,
    copies: usize,
) -> Result<Floor, DatapathError> {
    let copies = copies.max(1);
    let bytes = (shard_bytes * blocks) as u64;
    let tmp = tempfile::Builder::new()
        .prefix("datapath-floor-")
        .tempdir_in(dir)
        .map_err(io("baseline dir"))?;
    let mut pairs = Vec::with_capacity(copies);
    for c in 0..copies {
        let mut pages = shm(tmp.path(), &format!("pages{c}"), bytes)?;
        let slab = shm(tmp.path(), &format!("slab{c}"), bytes)?;
        pages.bytes_mut().fill(0x5a);
        pairs.push((pages, slab));
    }
    let mut best = Floor::default();
    for _ in 0..PASSES {
        let secs = together(&mut pairs, |(pages, slab)| {
            shards(slab.bytes_mut(), pages.bytes(), shard_bytes)
        })?;
        best.store_gbps = best.store_gbps.max(gbps(bytes, secs));
        let secs = together(&mut pairs, |(pages, slab)| {
            shards(pages.bytes_mut(), slab.bytes(), shard_bytes)
        })?;
        best.load_gbps = best.load_gbps.max(gbps(bytes, secs));
    }
    Ok(best)
}

/// One `copy_from_slice` per shard of `shard_bytes`.
fn shards(dst: &mut [u8], src: &[u8], shard_bytes: usize) {
    for (d, s) in dst
        .chunks_exact_mut(shard_bytes)
        .zip(src.chunks_exact(shard_bytes))
    {
        d.copy_from_slice(s);
    }
}

/// Run `copy` on every item at once, one thread each (the caller's thread alone for one item),
/// released together; seconds from the first start to the last end.
fn together<T: Send>(items: &mut [T], copy: impl Fn(&mut T) + Sync) -> Result<f64, DatapathError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::RwLock;
    if let [only] = items {
        let t = Instant::now();
        copy(only);
        return Ok(t.elapsed().as_secs_f64());
    }
    let n = items.len();
    // Threads start once the gate's write guard drops; a thread that could not be spawned
    // sets `abort`, and the others then return without copying.
    let gate = RwLock::new(());
    let abort = AtomicBool::new(false);
    let (gate, abort, copy) = (&gate, &abort, &copy);
    let spans = std::thread::scope(|scope| {
        let closed = gate.write().unwrap_or_else(|p| p.into_inner());
        let mut handles = Vec::with_capacity(n);
        let mut failed = None;
        for (i, item) in items.iter_mut().enumerate() {
            let started = std::thread::Builder::new()
                .name(format!("floor-copy-{i}"))
                .spawn_scoped(scope, move || {
                    drop(gate.read().unwrap_or_else(|p| p.into_inner()));
                    if abort.load(Ordering::SeqCst) {
                        return None;
                    }
                    let t = Instant::now();
                    copy(item);
                    Some((t, Instant::now()))
                });
            match started {
                Ok(h) => handles.push(h),
                Err(e) => {
                    abort.store(true, Ordering::SeqCst);
                    failed = Some(e);
                    break;
                }
            }
        }
        drop(closed);
        let spans: Vec<_> = handles
            .into_iter()
            .filter_map(|h| h.join().ok().flatten())
            .collect();
        failed.map_or(Ok(spans), Err)
    })
    .map_err(io("floor copy thread"))?;
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    match (first, last) {
        (Some(a), Some(b)) if spans.len() == n => Ok(b.duration_since(a).as_secs_f64()),
        _ => Err(DatapathError::Check("a floor copy thread panicked".into())),
    }
}

/// `write_all_at` then `read_exact_at` of one shard per call, `blocks` shards from a
/// shared-memory buffer to a preallocated file in `disk_dir` (the disk tier's file system) and
/// back, best of three passes each (buffered I/O, as the disk tier's default mode). One
/// thread, nothing else writing: the floor issue 20's disk goal names.
///
/// # Errors
/// [`DatapathError::Io`] when a file cannot be created, preallocated, written or read.
pub fn disk_floor(
    disk_dir: &Path,
    shm_dir: &Path,
    shard_bytes: usize,
    blocks: usize,
) -> Result<Floor, DatapathError> {
    concurrent_disk_floor(disk_dir, shm_dir, shard_bytes, blocks, 1)
}

/// The disk floor of a group of `copies` ranks on this machine: `copies` of [`disk_floor`]'s
/// loops at once, one thread each, every thread moving its own `blocks` shards between its
/// own shared-memory buffer and its own preallocated file in `disk_dir` (every rank's agent
/// writes or reads its shard of the same task into its own disk tier at the same time). GB/s
/// per copy as in [`concurrent_copy_floor`]; best of three passes each way. With `copies` ≤ 1
/// this is [`disk_floor`]. It is the machine's figure for N ranks' positional I/O at once,
/// below the single-thread floor where the cores or the memory bandwidth are short.
///
/// # Errors
/// [`DatapathError::Io`] when a file cannot be created, preallocated, written or read, or a
/// thread not started.
pub fn concurrent_disk_floor(
    disk_dir: &Path,
    shm_dir: &Path,
    shard_bytes: usize,
    blocks: usize,
    copies: usize,
) -> Result<Floor, DatapathError> {
    let copies = copies.max(1);
    let bytes = (shard_bytes * blocks) as u64;
    let shm_tmp = tempfile::Builder::new()
        .prefix("datapath-floor-")
        .tempdir_in(shm_dir)
        .map_err(io("baseline dir"))?;
    let tmp = tempfile::Builder::new()
        .prefix("datapath-floor-")
        .tempdir_in(disk_dir)
        .map_err(io("baseline dir"))?;
    let mut pairs = Vec::with_capacity(copies);
    for c in 0..copies {
        let mut pages = shm(shm_tmp.path(), &format!("pages{c}"), bytes)?;
        pages.bytes_mut().fill(0xa5);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(tmp.path().join(format!("plain{c}")))
            .map_err(io("baseline file"))?;
        preallocate(&file, bytes).map_err(io("baseline file"))?;
        pairs.push((pages, file, None::<std::io::Error>));
    }
    let mut best = Floor::default();
    for _ in 0..PASSES {
        let secs = together(&mut pairs, |(pages, file, failed)| {
            for (i, s) in pages.bytes().chunks_exact(shard_bytes).enumerate() {
                if let Err(e) = file.write_all_at(s, (i * shard_bytes) as u64) {
                    failed.get_or_insert(e);
                    return;
                }
            }
        })?;
        failed(&mut pairs, "pwrite")?;
        best.store_gbps = best.store_gbps.max(gbps(bytes, secs));
        let secs = together(&mut pairs, |(pages, file, failed)| {
            for (i, d) in pages.bytes_mut().chunks_exact_mut(shard_bytes).enumerate() {
                if let Err(e) = file.read_exact_at(d, (i * shard_bytes) as u64) {
                    failed.get_or_insert(e);
                    return;
                }
            }
        })?;
        failed(&mut pairs, "pread")?;
        best.load_gbps = best.load_gbps.max(gbps(bytes, secs));
    }
    Ok(best)
}

/// The first I/O error a floor thread kept, as the typed error.
fn failed(
    pairs: &mut [(ShmFile, std::fs::File, Option<std::io::Error>)],
    what: &'static str,
) -> Result<(), DatapathError> {
    match pairs.iter_mut().find_map(|p| p.2.take()) {
        Some(e) => Err(io(what)(e)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item is copied, once each, on its own thread, and the span covers them all.
    #[test]
    fn together_runs_every_copy() {
        let mut items: Vec<(Vec<u8>, Vec<u8>, u32)> = (0..3u8)
            .map(|i| (vec![i + 1; 4096], vec![0; 4096], 0))
            .collect();
        let secs = together(&mut items, |(src, dst, runs)| {
            dst.copy_from_slice(src);
            *runs += 1;
        })
        .unwrap();
        assert!(secs >= 0.0);
        for (src, dst, runs) in &items {
            assert_eq!((src, *runs), (dst, 1));
        }
        let mut one = [(vec![7u8; 8], vec![0u8; 8])];
        together(&mut one, |(s, d)| d.copy_from_slice(s)).unwrap();
        assert_eq!(one[0].1, vec![7u8; 8]);
    }

    /// Two copies at once through shared-memory files give a floor in both directions; one
    /// copy is the single-thread floor's measurement.
    #[test]
    fn the_concurrent_floor_measures_both_directions() {
        let dir = tempfile::tempdir().unwrap();
        for copies in [1, 2] {
            let f = concurrent_copy_floor(dir.path(), 64 << 10, 4, copies).unwrap();
            assert!(f.store_gbps > 0.0 && f.load_gbps > 0.0, "{copies}: {f:?}");
        }
        // The files are gone afterwards.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// Two pwrite/pread loops at once on real files give a floor in both directions, and
    /// their files and buffers are removed; a directory that cannot hold a file is the typed
    /// error, not a panic.
    #[test]
    fn the_concurrent_disk_floor_measures_both_directions() {
        let (disk, shm) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for copies in [1, 2] {
            let f = concurrent_disk_floor(disk.path(), shm.path(), 64 << 10, 4, copies).unwrap();
            assert!(f.store_gbps > 0.0 && f.load_gbps > 0.0, "{copies}: {f:?}");
        }
        for d in [&disk, &shm] {
            assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        }
        let missing = disk.path().join("absent");
        let e = concurrent_disk_floor(&missing, shm.path(), 64 << 10, 4, 2).unwrap_err();
        assert!(matches!(e, DatapathError::Io { .. }), "{e}");
    }
}
