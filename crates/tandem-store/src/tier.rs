//! Storage tiers: the one trait every tier implements.
//!
//! Owns the [`TierSlots`] trait (fixed-size slots written from and read into byte slices, with
//! the checksum computed in the same pass) and [`TierError`]. The tier names, with their
//! latency and capacity, are defined once in the protocol core ([`Tier`], re-exported here).
//! It must never decide which block goes where: placement belongs to the group index
//! (`tandem-core`), slot bookkeeping to the per-rank store.

use std::path::PathBuf;

use crate::block::{BlockHash, SlotId};
use crate::checksum::Checksum;

/// The name of a storage tier, defined once in the protocol core.
pub use tandem_proto::ids::Tier;

/// Why a tier refused or failed a slot operation.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    /// The slot index is not below the tier's capacity.
    #[error("{tier} tier: slot {slot} out of range (capacity {capacity} slots)")]
    SlotOutOfRange {
        /// The tier.
        tier: Tier,
        /// The slot asked for.
        slot: SlotId,
        /// The capacity in slots.
        capacity: u64,
    },
    /// The source or destination parts do not add up to one slot.
    #[error("{tier} tier: wrong length, slot holds {expected} bytes, got {got} bytes")]
    WrongLength {
        /// The tier.
        tier: Tier,
        /// The slot size in bytes.
        expected: usize,
        /// The total length of the parts given, in bytes.
        got: usize,
    },
    /// The geometry asked for is unusable (zero-sized slots, or a size that overflows).
    #[error("{tier} tier: invalid geometry, {slot_bytes} bytes per slot × {capacity} slots")]
    InvalidGeometry {
        /// The tier.
        tier: Tier,
        /// The slot size asked for, in bytes.
        slot_bytes: usize,
        /// The capacity asked for, in slots.
        capacity: u64,
    },
    /// The file system refused O_DIRECT on this file.
    #[error("disk tier: O_DIRECT is not supported for {path}: {source}")]
    DirectUnsupported {
        /// The tier file.
        path: PathBuf,
        /// The error from `open(2)`.
        source: std::io::Error,
    },
    /// An I/O call on the tier's backing file failed.
    #[error("{tier} tier: {op} {path} failed: {source}")]
    Io {
        /// The tier.
        tier: Tier,
        /// What was being done (`open`, `allocate`, `read`, `write`, `map`).
        op: &'static str,
        /// The backing file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A disk transfer did not end within the deadline of the I/O it ran through
    /// ([`crate::disk::DiskIo`]); it may still be in flight, and the tier takes nothing until
    /// it ends.
    #[error("disk tier: {op} of slot {slot} missed its deadline of {deadline_ms} ms")]
    DiskDeadline {
        /// `read` or `write`.
        op: &'static str,
        /// The slot.
        slot: SlotId,
        /// The deadline, in ms.
        deadline_ms: u64,
    },
    /// An earlier disk transfer missed its deadline and has not ended: this operation was not
    /// started (the disk tier is degraded until that transfer ends).
    #[error("disk tier: {op} of slot {slot} not started: an earlier {earlier_op} of slot {earlier_slot} missed its deadline of {deadline_ms} ms and is still in flight")]
    DiskStalled {
        /// `read` or `write`: the operation refused.
        op: &'static str,
        /// Its slot.
        slot: SlotId,
        /// The overdue operation.
        earlier_op: &'static str,
        /// Its slot.
        earlier_slot: SlotId,
        /// The deadline it missed, in ms.
        deadline_ms: u64,
    },
    /// The device-memory tier failed (feature `cuda`).
    #[error("device tier: {0}")]
    Device(String),
}

/// A tier of fixed-size slots, each holding one block shard of `slot_bytes()` bytes.
///
/// Writes and reads take the shard as a list of parts (engine pages, or one slice) whose
/// lengths add up to exactly one slot; the checksum of the bytes is computed in the same pass
/// as the copy (see [`crate::checksum`]), seeded with the block hash.
pub trait TierSlots {
    /// Which tier this is.
    fn kind(&self) -> Tier;
    /// Capacity in slots (one block shard per slot).
    fn capacity_slots(&self) -> u64;
    /// Size of one slot in bytes (the shard size).
    fn slot_bytes(&self) -> usize;
    /// Copies the concatenation of `src` into `slot` and returns its checksum seeded with `seed`.
    ///
    /// Errors: [`TierError::SlotOutOfRange`], [`TierError::WrongLength`] (checked before any
    /// byte is written), [`TierError::Io`] or [`TierError::Device`] from the backing store.
    fn write_slot(
        &mut self,
        slot: SlotId,
        src: &[&[u8]],
        seed: BlockHash,
    ) -> Result<Checksum, TierError>;
    /// Copies `slot` into the concatenation of `dst` and returns the checksum of the bytes read,
    /// seeded with `seed`. The caller compares it with the checksum recorded at write time.
    ///
    /// Errors: as [`TierSlots::write_slot`]; on an I/O error `dst` holds unspecified bytes.
    fn read_slot(
        &mut self,
        slot: SlotId,
        dst: &mut [&mut [u8]],
        seed: BlockHash,
    ) -> Result<Checksum, TierError>;
    /// Copies bytes `offset .. offset + dst.len()` of `slot` into `dst`, unverified (a
    /// layerwise load reads one layer of a shard at a time and verifies the whole shard's
    /// checksum with its last layer). The default reads the whole slot and keeps the range; a
    /// tier that can read a range directly overrides it.
    ///
    /// Errors: [`TierError::SlotOutOfRange`], [`TierError::WrongLength`] when the range runs
    /// past the slot, and the errors of [`TierSlots::read_slot`].
    fn read_range(&mut self, slot: SlotId, offset: usize, dst: &mut [u8]) -> Result<(), TierError> {
        let slot_bytes = self.slot_bytes();
        check_range(self.kind(), offset, dst.len(), slot_bytes)?;
        let mut whole = vec![0u8; slot_bytes];
        self.read_slot(slot, &mut [&mut whole[..]], BlockHash(0))?;
        dst.copy_from_slice(&whole[offset..offset + dst.len()]);
        Ok(())
    }
}

/// Checks that `offset .. offset + len` lies inside a slot of `slot_bytes` bytes.
pub(crate) fn check_range(
    tier: Tier,
    offset: usize,
    len: usize,
    slot_bytes: usize,
) -> Result<(), TierError> {
    if offset.checked_add(len).is_none_or(|end| end > slot_bytes) {
        return Err(TierError::WrongLength {
            tier,
            expected: slot_bytes,
            got: offset.saturating_add(len),
        });
    }
    Ok(())
}

/// Checks `slot` against `capacity` and the total length of `lens` against `slot_bytes`; the
/// shared precondition of every [`TierSlots`] operation.
pub(crate) fn check_slot(
    tier: Tier,
    slot: SlotId,
    capacity: u64,
    slot_bytes: usize,
    total_len: usize,
) -> Result<(), TierError> {
    if slot >= capacity {
        return Err(TierError::SlotOutOfRange {
            tier,
            slot,
            capacity,
        });
    }
    if total_len != slot_bytes {
        return Err(TierError::WrongLength {
            tier,
            expected: slot_bytes,
            got: total_len,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages() {
        let e = TierError::SlotOutOfRange {
            tier: Tier::Host,
            slot: 9,
            capacity: 8,
        };
        assert_eq!(
            e.to_string(),
            "host tier: slot 9 out of range (capacity 8 slots)"
        );
        let e = TierError::WrongLength {
            tier: Tier::Disk,
            expected: 4096,
            got: 100,
        };
        assert_eq!(
            e.to_string(),
            "disk tier: wrong length, slot holds 4096 bytes, got 100 bytes"
        );
        let e = TierError::InvalidGeometry {
            tier: Tier::Host,
            slot_bytes: 0,
            capacity: 4,
        };
        assert_eq!(
            e.to_string(),
            "host tier: invalid geometry, 0 bytes per slot × 4 slots"
        );
        let e = TierError::DirectUnsupported {
            path: "/x".into(),
            source: std::io::Error::from_raw_os_error(22),
        };
        assert!(e
            .to_string()
            .starts_with("disk tier: O_DIRECT is not supported for /x: "));
        let e = TierError::Io {
            tier: Tier::Disk,
            op: "read",
            path: "/d".into(),
            source: std::io::Error::other("boom"),
        };
        assert_eq!(e.to_string(), "disk tier: read /d failed: boom");
        assert_eq!(
            TierError::Device("no".into()).to_string(),
            "device tier: no"
        );
    }

    #[test]
    fn check_slot_rejects_out_of_range_then_length() {
        assert!(check_slot(Tier::Host, 0, 1, 8, 8).is_ok());
        assert!(matches!(
            check_slot(Tier::Host, 1, 1, 8, 8),
            Err(TierError::SlotOutOfRange { slot: 1, .. })
        ));
        assert!(matches!(
            check_slot(Tier::Host, 0, 1, 8, 7),
            Err(TierError::WrongLength { got: 7, .. })
        ));
    }
}
