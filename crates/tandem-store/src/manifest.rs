//! A rank's manifest: which block shards it holds, where, and with which checksum.
//!
//! Owns [`Manifest`], its [`Geometry`], its file format and its crash-safe persistence
//! ([`ManifestFile`]): the manifest is kept in **two copies**, `manifest.bin` and
//! `manifest.bin.1` beside it, and each save overwrites, in place, the copy that does not hold
//! the newest good save, then `fdatasync`s it (one flush: no temporary file, no rename, no
//! directory sync except when a copy is first created). Each copy carries a save key
//! (the writer's fence incarnation, then a generation counted up on every save) and a checksum
//! over the key and the payload; reading takes the valid copy with the highest key. So a save
//! torn by a crash (or an I/O error) leaves the other copy, the previous save, intact and
//! chosen, and a crash never loses or corrupts the manifest as a whole, only the save that was
//! under way. A writer of an older incarnation (one that lost the rank's tiers and ran on) never
//! outranks the new owner's saves. It must never read tier slots: the store checks each
//! shard's bytes against its entry's checksum whenever it reads the shard.
//!
//! File format of a copy (version 4): the 8 bytes `TNDMANI4`; the save's incarnation, its
//! generation and the payload's length, little-endian `u64`s; the CRC-32C of those 24 bytes
//! followed by the payload (4 bytes, little-endian); the payload: the [`Manifest`] encoded with
//! postcard: rank, geometry, the model layout ([`LayoutFingerprint`]) the shards were written
//! under, then the entries in block hash order, each with its tier, slot and shard checksum
//! (read back in bulk). Bytes past the payload are padding (a copy grows in steps of 64 KiB,
//! so that most saves rewrite blocks already allocated, and never shrinks). A manifest is
//! rewritten whole on every save (about 30 bytes per entry); the store saves when asked,
//! typically once per step, not per block. A version 3 file (`TNDMANI3`, one file replaced by
//! rename) is still read, as the oldest possible save; the next save writes the other copy.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tandem_proto::ids::Rank;
use tandem_proto::LayoutFingerprint;

use crate::block::{BlockHash, Location};
use crate::fence::{Fence, Fenced};

/// The file name of the manifest (its first copy) inside the disk directory; the second copy
/// is the same name with `.1` appended ([`ManifestFile::copies`]).
pub const MANIFEST_FILE: &str = "manifest.bin";

/// Version 4 (two copies, each with a save key); version 3 (the model layout recorded, one
/// file) is read as the oldest save. A manifest of an earlier version (version 2 had no
/// layout, version 1 had 64-bit block hashes) is discarded whole at open: its shards' layout
/// is unknown.
const MAGIC: &[u8; 8] = b"TNDMANI4";
const MAGIC_V3: &[u8; 8] = b"TNDMANI3";
/// Bytes of a version 4 header: magic, incarnation, generation, payload length, CRC.
const HEADER: usize = 36;
/// A copy's file grows in steps of this many bytes (zero padding past the payload).
const GROW: usize = 64 << 10;

/// Which save a copy holds: ordered by the writer's fence incarnation, then by the
/// generation, counted up on every save of the manifest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SaveKey {
    /// The fence incarnation of the process that saved it (0: saved without a fence).
    pub incarnation: u64,
    /// One more than the newest save found when it was written (from 1; 0 for a version 3
    /// file).
    pub generation: u64,
}

/// The tier geometry a manifest was written for; entries are meaningless under another one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    /// Bytes of one block shard (one slot).
    pub shard_bytes: u64,
    /// Host tier capacity, in blocks.
    pub host_capacity_blocks: u64,
    /// Disk tier capacity, in blocks.
    pub disk_capacity_blocks: u64,
}

/// One rank's record of its shards: block hash → tier, slot and checksum.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The rank that wrote it.
    pub rank: Rank,
    /// The geometry of its tiers.
    pub geometry: Geometry,
    /// The model layout its shards were written under; a store opened under another one
    /// drops every entry.
    pub layout: LayoutFingerprint,
    /// Every shard the rank holds, with its checksum (what a load verifies the shard's bytes
    /// against; a restart takes these over without reading the shards).
    #[serde(deserialize_with = "entries_in_bulk")]
    pub entries: BTreeMap<BlockHash, Location>,
}

/// Reads the entries (postcard writes a map as a length and its pairs, exactly as it writes
/// a sequence of pairs) as a sequence and builds the map in bulk: a manifest is saved in key
/// order, and `BTreeMap`'s `FromIterator` builds from sorted pairs in one pass, where
/// deserialising a map inserts the pairs one by one. The open of a large tier is mostly this.
/// A pair listed twice keeps its last value, as a map would.
fn entries_in_bulk<'de, D>(d: D) -> Result<BTreeMap<BlockHash, Location>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let pairs: Vec<(BlockHash, Location)> = Deserialize::deserialize(d)?;
    Ok(pairs.into_iter().collect())
}

/// Why a manifest could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file does not start with the manifest magic.
    #[error("manifest {path}: not a Tandem manifest (bad magic)")]
    BadMagic {
        /// The file.
        path: PathBuf,
    },
    /// The payload does not match its checksum.
    #[error("manifest {path}: payload checksum {actual:08x} does not match header {expected:08x}")]
    BadChecksum {
        /// The file.
        path: PathBuf,
        /// The checksum in the header.
        expected: u32,
        /// The checksum of the payload read.
        actual: u32,
    },
    /// The payload could not be decoded.
    #[error("manifest {path}: cannot decode: {reason}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// The decoder's message.
        reason: String,
    },
    /// The writer was fenced: another process owns the rank's tiers; the manifest on disk was
    /// left as it was.
    #[error("manifest {path} not written: {fenced}")]
    Fenced {
        /// The file.
        path: PathBuf,
        /// Why.
        fenced: Fenced,
    },
    /// An I/O call failed.
    #[error("manifest {path}: {op} failed: {source}")]
    Io {
        /// The file (or its directory, for `sync-dir`).
        path: PathBuf,
        /// What was being done (`read`, `write`, `sync`, `rename`, `sync-dir`).
        op: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl Manifest {
    /// An empty manifest.
    pub fn new(rank: Rank, geometry: Geometry, layout: LayoutFingerprint) -> Self {
        Manifest {
            rank,
            geometry,
            layout,
            entries: BTreeMap::new(),
        }
    }

    /// The bytes of a copy holding this manifest as save `key` (see the module docs), without
    /// padding.
    pub fn encode_as(&self, key: SaveKey) -> Vec<u8> {
        // Serialising plain structs and maps into a Vec cannot fail.
        let payload = postcard::to_stdvec(self).unwrap_or_default();
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&key.incarnation.to_le_bytes());
        out.extend_from_slice(&key.generation.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&out[8..32]), &payload);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// [`Manifest::encode_as`] with the key of the oldest save.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_as(SaveKey::default())
    }

    /// Parses a copy's bytes; `path` only names the file in errors.
    ///
    /// Errors: [`ManifestError::BadMagic`], [`ManifestError::BadChecksum`] (also for a copy
    /// cut short: a torn save), [`ManifestError::Decode`].
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Manifest, ManifestError> {
        Manifest::decode_copy(path, bytes).map(|(m, _)| m)
    }

    /// As [`Manifest::decode`], with the save key the copy carries.
    ///
    /// Errors: as [`Manifest::decode`].
    pub fn decode_copy(path: &Path, bytes: &[u8]) -> Result<(Manifest, SaveKey), ManifestError> {
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let u32_at = |at: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[at..at + 4]);
            u32::from_le_bytes(b)
        };
        let bad_checksum = |expected, actual| ManifestError::BadChecksum {
            path: path.to_path_buf(),
            expected,
            actual,
        };
        let (key, payload) = if bytes.len() >= 12 && &bytes[..8] == MAGIC_V3 {
            let payload = &bytes[12..];
            let (expected, actual) = (u32_at(8), crc32c::crc32c(payload));
            if actual != expected {
                return Err(bad_checksum(expected, actual));
            }
            (SaveKey::default(), payload)
        } else if bytes.len() >= HEADER && &bytes[..8] == MAGIC {
            let key = SaveKey {
                incarnation: u64_at(8),
                generation: u64_at(16),
            };
            let len = u64_at(24);
            let expected = u32_at(32);
            let available = (bytes.len() - HEADER) as u64;
            if len > available {
                // Cut short: the header of a save whose payload did not reach the file.
                return Err(bad_checksum(expected, 0));
            }
            let payload = &bytes[HEADER..HEADER + len as usize];
            let actual = crc32c::crc32c_append(crc32c::crc32c(&bytes[8..32]), payload);
            if actual != expected {
                return Err(bad_checksum(expected, actual));
            }
            (key, payload)
        } else {
            return Err(ManifestError::BadMagic {
                path: path.to_path_buf(),
            });
        };
        postcard::from_bytes(payload)
            .map(|m| (m, key))
            .map_err(|e| ManifestError::Decode {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })
    }

    /// Reads the manifest at `path` (the newest valid of its two copies, see
    /// [`ManifestFile::load`]); `Ok(None)` when there is none.
    ///
    /// Errors: as [`ManifestFile::load`].
    pub fn load(path: &Path) -> Result<Option<Manifest>, ManifestError> {
        ManifestFile::new(path).load()
    }

    /// Saves the manifest at `path` (see [`ManifestFile::save`]; both copies are read first,
    /// to find which one to overwrite).
    ///
    /// Errors: [`ManifestError::Io`].
    pub fn save(&self, path: &Path) -> Result<(), ManifestError> {
        ManifestFile::new(path).save(self)
    }

    /// [`Manifest::save`] by the holder of `fence` (see [`ManifestFile::save_fenced`]).
    ///
    /// Errors: [`ManifestError::Fenced`], [`ManifestError::Io`].
    pub fn save_fenced(&self, path: &Path, fence: &Fence) -> Result<(), ManifestError> {
        ManifestFile::new(path).save_fenced(self, fence)
    }
}

/// The newest good save this handle knows of: its key and which copy holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Newest {
    key: SaveKey,
    copy: usize,
}

/// A manifest's two copies on disk (see the module docs) and which one holds the newest good
/// save. Clones share that knowledge and take turns: saves through one handle and its clones
/// never run at once (a save holds the handle's lock), so one copy always holds a complete
/// save while the other is overwritten. A handle learns the newest save when it loads, or by
/// reading both copies before its first save.
#[derive(Clone, Debug)]
pub struct ManifestFile {
    path: PathBuf,
    /// `None` until both copies were read; then the newest good save, if any.
    newest: Arc<Mutex<Option<Option<Newest>>>>,
}

impl ManifestFile {
    /// The manifest whose first copy is `path` (nothing is read yet).
    pub fn new(path: &Path) -> Self {
        ManifestFile {
            path: path.to_path_buf(),
            newest: Arc::new(Mutex::new(None)),
        }
    }

    /// The first copy's path (the manifest's name).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The paths of both copies: `path`, and `path` with `.1` appended.
    pub fn copies(&self) -> [PathBuf; 2] {
        let mut second = self.path.clone().into_os_string();
        second.push(".1");
        [self.path.clone(), PathBuf::from(second)]
    }

    /// Reads both copies and returns the valid one with the highest save key (a torn or
    /// corrupt copy is passed over); `Ok(None)` when neither exists. Remembers which copy that
    /// is, so that the next save overwrites the other.
    ///
    /// Errors: when copies exist and none is valid, the first copy's error
    /// ([`ManifestError::BadMagic`], [`ManifestError::BadChecksum`],
    /// [`ManifestError::Decode`]); [`ManifestError::Io`] when a copy cannot be read.
    pub fn load(&self) -> Result<Option<Manifest>, ManifestError> {
        let mut newest = self.lock();
        let (found, error) = self.scan(true)?;
        *newest = Some(found.as_ref().map(|(n, _)| *n));
        match (found, error) {
            (Some((_, m)), _) => Ok(m),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(None),
        }
    }

    /// Writes `manifest` over the copy that does not hold the newest good save, in place, and
    /// `fdatasync`s it (the directory is synced too when the copy was created). A save that
    /// fails leaves the other copy as it was (and removes a copy it created: a torn first save
    /// must not read as a corrupt manifest); the next save overwrites the failed one again.
    ///
    /// Errors: [`ManifestError::Io`].
    pub fn save(&self, manifest: &Manifest) -> Result<(), ManifestError> {
        self.save_checked(manifest, None, || Ok(()))
    }

    /// [`ManifestFile::save`] by the holder of `fence`: the fence is checked right before the
    /// copy is overwritten (a writer that lost the rank's tiers leaves both copies as they
    /// were), and the save carries the fence's incarnation, so that a later owner's saves
    /// always outrank this writer's.
    ///
    /// Errors: [`ManifestError::Fenced`], [`ManifestError::Io`].
    pub fn save_fenced(&self, manifest: &Manifest, fence: &Fence) -> Result<(), ManifestError> {
        self.save_checked(manifest, Some(fence.token().incarnation), || {
            fence.check_file()
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Option<Newest>>> {
        // A panic mid-save leaves the last known newest save, still true.
        self.newest.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads both copies: the newest valid one (with its manifest when `keep`), and the first
    /// copy's error when none is valid.
    #[allow(clippy::type_complexity)]
    fn scan(
        &self,
        keep: bool,
    ) -> Result<(Option<(Newest, Option<Manifest>)>, Option<ManifestError>), ManifestError> {
        let mut best: Option<(Newest, Option<Manifest>)> = None;
        let mut first_error = None;
        for (copy, path) in self.copies().iter().enumerate() {
            let bytes = match std::fs::read(path) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(ManifestError::Io {
                        path: path.clone(),
                        op: "read",
                        source,
                    })
                }
            };
            match Manifest::decode_copy(path, &bytes) {
                Ok((m, key)) if best.as_ref().is_none_or(|(b, _)| key > b.key) => {
                    best = Some((Newest { key, copy }, keep.then_some(m)));
                }
                Ok(_) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        Ok((best, first_error))
    }

    fn save_checked(
        &self,
        manifest: &Manifest,
        incarnation: Option<u64>,
        check: impl Fn() -> Result<(), Fenced>,
    ) -> Result<(), ManifestError> {
        let mut newest = self.lock();
        let known = match *newest {
            Some(n) => n,
            None => {
                let n = self.scan(false)?.0.map(|(n, _)| n);
                *newest = Some(n);
                n
            }
        };
        let copy = known.map_or(0, |n| 1 - n.copy);
        let key = SaveKey {
            incarnation: incarnation.unwrap_or(known.map_or(0, |n| n.key.incarnation)),
            generation: known.map_or(0, |n| n.key.generation) + 1,
        };
        let path = &self.copies()[copy];
        let io = |op: &'static str| {
            let p = path.clone();
            move |source| ManifestError::Io {
                path: p,
                op,
                source,
            }
        };
        check().map_err(|fenced| ManifestError::Fenced {
            path: path.clone(),
            fenced,
        })?;
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io("write"))?;
        let had = file.metadata().map_err(io("write"))?.len();
        let mut bytes = manifest.encode_as(key);
        if (bytes.len() as u64) > had {
            // Grow in steps, so that the next saves rewrite blocks already allocated.
            bytes.resize(bytes.len().div_ceil(GROW) * GROW, 0);
        }
        let written = file
            .write_all_at(&bytes, 0)
            .map_err(io("write"))
            .and_then(|()| file.sync_data().map_err(io("sync")));
        if let Err(e) = written {
            if had == 0 {
                // A copy this save created holds nothing valid: remove it, so that a rank that
                // never saved a manifest still opens as one with none (a torn first copy would
                // read as a corrupt manifest, and open would have to save a fresh one: on a
                // full file system it cannot, and the rank could not start).
                drop(file);
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
        drop(file);
        if had == 0 {
            // The copy may be new: its directory entry must be durable too.
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|source| ManifestError::Io {
                    path: dir.to_path_buf(),
                    op: "sync-dir",
                    source,
                })?;
        }
        *newest = Some(Some(Newest { key, copy }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::Checksum;
    use crate::tier::Tier;

    fn sample() -> Manifest {
        let geometry = Geometry {
            shard_bytes: 4096,
            host_capacity_blocks: 4,
            disk_capacity_blocks: 8,
        };
        let layout = LayoutFingerprint {
            model_id: "m".into(),
            num_layers: 2,
            ..LayoutFingerprint::default()
        };
        let mut m = Manifest::new(Rank(2), geometry, layout);
        m.entries.insert(
            BlockHash(7),
            Location {
                tier: Tier::Host,
                slot: 1,
                checksum: Checksum([1, 2, 3]),
            },
        );
        m.entries.insert(
            BlockHash(9),
            Location {
                tier: Tier::Disk,
                slot: 5,
                checksum: Checksum([4, 5, 6]),
            },
        );
        m
    }

    #[test]
    fn save_load_round_trip_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MANIFEST_FILE);
        assert_eq!(Manifest::load(&path).unwrap(), None);
        let m = sample();
        m.save(&path).unwrap();
        assert_eq!(Manifest::load(&path).unwrap(), Some(m.clone()));
        let mut m2 = m.clone();
        m2.entries.remove(&BlockHash(7));
        m2.save(&path).unwrap();
        assert_eq!(Manifest::load(&path).unwrap(), Some(m2));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn the_map_reads_back_from_the_bytes_a_map_writes() {
        let mut m = sample();
        for n in 0..1000u64 {
            m.entries.insert(
                BlockHash::from(n * 7919 % 1000),
                Location {
                    tier: Tier::Disk,
                    slot: n,
                    checksum: Checksum([n as u32, 0, 1]),
                },
            );
        }
        let bytes = m.encode();
        assert_eq!(Manifest::decode(Path::new("/m"), &bytes).unwrap(), m);
        // A map as serde writes it, pairs out of order and one key twice: the last wins.
        #[derive(Serialize)]
        struct Pairs(Vec<(BlockHash, Location)>);
        let loc = |slot| Location {
            tier: Tier::Host,
            slot,
            checksum: Checksum([0, 0, 0]),
        };
        let pairs = Pairs(vec![
            (BlockHash(9), loc(1)),
            (BlockHash(3), loc(2)),
            (BlockHash(9), loc(3)),
        ]);
        let payload = postcard::to_stdvec(&(Rank(2), m.geometry, m.layout.clone(), pairs)).unwrap();
        // A version 3 file (magic, CRC, payload) still reads.
        let mut bytes = MAGIC_V3.to_vec();
        bytes.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        let back = Manifest::decode(Path::new("/m"), &bytes).unwrap();
        assert_eq!(
            back.entries.into_iter().collect::<Vec<_>>(),
            vec![(BlockHash(3), loc(2)), (BlockHash(9), loc(3))]
        );
    }

    #[test]
    fn errors() {
        let p = Path::new("/m");
        let e = Manifest::decode(p, b"nonsense-bytes").unwrap_err();
        assert_eq!(
            e.to_string(),
            "manifest /m: not a Tandem manifest (bad magic)"
        );
        let mut bytes = sample().encode();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let e = Manifest::decode(p, &bytes).unwrap_err();
        assert!(
            e.to_string().starts_with("manifest /m: payload checksum "),
            "{e}"
        );
        let mut bytes = MAGIC_V3.to_vec();
        bytes.extend_from_slice(&crc32c::crc32c(&[0xff]).to_le_bytes());
        bytes.push(0xff);
        let e = Manifest::decode(p, &bytes).unwrap_err();
        assert!(
            e.to_string().starts_with("manifest /m: cannot decode: "),
            "{e}"
        );
        let e = ManifestError::Io {
            path: "/d".into(),
            op: "rename",
            source: std::io::Error::other("x"),
        };
        assert_eq!(e.to_string(), "manifest /d: rename failed: x");
    }
    fn with_entries(n: u64) -> Manifest {
        let mut m = sample();
        for i in 0..n {
            m.entries.insert(
                BlockHash::from(1000 + i),
                Location {
                    tier: Tier::Disk,
                    slot: i,
                    checksum: Checksum([i as u32, 1, 2]),
                },
            );
        }
        m
    }

    fn key_of(path: &Path) -> SaveKey {
        Manifest::decode_copy(path, &std::fs::read(path).unwrap())
            .unwrap()
            .1
    }

    #[test]
    fn saves_alternate_between_the_two_copies_and_the_newest_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = ManifestFile::new(&dir.path().join(MANIFEST_FILE));
        let [a, b] = file.copies();
        assert_eq!(b, dir.path().join("manifest.bin.1"));
        assert_eq!(file.load().unwrap(), None);
        let saves: Vec<_> = (1..=4).map(with_entries).collect();
        for (i, m) in saves.iter().enumerate() {
            file.save(m).unwrap();
            // Another handle (another process) reads the save just made.
            assert_eq!(Manifest::load(file.path()).unwrap().as_ref(), Some(m));
            let (written, other) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
            assert_eq!(key_of(written).generation, i as u64 + 1);
            if i > 0 {
                assert_eq!(
                    key_of(other).generation,
                    i as u64,
                    "the previous save is kept"
                );
            }
        }
        // A handle that did not load reads both copies before its first save and overwrites
        // the older one.
        let fresh = ManifestFile::new(file.path());
        fresh.save(&saves[0]).unwrap();
        assert_eq!(key_of(&a).generation, 5);
        assert_eq!(key_of(&b).generation, 4);
        assert_eq!(Manifest::load(file.path()).unwrap(), Some(saves[0].clone()));
    }

    #[test]
    fn a_torn_or_corrupt_newest_copy_falls_back_to_the_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MANIFEST_FILE);
        let file = ManifestFile::new(&path);
        let (older, newer) = (with_entries(3), with_entries(200));
        file.save(&older).unwrap();
        file.save(&newer).unwrap();
        let [a, b] = file.copies();
        assert_eq!(
            key_of(&b).generation,
            2,
            "the newer save is in the second copy"
        );
        let whole = std::fs::read(&b).unwrap();
        let first = std::fs::read(&a).unwrap();
        let payload_end = HEADER + {
            let mut l = [0u8; 8];
            l.copy_from_slice(&whole[24..32]);
            u64::from_le_bytes(l) as usize
        };
        // A save cut short at any point (header only, part of the payload, nothing) or one
        // with a flipped byte: the other copy, the previous save, is read.
        let torn: Vec<Vec<u8>> = vec![
            Vec::new(),
            whole[..20].to_vec(),
            whole[..HEADER].to_vec(),
            whole[..payload_end - 1].to_vec(),
            {
                let mut w = whole.clone();
                w[HEADER + 10] ^= 0x40;
                w
            },
            {
                let mut w = whole.clone();
                w[16] ^= 1; // the generation itself
                w
            },
        ];
        for bytes in &torn {
            std::fs::write(&b, bytes).unwrap();
            assert_eq!(
                Manifest::load(&path).unwrap(),
                Some(older.clone()),
                "second copy of {} bytes",
                bytes.len()
            );
            // The next save overwrites the bad copy, never the good one.
            let h = ManifestFile::new(&path);
            assert_eq!(h.load().unwrap(), Some(older.clone()));
            h.save(&newer).unwrap();
            assert_eq!(
                std::fs::read(&a).unwrap(),
                first,
                "the good copy is untouched"
            );
            assert_eq!(Manifest::load(&path).unwrap(), Some(newer.clone()));
        }
        // Both copies bad: the first copy's error, as for a single corrupt manifest.
        std::fs::write(&a, b"garbage").unwrap();
        std::fs::write(&b, &whole[..HEADER]).unwrap();
        let e = Manifest::load(&path).unwrap_err();
        assert!(e.to_string().contains("bad magic"), "{e}");
        // Only the second copy left, valid: it is read.
        std::fs::remove_file(&a).unwrap();
        std::fs::write(&b, &whole).unwrap();
        assert_eq!(Manifest::load(&path).unwrap(), Some(newer));
    }

    #[test]
    fn a_version_3_file_is_read_as_the_oldest_save_and_kept_until_the_next_save() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MANIFEST_FILE);
        let old = with_entries(5);
        let payload = postcard::to_stdvec(&old).unwrap();
        let mut v3 = MAGIC_V3.to_vec();
        v3.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        v3.extend_from_slice(&payload);
        std::fs::write(&path, &v3).unwrap();
        let file = ManifestFile::new(&path);
        assert_eq!(file.load().unwrap(), Some(old.clone()));
        let new = with_entries(6);
        file.save(&new).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            v3,
            "the version 3 file stays"
        );
        assert_eq!(Manifest::load(&path).unwrap(), Some(new));
    }

    #[test]
    fn a_later_incarnation_outranks_any_generation_of_an_earlier_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MANIFEST_FILE);
        let [a, b] = ManifestFile::new(&path).copies();
        let (stale, owner) = (with_entries(1), with_entries(2));
        let mut s = stale.encode_as(SaveKey {
            incarnation: 3,
            generation: 90,
        });
        s.resize(s.len() + 100, 0); // padding past the payload is ignored
        std::fs::write(&a, s).unwrap();
        std::fs::write(
            &b,
            owner.encode_as(SaveKey {
                incarnation: 4,
                generation: 2,
            }),
        )
        .unwrap();
        assert_eq!(Manifest::load(&path).unwrap(), Some(owner));
    }
}
