//! The host tier: a preallocated slab of fixed-size slots in file-backed shared memory.
//!
//! Owns [`HostTier`]. The slab is one file of `capacity × slot_bytes` bytes, by default
//! `/dev/shm/tandem-<group>-<rank>/host.slab` (the directory comes from the configuration).
//! Because it is a file on tmpfs and not anonymous memory, a restarted agent process maps the
//! same bytes again and, with its manifest, finds its blocks (the checksums say which ones are
//! still good). A machine reboot empties /dev/shm, and the blocks are then simply gone.
//! It must never decide which slot holds which block: the store does.

use std::path::{Path, PathBuf};

use crate::block::{BlockHash, SlotId};
use crate::checksum::{copy_parts, Checksum, ShardHasher};
use crate::shm::{FileOrigin, ShmError, ShmFile};
use crate::tier::{check_slot, Tier, TierError, TierSlots};

/// The file name of the slab inside the host directory.
pub const HOST_SLAB_FILE: &str = "host.slab";

/// Preallocated host-memory slots in one shared-memory file.
#[derive(Debug)]
pub struct HostTier {
    slab: ShmFile,
    slot_bytes: usize,
    capacity: u64,
}

impl HostTier {
    /// Maps (creating if needed) the slab at `path` for `capacity` slots of `slot_bytes`. An
    /// existing slab of exactly that size keeps its bytes ([`FileOrigin::Reused`]); any other
    /// size starts from zeros ([`FileOrigin::Fresh`]).
    ///
    /// Errors: [`TierError::InvalidGeometry`] (zero sizes or overflow), [`TierError::Io`].
    pub fn open(
        path: &Path,
        slot_bytes: usize,
        capacity: u64,
    ) -> Result<(HostTier, FileOrigin), TierError> {
        let size = (slot_bytes as u64)
            .checked_mul(capacity)
            .filter(|&s| s > 0 && usize::try_from(s).is_ok())
            .ok_or(TierError::InvalidGeometry {
                tier: Tier::Host,
                slot_bytes,
                capacity,
            })?;
        let (slab, origin) = ShmFile::open_or_create(path, size).map_err(|e| shm_error(path, e))?;
        // The slab's pages are reserved already; mapping them now keeps a first-touch fault
        // per 4 KiB page off every first store into a slot.
        slab.populate();
        Ok((
            HostTier {
                slab,
                slot_bytes,
                capacity,
            },
            origin,
        ))
    }

    /// The slab file.
    pub fn path(&self) -> &Path {
        self.slab.path()
    }

    /// The whole slab (slot `s` at `s × slot_bytes`), for batched copies (`crate::batch`).
    pub(crate) fn slab(&self) -> &[u8] {
        self.slab.bytes()
    }

    /// The whole slab, writable, for batched copies (`crate::batch`).
    pub(crate) fn slab_mut(&mut self) -> &mut [u8] {
        self.slab.bytes_mut()
    }

    fn range(&self, slot: SlotId) -> std::ops::Range<usize> {
        let start = slot as usize * self.slot_bytes;
        start..start + self.slot_bytes
    }
}

impl TierSlots for HostTier {
    fn kind(&self) -> Tier {
        Tier::Host
    }

    fn capacity_slots(&self) -> u64 {
        self.capacity
    }

    fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    fn write_slot(
        &mut self,
        slot: SlotId,
        src: &[&[u8]],
        seed: BlockHash,
    ) -> Result<Checksum, TierError> {
        let total = src.iter().map(|s| s.len()).sum();
        check_slot(Tier::Host, slot, self.capacity, self.slot_bytes, total)?;
        let range = self.range(slot);
        let mut hasher = ShardHasher::new(seed);
        copy_parts(&mut [&mut self.slab.bytes_mut()[range]], src, &mut hasher);
        Ok(hasher.finish())
    }

    fn read_slot(
        &mut self,
        slot: SlotId,
        dst: &mut [&mut [u8]],
        seed: BlockHash,
    ) -> Result<Checksum, TierError> {
        let total = dst.iter().map(|d| d.len()).sum();
        check_slot(Tier::Host, slot, self.capacity, self.slot_bytes, total)?;
        let range = self.range(slot);
        let mut hasher = ShardHasher::new(seed);
        copy_parts(dst, &[&self.slab.bytes()[range]], &mut hasher);
        Ok(hasher.finish())
    }

    fn read_range(&mut self, slot: SlotId, offset: usize, dst: &mut [u8]) -> Result<(), TierError> {
        check_slot(
            Tier::Host,
            slot,
            self.capacity,
            self.slot_bytes,
            self.slot_bytes,
        )?;
        crate::tier::check_range(Tier::Host, offset, dst.len(), self.slot_bytes)?;
        let start = self.range(slot).start + offset;
        dst.copy_from_slice(&self.slab.bytes()[start..start + dst.len()]);
        Ok(())
    }
}

fn shm_error(path: &Path, e: ShmError) -> TierError {
    let (op, source) = match e {
        ShmError::Io { op, source, .. } => (op, source),
        other => (
            "map",
            std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
        ),
    };
    TierError::Io {
        tier: Tier::Host,
        op,
        path: PathBuf::from(path),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::checksum;

    #[test]
    fn round_trip_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(HOST_SLAB_FILE);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 13) as u8).collect();
        let (mut host, origin) = HostTier::open(&path, 1000, 3).unwrap();
        assert_eq!(origin, FileOrigin::Fresh);
        let sum = host
            .write_slot(2, &[&data[..100], &data[100..]], BlockHash(1))
            .unwrap();
        assert_eq!(sum, checksum(BlockHash(1), &data));
        drop(host);
        let (mut host, origin) = HostTier::open(&path, 1000, 3).unwrap();
        assert_eq!(origin, FileOrigin::Reused);
        let mut out = vec![0u8; 1000];
        let read = host
            .read_slot(2, &mut [&mut out[..]], BlockHash(1))
            .unwrap();
        assert_eq!(read, sum);
        assert_eq!(out, data);
    }

    #[test]
    fn rejects_bad_slot_length_and_geometry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(HOST_SLAB_FILE);
        let (mut host, _) = HostTier::open(&path, 64, 2).unwrap();
        assert!(matches!(
            host.write_slot(2, &[&[0u8; 64]], BlockHash(0)),
            Err(TierError::SlotOutOfRange { .. })
        ));
        assert!(matches!(
            host.write_slot(0, &[&[0u8; 63]], BlockHash(0)),
            Err(TierError::WrongLength { .. })
        ));
        assert!(host.path().ends_with(HOST_SLAB_FILE));
        assert!(matches!(
            HostTier::open(&path, 0, 2),
            Err(TierError::InvalidGeometry { .. })
        ));
        assert!(matches!(
            HostTier::open(&path, 64, 0),
            Err(TierError::InvalidGeometry { .. })
        ));
    }
}
