//! The per-rank store: host and disk tiers, slot allocation, checksums and the manifest.
//!
//! Owns [`Store`], [`StoreConfig`], [`OpenReport`] and [`StoreError`]. A store writes and
//! reads this rank's shards, verifies every read against the checksum recorded at write time,
//! drops a shard that fails (it is never served), and keeps the manifest. It must never decide
//! placement: which tier a shard goes to, what is demoted, promoted or dropped comes from the
//! leader's group index (`tandem-core`) as [`TierOp`]s, applied in order on every rank.
//!
//! Validation comes before any write: a refused store leaves the tiers and the manifest as
//! they were, a refused load leaves the engine's pages as they were. Every write to a slot and
//! every manifest save is fenced ([`crate::fence`]): once another process took the rank's
//! tiers over, this store refuses everything with [`StoreError::Fenced`]. A load that fails its
//! checksum has already copied bytes into the destination; those bytes are unspecified and
//! the load is reported failed.

use std::path::{Path, PathBuf};

use tandem_proto::ids::Rank;

use crate::block::{BlockHash, Location, SlotId};
use crate::buffer::{BufferError, EngineBuffers, PageId};
use crate::checksum::Checksum;
use crate::disk::{DiskIo, DiskTier, IoMode};
use crate::fence::{Fence, Fenced};
use crate::host::HostTier;
use crate::lock::{LockError, TierLock};
use crate::manifest::{Geometry, Manifest, ManifestError, ManifestFile};
use crate::tier::{Tier, TierError, TierSlots};
use tandem_proto::{LayoutFingerprint, RankBlocks, TierOp};

/// Where and how big this rank's tiers are. Sizes come from the configuration (the shard size
/// from the model layout, capacities in blocks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// This rank.
    pub rank: Rank,
    /// Bytes of one block shard on this rank (one slot).
    pub shard_bytes: usize,
    /// Host tier capacity, in blocks (0 disables it).
    pub host_capacity_blocks: u64,
    /// Disk tier capacity, in blocks (0 disables it).
    pub disk_capacity_blocks: u64,
    /// Directory of the host slab, typically `/dev/shm/tandem-<group>-<rank>`.
    pub host_dir: PathBuf,
    /// Directory of the disk slab and of the manifest.
    pub disk_dir: PathBuf,
    /// Disk I/O mode.
    pub disk_io: IoMode,
    /// The model layout the shards are written under (from the configuration): recorded in
    /// the manifest; a manifest written under another layout is dropped whole at open.
    pub layout: LayoutFingerprint,
}

impl StoreConfig {
    /// The geometry recorded in the manifest.
    pub fn geometry(&self) -> Geometry {
        Geometry {
            shard_bytes: self.shard_bytes as u64,
            host_capacity_blocks: self.host_capacity_blocks,
            disk_capacity_blocks: self.disk_capacity_blocks,
        }
    }
}

/// What [`Store::open`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Shards taken over from the manifest, in blocks; each is verified against its
    /// checksum when it is first read (open reads none).
    pub adopted: usize,
    /// Shards dropped: slot outside the tier, slot listed twice, tier absent or recreated
    /// empty.
    pub invalid: usize,
    /// Why the manifest was discarded whole (unreadable, another rank's, another layout,
    /// another geometry).
    pub discarded_manifest: Option<String>,
    /// Set when the manifest was written under another model layout: every shard it listed
    /// was dropped unread.
    pub layout_changed: Option<LayoutChange>,
}

/// A manifest written under another model layout than the store's (see [`OpenReport`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutChange {
    /// The layout the manifest's shards were written under.
    pub written_under: LayoutFingerprint,
    /// The layout the store opened under.
    pub opened_under: LayoutFingerprint,
    /// Shards the manifest listed (host and disk tiers), all dropped, in blocks.
    pub dropped: usize,
}

/// What [`Store::scrub`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubReport {
    /// Shards read back whose checksums matched.
    pub verified: usize,
    /// Shards whose bytes failed the checksum, dropped, sorted.
    pub corrupt: Vec<BlockHash>,
}

/// Why a store operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A shard size of zero bytes.
    #[error("store: shard size must be at least one byte")]
    ZeroShard,
    /// The source or destination is not exactly one shard.
    #[error("block {hash}: wrong length, shard is {expected} bytes, got {got}")]
    WrongLength {
        /// The block.
        hash: BlockHash,
        /// The shard size, in bytes.
        expected: usize,
        /// The length given, in bytes.
        got: usize,
    },
    /// The block already has a shard on this rank.
    #[error("block {hash} is already stored on this rank ({tier} tier)")]
    AlreadyStored {
        /// The block.
        hash: BlockHash,
        /// Where it is.
        tier: Tier,
    },
    /// The block has no shard on this rank.
    #[error("block {hash} is not stored on this rank")]
    UnknownBlock {
        /// The block.
        hash: BlockHash,
    },
    /// The tier is not configured on this rank.
    #[error("{tier} tier is disabled on this rank (capacity 0)")]
    TierDisabled {
        /// The tier.
        tier: Tier,
    },
    /// No free slot: the leader's index believed there was room, so this rank has diverged.
    #[error("{tier} tier has no free slot ({capacity_blocks} blocks): this rank disagrees with the group index")]
    NoFreeSlot {
        /// The tier.
        tier: Tier,
        /// Its capacity, in blocks.
        capacity_blocks: u64,
    },
    /// The bytes read do not match the checksum written; the shard has been dropped.
    #[error("block {hash}: checksum mismatch in {tier} slot {slot} (expected {expected}, read {actual}); shard dropped")]
    ChecksumMismatch {
        /// The block.
        hash: BlockHash,
        /// The tier read.
        tier: Tier,
        /// The slot read.
        slot: SlotId,
        /// The checksum recorded at write time.
        expected: Checksum,
        /// The checksum of the bytes read.
        actual: Checksum,
    },
    /// An engine-buffer request was refused.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// A tier operation failed.
    #[error(transparent)]
    Tier(#[from] TierError),
    /// The manifest could not be written or read.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The rank's tiers are locked by another process; nothing was opened or changed.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// Another process (or a later epoch) owns the rank's tiers now: this store must stop.
    /// Nothing was recorded.
    #[error(transparent)]
    Fenced(#[from] Fenced),
}

/// One rank's store (see the module docs).
#[derive(Debug)]
pub struct Store {
    pub(crate) config: StoreConfig,
    pub(crate) host: Option<HostTier>,
    pub(crate) disk: Option<DiskTier>,
    pub(crate) manifest: Manifest,
    pub(crate) manifest_file: ManifestFile,
    pub(crate) dirty: bool,
    pub(crate) free_host: Vec<SlotId>,
    pub(crate) free_disk: Vec<SlotId>,
    /// One shard of staging for demotions, promotions and verification.
    pub(crate) scratch: Vec<u8>,
    /// Checked before every write to a slot or the manifest.
    pub(crate) fence: Fence,
    /// The rank's lock, when [`Store::open`] took it (held as long as the store lives).
    pub(crate) _lock: Option<TierLock>,
}

impl Store {
    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// This store's write fence (the manifest writer of an agent checks it too).
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// A new epoch begins: the fence moves to it (writes of this store are checked against
    /// it from now on).
    ///
    /// Errors: [`StoreError::Fenced`] when another process owns the tiers now.
    pub fn begin_epoch(&mut self, epoch: u64) -> Result<(), StoreError> {
        Ok(self.fence.advance_epoch(epoch)?)
    }

    /// Runs the disk tier's transfers through `io` from now on (the agent's puts a deadline
    /// on each; see [`crate::disk`]); nothing when the disk tier is disabled.
    pub fn set_disk_io(&mut self, io: Box<dyn DiskIo>) {
        if let Some(disk) = self.disk.as_mut() {
            disk.set_io(io);
        }
    }

    /// The in-memory manifest (what [`Store::flush_manifest`] writes).
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Whether this rank holds a shard of the block.
    pub fn contains(&self, hash: BlockHash) -> bool {
        self.manifest.entries.contains_key(&hash)
    }

    /// Where this rank holds a block's shard.
    pub fn location(&self, hash: BlockHash) -> Option<Location> {
        self.manifest.entries.get(&hash).copied()
    }

    /// Shards held, in blocks.
    pub fn len(&self) -> usize {
        self.manifest.entries.len()
    }

    /// Whether no shard is held.
    pub fn is_empty(&self) -> bool {
        self.manifest.entries.is_empty()
    }

    /// Free slots in a tier, in blocks.
    pub fn free_slots(&self, tier: Tier) -> u64 {
        match tier {
            Tier::Host => self.free_host.len() as u64,
            Tier::Disk => self.free_disk.len() as u64,
            #[allow(unreachable_patterns)]
            _ => 0,
        }
    }

    /// This rank's shards (as the manifest lists them; each is verified when read), for the
    /// leader's rebuild of the group index.
    pub fn rank_blocks(&self) -> RankBlocks {
        RankBlocks {
            rank: self.config.rank,
            blocks: self
                .manifest
                .entries
                .iter()
                .map(|(&h, l)| (h, l.tier))
                .collect(),
        }
    }

    /// Stores one shard given as one slice.
    ///
    /// Errors: as [`Store::store_parts`].
    pub fn store_shard(
        &mut self,
        hash: BlockHash,
        tier: Tier,
        src: &[u8],
    ) -> Result<Location, StoreError> {
        self.store_parts(hash, tier, &[src])
    }

    /// Stores one shard from engine pages (their concatenation, in order).
    ///
    /// Errors: [`StoreError::Buffer`] (unregistered or unmapped region, page out of range,
    /// wrong length), then as [`Store::store_parts`].
    pub fn store_pages(
        &mut self,
        hash: BlockHash,
        tier: Tier,
        buffers: &EngineBuffers,
        region: &str,
        pages: &[PageId],
    ) -> Result<Location, StoreError> {
        let parts = buffers.pages(region, pages, self.config.shard_bytes as u64)?;
        self.store_parts(hash, tier, &parts)
    }

    /// Stores one shard given as parts (concatenated in order) into a free slot of `tier`.
    ///
    /// Errors: [`StoreError::Fenced`], [`StoreError::WrongLength`],
    /// [`StoreError::AlreadyStored`], [`StoreError::TierDisabled`], [`StoreError::NoFreeSlot`]
    /// (all before any write), [`StoreError::Tier`] from the write (the slot is then released),
    /// and [`StoreError::Fenced`] when the fence moved during the write (nothing recorded).
    pub fn store_parts(
        &mut self,
        hash: BlockHash,
        tier: Tier,
        parts: &[&[u8]],
    ) -> Result<Location, StoreError> {
        self.fence.check()?;
        let got: usize = parts.iter().map(|p| p.len()).sum();
        if got != self.config.shard_bytes {
            return Err(StoreError::WrongLength {
                hash,
                expected: self.config.shard_bytes,
                got,
            });
        }
        if let Some(loc) = self.location(hash) {
            return Err(StoreError::AlreadyStored {
                hash,
                tier: loc.tier,
            });
        }
        let slot = self.take_slot(tier)?;
        let written = match self.tier_mut(tier) {
            Some(t) => t.write_slot(slot, parts, hash),
            None => return Err(StoreError::TierDisabled { tier }),
        };
        match written {
            Ok(checksum) => {
                // The bytes are in the slot; whether they count is the fence's to say.
                self.fence.check()?;
                Ok(self.record(
                    hash,
                    Location {
                        tier,
                        slot,
                        checksum,
                    },
                ))
            }
            Err(e) => {
                self.give_slot(tier, slot);
                Err(e.into())
            }
        }
    }

    /// Loads a block's shard into one slice, verifying its checksum.
    ///
    /// Errors: as [`Store::load_parts`].
    pub fn load_shard(&mut self, hash: BlockHash, dst: &mut [u8]) -> Result<Location, StoreError> {
        self.load_parts(hash, &mut [dst])
    }

    /// Loads a block's shard into engine pages (their concatenation, in order).
    ///
    /// Errors: [`StoreError::UnknownBlock`], then [`StoreError::Buffer`] (including a page
    /// named twice), all before any write; then as [`Store::load_parts`].
    pub fn load_pages(
        &mut self,
        hash: BlockHash,
        buffers: &mut EngineBuffers,
        region: &str,
        pages: &[PageId],
    ) -> Result<Location, StoreError> {
        if !self.contains(hash) {
            return Err(StoreError::UnknownBlock { hash });
        }
        let mut parts = buffers.pages_mut(region, pages, self.config.shard_bytes as u64)?;
        self.load_parts(hash, &mut parts)
    }

    /// Loads a block's shard into parts (concatenated in order) and verifies its checksum.
    /// A mismatch drops the shard from this rank (it is never served again).
    ///
    /// Errors: [`StoreError::Fenced`] (a store whose tiers another process owns serves
    /// nothing: its view of them is stale), [`StoreError::UnknownBlock`],
    /// [`StoreError::WrongLength`] (before any write), [`StoreError::ChecksumMismatch`],
    /// [`StoreError::Tier`].
    pub fn load_parts(
        &mut self,
        hash: BlockHash,
        dst: &mut [&mut [u8]],
    ) -> Result<Location, StoreError> {
        self.fence.check()?;
        let loc = self
            .location(hash)
            .ok_or(StoreError::UnknownBlock { hash })?;
        let got: usize = dst.iter().map(|d| d.len()).sum();
        if got != self.config.shard_bytes {
            return Err(StoreError::WrongLength {
                hash,
                expected: self.config.shard_bytes,
                got,
            });
        }
        let actual = match self.tier_mut(loc.tier) {
            Some(t) => t.read_slot(loc.slot, dst, hash)?,
            None => return Err(StoreError::TierDisabled { tier: loc.tier }),
        };
        self.verify(hash, loc, actual)?;
        Ok(loc)
    }

    /// Moves a shard from host to disk (verified on the way).
    ///
    /// Errors: [`StoreError::UnknownBlock`], [`StoreError::TierDisabled`],
    /// [`StoreError::NoFreeSlot`], [`StoreError::ChecksumMismatch`], [`StoreError::Tier`].
    pub fn demote(&mut self, hash: BlockHash) -> Result<Location, StoreError> {
        self.relocate(hash, Tier::Host, Tier::Disk)
    }

    /// Moves a shard from disk to host (verified on the way).
    ///
    /// Errors: as [`Store::demote`].
    pub fn promote(&mut self, hash: BlockHash) -> Result<Location, StoreError> {
        self.relocate(hash, Tier::Disk, Tier::Host)
    }

    /// Forgets a shard and frees its slot; false if it was not held.
    pub fn evict(&mut self, hash: BlockHash) -> bool {
        match self.manifest.entries.remove(&hash) {
            Some(loc) => {
                self.give_slot(loc.tier, loc.slot);
                self.dirty = true;
                true
            }
            None => false,
        }
    }

    /// Applies one tier operation of the leader's. Operations are idempotent: demoting a shard
    /// already on disk, promoting one already on host, or evicting one not held does nothing,
    /// so that a rebuild's operations apply to every rank whatever it held.
    ///
    /// Errors: as [`Store::demote`] and [`Store::promote`].
    pub fn apply(&mut self, op: TierOp) -> Result<(), StoreError> {
        match op {
            TierOp::Demote(h) if self.location(h).is_some_and(|l| l.tier == Tier::Host) => {
                self.demote(h).map(drop)
            }
            TierOp::Promote(h) if self.location(h).is_some_and(|l| l.tier == Tier::Disk) => {
                self.promote(h).map(drop)
            }
            TierOp::Evict(h) => {
                self.evict(h);
                Ok(())
            }
            TierOp::Demote(_) | TierOp::Promote(_) => Ok(()),
        }
    }

    /// Writes the manifest if anything changed since the last flush; true when written.
    ///
    /// Errors: [`StoreError::Fenced`], [`StoreError::Manifest`].
    pub fn flush_manifest(&mut self) -> Result<bool, StoreError> {
        if !self.dirty {
            return Ok(false);
        }
        self.manifest_file
            .save_fenced(&self.manifest, &self.fence)?;
        self.dirty = false;
        Ok(true)
    }

    /// The manifest's name (its first copy; see [`ManifestFile`]).
    pub fn manifest_path(&self) -> &Path {
        self.manifest_file.path()
    }

    /// The manifest's two copies on disk; a clone saves in turn with this store's own saves
    /// (the agent's writer thread saves through one).
    pub fn manifest_file(&self) -> &ManifestFile {
        &self.manifest_file
    }

    fn relocate(&mut self, hash: BlockHash, from: Tier, to: Tier) -> Result<Location, StoreError> {
        self.fence.check()?;
        let loc = self
            .location(hash)
            .filter(|l| l.tier == from)
            .ok_or(StoreError::UnknownBlock { hash })?;
        if self.tier_mut(to).is_none() {
            return Err(StoreError::TierDisabled { tier: to });
        }
        let slot = self.take_slot(to)?;
        let mut scratch = std::mem::take(&mut self.scratch);
        let moved = self.copy_between(hash, loc, to, slot, &mut scratch);
        self.scratch = scratch;
        match moved.and_then(|c| self.fence.check().map(|()| c).map_err(StoreError::from)) {
            Ok(checksum) => {
                self.give_slot(from, loc.slot);
                Ok(self.record(
                    hash,
                    Location {
                        tier: to,
                        slot,
                        checksum,
                    },
                ))
            }
            Err(e) => {
                self.give_slot(to, slot);
                Err(e)
            }
        }
    }

    fn copy_between(
        &mut self,
        hash: BlockHash,
        loc: Location,
        to: Tier,
        slot: SlotId,
        scratch: &mut [u8],
    ) -> Result<Checksum, StoreError> {
        let actual = match self.tier_mut(loc.tier) {
            Some(t) => t.read_slot(loc.slot, &mut [scratch], hash)?,
            None => return Err(StoreError::TierDisabled { tier: loc.tier }),
        };
        self.verify(hash, loc, actual)?;
        match self.tier_mut(to) {
            Some(t) => Ok(t.write_slot(slot, &[scratch], hash)?),
            None => Err(StoreError::TierDisabled { tier: to }),
        }
    }

    /// Compares; on mismatch drops the shard and reports it.
    pub(crate) fn verify(
        &mut self,
        hash: BlockHash,
        loc: Location,
        actual: Checksum,
    ) -> Result<(), StoreError> {
        if actual == loc.checksum {
            return Ok(());
        }
        self.evict(hash);
        Err(StoreError::ChecksumMismatch {
            hash,
            tier: loc.tier,
            slot: loc.slot,
            expected: loc.checksum,
            actual,
        })
    }

    pub(crate) fn record(&mut self, hash: BlockHash, loc: Location) -> Location {
        self.manifest.entries.insert(hash, loc);
        self.dirty = true;
        loc
    }

    pub(crate) fn tier_mut(&mut self, tier: Tier) -> Option<&mut dyn TierSlots> {
        match tier {
            Tier::Host => self.host.as_mut().map(|t| t as &mut dyn TierSlots),
            Tier::Disk => self.disk.as_mut().map(|t| t as &mut dyn TierSlots),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    pub(crate) fn take_slot(&mut self, tier: Tier) -> Result<SlotId, StoreError> {
        let (free, capacity) = match tier {
            Tier::Host if self.host.is_some() => {
                (&mut self.free_host, self.config.host_capacity_blocks)
            }
            Tier::Disk if self.disk.is_some() => {
                (&mut self.free_disk, self.config.disk_capacity_blocks)
            }
            _ => return Err(StoreError::TierDisabled { tier }),
        };
        free.pop().ok_or(StoreError::NoFreeSlot {
            tier,
            capacity_blocks: capacity,
        })
    }

    pub(crate) fn give_slot(&mut self, tier: Tier, slot: SlotId) {
        match tier {
            Tier::Host => self.free_host.push(slot),
            Tier::Disk => self.free_disk.push(slot),
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages() {
        let h = BlockHash(1);
        assert_eq!(
            StoreError::ZeroShard.to_string(),
            "store: shard size must be at least one byte"
        );
        assert_eq!(
            StoreError::WrongLength {
                hash: h,
                expected: 8,
                got: 7
            }
            .to_string(),
            format!("block {h}: wrong length, shard is 8 bytes, got 7")
        );
        assert_eq!(
            StoreError::AlreadyStored {
                hash: h,
                tier: Tier::Disk
            }
            .to_string(),
            format!("block {h} is already stored on this rank (disk tier)")
        );
        assert_eq!(
            StoreError::UnknownBlock { hash: h }.to_string(),
            format!("block {h} is not stored on this rank")
        );
        assert_eq!(
            StoreError::TierDisabled { tier: Tier::Disk }.to_string(),
            "disk tier is disabled on this rank (capacity 0)"
        );
        assert_eq!(
            StoreError::NoFreeSlot {
                tier: Tier::Host,
                capacity_blocks: 4
            }
            .to_string(),
            "host tier has no free slot (4 blocks): this rank disagrees with the group index"
        );
        let e = StoreError::ChecksumMismatch {
            hash: h,
            tier: Tier::Host,
            slot: 3,
            expected: Checksum([1, 2, 3]),
            actual: Checksum([1, 2, 4]),
        };
        assert_eq!(
            e.to_string(),
            format!("block {h}: checksum mismatch in host slot 3 (expected 00000001-00000002-00000003, read 00000001-00000002-00000004); shard dropped")
        );
        let e: StoreError = BufferError::Unregistered { name: "r".into() }.into();
        assert_eq!(e.to_string(), "engine region r is not registered");
    }
}
