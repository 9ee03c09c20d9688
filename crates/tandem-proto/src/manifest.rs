//! What one rank tells the leader it holds at the start of an epoch: its verified shards, by
//! block and tier (the "manifest" every rank publishes through the liveness store).
//!
//! Owns [`RankBlocks`] and its encoding (postcard, as carried in `tandem:{g}:manifest:*`).
//! It never decides which blocks the group keeps: the leader's rebuild of the group index
//! (`tandem-core`) intersects every rank's list.

use crate::ids::{BlockHash, Rank, Tier};
use serde::{Deserialize, Serialize};

/// The verified shards of one rank: block hash and the tier holding it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RankBlocks {
    /// The reporting rank.
    pub rank: Rank,
    /// Its shards whose checksums verified.
    pub blocks: Vec<(BlockHash, Tier)>,
}

impl RankBlocks {
    /// The bytes a rank publishes (postcard).
    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain structs into a Vec cannot fail.
        postcard::to_stdvec(self).unwrap_or_default()
    }

    /// The list `bytes` hold, or `None` when they are not one (a rank of another version, or
    /// damaged bytes: the rebuild then treats the rank as holding nothing).
    pub fn decode(bytes: &[u8]) -> Option<RankBlocks> {
        postcard::from_bytes(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let r = RankBlocks {
            rank: Rank(3),
            blocks: vec![(BlockHash(1), Tier::Host), (BlockHash(2), Tier::Disk)],
        };
        assert_eq!(RankBlocks::decode(&r.encode()), Some(r));
        assert_eq!(RankBlocks::decode(&[0xff; 3]), None);
    }
}
