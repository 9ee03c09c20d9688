//! Identifiers shared by every message and state machine: epochs, steps, ranks, tasks,
//! requests, blocks and pages.
//!
//! Owns only the newtypes and their text forms. It never allocates ids: task ids come from
//! the [`crate::Leader`], epochs from the supervisor's Redis counter.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A generation of the group; it increases on every group restart (docs/DESIGN.md invariant 4).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Epoch(pub u64);

/// One scheduler iteration of the engines, numbered from 0 within an epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Step(pub u64);

/// One member of the group, `0..world_size`; rank 0 is the leader.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Rank(pub u32);

/// A group-unique task id: the epoch that started the task and a sequence number within it.
///
/// Unique across epochs and process restarts because epochs come from a Redis counter and
/// never repeat; `seq` counts from 0 in each epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct TaskId {
    /// Epoch whose leader started the task.
    pub epoch: u64,
    /// Sequence number within that epoch, from 0.
    pub seq: u64,
}

/// The engine's id of one inference request.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct RequestId(pub u64);

/// The chained prefix hash that names one block (it depends on every token before it):
/// 128 bits, written as 32 hex digits and carried on the wire as 16 big-endian bytes.
///
/// Engines name blocks with longer digests (SGLang: SHA-256 hex strings; vLLM: SHA-256 bytes)
/// or shorter ones (vLLM's 64-bit xxhash); [`BlockHash::from_digest`] maps any digest to a
/// block hash deterministically. With `n` distinct blocks in a group's cache the chance that
/// two share a block hash is below `n² / 2¹²⁹` (the birthday bound): under 3·10⁻²¹ for ten
/// billion blocks, when the engine's digest is itself at least 128 bits wide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub u128);

impl BlockHash {
    /// Bytes of a block hash on the wire and in files.
    pub const BYTES: usize = 16;

    /// The block hash for an engine's digest of any length, deterministically:
    /// - 16 bytes or more: the first 16 bytes, big-endian (a truncated cryptographic digest
    ///   keeps its uniformity; SHA-256 truncated to 128 bits is what the bound above assumes);
    /// - fewer than 16 bytes (for example a 64-bit xxhash): the bytes, zero-padded on the
    ///   left, with the digest's length in the top byte, so that digests of different lengths
    ///   never map to the same block hash. The collision bound is then the engine's own.
    pub fn from_digest(digest: &[u8]) -> BlockHash {
        let mut bytes = [0u8; Self::BYTES];
        if digest.len() >= Self::BYTES {
            bytes.copy_from_slice(&digest[..Self::BYTES]);
        } else {
            bytes[Self::BYTES - digest.len()..].copy_from_slice(digest);
            bytes[0] = 0x80 | digest.len() as u8;
        }
        BlockHash(u128::from_be_bytes(bytes))
    }

    /// The 16 big-endian bytes of the hash.
    pub fn to_bytes(self) -> [u8; Self::BYTES] {
        self.0.to_be_bytes()
    }

    /// The low 64 bits, for seeding a per-block checksum or picking a shard.
    pub fn low64(self) -> u64 {
        self.0 as u64
    }
}

impl From<u64> for BlockHash {
    /// A block hash whose value is `v` (tests and traces that number blocks with integers).
    fn from(v: u64) -> BlockHash {
        BlockHash(u128::from(v))
    }
}

impl Serialize for BlockHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // A fixed 16-byte array: postcard writes it without a length prefix (a varint u128
        // of a random hash would take up to 19 bytes).
        self.to_bytes().serialize(s)
    }
}

impl<'de> Deserialize<'de> for BlockHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<BlockHash, D::Error> {
        <[u8; Self::BYTES]>::deserialize(d).map(|b| BlockHash(u128::from_be_bytes(b)))
    }
}

/// Index of one KV page in an engine's page pool (the same index on every rank).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct PageId(pub u32);

/// The name of the group a rank belongs to (one model instance).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GroupId(pub String);

/// What a task moves: engine pages to the tiers (store) or tiers to engine pages (load).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TaskKind {
    /// Copy blocks from the engine's pages into the tiers.
    Store,
    /// Copy blocks from the tiers into the engine's pages.
    Load,
}

/// The name of a storage tier of a rank, defined once for the whole workspace: frames name
/// it, the group index places blocks by it, the store implements one slot tier per name, and
/// the metrics label by it. Ordered fastest first (`Device < Host < Disk`).
///
/// The wire form (postcard variant index: host 0, disk 1, device 2) is also the manifest's
/// on disk, so variants are only ever added at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Host DRAM in a file-backed shared-memory slab: a copy costs about a `memcpy` (tens of
    /// µs per MiB); capacity is a share of the machine's memory, typically tens to hundreds of
    /// GB.
    Host,
    /// A preallocated file on local disk with positional I/O: page-cache hits cost about a
    /// `memcpy`, misses a device read (hundreds of µs and up); capacity is the disk, TBs.
    Disk,
    /// GPU memory (HBM) reached through the CUDA driver: copies take microseconds over PCIe or
    /// NVLink; capacity is what the engine leaves free, tens of GB. Implemented only with
    /// `tandem-store`'s feature `cuda`; the group index never places a block there yet (it is
    /// not in [`Tier::PLACED`]), so no frame names it.
    Device,
}

impl Tier {
    /// The tiers the group index places blocks in, fastest first: what frames name, what every
    /// rank opens, and what the metrics label.
    pub const PLACED: [Tier; 2] = [Tier::Host, Tier::Disk];

    /// The lowercase name used in messages, metrics and logs (`host`, `disk`, `device`).
    pub fn name(self) -> &'static str {
        match self {
            Tier::Host => "host",
            Tier::Disk => "disk",
            Tier::Device => "device",
        }
    }

    /// Position in the fastest-first order.
    fn speed_rank(self) -> u8 {
        match self {
            Tier::Device => 0,
            Tier::Host => 1,
            Tier::Disk => 2,
        }
    }
}

impl PartialOrd for Tier {
    fn partial_cmp(&self, other: &Tier) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Tier {
    /// Fastest first: device, host, disk.
    fn cmp(&self, other: &Tier) -> std::cmp::Ordering {
        self.speed_rank().cmp(&other.speed_rank())
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Step {
    /// The step after this one.
    pub fn next(self) -> Step {
        Step(self.0.saturating_add(1))
    }
}

impl TaskId {
    /// The task id for sequence number `seq` of `epoch`.
    pub fn new(epoch: Epoch, seq: u64) -> TaskId {
        TaskId {
            epoch: epoch.0,
            seq,
        }
    }
}

macro_rules! display_inner {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    )*};
}
display_inner!(Epoch, Step, Rank, RequestId, PageId, GroupId);

impl fmt::Display for BlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Display for TaskId {
    /// `epoch.seq`, for example `3.17`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.epoch, self.seq)
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskKind::Store => "store",
            TaskKind::Load => "load",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms() {
        assert_eq!(Epoch(3).to_string(), "3");
        assert_eq!(Step(812).to_string(), "812");
        assert_eq!(Rank(2).to_string(), "2");
        assert_eq!(TaskId::new(Epoch(3), 17).to_string(), "3.17");
        assert_eq!(
            BlockHash(0xab).to_string(),
            "000000000000000000000000000000ab"
        );
        assert_eq!(GroupId("g".into()).to_string(), "g");
        assert_eq!(TaskKind::Store.to_string(), "store");
        assert_eq!(TaskKind::Load.to_string(), "load");
        assert_eq!(Tier::Host.to_string(), "host");
        assert_eq!(Tier::Disk.to_string(), "disk");
        assert_eq!(Tier::Device.to_string(), "device");
        assert!(
            Tier::Device < Tier::Host && Tier::Host < Tier::Disk,
            "fastest first"
        );
        assert_eq!(Step(1).next(), Step(2));
        assert_eq!(Step(u64::MAX).next(), Step(u64::MAX));
    }

    #[test]
    fn engine_digests_map_to_block_hashes_deterministically() {
        // A SHA-256 digest (32 bytes) keeps its first 16 bytes.
        let sha: Vec<u8> = (0u8..32).collect();
        let h = BlockHash::from_digest(&sha);
        assert_eq!(h.to_bytes().as_slice(), &sha[..16]);
        assert_eq!(h, BlockHash::from_digest(&sha), "same digest, same hash");
        assert_ne!(
            h,
            BlockHash::from_digest(&sha[1..]),
            "a different digest differs"
        );
        // Exactly 16 bytes: the bytes themselves.
        assert_eq!(
            BlockHash::from_digest(&[0xab; 16]).0,
            u128::from_be_bytes([0xab; 16])
        );
        // Short digests of different lengths never collide, even with equal values.
        let eight = BlockHash::from_digest(&[0, 0, 0, 0, 0, 0, 0, 7]);
        let nine = BlockHash::from_digest(&[0, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert_ne!(eight, nine);
        assert_ne!(BlockHash::from_digest(&[]), BlockHash::from_digest(&[0]));
        assert_eq!(eight.to_string(), "88000000000000000000000000000007");
    }

    #[test]
    fn tier_wire_form_is_stable() {
        // The manifest on disk and the frames use these indices: never renumber.
        for (tier, byte) in [(Tier::Host, 0u8), (Tier::Disk, 1), (Tier::Device, 2)] {
            assert_eq!(postcard::to_stdvec(&tier).unwrap(), vec![byte]);
        }
    }

    #[test]
    fn block_hashes_take_sixteen_bytes_on_the_wire() {
        let h = BlockHash(u128::MAX - 5);
        let bytes = postcard::to_stdvec(&h).unwrap();
        assert_eq!(bytes.len(), BlockHash::BYTES);
        assert_eq!(postcard::from_bytes::<BlockHash>(&bytes).unwrap(), h);
        assert_eq!(BlockHash::from(7u64).0, 7);
        assert_eq!(BlockHash(u128::MAX).low64(), u64::MAX);
    }

    #[test]
    fn task_ids_order_by_epoch_then_seq() {
        assert!(TaskId::new(Epoch(1), 99) < TaskId::new(Epoch(2), 0));
        assert!(TaskId::new(Epoch(2), 0) < TaskId::new(Epoch(2), 1));
    }
}
