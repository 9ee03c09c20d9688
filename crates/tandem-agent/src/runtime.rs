//! The agent's runtime: everything that outlives an epoch, and the loop that moves from one
//! epoch to the next.
//!
//! Owns the listeners (leader TCP, engine socket, HTTP), the `StoreActor`, and, when Redis is
//! configured, the agent's side of the supervisor's protocol: a heartbeat key each interval,
//! failure reports, membership of each epoch, delivery tracking of the completion stream (XACK
//! once the engine acknowledged a frame), and a watch on the epoch counter. When the counter
//! moves, the current `ProtocolActor` stops and a fresh one starts in the new epoch; nothing of
//! the old epoch's protocol resumes. Without Redis (`redis.url = ""`, no cluster, no
//! sentinels) the agent runs one epoch, and completions are not durable.
//!
//! It stops when the [`CancellationToken`] it is given is cancelled (the binary cancels it on
//! SIGTERM or SIGINT; this library catches no signal), also while it waits for Redis, for
//! the first epoch, for a new epoch or for a recovery read. Its retry and cadence figures are
//! named in [`cadence`].

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix::{Actor, Addr, Arbiter};
use tandem_durable::liveness::{FailureReport, Heartbeat};
use tandem_durable::recovery::EntryCheck;
use tandem_durable::{
    AckTracker, CompletionStream, DurableConfig, EpochStore, LivenessStore, RedisLog, StreamEntryId,
};
use tandem_proto::ids::{Epoch, TaskId};
use tandem_proto::wire::handshake::HandshakeError;
use tandem_proto::{reconcile, Leader, LeaderConfig};
use tandem_store::index::{GroupIndex, IndexConfig};
use tandem_store::store::Store;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::peer::connect::JoinError;
use crate::protocol::leader::LeaderRole;
use crate::protocol::{AgentEvent, ProtocolActor, StopEpoch, Wiring};
use crate::router::Router;
use crate::settings::AgentSettings;
use crate::store_actor::StoreActor;
use crate::{engine, http, peer, AgentRunError};

/// Every retry and cadence figure of the epoch loop, in one place.
pub mod cadence {
    /// Pause between attempts to reach Redis at start-up, ms.
    pub const REDIS_CONNECT_RETRY_MS: u64 = 500;
    /// Pause between reads of the epoch counter while no first epoch exists yet, ms.
    pub const FIRST_EPOCH_POLL_MS: u64 = 200;
    /// Attempts at reading the completion stream for a new epoch's recovery before the
    /// agent gives up with an error (with [`RECOVERY_RETRY_MS`]: one minute).
    pub const RECOVERY_ATTEMPTS: u32 = 120;
    /// Pause between recovery attempts, ms.
    pub const RECOVERY_RETRY_MS: u64 = 500;
    /// Attempts at publishing this rank's manifest before the epoch starts without it (the
    /// leader then treats the rank as holding nothing).
    pub const MANIFEST_ATTEMPTS: u32 = 20;
    /// Pause between manifest attempts, ms.
    pub const MANIFEST_RETRY_MS: u64 = 250;
    /// How long a published manifest is kept, ms (one hour: far beyond any epoch start).
    pub const MANIFEST_TTL_MS: u64 = 3_600_000;
    /// A heartbeat key lives this many heartbeat timeouts: long enough that the supervisor,
    /// not the expiry, judges a silent rank (it needs the age).
    pub const HEARTBEAT_TTL_TIMEOUTS: u64 = 10;
    /// Completion-stream entries read per call.
    pub const READ_BATCH: usize = 512;
    /// The leader trims the completion stream every this many heartbeat ticks (a trim scans
    /// the retained stream).
    pub const TRIM_EVERY_TICKS: u64 = 50;
    /// Pause before a follower tries to join again when the leader is in another epoch or
    /// unreachable, ms.
    pub const JOIN_RETRY_MS: u64 = 50;
    /// Pause before a follower tries again when the leader still holds its old connection, ms.
    pub const DUPLICATE_RANK_RETRY_MS: u64 = 100;
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What a started epoch needs from the runtime afterwards.
struct EpochRun {
    protocol: Addr<ProtocolActor>,
    /// Acknowledge every entry up to here once the engine acknowledged the reconciliation.
    ack_through: Option<StreamEntryId>,
}

/// Run the agent (see the module docs) until `shutdown` is cancelled (`Ok`) or a fatal error.
///
/// # Errors
/// [`AgentRunError`]: a listener that cannot bind, a refused group name, a recovery that kept
/// failing, a follower refused by its leader.
pub async fn serve(
    settings: AgentSettings,
    store: Store,
    fixed_epoch: bool,
    shutdown: CancellationToken,
) -> Result<(), AgentRunError> {
    let settings = Arc::new(settings);
    let clock = Clock::new();
    let shard_bytes = settings.shard_bytes;
    let store_arbiter = Arbiter::new();
    let metrics = Arc::new(tandem_metrics::AgentMetrics::new(
        &settings.membership.group_id.0,
        settings.rank.0,
    ));
    metrics.set_stream_max_length(settings.config.redis.stream_max_len);
    metrics.set_not_ready(Some(tandem_metrics::NotReadyReason::BetweenEpochs));
    let store_metrics = metrics.clone();
    // The store's thread logs inside the agent's span too (group, rank, epoch).
    let span = tracing::Span::current();
    store_arbiter.spawn_fn(move || {
        std::mem::forget(span.entered());
    });
    let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel::<AgentRunError>();
    let store_fatal = fatal_tx.clone();
    let store_addr = StoreActor::start_in_arbiter(&store_arbiter.handle(), move |_| {
        StoreActor::new(store, shard_bytes, store_metrics, store_fatal)
    });
    let router = Router::default();
    let (events_tx, mut events_rx) = mpsc::unbounded_channel::<AgentEvent>();

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
    actix_rt::spawn(engine::endpoint::serve(
        listener,
        settings.engine_socket.clone(),
        router.clone(),
        store_addr.clone(),
    ));
    let server = http::start(
        settings.http_addr,
        http::HttpState {
            router: router.clone(),
            store: store_addr.clone(),
            metrics: metrics.clone(),
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

    let durable = DurableConfig::from_config(
        &settings.config.redis,
        settings.membership.group_id.0.clone(),
        settings.world_size,
    );
    let log = if let Some(cfg) = durable {
        tracing::info!(redis = %settings.config.redis.describe(), wait_replicas = cfg.wait.replicas, "completion log");
        let mut warned = false;
        loop {
            tokio::select! {
                r = RedisLog::connect(&cfg) => match r {
                    Ok(l) => { metrics.set_redis_up(true); break Some(l) }
                    Err(tandem_durable::DurableError::InvalidGroup { group, reason }) => {
                        return Err(tandem_durable::DurableError::InvalidGroup { group, reason }.into());
                    }
                    Err(e) => {
                        metrics.set_redis_up(false);
                        if !warned { tracing::warn!(error = %e, "Redis unreachable; retrying"); warned = true; }
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(cadence::REDIS_CONNECT_RETRY_MS)) => {}
                            _ = shutdown.cancelled() => return Ok(()),
                        }
                    }
                },
                _ = shutdown.cancelled() => return Ok(()),
            }
        }
    } else {
        tracing::warn!("no Redis configured (redis.url empty, no cluster_nodes, no sentinels): completions are NOT durable and the group cannot be restarted by a supervisor");
        None
    };

    let mut epoch = match (&log, fixed_epoch) {
        (Some(log), false) => loop {
            match log.current_epoch().await {
                Ok(e) if e.0 > 0 => break e,
                Ok(_) => {
                    tracing::info!("waiting for the supervisor to start the group's first epoch")
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the epoch; retrying"),
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(cadence::FIRST_EPOCH_POLL_MS)) => {}
                _ = shutdown.cancelled() => return Ok(()),
            }
        },
        _ => settings.epoch,
    };

    let rank = settings.rank;
    // A process restarted inside a running epoch lost that epoch's protocol state: it reports
    // the failure and waits for the group's next epoch instead of serving this one.
    if let (Some(log), false) = (&log, fixed_epoch) {
        if log.members(epoch).await.is_ok_and(|m| m.contains(&rank)) {
            tracing::warn!(epoch = epoch.0, "this rank already joined the running epoch before a restart: waiting for the next one");
            let report = FailureReport {
                epoch,
                rank,
                reason: format!("agent of rank {rank} restarted inside epoch {epoch}"),
            };
            let beat_ttl = settings
                .heartbeat_timeout_ms
                .saturating_mul(cadence::HEARTBEAT_TTL_TIMEOUTS);
            epoch = loop {
                let _ = log.report_failure(&report).await;
                let _ = log
                    .heartbeat(
                        rank,
                        Heartbeat {
                            epoch,
                            unix_ms: unix_ms(),
                        },
                        beat_ttl,
                    )
                    .await;
                match log.current_epoch().await {
                    Ok(e) if e > epoch => break e,
                    _ => {}
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(settings.heartbeat_interval_ms)) => {}
                    _ = shutdown.cancelled() => return Ok(()),
                }
            };
        }
    }
    let interval = Duration::from_millis(settings.heartbeat_interval_ms);
    let ttl_ms = settings
        .heartbeat_timeout_ms
        .saturating_mul(cadence::HEARTBEAT_TTL_TIMEOUTS);
    let mut tracker = AckTracker::new();
    // Entries this rank reads are held to what the fenced append writes: a copy is counted
    // and reported here as it arrives (it is still acknowledged: it carries nothing), and
    // recovery ignores it.
    let mut entry_check = EntryCheck::new();
    let mut read_entries = |entries: &[tandem_durable::LoggedStep], tracker: &mut AckTracker| {
        for e in entries {
            if let Err(r) = entry_check.check_step(e) {
                tracing::warn!(rejection = %r, "completion stream entry ignored: a copy, or inconsistent with its id");
                metrics.stream_entries_rejected().inc();
            }
        }
        tracker.on_read(entries);
    };
    let outcome = 'epochs: loop {
        // Every log line of this epoch on this thread (the protocol actor's too) carries it.
        let _epoch_span = tracing::info_span!("epoch", epoch = epoch.0).entered();
        metrics.set_epoch(epoch.0);
        let Some(run) = start_epoch(
            &settings,
            epoch,
            log.as_ref(),
            &store_addr,
            &router,
            &events_tx,
            &fatal_tx,
            clock,
            &metrics,
            &shutdown,
        )
        .await?
        else {
            tracing::info!("shutdown requested while the epoch started: stopping");
            break 'epochs Ok(());
        };
        let mut ack_through = run.ack_through;
        let mut pending_reports: Vec<FailureReport> = Vec::new();
        let mut join_pending = false;
        let mut ticker = tokio::time::interval(interval);
        let mut ticks: u64 = 0;
        let next = loop {
            tokio::select! {
                _ = shutdown.cancelled() => { tracing::info!("shutdown requested: stopping"); break 'epochs Ok(()); }
                Some(e) = fatal_rx.recv() => break 'epochs Err(e),
                Some(ev) = events_rx.recv() => match ev {
                    AgentEvent::Ready { epoch: e } if e == epoch => join_pending = true,
                    AgentEvent::Failed { epoch: e, reason } if e == epoch => pending_reports.push(FailureReport { epoch: e, rank, reason }),
                    AgentEvent::EngineAcked { epoch: e, step } if e == epoch => {
                        if let Some(log) = &log {
                            // Read what was appended since the last tick, so that the ack
                            // covers every entry the engine has now applied.
                            if let Ok(entries) = log.read_new(rank, cadence::READ_BATCH).await {
                                read_entries(&entries, &mut tracker);
                            }
                            let ids = tracker.on_engine_ack(e, step);
                            if let Err(err) = log.ack(rank, &ids).await {
                                tracing::warn!(error = %err, "cannot acknowledge delivered completions");
                            }
                            if let Some(through) = ack_through {
                                match log.ack_through(rank, through).await {
                                    Ok(_) => ack_through = None,
                                    Err(err) => tracing::warn!(error = %err, "cannot acknowledge the reconciled completions"),
                                }
                            }
                        }
                    }
                    _ => {}
                },
                _ = ticker.tick() => {
                    let Some(log) = &log else { continue };
                    let beat = log.heartbeat(rank, Heartbeat { epoch, unix_ms: unix_ms() }, ttl_ms).await;
                    metrics.set_redis_up(beat.is_ok());
                    if join_pending && log.join(epoch, rank).await.is_ok() {
                        join_pending = false;
                    }
                    while let Some(r) = pending_reports.first() {
                        if log.report_failure(r).await.is_err() { break; }
                        pending_reports.remove(0);
                    }
                    if !fixed_epoch {
                        if let Ok(current) = log.current_epoch().await {
                            if current > epoch {
                                break current;
                            }
                        }
                    }
                    match log.read_new(rank, cadence::READ_BATCH).await {
                        Ok(entries) => read_entries(&entries, &mut tracker),
                        Err(e) => tracing::debug!(error = %e, "cannot read the completion stream"),
                    }
                    // The leader bounds the stream: entries every rank acknowledged go, beyond
                    // redis.stream_max_len (a trim scans the retained stream, so not every tick).
                    ticks += 1;
                    if settings.is_leader() && ticks % cadence::TRIM_EVERY_TICKS == 0 {
                        match log.trim(settings.config.redis.stream_max_len as usize).await {
                            Ok(n) => metrics.stream_trimmed().add(n),
                            Err(e) => tracing::debug!(error = %e, "cannot trim the completion stream"),
                        }
                        if let Ok(len) = log.stream_len().await {
                            metrics.set_stream_length(len);
                        }
                    }
                }
            }
        };
        tracing::info!(
            from = epoch.0,
            to = next.0,
            "the group moved to a new epoch: restarting the protocol actor"
        );
        let _ = run
            .protocol
            .send(StopEpoch {
                reason: format!("the group moved to epoch {next}"),
            })
            .await;
        router.set(None);
        metrics.set_not_ready(Some(tandem_metrics::NotReadyReason::BetweenEpochs));
        metrics.restarts().inc();
        epoch = next;
    };
    if let Some(p) = router.current() {
        if outcome.is_ok() {
            let drain = Duration::from_millis(settings.config.protocol.drain_timeout_ms);
            if tokio::time::timeout(drain, p.send(crate::protocol::Drain))
                .await
                .is_err()
            {
                tracing::warn!(
                    timeout_ms = drain.as_millis() as u64,
                    "drain did not finish in time"
                );
            }
        }
        let _ = p
            .send(StopEpoch {
                reason: "agent stopping".into(),
            })
            .await;
    }
    server_handle.stop(true).await;
    let _ = std::fs::remove_file(&settings.engine_socket);
    store_arbiter.stop();
    outcome
}

/// The settings of `epoch`.
fn for_epoch(settings: &AgentSettings, epoch: Epoch) -> Arc<AgentSettings> {
    let mut s = settings.clone();
    s.epoch = epoch;
    s.membership.epoch = epoch;
    Arc::new(s)
}

/// What the completion log says this epoch must reconcile; `None` once `shutdown` was
/// cancelled.
async fn recover(
    log: &RedisLog,
    shutdown: &CancellationToken,
) -> Result<Option<tandem_durable::Recovery>, AgentRunError> {
    let mut attempts = 0;
    loop {
        match log.recover().await {
            Ok(r) => return Ok(Some(r)),
            Err(e) if attempts < cadence::RECOVERY_ATTEMPTS => {
                attempts += 1;
                tracing::warn!(error = %e, "cannot read the completion stream for recovery; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(cadence::RECOVERY_RETRY_MS)) => {}
                    _ = shutdown.cancelled() => return Ok(None),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Starts the protocol actor of `epoch`; `None` once `shutdown` was cancelled meanwhile.
#[allow(clippy::too_many_arguments)]
async fn start_epoch(
    settings: &AgentSettings,
    epoch: Epoch,
    log: Option<&RedisLog>,
    store: &Addr<StoreActor>,
    router: &Router,
    events: &mpsc::UnboundedSender<AgentEvent>,
    fatal: &mpsc::UnboundedSender<AgentRunError>,
    clock: Clock,
    metrics: &Arc<tandem_metrics::AgentMetrics>,
    shutdown: &CancellationToken,
) -> Result<Option<EpochRun>, AgentRunError> {
    let s = for_epoch(settings, epoch);
    let recovery = match log {
        Some(log) => match recover(log, shutdown).await? {
            Some(r) => Some(r),
            None => return Ok(None),
        },
        None => None,
    };
    if let Some(r) = recovery.as_ref().filter(|r| r.entries_rejected > 0) {
        tracing::warn!(
            rejected = r.entries_rejected,
            scanned = r.entries_scanned,
            "recovery ignored completion stream entries that are copies of earlier ones or inconsistent with their ids"
        );
        metrics.stream_entries_rejected().add(r.entries_rejected);
    }
    let acknowledged: std::collections::BTreeSet<TaskId> = recovery
        .as_ref()
        .and_then(|r| r.acknowledged_by_rank.get(s.rank.0 as usize).cloned())
        .unwrap_or_default();
    let ack_through = recovery.as_ref().and_then(|r| r.last_entry_id);
    if let Some(log) = log {
        publish_manifest(log, &s, store, shutdown).await;
    }
    let wiring = Wiring {
        events: Some(events.clone()),
        log: log.cloned(),
        acknowledged,
        metrics: metrics.clone(),
    };
    let protocol = if s.is_leader() {
        let (reconciliation, aborted) = match &recovery {
            Some(r) => {
                let rec = reconcile(&r.redelivered, &r.in_flight, &[]);
                let empty = rec.redelivered.is_empty()
                    && rec.aborted.is_empty()
                    && rec.released_pins.is_empty();
                tracing::info!(
                    redelivered = rec.redelivered.len(),
                    aborted = rec.aborted.len(),
                    "reconciliation for the new epoch"
                );
                ((!empty).then_some(rec), r.aborted())
            }
            None => (None, Vec::new()),
        };
        let index = GroupIndex::new(IndexConfig {
            world_size: s.world_size,
            host_capacity_blocks: s.config.store.host_capacity_blocks,
            disk_capacity_blocks: s.config.store.disk_capacity_blocks,
        })?;
        let leader = Leader::new(
            LeaderConfig {
                epoch,
                world_size: s.world_size,
                window_steps: s.window_steps,
                retention_steps: s.retention_steps,
                heartbeat_timeout_ms: s.heartbeat_timeout_ms,
                start_ms: clock.now_ms(),
                max_frame_bytes: s.max_frame_bytes as u64,
            },
            reconciliation,
        )?;
        let role = LeaderRole::new(leader, index, &s, log.is_some(), aborted);
        ProtocolActor::new(s.clone(), clock, store.clone(), Some(role), wiring).start()
    } else {
        let addr = ProtocolActor::new(s.clone(), clock, store.clone(), None, wiring).start();
        actix_rt::spawn(join_leader(s.clone(), addr.clone(), fatal.clone()));
        addr
    };
    router.set(Some(protocol.clone()));
    Ok(Some(EpochRun {
        protocol,
        ack_through,
    }))
}

/// Publish this rank's shards for the leader's rebuild of the group index.
async fn publish_manifest(
    log: &RedisLog,
    s: &AgentSettings,
    store: &Addr<StoreActor>,
    shutdown: &CancellationToken,
) {
    let blocks = match store.send(crate::store_actor::ListBlocks).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list this rank's shards");
            return;
        }
    };
    let bytes = match postcard::to_allocvec(&blocks) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "cannot encode this rank's manifest");
            return;
        }
    };
    for _ in 0..cadence::MANIFEST_ATTEMPTS {
        match log
            .put_manifest(s.epoch, s.rank, &bytes, cadence::MANIFEST_TTL_MS)
            .await
        {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot publish this rank's manifest; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(cadence::MANIFEST_RETRY_MS)) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
}

/// A follower joins its leader, retrying while the two are in different epochs (one of them
/// has not noticed the restart yet). Refusals for configuration (version, group, fingerprint,
/// secret) are fatal: restarting would not change them.
async fn join_leader(
    s: Arc<AgentSettings>,
    actor: Addr<ProtocolActor>,
    fatal: mpsc::UnboundedSender<AgentRunError>,
) {
    loop {
        if !actor.connected() {
            return;
        }
        let joined = peer::connect::join(
            s.leader_addr.clone(),
            s.membership.clone(),
            s.rank,
            actor.clone(),
            s.connect_timeout_ms,
            s.handshake_timeout_ms,
            s.max_frame_bytes,
        )
        .await;
        match joined {
            Ok(()) => return,
            Err(JoinError::Refused {
                reason: HandshakeError::StaleEpoch { .. },
                ..
            })
            | Err(JoinError::Io(_)) => {
                tokio::time::sleep(Duration::from_millis(cadence::JOIN_RETRY_MS)).await;
            }
            Err(JoinError::Refused {
                reason: HandshakeError::DuplicateRank { .. },
                ..
            }) => {
                tokio::time::sleep(Duration::from_millis(cadence::DUPLICATE_RANK_RETRY_MS)).await;
            }
            Err(e) => {
                let _ = fatal.send(e.into());
                return;
            }
        }
    }
}
