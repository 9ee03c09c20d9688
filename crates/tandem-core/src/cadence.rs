//! Every fixed figure the cores and the epoch loop decide with, in one place: waits, retries,
//! cadences and batch sizes. Settings an operator chooses are in [`crate::CoreConfig`] and
//! [`crate::LoopConfig`] instead.

/// How long the leader reads the ranks' manifests again while some rank has not published
/// its own, from the first read, ms. After it, a missing manifest counts as empty (its blocks
/// are dropped by the rebuild).
pub const MANIFEST_WAIT_MS: u64 = 10_000;

/// Pause between two reads of the ranks' manifests by the leader, ms.
pub const MANIFEST_READ_RETRY_MS: u64 = 20;

/// What the frame budget reserves per block of a lookup or a store for the tier operations
/// the group index records: a bound, not a count. Today a lookup records none (a load never
/// moves a block) and a store at most two (the eviction that makes its place, and its own
/// eviction if refused); it stays at 3, the figure of the earlier placement (a promotion with
/// the demotion and eviction that made host room), so that frame admission is unchanged.
pub const TIER_OPS_PER_BLOCK: u64 = 3;

/// Pause between attempts to reach Redis at start-up, ms.
pub const REDIS_CONNECT_RETRY_MS: u64 = 500;

/// Pause between reads of the epoch counter while no first epoch exists yet, ms.
pub const FIRST_EPOCH_POLL_MS: u64 = 200;

/// Attempts at reading the completion stream for a new epoch's recovery before the agent
/// gives up with an error (with [`RECOVERY_RETRY_MS`]: one minute).
pub const RECOVERY_ATTEMPTS: u32 = 120;

/// Pause between recovery attempts, ms.
pub const RECOVERY_RETRY_MS: u64 = 500;

/// Attempts at publishing this rank's manifest before the epoch starts without it (the
/// leader then treats the rank as holding nothing).
pub const MANIFEST_PUBLISH_ATTEMPTS: u32 = 20;

/// Pause between manifest publishing attempts, ms.
pub const MANIFEST_PUBLISH_RETRY_MS: u64 = 250;

/// How long a published manifest is kept, ms (one hour: far beyond any epoch start).
pub const MANIFEST_TTL_MS: u64 = 3_600_000;

/// A heartbeat key lives this many heartbeat timeouts: long enough that the supervisor, not
/// the expiry, judges a silent rank (it needs the age).
pub const HEARTBEAT_TTL_TIMEOUTS: u64 = 10;

/// Completion-stream entries read per call.
pub const READ_BATCH: usize = 512;

/// The leader trims the completion stream every this many heartbeat ticks (a trim scans the
/// retained stream).
pub const TRIM_EVERY_TICKS: u64 = 50;

/// Pause before a follower tries to join again when the leader is in another epoch or
/// unreachable, ms.
pub const JOIN_RETRY_MS: u64 = 50;

/// Pause before a follower tries again when the leader still holds its old connection, ms.
pub const DUPLICATE_RANK_RETRY_MS: u64 = 100;

/// How long a follower waits before joining its leader again after `refusal`, ms; `None`
/// when joining again cannot help (a configuration or a secret that differs: the agent
/// stops). A leader in another epoch (one of the two has not seen the restart yet) or one
/// still holding the rank's old connection is waited for.
pub fn join_retry_ms(refusal: &tandem_proto::HandshakeError) -> Option<u64> {
    use tandem_proto::HandshakeError as H;
    match refusal {
        H::StaleEpoch { .. } => Some(JOIN_RETRY_MS),
        H::DuplicateRank { .. } => Some(DUPLICATE_RANK_RETRY_MS),
        _ => None,
    }
}
