//! The contract suite of the durable traits, written once and run against both
//! implementations: [`RedisLog`] on a real `redis-server` that each test starts on a free
//! loopback port, [`RedisLog`] on a real Redis Cluster (three masters, started once and
//! shared by the cases running at the same time, each case in a group of its own: the
//! cases are then also many groups on one deployment), and [`MemoryLog`] with a
//! [`ManualClock`].
//!
//! Each case in [`stream`], [`epochs`] and [`liveness`] is an `async fn(Kind)`; the
//! `contract!` macro below makes one `#[tokio::test]` per case and backend, so
//! `cargo test -p tandem-durable --test contract redis::`, `cluster::` or `memory::` runs
//! one side. The
//! cases reach the backends only through `Arc<dyn CompletionStream>`, `Arc<dyn EpochStore>`
//! and `Arc<dyn LivenessStore>`: what they check is the contract, and that the traits are
//! object safe.

mod epochs;
mod liveness;
mod stream;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tandem_durable::{
    CompletionStream, DurableConfig, EpochStore, LivenessStore, ManualClock, MemoryLog,
    RedisEndpoint, RedisLog, StartedTask, StreamEntryId,
};
use tandem_proto::{
    BlockHash, OutcomeResult, PageId, RequestId, TaskId, TaskKind, TaskOutcome, TaskStart,
};
use tandem_tests::redis::RedisServer;
use tandem_tests::redis_cluster::RedisCluster;

/// Which implementation a case runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Redis,
    Cluster,
    Memory,
}

/// How a backend's time moves: the in-memory twin's clock is moved; Redis's is the server's
/// own, so the case waits for real.
#[derive(Clone)]
enum Time {
    Manual(ManualClock),
    Real,
}

/// One group's durable state behind the three traits.
#[derive(Clone)]
pub(crate) struct Backend {
    pub stream: Arc<dyn CompletionStream>,
    pub epochs: Arc<dyn EpochStore>,
    pub liveness: Arc<dyn LivenessStore>,
    time: Time,
    /// What [`Backend::reopen`] opens again.
    origin: Origin,
}

#[derive(Clone)]
enum Origin {
    Redis(Arc<RedisServer>, u32),
    Cluster(Arc<RedisCluster>, String, u32),
    Memory(MemoryLog),
}

/// The group name every case on its own server uses.
const GROUP: &str = "g1";

/// The cluster the cases running now share; it stops when the last of them drops it.
static CLUSTER: Mutex<Weak<RedisCluster>> = Mutex::new(Weak::new());
/// Numbers the groups of the cases on the shared cluster.
static CLUSTER_GROUPS: AtomicU32 = AtomicU32::new(0);

/// The shared cluster, started when no case holds it.
fn shared_cluster() -> Arc<RedisCluster> {
    let mut slot = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = slot.upgrade() {
        return c;
    }
    let c = Arc::new(RedisCluster::start(3, 0));
    *slot = Arc::downgrade(&c);
    c
}

/// A fresh group of `world_size` ranks on backend `kind` (Redis: its own new server).
pub(crate) async fn open(kind: Kind, world_size: u32) -> Backend {
    match kind {
        Kind::Redis => {
            let server = Arc::new(RedisServer::start());
            redis_backend(server, world_size).await
        }
        Kind::Cluster => {
            let cluster = tokio::task::spawn_blocking(shared_cluster)
                .await
                .expect("start the cluster");
            let group = format!("c{}", CLUSTER_GROUPS.fetch_add(1, Ordering::SeqCst));
            cluster_backend(cluster, group, world_size).await
        }
        Kind::Memory => {
            let clock = ManualClock::new(1_700_000_000_000);
            let log = MemoryLog::with_clock(world_size, Arc::new(clock.clone()));
            Backend {
                stream: Arc::new(log.clone()),
                epochs: Arc::new(log.clone()),
                liveness: Arc::new(log.clone()),
                time: Time::Manual(clock),
                origin: Origin::Memory(log),
            }
        }
    }
}

async fn redis_backend(server: Arc<RedisServer>, world_size: u32) -> Backend {
    let log = RedisLog::connect(&DurableConfig::new(server.url(), GROUP, world_size))
        .await
        .expect("connect");
    Backend {
        stream: Arc::new(log.clone()),
        epochs: Arc::new(log.clone()),
        liveness: Arc::new(log),
        time: Time::Real,
        origin: Origin::Redis(server, world_size),
    }
}

async fn cluster_backend(cluster: Arc<RedisCluster>, group: String, world_size: u32) -> Backend {
    let endpoint = RedisEndpoint::cluster(cluster.urls());
    let log = RedisLog::connect(&DurableConfig::with_endpoint(endpoint, &group, world_size))
        .await
        .expect("connect to the cluster");
    Backend {
        stream: Arc::new(log.clone()),
        epochs: Arc::new(log.clone()),
        liveness: Arc::new(log),
        time: Time::Real,
        origin: Origin::Cluster(cluster, group, world_size),
    }
}

impl Backend {
    /// A second, independent handle on the same group (a restarted agent or supervisor).
    pub(crate) async fn reopen(&self) -> Backend {
        match &self.origin {
            Origin::Redis(server, world_size) => redis_backend(server.clone(), *world_size).await,
            Origin::Cluster(cluster, group, world_size) => {
                cluster_backend(cluster.clone(), group.clone(), *world_size).await
            }
            Origin::Memory(log) => Backend {
                stream: Arc::new(log.clone()),
                epochs: Arc::new(log.clone()),
                liveness: Arc::new(log.clone()),
                time: self.time.clone(),
                origin: self.origin.clone(),
            },
        }
    }

    /// Lets `ms` milliseconds pass on the backend's clock.
    pub(crate) async fn advance(&self, ms: u64) {
        match &self.time {
            Time::Manual(c) => {
                c.advance(ms);
            }
            Time::Real => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    }
}

pub(crate) fn started(epoch: u64, seq: u64) -> StartedTask {
    StartedTask {
        kind: TaskKind::Store,
        start: TaskStart {
            task: TaskId { epoch, seq },
            request: RequestId(seq),
            block_hashes: vec![BlockHash::from(seq), BlockHash::from(seq + 1)],
            page_ids: vec![PageId(1), PageId(2)],
            tiers: vec![],
        },
    }
}

pub(crate) fn ok(epoch: u64, seq: u64) -> TaskOutcome {
    TaskOutcome {
        task: TaskId { epoch, seq },
        kind: TaskKind::Store,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    }
}

pub(crate) fn ids(entries: &[tandem_durable::LoggedStep]) -> Vec<StreamEntryId> {
    entries.iter().map(|e| e.id).collect()
}

/// One `#[tokio::test]` per case, in a module per backend.
macro_rules! contract {
    ($($module:ident :: $case:ident),* $(,)?) => {
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::$module::$case(crate::Kind::Redis).await
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::$module::$case(crate::Kind::Cluster).await
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::$module::$case(crate::Kind::Memory).await
                }
            )*
        }
    };
}

contract!(
    stream::append_then_read_per_rank_then_ack,
    stream::appends_are_fenced_by_the_epoch_barrier,
    stream::the_fence_holds_on_a_stream_trimmed_empty,
    stream::unacked_entries_after_a_crash_are_redelivered_once,
    stream::in_flight_tasks_are_aborted_once_and_never_also_delivered,
    stream::duplicate_appends_are_suppressed_by_task_id,
    stream::ack_through_settles_undelivered_entries_and_never_moves_back,
    stream::cursors_show_each_ranks_position,
    stream::trim_keeps_unacked_entries_and_removes_fully_acked_ones,
    stream::trim_keeps_starts_of_unfinished_tasks,
    stream::ranks_outside_the_group_are_refused,
    epochs::epoch_increment_is_atomic_across_concurrent_callers,
    epochs::supervisor_state_and_membership,
    epochs::a_new_epoch_is_above_every_epoch_in_the_stream,
    epochs::a_new_epoch_drops_the_previous_epochs_keys_and_late_joins_are_refused,
    liveness::heartbeats_expire_after_their_ttl,
    liveness::manifests_are_kept_per_epoch_and_expire,
    liveness::failure_reports_come_out_in_order_once_and_bounded,
    liveness::event_sequence_numbers_never_repeat_across_a_restart,
);
