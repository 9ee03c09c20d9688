//! The Tandem rank agent: one process per rank of a group.
//!
//! # Layout
//! - [`settings`]: what one agent needs, derived from the configuration and command line.
//! - [`protocol`]: the `ProtocolActor` (the sans-IO leader or follower, wired to the world).
//! - [`store_actor`]: the `StoreActor` (tiers, engine page buffers, shard copies).
//! - [`peer`]: the TCP transport between leader and followers, with the handshake's IO.
//! - [`engine`]: the Unix-socket endpoint the local engine talks to.
//! - [`http`]: `/healthz`, `/readyz`, `/status`.
//! - [`tiers`]: protocol ↔ store names for tiers and tier operations.
//! - [`clock`]: the monotonic `now_ms` fed to the state machines.
//!
//! Block bytes never pass through actor mailboxes: the `StoreActor` copies between the
//! engine's shared-memory pages and the tiers. Actors own state; sockets, files and timers
//! stay at the edges.

pub mod clock;
pub mod engine;
pub mod http;
pub mod peer;
pub mod protocol;
pub mod settings;
pub mod store_actor;
pub mod tiers;

use std::path::PathBuf;
use std::sync::Arc;

use actix::{Actor, Arbiter};
use tandem_proto::{Leader, LeaderConfig};
use tandem_store::index::{GroupIndex, IndexConfig};
use tandem_store::store::{Store, StoreConfig};
use tokio::sync::mpsc;

use crate::clock::Clock;
use crate::protocol::leader::LeaderRole;
use crate::protocol::{ProtocolActor, StopEpoch};
pub use crate::settings::{AgentSettings, SettingsError};
use crate::store_actor::StoreActor;

/// Why an agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentRunError {
    /// The store's tiers could not be opened.
    #[error("cannot open the store: {0}")]
    Store(#[from] tandem_store::store::StoreError),
    /// The group index configuration was refused.
    #[error("invalid group index: {0}")]
    Index(#[from] tandem_store::index::IndexError),
    /// The leader configuration was refused.
    #[error("invalid leader configuration: {0}")]
    Leader(#[from] tandem_proto::LeaderError),
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
}

/// Substitute `{group}` and `{rank}` in a configured directory.
fn tier_dir(template: &str, settings: &AgentSettings) -> PathBuf {
    PathBuf::from(template.replace("{group}", &settings.membership.group_id.0).replace("{rank}", &settings.rank.0.to_string()))
}

/// Run one agent until SIGTERM or SIGINT (a clean stop, `Ok`) or a fatal error.
///
/// # Errors
/// [`AgentRunError`]: what could not start, or why a follower could not join.
pub fn run(settings: AgentSettings) -> Result<(), AgentRunError> {
    let settings = Arc::new(settings);
    let store_config = StoreConfig {
        rank: settings.rank,
        shard_bytes: settings.shard_bytes as usize,
        host_capacity_blocks: settings.config.store.host_capacity_blocks,
        disk_capacity_blocks: settings.config.store.disk_capacity_blocks,
        host_dir: tier_dir(&settings.config.store.host_dir, &settings),
        disk_dir: tier_dir(&settings.config.store.disk_dir, &settings),
        disk_io: Default::default(),
    };
    let (store, report) = Store::open(store_config)?;
    tracing::info!(verified = report.verified, corrupt = report.corrupt.len(), invalid = report.invalid, "store opened");
    let system = actix::System::new();
    let result = system.block_on(serve(settings, store));
    actix::System::current().stop();
    result
}

async fn serve(settings: Arc<AgentSettings>, store: Store) -> Result<(), AgentRunError> {
    let clock = Clock::new();
    let shard_bytes = settings.shard_bytes;
    let store_arbiter = Arbiter::new();
    let store_addr = StoreActor::start_in_arbiter(&store_arbiter.handle(), move |_| StoreActor::new(store, shard_bytes));
    let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel::<AgentRunError>();

    let protocol = if settings.is_leader() {
        let listener = tokio::net::TcpListener::bind(&settings.leader_addr).await.map_err(|source| AgentRunError::Bind {
            what: "leader address",
            addr: settings.leader_addr.clone(),
            source,
        })?;
        let index = GroupIndex::new(IndexConfig {
            world_size: settings.world_size,
            host_capacity_blocks: settings.config.store.host_capacity_blocks,
            disk_capacity_blocks: settings.config.store.disk_capacity_blocks,
        })?;
        let leader = Leader::new(
            LeaderConfig {
                epoch: settings.epoch,
                world_size: settings.world_size,
                window_steps: settings.window_steps,
                retention_steps: settings.retention_steps,
                heartbeat_timeout_ms: settings.heartbeat_timeout_ms,
                start_ms: clock.now_ms(),
            },
            None,
        )?;
        let role = LeaderRole::new(leader, index, &settings);
        let addr = ProtocolActor::new(settings.clone(), clock, store_addr.clone(), Some(role)).start();
        actix_rt::spawn(peer::listen::serve(listener, addr.clone(), settings.handshake_timeout_ms, settings.max_frame_bytes));
        tracing::info!(addr = %settings.leader_addr, world_size = settings.world_size, "leader listening for followers");
        addr
    } else {
        let addr = ProtocolActor::new(settings.clone(), clock, store_addr.clone(), None).start();
        let (s, a, tx) = (settings.clone(), addr.clone(), fatal_tx.clone());
        actix_rt::spawn(async move {
            let joined = peer::connect::join(
                s.leader_addr.clone(),
                s.membership.clone(),
                s.rank,
                a,
                s.connect_timeout_ms,
                s.handshake_timeout_ms,
                s.max_frame_bytes,
            )
            .await;
            if let Err(e) = joined {
                let _ = tx.send(e.into());
            }
        });
        addr
    };

    let listener = engine::endpoint::bind(&settings.engine_socket)?;
    actix_rt::spawn(engine::endpoint::serve(listener, settings.engine_socket.clone(), protocol.clone(), store_addr.clone()));
    let server = http::start(settings.http_addr, http::HttpState { protocol: protocol.clone(), store: store_addr.clone() })
        .map_err(|source| AgentRunError::Bind { what: "HTTP address", addr: settings.http_addr.to_string(), source })?;
    let server_handle = server.handle();
    actix_rt::spawn(server);
    tracing::info!(http = %settings.http_addr, engine_socket = %settings.engine_socket.display(), "agent serving");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(AgentRunError::System)?;
    let outcome = tokio::select! {
        _ = term.recv() => { tracing::info!("SIGTERM: stopping"); Ok(()) }
        _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: stopping"); Ok(()) }
        Some(e) = fatal_rx.recv() => Err(e),
    };
    protocol.do_send(StopEpoch { reason: "agent stopping".into() });
    server_handle.stop(true).await;
    let _ = std::fs::remove_file(&settings.engine_socket);
    store_arbiter.stop();
    outcome
}
