//! The engine's KV cache in GPU memory on this rank: the `RegisterDevice` engine request.
//!
//! Owns [`EngineDevice`] (the device region the engine registered, if any) and
//! [`DeviceRefusal`] (why a registration was refused). With the `cuda` feature a registration
//! opens a `tandem_store::device_region::DeviceRegion` from the engine's IPC handle and keeps
//! it; without it every registration is refused with [`DeviceRefusal::NotBuilt`]. It never
//! copies: the copies between device pages and tier slots are not wired yet, so the
//! StoreActor refuses the stores and loads of a rank that holds a device region. It is
//! driven by the StoreActor only.

use tandem_client::api::AgentError;

/// Bytes of a CUDA IPC memory handle (`cudaIpcMemHandle_t`).
pub const IPC_HANDLE_BYTES: usize = 64;

/// Why a `RegisterDevice` was refused; nothing was registered. Sent to the engine as
/// [`AgentError::Buffer`] with this text.
#[derive(Debug, thiserror::Error)]
pub enum DeviceRefusal {
    /// This agent binary has no device code.
    #[error("register_device: this agent was built without the cuda feature (cargo build -p tandem-cli --features cuda)")]
    NotBuilt,
    /// The handle is not [`IPC_HANDLE_BYTES`] long.
    #[error("register_device: a CUDA IPC handle is {IPC_HANDLE_BYTES} bytes, got {len}")]
    HandleLength {
        /// Bytes given.
        len: usize,
    },
    /// The page size is not this group's block-shard size.
    #[error("register_device: page size {page_bytes} bytes differs from the block shard size {shard_bytes} bytes")]
    ShardSize {
        /// Bytes of one page, as asked.
        page_bytes: u64,
        /// Bytes of one block shard.
        shard_bytes: u64,
    },
    /// The device region could not be opened (no CUDA driver library, a driver error, sizes
    /// that overflow).
    #[cfg(feature = "cuda")]
    #[error("register_device: {0}")]
    Device(#[from] tandem_store::cuda::DeviceError),
}

impl From<DeviceRefusal> for AgentError {
    fn from(e: DeviceRefusal) -> AgentError {
        AgentError::Buffer {
            reason: e.to_string(),
        }
    }
}

/// The device region an engine registered on this rank (none until a registration succeeds).
#[derive(Debug, Default)]
pub struct EngineDevice {
    #[cfg(feature = "cuda")]
    region: Option<tandem_store::device_region::DeviceRegion>,
}

impl EngineDevice {
    /// No region.
    pub fn new() -> EngineDevice {
        EngineDevice::default()
    }

    /// Whether a device region is registered.
    pub fn registered(&self) -> bool {
        #[cfg(feature = "cuda")]
        {
            self.region.is_some()
        }
        #[cfg(not(feature = "cuda"))]
        {
            false
        }
    }

    /// Forget the region (closes this process's mapping; the engine's memory stays).
    pub fn clear(&mut self) {
        #[cfg(feature = "cuda")]
        {
            self.region = None;
        }
    }

    /// Open `pages` pages of `page_bytes` bytes behind `handle` on GPU `ordinal`, replacing
    /// the region held only when it opens. Returns the pages registered.
    ///
    /// Errors: [`DeviceRefusal::NotBuilt`] without the `cuda` feature (checked first), then
    /// [`DeviceRefusal::HandleLength`], [`DeviceRefusal::ShardSize`] (`page_bytes` ≠
    /// `shard_bytes`), and with `cuda` `DeviceRefusal::Device` (libcuda missing, driver
    /// error, overflowing sizes).
    pub fn register(
        &mut self,
        ordinal: u32,
        handle: &[u8],
        pages: u64,
        page_bytes: u64,
        shard_bytes: u64,
    ) -> Result<u64, DeviceRefusal> {
        if !cfg!(feature = "cuda") {
            return Err(DeviceRefusal::NotBuilt);
        }
        if handle.len() != IPC_HANDLE_BYTES {
            return Err(DeviceRefusal::HandleLength { len: handle.len() });
        }
        if page_bytes != shard_bytes {
            return Err(DeviceRefusal::ShardSize {
                page_bytes,
                shard_bytes,
            });
        }
        self.open(ordinal, handle, pages, page_bytes)
    }

    #[cfg(feature = "cuda")]
    fn open(
        &mut self,
        ordinal: u32,
        handle: &[u8],
        pages: u64,
        page_bytes: u64,
    ) -> Result<u64, DeviceRefusal> {
        use tandem_store::cuda::DeviceError;
        let page_bytes = usize::try_from(page_bytes).map_err(|_| DeviceError::InvalidGeometry {
            slot_bytes: usize::MAX,
            capacity: pages,
        })?;
        let region = tandem_store::device_region::DeviceRegion::open(
            ordinal as usize,
            handle,
            pages,
            page_bytes,
        )?;
        self.region = Some(region);
        Ok(pages)
    }

    #[cfg(not(feature = "cuda"))]
    fn open(&mut self, _: u32, _: &[u8], _: u64, _: u64) -> Result<u64, DeviceRefusal> {
        Err(DeviceRefusal::NotBuilt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_their_cause() {
        let mut d = EngineDevice::new();
        let got = d.register(0, &[0; IPC_HANDLE_BYTES], 4, 4096, 4096);
        let got = got.expect_err("no GPU here, or no cuda feature");
        if cfg!(feature = "cuda") {
            assert!(!matches!(got, DeviceRefusal::NotBuilt), "{got}");
        } else {
            assert!(matches!(got, DeviceRefusal::NotBuilt), "{got}");
            assert!(got.to_string().contains("built without the cuda feature"));
        }
        assert!(!d.registered());
        assert_eq!(
            DeviceRefusal::HandleLength { len: 3 }.to_string(),
            "register_device: a CUDA IPC handle is 64 bytes, got 3"
        );
        assert_eq!(
            AgentError::from(DeviceRefusal::ShardSize {
                page_bytes: 1,
                shard_bytes: 2
            })
            .to_string(),
            "buffer refused: register_device: page size 1 bytes differs from the block shard size 2 bytes"
        );
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn with_cuda_the_cheap_checks_come_before_the_driver() {
        let mut d = EngineDevice::new();
        assert!(matches!(
            d.register(0, &[0; 3], 4, 4096, 4096),
            Err(DeviceRefusal::HandleLength { len: 3 })
        ));
        assert!(matches!(
            d.register(0, &[0; IPC_HANDLE_BYTES], 4, 4096, 8192),
            Err(DeviceRefusal::ShardSize { .. })
        ));
    }
}
