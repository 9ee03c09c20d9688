//! Block identity and where a rank keeps a block's shard.
//!
//! Owns the [`BlockHash`] newtype (the chained prefix hash that names a block in the whole
//! group) and [`Location`] (tier, slot and checksum of one rank's shard). It must never hold
//! block bytes or decide anything about placement.

use serde::{Deserialize, Serialize};

use crate::checksum::Checksum;
use crate::tier::TierKind;

/// The chained prefix hash of a block: it depends on every token before the block, so equal
/// hashes mean equal prefixes. Every rank names its shard of a block by the same hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlockHash(pub u64);

impl std::fmt::Display for BlockHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

/// Index of a fixed-size slot inside one tier, `0..capacity_blocks`.
pub type SlotId = u64;

/// Where one rank keeps its shard of a block: the tier, the slot in it, and the checksum of
/// the `shard_bytes` bytes written there (seeded with the block hash).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// The tier holding the shard.
    pub tier: TierKind,
    /// The slot in that tier.
    pub slot: SlotId,
    /// Checksum of the shard bytes, verified on every read.
    pub checksum: Checksum,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_hash_displays_as_fixed_width_hex() {
        assert_eq!(BlockHash(0xab).to_string(), "0x00000000000000ab");
    }
}
