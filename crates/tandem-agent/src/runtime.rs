//! The agent's runtime: everything that outlives an epoch, and the driver of the epoch loop.
//!
//! Owns the listeners (leader TCP, engine socket, HTTP), the `StoreActor`, the connection to
//! the completion log (`Arc<dyn CompletionStream>`, `EpochStore`, `LivenessStore`; `RedisLog`
//! in production), and the driver of `tandem_core::EpochLoop`, the state machine that decides
//! the agent's side of the supervisor's protocol (heartbeats, failure reports, membership,
//! delivery tracking, the epoch watch, recovery, manifests). The driver makes each call the
//! machine asks for ([`crate::epochs`]; the heartbeat beside one other call, never behind it)
//! and feeds back its result, the core's events and the machine's timer; when the machine
//! moves the epoch, the current `ProtocolActor` stops and a fresh one starts with a new core. Without Redis (`redis.url = ""`, no cluster, no
//! sentinels) the agent runs one epoch, and completions are not durable.
//!
//! It stops when the [`CancellationToken`] it is given is cancelled (the binary cancels it on
//! SIGTERM or SIGINT; this library catches no signal), also while it waits for Redis or for
//! any call of the log. Retry and cadence figures are named in `tandem_core::cadence`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Arbiter};
use tandem_core::{cadence, Effect, EpochLoop, LoopConfig};
use tandem_durable::{DurableConfig, RedisLog, SystemClock};
use tandem_store::store::Store;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::epochs::{Backends, Carried, EpochDriver};
use crate::router::Router;
use crate::settings::AgentSettings;
use crate::store_actor::StoreActor;
use crate::{engine, events, http, peer, AgentRunError};

/// Run the agent (see the module docs) until `shutdown` is cancelled (`Ok`) or a fatal error.
///
/// # Errors
/// [`AgentRunError`]: a listener that cannot bind, a refused group name, a recovery that kept
/// failing, a follower refused by its leader.
pub async fn serve(
    settings: AgentSettings,
    mut store: Store,
    fixed_epoch: bool,
    shutdown: CancellationToken,
) -> Result<(), AgentRunError> {
    let settings = Arc::new(settings);
    let clock = Clock::new();
    let shard_bytes = settings.shard_bytes;
    let incarnation = store.fence().token().incarnation;
    let store_arbiter = Arbiter::new();
    let mut agent_metrics =
        tandem_metrics::AgentMetrics::new(&settings.membership.group_id.0, settings.rank.0);
    let event_metrics = tandem_metrics::EventMetrics::register(agent_metrics.registry_mut());
    let metrics = Arc::new(agent_metrics);
    metrics.set_stream_max_length(settings.config.redis.stream_max_len);
    metrics.set_not_ready(Some(tandem_metrics::NotReadyReason::BetweenEpochs));
    // Every disk transfer runs on the disk-io thread, with a deadline.
    let disk = crate::disk_io::DiskHealth::new(metrics.clone());
    let disk_io =
        crate::disk_io::DeadlineIo::start(settings.config.store.disk_op_deadline_ms, disk.clone())
            .map_err(AgentRunError::DiskIo)?;
    store.set_disk_io(Box::new(disk_io));
    let store_metrics = metrics.clone();
    // The store's thread logs inside the agent's span too (group, rank, epoch).
    let span = tracing::Span::current();
    store_arbiter.spawn_fn(move || {
        std::mem::forget(span.entered());
    });
    let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel::<AgentRunError>();
    // From here on a panic in any thread (an actor's handler) stops the agent.
    crate::panics::install(fatal_tx.clone());
    crate::fault::announce();
    let store_fatal = fatal_tx.clone();
    let pool = crate::store_actor::PoolSize::default();
    let store_pool = pool.clone();
    let disk_deadline_ms = settings.config.store.disk_op_deadline_ms;
    let copy_workers = crate::copy_workers::CopyWorkers::new(settings.config.store.copy_workers);
    let store_addr = StoreActor::start_in_arbiter(&store_arbiter.handle(), move |_| {
        StoreActor::new(
            store,
            shard_bytes,
            store_metrics,
            store_fatal,
            store_pool,
            disk_deadline_ms,
        )
        .with_copy_workers(copy_workers)
    });
    let router = Router::default();
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();

    if settings.is_leader() {
        let listener = tokio::net::TcpListener::bind(&settings.leader_addr)
            .await
            .map_err(|source| AgentRunError::Bind {
                what: "leader address",
                addr: settings.leader_addr.clone(),
                source,
            })?;
        actix_rt::spawn(peer::listen::serve(
            listener,
            router.clone(),
            settings.handshake_timeout_ms,
            settings.max_frame_bytes,
        ));
        tracing::info!(addr = %settings.leader_addr, world_size = settings.world_size, "leader listening for followers");
    }
    let listener = engine::endpoint::bind(&settings.engine_socket)?;
    let ring = frame_ring(settings.rank.0);
    actix_rt::spawn(engine::endpoint::serve(
        listener,
        settings.engine_socket.clone(),
        router.clone(),
        store_addr.clone(),
        ring.clone(),
    ));
    let server = http::start(
        settings.http_addr,
        http::HttpState {
            router: router.clone(),
            store: store_addr.clone(),
            metrics: metrics.clone(),
            disk,
        },
    )
    .map_err(|source| AgentRunError::Bind {
        what: "HTTP address",
        addr: settings.http_addr.to_string(),
        source,
    })?;
    let server_handle = server.handle();
    actix_rt::spawn(server);
    tracing::info!(http = %settings.http_addr, engine_socket = %settings.engine_socket.display(), "agent serving");

    let backends = match connect(&settings, &metrics, &shutdown).await {
        Connected::Log(b) => Some(b),
        Connected::NoLog => None,
        Connected::Stopped => return Ok(()),
        Connected::Refused(e) => return Err(e.into()),
    };
    let mut machine = EpochLoop::new(
        LoopConfig {
            rank: settings.rank,
            epoch: settings.epoch,
            follow: !fixed_epoch,
            durable: backends.is_some(),
            heartbeat_interval_ms: settings.heartbeat_interval_ms,
            heartbeat_timeout_ms: settings.heartbeat_timeout_ms,
            stream_max_len: settings.config.redis.stream_max_len,
            ack_interval_ms: settings.config.redis.ack_interval_ms,
        },
        clock.now_ms(),
    );
    let cache_events = if settings.is_leader() && settings.config.events.enabled {
        let seqs = backends.as_ref().map(|b| b.liveness.clone());
        let block_size = settings.config.group.tokens_per_block;
        Some(events::start(&settings.config.events, seqs, block_size, event_metrics).await?)
    } else {
        None
    };
    let mut driver = EpochDriver {
        cache_events,
        settings: settings.clone(),
        clock,
        wall: Arc::new(SystemClock),
        incarnation,
        backends,
        store: store_addr,
        pool,
        router: router.clone(),
        events: events_tx,
        fatal: fatal_tx,
        metrics,
        shutdown: shutdown.clone(),
        current: None,
        span: None,
        ring,
    };
    // The machine's two call paths, carried side by side: the heartbeat, and one other
    // answered call. Neither waits for the other (a heartbeat behind a read that waits out its
    // 1 s deadline would be late for the supervisor's 500 ms timeout).
    let mut call: Option<InFlight> = None;
    let mut beat: Option<InFlight> = None;
    let outcome = 'run: loop {
        loop {
            // What arrived while the last effect was carried goes in first: the core's events
            // in order, then a wait that is over. Else, with a log that answers slowly, the
            // next queued call would always come first (the select below picks at random
            // among ready branches).
            while let Ok(ev) = events_rx.try_recv() {
                machine.handle_event(&ev, clock.now_ms());
            }
            machine.handle_timeout(clock.now_ms());
            let Some(effect) = machine.poll_effect() else {
                break;
            };
            let carried = match effect {
                e @ Effect::Heartbeat { .. } => {
                    beat = Some(Box::pin(driver.caller().carry(e)));
                    continue;
                }
                e if e.answered() => {
                    call = Some(Box::pin(driver.caller().carry(e)));
                    continue;
                }
                e => driver.carry(e).await,
            };
            if let Some(end) = settle(&mut machine, carried, clock.now_ms()) {
                break 'run end;
            }
        }
        let wait = machine
            .poll_timeout()
            .map_or(Duration::from_secs(3600), |t| {
                Duration::from_millis(t.saturating_sub(clock.now_ms()))
            });
        tokio::select! {
            _ = shutdown.cancelled() => { tracing::info!("shutdown requested: stopping"); break Ok(()); }
            Some(e) = fatal_rx.recv() => break Err(e),
            Some(ev) = events_rx.recv() => machine.handle_event(&ev, clock.now_ms()),
            carried = answer(&mut call) => {
                call = None;
                if let Some(end) = settle(&mut machine, carried, clock.now_ms()) {
                    break end;
                }
            }
            carried = answer(&mut beat) => {
                beat = None;
                if let Some(end) = settle(&mut machine, carried, clock.now_ms()) {
                    break end;
                }
            }
            _ = tokio::time::sleep(wait) => machine.handle_timeout(clock.now_ms()),
        }
    };
    driver.stop(outcome, &server_handle, store_arbiter).await
}

/// The rank's frame ring (`tandem_client::ring`); without one (a memfd the system refuses)
/// engines read every frame on the socket, as before.
fn frame_ring(rank: u32) -> Option<crate::protocol::ring::SharedRing> {
    use tandem_client::ring::{layout, Geometry, RingWriter};
    let geometry = Geometry::new(layout::DEFAULT_SLOTS, layout::DEFAULT_SLOT_BYTES);
    match RingWriter::create(&format!("tandem-frames-{rank}"), geometry) {
        Ok(ring) => Some(Arc::new(std::sync::Mutex::new(ring))),
        Err(e) => {
            tracing::warn!(error = %e, "no frame ring: engines read frames on the socket");
            None
        }
    }
}

/// An answered call of the epoch loop being carried.
type InFlight = Pin<Box<dyn Future<Output = Carried>>>;

/// The answer of the call in `slot`; never, while none is in flight.
async fn answer(slot: &mut Option<InFlight>) -> Carried {
    match slot {
        Some(call) => call.await,
        None => std::future::pending().await,
    }
}

/// Hand what carrying an effect came to to the machine; `Some`: the agent stops with it.
fn settle(
    machine: &mut EpochLoop,
    carried: Carried,
    now_ms: u64,
) -> Option<Result<(), AgentRunError>> {
    match carried {
        Carried::Answered(outcome) => machine.handle_outcome(outcome, now_ms),
        Carried::Done => {}
        Carried::Stopped => {
            tracing::info!("shutdown requested: stopping");
            return Some(Ok(()));
        }
        Carried::Fatal(reason) => return Some(Err(AgentRunError::Epochs(reason))),
    }
    None
}

/// How the connection to the completion log ended.
enum Connected {
    Log(Backends),
    NoLog,
    Stopped,
    Refused(tandem_durable::DurableError),
}

/// Reach Redis (retrying until `shutdown`), or run without it when `redis.url` is empty.
async fn connect(
    settings: &AgentSettings,
    metrics: &tandem_metrics::AgentMetrics,
    shutdown: &CancellationToken,
) -> Connected {
    let Some(cfg) = DurableConfig::from_config(
        &settings.config.redis,
        settings.membership.group_id.0.clone(),
        settings.world_size,
    ) else {
        tracing::warn!("no Redis configured (redis.url empty, no cluster_nodes, no sentinels): completions are NOT durable and the group cannot be restarted by a supervisor");
        return Connected::NoLog;
    };
    tracing::info!(redis = %settings.config.redis.describe(), wait_replicas = cfg.wait.replicas, "completion log");
    let mut warned = false;
    loop {
        tokio::select! {
            r = RedisLog::connect(&cfg) => match r {
                Ok(l) => {
                    metrics.set_redis_up(true);
                    let log = Arc::new(l);
                    return Connected::Log(Backends { stream: log.clone(), epochs: log.clone(), liveness: log });
                }
                Err(e @ tandem_durable::DurableError::InvalidGroup { .. }) => return Connected::Refused(e),
                Err(e) => {
                    metrics.set_redis_up(false);
                    if !warned { tracing::warn!(error = %e, "Redis unreachable; retrying"); warned = true; }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(cadence::REDIS_CONNECT_RETRY_MS)) => {}
                        _ = shutdown.cancelled() => return Connected::Stopped,
                    }
                }
            },
            _ = shutdown.cancelled() => return Connected::Stopped,
        }
    }
}
