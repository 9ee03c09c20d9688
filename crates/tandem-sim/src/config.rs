//! What one simulated run is made of: the settings a seed is run with, the fixed timings of the
//! simulated world, and the deliberately broken drivers the tests use to prove that the
//! invariant checks can fail.
//!
//! Owns [`SimConfig`], [`Broken`] and the timing constants. It decides nothing at run time.

/// A driver deliberately made wrong, injected from the simulator's side (no hook in the
/// cores): the tests run seeds with one of these and expect a violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// A follower's driver answers its engine's frame read with the frame that arrived last
    /// from the leader, instead of asking the core for the frame of the step read: frames
    /// applied by arrival order, not by position.
    FollowerAppliesArrivalOrder,
    /// The leader's driver tells the core an append is durable even when the completion log
    /// refused it: a frame can reveal what the log never took.
    AppendedBeforeDurable,
    /// A follower's driver drops the tier operations of the frames (a rank that evicts and
    /// moves nothing, or on its own): ranks stop holding the same blocks.
    FollowerSkipsTierOps,
    /// The leader's driver hands the answers of several appends out to the core in the order
    /// the log's answers arrive (a slow log answers them shuffled), not in the order the
    /// appends went out: the core confirms an append the log refused.
    AnswersAppendsOutOfOrder,
}

/// The settings of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Virtual time during which the engines issue work and faults are drawn, ms.
    pub active_ms: u64,
    /// Virtual time after `active_ms` with no new fault and no new task, for the group to
    /// settle before the end-of-run checks, ms.
    pub settle_ms: u64,
    /// Mean faults per second of active time (drawn from the seed; 0 turns faults off).
    pub faults_per_s: f64,
    /// A broken driver, for the tests that prove the checks can fail.
    pub broken: Option<Broken>,
    /// Keep a trace of every event (printed with a violation); off for speed.
    pub trace: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            active_ms: 2_000,
            settle_ms: 4_000,
            faults_per_s: 3.0,
            broken: None,
            trace: false,
        }
    }
}

/// The wall clock the log and the supervisor read starts here (ms since the Unix epoch), so
/// wall times look like real ones; the cores' monotonic clock starts at 0.
pub const WALL_BASE_MS: u64 = 1_700_000_000_000;

/// A follower heartbeats its leader this often, and the epoch loop ticks this often, ms.
pub const HEARTBEAT_INTERVAL_MS: u64 = 100;

/// The least time between two acknowledgements of a rank's stream entries to the log, ms
/// (`redis.ack_interval_ms`): several engine acknowledgements share one.
pub const ACK_INTERVAL_MS: u64 = 10;

/// The leader judges a follower silent after this long; the supervisor a rank, ms.
pub const HEARTBEAT_TIMEOUT_MS: u64 = 1_000;

/// The supervisor's round: it reads reports, heartbeats and members this often, ms.
pub const SUPERVISOR_ROUND_MS: u64 = 100;

/// How long ranks have to send a first heartbeat after a restart, ms.
pub const STARTUP_GRACE_MS: u64 = 2_000;

/// Steps the leader may run ahead of the slowest acknowledgement.
pub const WINDOW_STEPS: u64 = 4;

/// How long a rank waits for its engine to bind pages to a task started without them, ms.
/// The simulated engines always pass page ids with the task, so no rank ever waits on it.
pub const BIND_TIMEOUT_MS: u64 = 5_000;

/// Write-ahead appends the leader may have out at once.
pub const APPENDS_IN_FLIGHT: u32 = 4;

/// How long the leader's `end_step` waits for its own append, ms: a slow log's answer (up to
/// [`LOG_SLOW_MAX_MS`]) makes it seal without, with appends still out.
pub const APPEND_WAIT_MS: u64 = 1;

/// Frames kept for re-reads.
pub const RETENTION_STEPS: u64 = 16;

/// Host and disk tier capacity of every rank, blocks: small, so that evictions, demotions and
/// full tiers of pinned blocks happen.
pub const HOST_BLOCKS: u64 = 6;

/// See [`HOST_BLOCKS`].
pub const DISK_BLOCKS: u64 = 6;

/// Distinct prefix blocks the engines ask about: small, so that lookups hit.
pub const BLOCK_UNIVERSE: u64 = 24;

/// Pages of each engine's pool.
pub const PAGES: u32 = 32;

/// The longest a slow completion log takes to answer, ms: a pending call's deadline may be
/// passed by this much while the leader waits for an append.
pub const LOG_SLOW_MAX_MS: u64 = 150;

/// The deadline every waiting engine call carries (`end_step`, frame reads), ms.
pub const CALL_DEADLINE_MS: u64 = 300;

/// The longest one delivery of a peer message takes without a delay fault, ms.
pub const NET_MAX_MS: u64 = 3;

/// How long a lost connection takes to be noticed by each side, ms.
pub const LOSS_DETECT_MS: u64 = 5;

/// How long a relaunched agent or supervisor takes to start, ms.
pub const LAUNCH_MS: u64 = 30;
