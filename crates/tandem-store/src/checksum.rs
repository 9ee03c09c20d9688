//! Shard checksums, computed in the same pass as the copy.
//!
//! Owns [`Checksum`], the streaming [`ShardHasher`] and [`copy_parts`] (a gather/scatter copy
//! between two lists of slices that checksums the bytes as they move). It must never decide
//! what a mismatch means: callers compare and act.
//!
//! # Definition
//! The checksum of a shard is three CRC-32C values (the crc32c crate's polynomial), one per
//! *lane*. The shard is cut into 24-byte groups; lane `k` runs over the `k`-th little-endian
//! 8-byte word of every group, and the bytes after the last whole group go to lane 0. Lane `k`
//! starts from `crc32c(block_hash.to_le_bytes() ++ [k])`, so a slot that holds another block's
//! bytes fails the check even when the bytes are intact.
//!
//! Why lanes: the CRC instruction has a latency of three cycles and a throughput of one, so one
//! chain runs at a third of the speed the hardware allows. Three independent lanes keep it
//! busy inside the copy loop without the expensive CRC-combine step (measured at about 90 µs
//! per combine with the crate's zlib-style combine). On x86_64 with SSE 4.2 the copy loop uses
//! non-temporal stores: tier slots and engine pages are not read again by this CPU soon, and
//! skipping the read-for-ownership of the destination is what lets copy + checksum keep up
//! with `memcpy` (see docs/BENCHMARKS.md). Elsewhere a portable path gives the same values.

use serde::{Deserialize, Serialize};

use crate::block::BlockHash;

/// Bytes per lane group: three 8-byte words, one per lane.
const GROUP: usize = 24;

/// The checksum of one shard: one CRC-32C per lane (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Checksum(pub [u32; 3]);

impl std::fmt::Display for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:08x}-{:08x}-{:08x}", self.0[0], self.0[1], self.0[2])
    }
}

/// Computes the checksum of `data` seeded with `seed` in one call.
pub fn checksum(seed: BlockHash, data: &[u8]) -> Checksum {
    let mut hasher = ShardHasher::new(seed);
    hasher.update(data);
    hasher.finish()
}

/// Streaming state of a shard checksum; feed bytes in order with [`ShardHasher::update`] or
/// [`ShardHasher::copy_update`], any split, and read the result with [`ShardHasher::finish`].
#[derive(Clone, Debug)]
pub struct ShardHasher {
    /// Raw CRC registers of the three lanes (the complement of the running CRC).
    regs: [u64; 3],
    /// Bytes of an incomplete group carried to the next call.
    pending: [u8; GROUP],
    pending_len: usize,
}

impl ShardHasher {
    /// Starts a checksum for the shard of block `seed`.
    pub fn new(seed: BlockHash) -> Self {
        let mut regs = [0u64; 3];
        for (k, reg) in regs.iter_mut().enumerate() {
            let mut bytes = [0u8; 17];
            bytes[..16].copy_from_slice(&seed.0.to_le_bytes());
            bytes[16] = k as u8;
            *reg = u64::from(!crc32c::crc32c(&bytes));
        }
        ShardHasher {
            regs,
            pending: [0; GROUP],
            pending_len: 0,
        }
    }

    /// Feeds `data` (the next bytes of the shard).
    pub fn update(&mut self, data: &[u8]) {
        let rest = self.fill_pending(data);
        let whole = rest.len() / GROUP * GROUP;
        groups_crc(&mut self.regs, &rest[..whole]);
        self.stash(&rest[whole..]);
    }

    /// Copies `src` into `dst` (equal lengths) and feeds the bytes, in one pass.
    ///
    /// Panics if the lengths differ: callers check lengths before copying (a programming error,
    /// never external input).
    pub fn copy_update(&mut self, dst: &mut [u8], src: &[u8]) {
        assert_eq!(dst.len(), src.len(), "copy_update needs equal lengths");
        let head = if self.pending_len > 0 {
            (GROUP - self.pending_len).min(src.len())
        } else {
            0
        };
        dst[..head].copy_from_slice(&src[..head]);
        self.update(&src[..head]);
        let whole = (src.len() - head) / GROUP * GROUP;
        let end = head + whole;
        groups_copy_crc(&mut self.regs, &mut dst[head..end], &src[head..end]);
        dst[end..].copy_from_slice(&src[end..]);
        self.stash(&src[end..]);
    }

    /// Ends the stream and returns the checksum.
    pub fn finish(self) -> Checksum {
        let lane0 =
            crc32c::crc32c_append(!(self.regs[0] as u32), &self.pending[..self.pending_len]);
        Checksum([lane0, !(self.regs[1] as u32), !(self.regs[2] as u32)])
    }

    /// Completes a pending group from the front of `data`; returns what is left of `data`.
    fn fill_pending<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        if self.pending_len == 0 {
            return data;
        }
        let take = (GROUP - self.pending_len).min(data.len());
        self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&data[..take]);
        self.pending_len += take;
        if self.pending_len == GROUP {
            let group = self.pending;
            groups_crc(&mut self.regs, &group);
            self.pending_len = 0;
        }
        &data[take..]
    }

    /// Keeps a tail shorter than one group; callers reach it only with nothing pending.
    fn stash(&mut self, tail: &[u8]) {
        debug_assert!(tail.is_empty() || self.pending_len == 0);
        if tail.is_empty() {
            return;
        }
        self.pending[..tail.len()].copy_from_slice(tail);
        self.pending_len = tail.len();
    }
}

/// Copies the concatenation of `src` into the concatenation of `dst` and feeds the bytes to
/// `hasher`. The total lengths must be equal (callers validate first; a mismatch panics).
pub fn copy_parts(dst: &mut [&mut [u8]], src: &[&[u8]], hasher: &mut ShardHasher) {
    let dst_total: usize = dst.iter().map(|d| d.len()).sum();
    let src_total: usize = src.iter().map(|s| s.len()).sum();
    assert_eq!(dst_total, src_total, "copy_parts needs equal totals");
    let (mut di, mut doff, mut si, mut soff) = (0, 0, 0, 0);
    while di < dst.len() && si < src.len() {
        let n = (dst[di].len() - doff).min(src[si].len() - soff);
        hasher.copy_update(&mut dst[di][doff..doff + n], &src[si][soff..soff + n]);
        doff += n;
        soff += n;
        if doff == dst[di].len() {
            di += 1;
            doff = 0;
        }
        if soff == src[si].len() {
            si += 1;
            soff = 0;
        }
    }
}

/// Reads the little-endian word `k` of the group at `g`.
fn word(g: &[u8], k: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&g[k * 8..k * 8 + 8]);
    u64::from_le_bytes(w)
}

/// Portable lane step: one 8-byte word into a raw register.
fn step_portable(reg: u64, w: u64) -> u64 {
    u64::from(!crc32c::crc32c_append(!(reg as u32), &w.to_le_bytes()))
}

/// Feeds whole groups (`data.len()` a multiple of [`GROUP`]).
fn groups_crc(regs: &mut [u64; 3], data: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU supports SSE 4.2 (checked above); the function only reads `data`.
        unsafe { x86::groups_crc(regs, data) };
        return;
    }
    for g in data.chunks_exact(GROUP) {
        for (k, reg) in regs.iter_mut().enumerate() {
            *reg = step_portable(*reg, word(g, k));
        }
    }
}

/// Copies and feeds whole groups (`src.len() == dst.len()`, a multiple of [`GROUP`]).
fn groups_copy_crc(regs: &mut [u64; 3], dst: &mut [u8], src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: SSE 4.2 is present (checked above); `dst` and `src` are distinct slices of
        // equal length (a `&mut` cannot alias a `&`), and the loop stays inside both.
        unsafe { x86::groups_copy_crc(regs, dst, src) };
        return;
    }
    dst.copy_from_slice(src);
    groups_crc(regs, src);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! SSE 4.2 lane loops; callers check the CPU feature first.
    use std::arch::x86_64::{_mm_crc32_u64, _mm_sfence, _mm_stream_si64};

    use super::GROUP;

    /// CRC of whole groups, three independent chains.
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn groups_crc(regs: &mut [u64; 3], data: &[u8]) {
        let [mut a, mut b, mut c] = *regs;
        let p = data.as_ptr();
        for i in 0..data.len() / GROUP {
            let o = i * GROUP;
            a = _mm_crc32_u64(a, (p.add(o) as *const u64).read_unaligned());
            b = _mm_crc32_u64(b, (p.add(o + 8) as *const u64).read_unaligned());
            c = _mm_crc32_u64(c, (p.add(o + 16) as *const u64).read_unaligned());
        }
        *regs = [a, b, c];
    }

    /// Copy of whole groups with the CRC of each word as it passes; non-temporal stores when
    /// the destination is 8-byte aligned.
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn groups_copy_crc(regs: &mut [u64; 3], dst: &mut [u8], src: &[u8]) {
        let [mut a, mut b, mut c] = *regs;
        let s = src.as_ptr();
        let d = dst.as_mut_ptr();
        let groups = src.len() / GROUP;
        if (d as usize) % 8 == 0 {
            for i in 0..groups {
                let o = i * GROUP;
                let x = (s.add(o) as *const u64).read_unaligned();
                let y = (s.add(o + 8) as *const u64).read_unaligned();
                let z = (s.add(o + 16) as *const u64).read_unaligned();
                _mm_stream_si64(d.add(o) as *mut i64, x as i64);
                _mm_stream_si64(d.add(o + 8) as *mut i64, y as i64);
                _mm_stream_si64(d.add(o + 16) as *mut i64, z as i64);
                a = _mm_crc32_u64(a, x);
                b = _mm_crc32_u64(b, y);
                c = _mm_crc32_u64(c, z);
            }
            // Non-temporal stores are weakly ordered: fence before anyone reads the bytes.
            _mm_sfence();
        } else {
            for i in 0..groups {
                let o = i * GROUP;
                let x = (s.add(o) as *const u64).read_unaligned();
                let y = (s.add(o + 8) as *const u64).read_unaligned();
                let z = (s.add(o + 16) as *const u64).read_unaligned();
                (d.add(o) as *mut u64).write_unaligned(x);
                (d.add(o + 8) as *mut u64).write_unaligned(y);
                (d.add(o + 16) as *mut u64).write_unaligned(z);
                a = _mm_crc32_u64(a, x);
                b = _mm_crc32_u64(b, y);
                c = _mm_crc32_u64(c, z);
            }
        }
        *regs = [a, b, c];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition from the module docs, written the slow and obvious way.
    fn reference(seed: BlockHash, data: &[u8]) -> Checksum {
        let mut lanes: [Vec<u8>; 3] = Default::default();
        let whole = data.len() / GROUP * GROUP;
        for g in data[..whole].chunks_exact(GROUP) {
            for (k, lane) in lanes.iter_mut().enumerate() {
                lane.extend_from_slice(&g[k * 8..k * 8 + 8]);
            }
        }
        lanes[0].extend_from_slice(&data[whole..]);
        let mut out = [0u32; 3];
        for k in 0..3 {
            let mut s = seed.0.to_le_bytes().to_vec();
            s.push(k as u8);
            out[k] = crc32c::crc32c_append(crc32c::crc32c(&s), &lanes[k]);
        }
        Checksum(out)
    }

    #[test]
    fn matches_reference_definition() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 23, 24, 25, 47, 48, 1000] {
            assert_eq!(
                checksum(BlockHash(5), &data[..len]),
                reference(BlockHash(5), &data[..len]),
                "len {len}"
            );
        }
    }

    #[test]
    fn seed_changes_checksum() {
        let data = [7u8; 64];
        assert_ne!(checksum(BlockHash(1), &data), checksum(BlockHash(2), &data));
    }

    #[test]
    fn single_byte_flip_changes_checksum() {
        let mut data = vec![0x5au8; 4096];
        let good = checksum(BlockHash(3), &data);
        for i in [0, 7, 8, 23, 24, 4095] {
            data[i] ^= 0x10;
            assert_ne!(checksum(BlockHash(3), &data), good, "flip at {i}");
            data[i] ^= 0x10;
        }
    }

    #[test]
    fn display_is_three_hex_lanes() {
        assert_eq!(
            Checksum([1, 0xabc, 0xffff_ffff]).to_string(),
            "00000001-00000abc-ffffffff"
        );
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_checksum(
            data in proptest::collection::vec(any::<u8>(), 0..600),
            cuts in proptest::collection::vec(0usize..600, 0..6),
            seed in any::<u64>(),
        ) {
            let seed = BlockHash::from(seed);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut hasher = ShardHasher::new(seed);
            let mut copier = ShardHasher::new(seed);
            let mut copy = vec![0u8; data.len()];
            let mut start = 0;
            for &c in cuts.iter().chain(std::iter::once(&data.len())) {
                hasher.update(&data[start..c]);
                copier.copy_update(&mut copy[start..c], &data[start..c]);
                start = c;
            }
            let want = reference(seed, &data);
            prop_assert_eq!(hasher.finish(), want);
            prop_assert_eq!(copier.finish(), want);
            prop_assert_eq!(copy, data);
        }

        #[test]
        fn copy_parts_scatters_and_gathers(
            data in proptest::collection::vec(any::<u8>(), 1..500),
            src_part in 1usize..97,
            dst_part in 1usize..97,
        ) {
            let src: Vec<&[u8]> = data.chunks(src_part).collect();
            let mut out = vec![0u8; data.len()];
            let mut dst: Vec<&mut [u8]> = out.chunks_mut(dst_part).collect();
            let mut hasher = ShardHasher::new(BlockHash(9));
            copy_parts(&mut dst, &src, &mut hasher);
            prop_assert_eq!(hasher.finish(), reference(BlockHash(9), &data));
            prop_assert_eq!(out, data);
        }
    }
}
