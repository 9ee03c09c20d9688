//! An engine's KV cache in GPU memory, opened from a CUDA IPC handle (feature `cuda`).
//!
//! Owns [`DeviceRegion`]: the engine's device allocation mapped into this process with
//! `cuIpcOpenMemHandle`, seen as `pages` pages of `page_bytes` bytes (page `i` at byte
//! `i × page_bytes` of the allocation: one page one contiguous block shard, as SGLang's
//! `page_unified` host layout). Its copies go straight between a device page and a host slice
//! the caller owns (a host-tier slot, a disk buffer): one `cuMemcpyDtoH` / `cuMemcpyHtoD` each,
//! no staging copy. Like [`crate::cuda::DeviceTier`], every entry point first checks that libcuda
//! can be loaded and returns [`DeviceError::LibraryMissing`] otherwise (cudarc panics without
//! it). It never decides what to copy, never checksums (the tier the bytes land in does) and
//! never frees the engine's memory: dropping it only closes this process's mapping.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext};

use crate::cuda::{driver_present, DeviceError};

/// Bytes of a CUDA IPC memory handle (`cudaIpcMemHandle_t`).
pub const IPC_HANDLE_BYTES: usize = 64;

/// An engine's device pages, mapped from its IPC handle. See the module docs.
pub struct DeviceRegion {
    ctx: Arc<CudaContext>,
    base: sys::CUdeviceptr,
    pages: u64,
    page_bytes: usize,
}

impl std::fmt::Debug for DeviceRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceRegion")
            .field("ordinal", &self.ctx.ordinal())
            .field("pages", &self.pages)
            .field("page_bytes", &self.page_bytes)
            .finish()
    }
}

impl DeviceRegion {
    /// Maps the allocation behind `handle` (the [`IPC_HANDLE_BYTES`] bytes the engine's
    /// `cudaIpcGetMemHandle` gave) on GPU `ordinal`, as `pages` pages of `page_bytes`.
    ///
    /// Errors: [`DeviceError::LibraryMissing`] (checked first), [`DeviceError::BadHandle`] (not
    /// 64 bytes), [`DeviceError::InvalidGeometry`] (zero or overflowing sizes),
    /// [`DeviceError::Driver`] (no such device; a handle this process exported itself, or one
    /// whose allocation was freed).
    pub fn open(
        ordinal: usize,
        handle: &[u8],
        pages: u64,
        page_bytes: usize,
    ) -> Result<DeviceRegion, DeviceError> {
        if !driver_present() {
            return Err(DeviceError::LibraryMissing);
        }
        let raw: [u8; IPC_HANDLE_BYTES] = handle
            .try_into()
            .map_err(|_| DeviceError::BadHandle { len: handle.len() })?;
        (page_bytes as u64)
            .checked_mul(pages)
            .filter(|&t| t > 0)
            .and_then(|t| usize::try_from(t).ok())
            .ok_or(DeviceError::InvalidGeometry {
                slot_bytes: page_bytes,
                capacity: pages,
            })?;
        let ctx = CudaContext::new(ordinal).map_err(driver("open context"))?;
        ctx.bind_to_thread().map_err(driver("bind context"))?;
        let handle = sys::CUipcMemHandle_st {
            reserved: raw.map(|b| b as core::ffi::c_char),
        };
        let mut base: sys::CUdeviceptr = 0;
        let flags = sys::CUipcMem_flags_enum::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: libcuda is present (checked above), the context is current on this thread,
        // and `base` is a valid place for the driver to write the mapped address.
        unsafe { sys::cuIpcOpenMemHandle_v2(&mut base, handle, flags) }
            .result()
            .map_err(driver("open IPC handle"))?;
        Ok(DeviceRegion {
            ctx,
            base,
            pages,
            page_bytes,
        })
    }

    /// Pages in the region.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Bytes of one page (one block shard).
    pub fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    fn page_ptr(&self, page: u64, len: usize) -> Result<sys::CUdeviceptr, DeviceError> {
        if page >= self.pages || len != self.page_bytes {
            return Err(DeviceError::PageOutOfRange {
                page,
                pages: self.pages,
                len,
                page_bytes: self.page_bytes,
            });
        }
        Ok(self.base + page * self.page_bytes as u64)
    }

    /// Copies device page `page` into `dst` (exactly one page of bytes), synchronously.
    ///
    /// Errors: [`DeviceError::PageOutOfRange`], [`DeviceError::Driver`].
    pub fn read_page(&self, page: u64, dst: &mut [u8]) -> Result<(), DeviceError> {
        let src = self.page_ptr(page, dst.len())?;
        self.ctx.bind_to_thread().map_err(driver("bind context"))?;
        // SAFETY: `src` lies within the mapped allocation (checked) and `dst` is a host slice
        // of the same length; the copy is synchronous, so `dst` outlives it.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(dst, src) }
            .map_err(driver("copy page to host"))
    }

    /// Copies `src` (exactly one page of bytes) into device page `page`, synchronously.
    ///
    /// Errors: [`DeviceError::PageOutOfRange`], [`DeviceError::Driver`].
    pub fn write_page(&self, page: u64, src: &[u8]) -> Result<(), DeviceError> {
        let dst = self.page_ptr(page, src.len())?;
        self.ctx.bind_to_thread().map_err(driver("bind context"))?;
        // SAFETY: as in `read_page`, with the directions swapped.
        unsafe { cudarc::driver::result::memcpy_htod_sync(dst, src) }
            .map_err(driver("copy page to device"))
    }
}

impl Drop for DeviceRegion {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `base` came from cuIpcOpenMemHandle in this context and is closed once.
            let _ = unsafe { sys::cuIpcCloseMemHandle(self.base) };
        }
    }
}

fn driver(op: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> DeviceError {
    move |e| DeviceError::Driver {
        op,
        message: format!("{e:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_libcuda_every_open_is_library_missing() {
        let cases: [(&[u8], u64, usize); 3] = [
            (&[0; IPC_HANDLE_BYTES], 4, 4096),
            (&[0; 3], 4, 4096), // a bad handle too: the library is checked first
            (&[0; IPC_HANDLE_BYTES], 0, 0),
        ];
        for (handle, pages, page_bytes) in cases {
            let got = DeviceRegion::open(0, handle, pages, page_bytes);
            if driver_present() {
                // A machine with libcuda: the handle names no allocation of another process.
                assert!(got.is_err(), "{got:?}");
            } else {
                assert!(matches!(got, Err(DeviceError::LibraryMissing)), "{got:?}");
            }
        }
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            DeviceError::BadHandle { len: 3 }.to_string(),
            "device region: a CUDA IPC handle is 64 bytes, got 3"
        );
        assert_eq!(
            DeviceError::PageOutOfRange {
                page: 9,
                pages: 4,
                len: 10,
                page_bytes: 4096
            }
            .to_string(),
            "device region: page 9 of 4 with 10 bytes (pages are 4096 bytes)"
        );
    }
}
