//! A rank's manifest: which block shards it holds, where, and with which checksum.
//!
//! Owns [`Manifest`], its [`Geometry`], its file format and its atomic persistence (write a
//! temporary file, fsync it, rename it over the old one, fsync the directory), so a crash
//! leaves either the old or the new manifest, never a torn one. It must never read tier slots:
//! the store checks each shard's bytes against its entry's checksum whenever it reads the
//! shard.
//!
//! File format: the 8 bytes `TNDMANI3`, the CRC-32C of the payload (4 bytes, little-endian),
//! then the payload: the [`Manifest`] encoded with postcard: rank, geometry, the model layout
//! ([`LayoutFingerprint`]) the shards were written under, then the entries in block hash order, each with its tier, slot and shard checksum (read back in bulk). A manifest is rewritten whole on
//! every flush (about 30 bytes per entry); the store flushes when asked, typically once per
//! step, not per block.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tandem_proto::ids::Rank;
use tandem_proto::LayoutFingerprint;

use crate::block::{BlockHash, Location};
use crate::fence::{Fence, Fenced};

/// The file name of the manifest inside the disk directory.
pub const MANIFEST_FILE: &str = "manifest.bin";

/// Version 3 (the model layout recorded); a manifest of an earlier version (version 2 had no
/// layout, version 1 had 64-bit block hashes) is discarded whole at open: its shards' layout
/// is unknown.
const MAGIC: &[u8; 8] = b"TNDMANI3";

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

    /// The file bytes: magic, payload checksum, payload.
    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain structs and maps into a Vec cannot fail.
        let payload = postcard::to_stdvec(self).unwrap_or_default();
        let mut out = Vec::with_capacity(12 + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// Parses file bytes; `path` only names the file in errors.
    ///
    /// Errors: [`ManifestError::BadMagic`], [`ManifestError::BadChecksum`],
    /// [`ManifestError::Decode`].
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Manifest, ManifestError> {
        if bytes.len() < 12 || &bytes[..8] != MAGIC {
            return Err(ManifestError::BadMagic {
                path: path.to_path_buf(),
            });
        }
        let mut header = [0u8; 4];
        header.copy_from_slice(&bytes[8..12]);
        let expected = u32::from_le_bytes(header);
        let payload = &bytes[12..];
        let actual = crc32c::crc32c(payload);
        if actual != expected {
            return Err(ManifestError::BadChecksum {
                path: path.to_path_buf(),
                expected,
                actual,
            });
        }
        postcard::from_bytes(payload).map_err(|e| ManifestError::Decode {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }

    /// Reads the manifest at `path`; `Ok(None)` when there is no file.
    ///
    /// Errors: as [`Manifest::decode`], plus [`ManifestError::Io`].
    pub fn load(path: &Path) -> Result<Option<Manifest>, ManifestError> {
        match std::fs::read(path) {
            Ok(bytes) => Manifest::decode(path, &bytes).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ManifestError::Io {
                path: path.to_path_buf(),
                op: "read",
                source,
            }),
        }
    }

    /// Writes the manifest to `path` atomically: a temporary file beside it (unique per save),
    /// fsync, rename over `path`, fsync of the directory. Concurrent saves never tear the file;
    /// the last rename wins.
    ///
    /// Errors: [`ManifestError::Io`].
    pub fn save(&self, path: &Path) -> Result<(), ManifestError> {
        self.save_checked(path, || Ok(()))
    }

    /// [`Manifest::save`] by the holder of `fence`: the fence is checked before the temporary
    /// file is written and again, with its record's file, right before the rename replaces
    /// `path`, so a writer that lost the rank's tiers never replaces the manifest.
    ///
    /// Errors: [`ManifestError::Fenced`], [`ManifestError::Io`].
    pub fn save_fenced(&self, path: &Path, fence: &Fence) -> Result<(), ManifestError> {
        self.save_checked(path, || fence.check_file())
    }

    fn save_checked(
        &self,
        path: &Path,
        check: impl Fn() -> Result<(), Fenced>,
    ) -> Result<(), ManifestError> {
        let fenced = |fenced| ManifestError::Fenced {
            path: path.to_path_buf(),
            fenced,
        };
        check().map_err(fenced)?;
        // A temporary name of its own per save: two concurrent saves of one manifest (a writer
        // thread and a final flush) must not write into the same temporary file.
        static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("{}.{n}.tmp", std::process::id()));
        let io = |p: &Path, op: &'static str| {
            let p = p.to_path_buf();
            move |source| ManifestError::Io {
                path: p,
                op,
                source,
            }
        };
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io(&tmp, "write"))?;
        file.write_all(&self.encode()).map_err(io(&tmp, "write"))?;
        file.sync_all().map_err(io(&tmp, "sync"))?;
        drop(file);
        if let Err(e) = check() {
            let _ = std::fs::remove_file(&tmp);
            return Err(fenced(e));
        }
        std::fs::rename(&tmp, path).map_err(io(path, "rename"))?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir, "sync-dir"))?;
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
        let mut bytes = MAGIC.to_vec();
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
        let mut bytes = MAGIC.to_vec();
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
}
