//! Block identity and where a rank keeps a block's shard.
//!
//! Re-exports [`BlockHash`] (the chained prefix hash that names a block in the whole group,
//! defined by the protocol core) and owns [`Location`] (tier, slot and checksum of one rank's shard). It must never hold
//! block bytes or decide anything about placement.

use serde::{Deserialize, Serialize};

use crate::checksum::Checksum;
use crate::tier::Tier;

/// The chained prefix hash of a block, shared with the protocol core so that frames, engines
/// and tiers name blocks with one type.
pub use tandem_proto::ids::BlockHash;

/// Index of a fixed-size slot inside one tier, `0..capacity_blocks`.
pub type SlotId = u64;

/// Where one rank keeps its shard of a block: the tier, the slot in it, and the checksum of
/// the `shard_bytes` bytes written there (seeded with the block hash).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// The tier holding the shard.
    pub tier: Tier,
    /// The slot in that tier.
    pub slot: SlotId,
    /// Checksum of the shard bytes, verified on every read.
    pub checksum: Checksum,
}
