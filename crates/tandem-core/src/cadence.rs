//! Every fixed figure the cores decide with, in one place: how long the leader waits for the
//! ranks' manifests and how often it reads them, and how many tier operations a request may
//! record. Settings an operator chooses are in [`crate::CoreConfig`] instead.

/// How long the leader reads the ranks' manifests again while some rank has not published
/// its own, from the first read, ms. After it, a missing manifest counts as empty (its blocks
/// are dropped by the rebuild).
pub const MANIFEST_WAIT_MS: u64 = 10_000;

/// Pause between two reads of the ranks' manifests, ms.
pub const MANIFEST_RETRY_MS: u64 = 20;

/// The most tier operations the group index records for one block of a lookup (a promotion
/// from disk, and the demotion and eviction that make host room for it) or of a store (the
/// demotion and eviction that make room, and the eviction of a refused store): what the frame
/// budget reserves per block.
pub const TIER_OPS_PER_BLOCK: u64 = 3;
