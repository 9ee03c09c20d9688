//! The deterministic content of a block shard: what a simulated engine "computes" into a page
//! and checks after a load.
//!
//! A shard's bytes are a SplitMix64 word stream seeded by `(block hash, rank)`, written
//! little-endian 8 bytes at a time (a partial last word is truncated). So every rank's shard
//! of every block differs, a shard loaded into the wrong page, on the wrong rank or from the
//! wrong block is caught, and the check needs no copy of the expected bytes. Owns only these
//! two functions; it never reads pages from a pool or talks to an agent.

/// A shard's bytes differ from the deterministic content of `(block_hash, rank)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shard of block {block_hash:032x} on rank {rank} differs from its content at byte {first_bad_offset} of {len}")]
pub struct VerifyError {
    /// The block the shard should hold.
    pub block_hash: u128,
    /// The rank whose shard it should be.
    pub rank: u32,
    /// Offset of the first differing byte, bytes from the start of the shard.
    pub first_bad_offset: usize,
    /// Length of the shard checked, bytes.
    pub len: usize,
}

/// Fill `buf` (one page: one shard, any length in bytes) with the content of block
/// `block_hash`'s shard on `rank`.
pub fn fill_shard(buf: &mut [u8], block_hash: u128, rank: u32) {
    let mut stream = WordStream::new(block_hash, rank);
    let mut words = buf.chunks_exact_mut(8);
    for chunk in &mut words {
        chunk.copy_from_slice(&stream.next_word().to_le_bytes());
    }
    let tail = words.into_remainder();
    if !tail.is_empty() {
        let word = stream.next_word().to_le_bytes();
        tail.copy_from_slice(&word[..tail.len()]);
    }
}

/// Check that `buf` holds exactly what [`fill_shard`] writes for `(block_hash, rank)`.
///
/// # Errors
/// [`VerifyError`] with the offset of the first differing byte.
pub fn verify_shard(buf: &[u8], block_hash: u128, rank: u32) -> Result<(), VerifyError> {
    let mut stream = WordStream::new(block_hash, rank);
    let bad = |offset: usize| VerifyError {
        block_hash,
        rank,
        first_bad_offset: offset,
        len: buf.len(),
    };
    let mut words = buf.chunks_exact(8);
    let mut offset = 0usize;
    for chunk in &mut words {
        let expected = stream.next_word().to_le_bytes();
        if chunk != expected {
            return Err(bad(offset + first_difference(chunk, &expected)));
        }
        offset += 8;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let expected = stream.next_word().to_le_bytes();
        if tail != &expected[..tail.len()] {
            return Err(bad(offset + first_difference(tail, &expected)));
        }
    }
    Ok(())
}

fn first_difference(got: &[u8], expected: &[u8]) -> usize {
    got.iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(0)
}

/// SplitMix64 (Steele, Lea, Flood 2014), defined here so that the content of a shard is fixed
/// by this file alone.
struct WordStream(u64);

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl WordStream {
    fn new(block_hash: u128, rank: u32) -> Self {
        let rank_key = mix((u64::from(rank) + 1).wrapping_mul(GOLDEN));
        // Both halves of the hash count: blocks that differ only in the high 64 bits get
        // different content.
        let folded = mix(block_hash as u64) ^ mix((block_hash >> 64) as u64 ^ GOLDEN);
        WordStream(mix(folded ^ rank_key))
    }

    fn next_word(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_verify_round_trips_for_any_length() {
        for len in [0usize, 1, 7, 8, 9, 64, 1000, 64 * 1024 + 3] {
            let mut page = vec![0u8; len];
            fill_shard(&mut page, 0xdead_beef, 3);
            assert_eq!(verify_shard(&page, 0xdead_beef, 3), Ok(()), "len {len}");
        }
    }

    #[test]
    fn content_depends_on_block_and_rank() {
        let mut a = vec![0u8; 256];
        let mut b = vec![0u8; 256];
        let mut c = vec![0u8; 256];
        fill_shard(&mut a, 1, 0);
        fill_shard(&mut b, 1, 1);
        fill_shard(&mut c, 2, 0);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert!(verify_shard(&a, 1, 1).is_err(), "wrong rank is caught");
        assert!(verify_shard(&a, 2, 0).is_err(), "wrong block is caught");
        assert!(a.iter().any(|&x| x != 0), "content is not zero");
    }

    #[test]
    fn corruption_reports_the_first_bad_byte() {
        let mut page = vec![0u8; 4099];
        fill_shard(&mut page, 42, 1);
        page[1234] ^= 0x10;
        page[3000] ^= 0x01;
        let err = verify_shard(&page, 42, 1).unwrap_err();
        assert_eq!(err.first_bad_offset, 1234);
        assert_eq!(
            err.to_string(),
            "shard of block 0000000000000000000000000000002a on rank 1 differs from its content at byte 1234 of 4099"
        );
        // A corrupted partial last word is found too.
        let mut page = vec![0u8; 19];
        fill_shard(&mut page, 42, 1);
        page[18] ^= 0xff;
        assert_eq!(verify_shard(&page, 42, 1).unwrap_err().first_bad_offset, 18);
    }

    #[test]
    fn zeroed_page_is_not_valid_content() {
        let page = vec![0u8; 512];
        assert!(verify_shard(&page, 7, 0).is_err());
    }
}
