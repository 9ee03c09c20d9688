//! Heap bytes in use, from glibc's allocator (`mallinfo2`): what a structure costs in memory
//! is the difference before and after building it, allocator overhead included (each chunk's
//! header, the slack of a grown vector or table), which is what a process pays for it.
//!
//! Owns [`heap_in_use`]. It never allocates itself.

/// Bytes the allocator has handed out and not taken back: small-chunk arena bytes in use
/// plus bytes in separately mapped large chunks. `None` where `mallinfo2` is not glibc's.
pub fn heap_in_use() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        let info = unsafe { libc::mallinfo2() };
        Some((info.uordblks + info.hblkhd) as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}
