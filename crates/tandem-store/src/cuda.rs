//! The device tier (feature `cuda`): slots in GPU memory behind the same [`Tier`] interface.
//!
//! Owns [`DeviceTier`] and [`DeviceError`]. One device allocation of `capacity × slot_bytes`
//! holds the slots; writes gather the parts into a host staging buffer (checksumming in the
//! same pass) and copy it to the device, reads copy to staging and scatter out with the
//! checksum. cudarc is built with dynamic loading, so this compiles with no CUDA installed;
//! [`DeviceTier::new`] checks that libcuda can be loaded before calling into cudarc (which
//! panics otherwise) and returns [`DeviceError::LibraryMissing`]. It must never be used
//! without that check, and never decides placement.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};

use crate::block::{BlockHash, SlotId};
use crate::checksum::{copy_parts, Checksum, ShardHasher};
use crate::tier::{check_slot, Tier, TierError, TierSlots};

/// Why the device tier could not start or copy.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// libcuda (the CUDA driver library) cannot be loaded on this machine.
    #[error("device tier: the CUDA driver library (libcuda) is not available on this machine")]
    LibraryMissing,
    /// Zero-sized slots, no slots, or a size that overflows.
    #[error("device tier: invalid geometry, {slot_bytes} bytes per slot × {capacity} slots")]
    InvalidGeometry {
        /// Slot size asked for, in bytes.
        slot_bytes: usize,
        /// Capacity asked for, in slots.
        capacity: u64,
    },
    /// An engine's IPC memory handle that is not the 64 bytes CUDA makes.
    #[error("device region: a CUDA IPC handle is 64 bytes, got {len}")]
    BadHandle {
        /// Bytes given.
        len: usize,
    },
    /// A page past the engine's region, or a host slice that is not one page long.
    #[error(
        "device region: page {page} of {pages} with {len} bytes (pages are {page_bytes} bytes)"
    )]
    PageOutOfRange {
        /// The page asked for.
        page: u64,
        /// Pages in the region.
        pages: u64,
        /// Bytes of the host slice given.
        len: usize,
        /// Bytes of one page.
        page_bytes: usize,
    },
    /// A CUDA driver call failed.
    #[error("device tier: CUDA driver error during {op}: {message}")]
    Driver {
        /// What was being done.
        op: &'static str,
        /// The driver's message.
        message: String,
    },
}

/// Whether libcuda can be loaded here (the check cudarc needs before any call).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library names; it does not call into the library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Slots in the memory of one GPU.
pub struct DeviceTier {
    _ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    slots: CudaSlice<u8>,
    slot_bytes: usize,
    capacity: u64,
    staging: Vec<u8>,
}

impl std::fmt::Debug for DeviceTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceTier")
            .field("slot_bytes", &self.slot_bytes)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl DeviceTier {
    /// Allocates `capacity` slots of `slot_bytes` on GPU `ordinal`.
    ///
    /// Errors: [`DeviceError::LibraryMissing`] (checked first), [`DeviceError::InvalidGeometry`],
    /// [`DeviceError::Driver`] (no such device, out of memory).
    pub fn new(
        ordinal: usize,
        slot_bytes: usize,
        capacity: u64,
    ) -> Result<DeviceTier, DeviceError> {
        if !driver_present() {
            return Err(DeviceError::LibraryMissing);
        }
        let total = (slot_bytes as u64)
            .checked_mul(capacity)
            .filter(|&t| t > 0)
            .and_then(|t| usize::try_from(t).ok())
            .ok_or(DeviceError::InvalidGeometry {
                slot_bytes,
                capacity,
            })?;
        let ctx = CudaContext::new(ordinal).map_err(driver("open context"))?;
        let stream = ctx.default_stream();
        let slots = stream
            .alloc_zeros::<u8>(total)
            .map_err(driver("allocate"))?;
        Ok(DeviceTier {
            _ctx: ctx,
            stream,
            slots,
            slot_bytes,
            capacity,
            staging: vec![0; slot_bytes],
        })
    }

    fn range(&self, slot: SlotId) -> std::ops::Range<usize> {
        let start = slot as usize * self.slot_bytes;
        start..start + self.slot_bytes
    }
}

fn driver(op: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> DeviceError {
    move |e| DeviceError::Driver {
        op,
        message: format!("{e:?}"),
    }
}

fn tier_error(e: DeviceError) -> TierError {
    TierError::Device(e.to_string())
}

impl TierSlots for DeviceTier {
    fn kind(&self) -> Tier {
        Tier::Device
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
        check_slot(Tier::Device, slot, self.capacity, self.slot_bytes, total)?;
        let mut hasher = ShardHasher::new(seed);
        copy_parts(&mut [&mut self.staging[..]], src, &mut hasher);
        let range = self.range(slot);
        let mut view = self.slots.slice_mut(range);
        self.stream
            .memcpy_htod(&self.staging[..], &mut view)
            .map_err(|e| tier_error(driver("copy to device")(e)))?;
        self.stream
            .synchronize()
            .map_err(|e| tier_error(driver("synchronize")(e)))?;
        Ok(hasher.finish())
    }

    fn read_slot(
        &mut self,
        slot: SlotId,
        dst: &mut [&mut [u8]],
        seed: BlockHash,
    ) -> Result<Checksum, TierError> {
        let total = dst.iter().map(|d| d.len()).sum();
        check_slot(Tier::Device, slot, self.capacity, self.slot_bytes, total)?;
        let range = self.range(slot);
        let view = self.slots.slice(range);
        self.stream
            .memcpy_dtoh(&view, &mut self.staging[..])
            .map_err(|e| tier_error(driver("copy to host")(e)))?;
        self.stream
            .synchronize()
            .map_err(|e| tier_error(driver("synchronize")(e)))?;
        let mut hasher = ShardHasher::new(seed);
        copy_parts(dst, &[&self.staging[..]], &mut hasher);
        Ok(hasher.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages() {
        assert_eq!(
            DeviceError::LibraryMissing.to_string(),
            "device tier: the CUDA driver library (libcuda) is not available on this machine"
        );
        assert_eq!(
            DeviceError::InvalidGeometry {
                slot_bytes: 0,
                capacity: 1
            }
            .to_string(),
            "device tier: invalid geometry, 0 bytes per slot × 1 slots"
        );
        let e = DeviceError::Driver {
            op: "allocate",
            message: "OUT_OF_MEMORY".into(),
        };
        assert_eq!(
            e.to_string(),
            "device tier: CUDA driver error during allocate: OUT_OF_MEMORY"
        );
        assert_eq!(Tier::Device.to_string(), "device");
    }

    #[test]
    fn constructor_reports_a_missing_driver_or_round_trips() {
        match DeviceTier::new(0, 4096, 2) {
            Err(DeviceError::LibraryMissing) => assert!(!driver_present()),
            Err(e) => {
                // libcuda loads but there is no usable device: still a typed error.
                assert!(matches!(e, DeviceError::Driver { .. }), "{e}");
            }
            Ok(mut tier) => {
                let data: Vec<u8> = (0..4096u32).map(|i| (i * 3) as u8).collect();
                let sum = tier
                    .write_slot(1, &[&data[..1000], &data[1000..]], BlockHash(5))
                    .unwrap();
                let mut out = vec![0u8; 4096];
                assert_eq!(
                    tier.read_slot(1, &mut [&mut out[..]], BlockHash(5))
                        .unwrap(),
                    sum
                );
                assert_eq!(out, data);
            }
        }
    }
}
