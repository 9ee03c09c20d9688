//! The Tandem rank agent: one process per rank of a group.
//!
//! Drivers only: every rule the agent follows is in `tandem-core` (the rank's `RankCore` for
//! each epoch, and the `EpochLoop` across epochs) or in `tandem-proto`. The actors feed those
//! cores their inputs with the agent's `now_ms` and carry out their outputs: sockets, files,
//! Redis calls, timers. No decision is made here.
//!
//! # Layout
//! - [`settings`]: what one agent needs, derived from the configuration and command line.
//! - [`protocol`]: the `ProtocolActor`, the driver of one epoch's `RankCore` (inputs in,
//!   outputs carried out, one timer).
//! - [`store_actor`]: the `StoreActor` (tiers, engine page buffers, shard copies; carries out
//!   the core's store commands and reports each shard to whoever asked).
//! - [`copy_workers`]: the threads that run a task's shard copies side by side
//!   (`store.copy_workers`).
//! - [`peer`]: the TCP transport between leader and followers, with the handshake's IO.
//! - [`engine`]: the Unix-socket endpoint the local engine talks to.
//! - [`http`]: `/healthz`, `/readyz`, `/status`.
//! - [`events`]: rank 0's KV cache event stream (ZeroMQ PUB and replay), publishing what
//!   `tandem_core::CacheEventDeriver` derives from sealed frames.
//! - [`router`]: which epoch's protocol actor requests go to.
//! - [`runtime`]: everything that outlives an epoch, and the driver of the epoch loop
//!   (`tandem_core::EpochLoop`).
//! - [`epochs`]: the calls the epoch loop asks for, made (the log's traits, the protocol
//!   actor of each epoch, metrics).
//! - [`clock`]: the monotonic `now_ms` fed to the cores.
//! - [`panics`]: the panic hook that stops the agent when any of its threads panics.
//! - [`disk_io`]: the disk tier's transfers on a thread of their own, each with a deadline
//!   (`store.disk_op_deadline_ms`), and whether the disk tier is degraded.
//! - [`fault`]: test-only fault hooks (a panic at an actor's Nth message, disk errors and
//!   delays), compiled in only with the `fault-hooks` feature.
//! - [`fault_layer`]: the test-only stall of one layer of layerwise loads
//!   (`TANDEM_FAULT_LAYER_STALL`), with the same feature.
//!
//! Block bytes never pass through actor mailboxes: the `StoreActor` copies between the
//! engine's shared-memory pages and the tiers. Actors own state; sockets, files and timers
//! stay at the edges.

pub mod clock;
pub mod copy_workers;
pub mod device;
pub mod disk_io;
pub mod engine;
pub mod epochs;
pub mod events;
pub mod fault;
pub mod fault_layer;
pub mod http;
pub mod panics;
pub mod peer;
pub mod protocol;
pub mod router;
pub mod runtime;
pub mod settings;
pub mod store_actor;

use std::path::PathBuf;

use tandem_store::lock::TierLock;
use tandem_store::store::{Store, StoreConfig};

pub use crate::settings::{AgentSettings, SettingsError};

/// Why an agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentRunError {
    /// The store's tiers could not be opened.
    #[error("cannot open the store: {0}")]
    Store(#[from] tandem_store::store::StoreError),
    /// Another process holds this rank's tiers (another agent for the same rank runs, or one
    /// has not stopped): this agent touched nothing and exits.
    #[error("{0}; this agent touched nothing and exits")]
    Locked(#[from] tandem_store::lock::LockError),
    /// Another process took this rank's tiers over (this agent had lost its lock): it stops
    /// without changing them.
    #[error("this agent no longer owns the rank's tiers and stops: {0}")]
    Fenced(String),
    /// The core's configuration was refused (the leader's or the group index's).
    #[error(transparent)]
    Core(#[from] tandem_core::CoreError),
    /// The KV cache event stream could not start (`[events]`).
    #[error(transparent)]
    Events(#[from] crate::events::EventsError),
    /// A listener could not bind.
    #[error("cannot listen on {what} {addr}: {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Its address.
        addr: String,
        /// The IO error.
        source: std::io::Error,
    },
    /// The disk tier's I/O thread could not be started.
    #[error("cannot start the disk I/O thread: {0}")]
    DiskIo(std::io::Error),
    /// The engine socket could not be created.
    #[error(transparent)]
    Endpoint(#[from] engine::endpoint::EndpointError),
    /// A follower could not join the leader (unreachable, or refused: the message names the
    /// differing field).
    #[error(transparent)]
    Join(#[from] peer::connect::JoinError),
    /// The actor system failed.
    #[error("actor system: {0}")]
    System(std::io::Error),
    /// The completion log refused the group (bad URL or group name).
    #[error("completion log: {0}")]
    Durable(#[from] tandem_durable::DurableError),
    /// The epoch loop gave up (a recovery that kept failing, a core that cannot start).
    #[error("completion log: {0}")]
    Epochs(String),
    /// A thread of the agent panicked (an actor's handler, typically): the agent stops rather
    /// than run on with a dead actor.
    #[error("thread {thread} panicked at {location}: {message}; the agent stops")]
    Panicked {
        /// The thread's name.
        thread: String,
        /// `file:line` of the panic.
        location: String,
        /// The panic's message.
        message: String,
    },
}

/// Substitute `{group}` and `{rank}` in a configured directory.
fn tier_dir(template: &str, settings: &AgentSettings) -> PathBuf {
    PathBuf::from(
        template
            .replace("{group}", &settings.membership.group_id.0)
            .replace("{rank}", &settings.rank.0.to_string()),
    )
}

/// The lock file beside an engine socket (`rank<r>.sock.lock`), never unlinked.
pub fn socket_lock_path(socket: &std::path::Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Run one agent until `shutdown` is cancelled (a clean stop, `Ok`; the binary cancels it on
/// SIGTERM or SIGINT) or a fatal error. With `fixed_epoch`, the agent runs that one epoch
/// without a supervisor; otherwise it follows the epoch counter in Redis.
///
/// The first thing it does is lock the rank's tiers and its engine socket
/// ([`TierLock`]): a second agent for a rank that has one exits with
/// [`AgentRunError::Locked`], naming the lock file and the pid holding it, before it opens,
/// creates or unlinks anything (the running agent's engine socket included). The lock is held
/// until this function returns.
///
/// # Errors
/// [`AgentRunError`]: what could not start, or why a follower could not join.
pub fn run(
    settings: AgentSettings,
    fixed_epoch: bool,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), AgentRunError> {
    let store_config = StoreConfig {
        rank: settings.rank,
        shard_bytes: settings.shard_bytes as usize,
        host_capacity_blocks: settings.config.store.host_capacity_blocks,
        disk_capacity_blocks: settings.config.store.disk_capacity_blocks,
        host_dir: tier_dir(&settings.config.store.host_dir, &settings),
        disk_dir: tier_dir(&settings.config.store.disk_dir, &settings),
        disk_io: Default::default(),
        layout: settings.layout.clone(),
    };
    let lock = TierLock::acquire(&store_config, &[socket_lock_path(&settings.engine_socket)])?;
    tracing::info!(
        incarnation = lock.fence().token().incarnation,
        "this rank's tiers and engine socket are locked"
    );
    let (store, report) = Store::open_locked(store_config, &lock)?;
    if let Some(change) = &report.layout_changed {
        tracing::warn!(
            dropped = change.dropped,
            written_under = %change.written_under,
            opened_under = %change.opened_under,
            "the model layout changed since the tiers were written: every persisted shard was dropped unread"
        );
    } else if let Some(why) = &report.discarded_manifest {
        tracing::warn!(reason = %why, "the manifest was discarded: the tiers start empty");
    }
    tracing::info!(
        adopted = report.adopted,
        invalid = report.invalid,
        dropped_for_layout = report.layout_changed.as_ref().map_or(0, |c| c.dropped),
        "store opened (shards are verified when first read)"
    );
    let system = actix::System::new();
    let result = system.block_on(runtime::serve(settings, store, fixed_epoch, shutdown));
    actix::System::current().stop();
    // Held to the end: nothing of this process touches the tiers after this.
    drop(lock);
    result
}
