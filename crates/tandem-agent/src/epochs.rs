//! The calls the epoch loop asks for, made: the driver side of `tandem_core::EpochLoop`.
//!
//! Owns [`EpochDriver`]: the log's backends behind their traits, the store, the router and the
//! current epoch's `ProtocolActor`. [`EpochDriver::carry`] makes one [`Effect`] (a call of the
//! log raced against the shutdown, the start or stop of an epoch's protocol actor, the log's
//! health handed to that actor, a metric) and returns its [`Outcome`]; it decides nothing.
//! An answered call can also be made by a [`Caller`], which owns what it needs, so that the
//! runtime carries the heartbeat and one other call side by side (the epoch loop's two call
//! paths); it never holds a heartbeat back behind another call. A follower's join of its
//! leader runs here too, as IO: connect, retry while `tandem_core::cadence::join_retry_ms` says
//! waiting helps.

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr};
use tandem_core::{cadence, CoreConfig, Effect, EpochStart, Event, Note, Outcome, RankCore};
use tandem_durable::{
    CompletionStream, DurableError, EpochStore, Heartbeat, LivenessStore, WallClock,
};
use tandem_proto::Epoch;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::peer::connect::JoinError;
use crate::protocol::{Drain, Log, ProtocolActor, StopEpoch, Wiring};
use crate::router::Router;
use crate::settings::AgentSettings;
use crate::store_actor::{ListBlocks, StoreActor};
use crate::{peer, AgentRunError};

/// The completion log's three concerns.
#[derive(Clone, Debug)]
pub struct Backends {
    /// The completion stream.
    pub stream: Arc<dyn CompletionStream>,
    /// Epochs, supervisor state, membership.
    pub epochs: Arc<dyn EpochStore>,
    /// Heartbeats, failure reports, manifests.
    pub liveness: Arc<dyn LivenessStore>,
}

/// What carrying out one effect came to.
pub enum Carried {
    /// The machine's answer.
    Answered(Outcome),
    /// Done; no answer.
    Done,
    /// The shutdown came first.
    Stopped,
    /// The machine gave up.
    Fatal(String),
}

/// Everything an epoch loop's calls reach.
pub struct EpochDriver {
    /// The agent's settings (epoch: the first one's).
    pub settings: Arc<AgentSettings>,
    /// The monotonic clock of the cores.
    pub clock: Clock,
    /// The wall clock heartbeats are stamped with.
    pub wall: Arc<dyn WallClock>,
    /// This process's incarnation (its tier fence's), carried in every heartbeat: the
    /// supervisor sees a restart inside an epoch by the change, however fast it was.
    pub incarnation: u64,
    /// The log, when Redis is configured.
    pub backends: Option<Backends>,
    /// The rank's store.
    pub store: Addr<StoreActor>,
    /// Pages of the engine's registered pool, kept by the store.
    pub pool: crate::store_actor::PoolSize,
    /// Where engine, peer and HTTP requests find the current protocol actor.
    pub router: Router,
    /// The cores' events, for the machine.
    pub events: mpsc::UnboundedSender<Event>,
    /// Where a follower's refused join stops the agent.
    pub fatal: mpsc::UnboundedSender<AgentRunError>,
    /// The agent's metrics.
    pub metrics: Arc<tandem_metrics::AgentMetrics>,
    /// Cancelled to stop.
    pub shutdown: CancellationToken,
    /// The current epoch's protocol actor.
    pub current: Option<Addr<ProtocolActor>>,
    /// Rank 0 with `[events] enabled`: the KV cache event publisher.
    pub cache_events: Option<crate::events::EventSink>,
    /// Every log line of an epoch on this thread (the protocol actor's too) carries it.
    pub span: Option<tracing::span::EnteredSpan>,
    /// The rank's frame ring, when it could be made.
    pub ring: Option<crate::protocol::ring::SharedRing>,
}

impl EpochDriver {
    /// What makes the answered calls, owned (see [`Caller`]).
    pub fn caller(&self) -> Caller {
        Caller {
            rank: self.settings.rank,
            wall: self.wall.clone(),
            incarnation: self.incarnation,
            backends: self.backends.clone(),
            store: self.store.clone(),
            shutdown: self.shutdown.clone(),
        }
    }

    /// Make `effect`.
    pub async fn carry(&mut self, effect: Effect) -> Carried {
        match effect {
            Effect::StartEpoch { epoch, start } => self.start(epoch, start),
            Effect::StopEpoch { epoch, next } => {
                self.stop_epoch(format!(
                    "the group moved from epoch {epoch} to epoch {next}"
                ))
                .await;
                Carried::Done
            }
            Effect::Note(n) => {
                self.note(n);
                Carried::Done
            }
            Effect::LogHealth { epoch: _, health } => {
                // Effects come in order: the current actor is the running epoch's.
                tracing::info!(?health, "the completion log's answers to this rank changed");
                if let Some(p) = &self.current {
                    p.do_send(crate::protocol::LogHealth(health));
                }
                Carried::Done
            }
            Effect::Fatal(reason) => Carried::Fatal(reason),
            answered => self.caller().carry(answered).await,
        }
    }

    fn note(&self, n: Note) {
        let m = &self.metrics;
        match n {
            Note::RedisUp(up) => m.set_redis_up(up),
            Note::EntriesRejected(k) => m.stream_entries_rejected().add(k),
            Note::Trimmed(k) => m.stream_trimmed().add(k),
            Note::StreamLength(k) => m.set_stream_length(k),
            Note::Restarted => m.restarts().inc(),
        }
    }
}

/// Makes one answered call ([`Effect::answered`]) with what it owns: a clone of the backends,
/// the store's address, the shutdown. Several may run at once; each is raced against the
/// shutdown ([`Carried::Stopped`]).
#[derive(Clone)]
pub struct Caller {
    rank: tandem_proto::Rank,
    wall: Arc<dyn WallClock>,
    incarnation: u64,
    backends: Option<Backends>,
    store: Addr<StoreActor>,
    shutdown: CancellationToken,
}

impl Caller {
    /// Make `effect`, an answered one; any other is [`Carried::Fatal`] (a driver's mistake).
    pub async fn carry(self, effect: Effect) -> Carried {
        if effect == Effect::ListBlocks {
            return Carried::Answered(Outcome::Blocks(self.store.send(ListBlocks).await.ok()));
        }
        match self.logged(effect).await {
            Ok(outcome) => Carried::Answered(outcome),
            Err(carried) => carried,
        }
    }

    /// Make a call of the log.
    async fn logged(&self, effect: Effect) -> Result<Outcome, Carried> {
        let rank = self.rank;
        let b = self.backends.clone();
        let log = |op: &'static str| {
            b.clone()
                .ok_or_else(|| format!("no completion log for {op}"))
        };
        Ok(match effect {
            Effect::ReadEpoch => Outcome::EpochRead(
                self.call(log("read_epoch"), |b| async move {
                    b.epochs.current_epoch().await
                })
                .await?,
            ),
            Effect::ReadMembers { epoch } => Outcome::Members(
                self.call(
                    log("members"),
                    |b| async move { b.epochs.members(epoch).await },
                )
                .await?,
            ),
            Effect::ReportFailure(r) => Outcome::Reported(
                self.call(log("report"), |b| async move {
                    b.liveness.report_failure(&r).await
                })
                .await?,
            ),
            Effect::Heartbeat { epoch, ttl_ms } => {
                let unix_ms = self.wall.now_ms();
                let beat = Heartbeat {
                    epoch,
                    unix_ms,
                    incarnation: self.incarnation,
                };
                Outcome::HeartbeatWritten(
                    self.call(log("heartbeat"), |b| async move {
                        b.liveness.heartbeat(rank, beat, ttl_ms).await
                    })
                    .await?,
                )
            }
            Effect::Join { epoch } => Outcome::Joined(
                self.call(log("join"), |b| async move {
                    b.epochs.join(epoch, rank).await.map(drop)
                })
                .await?,
            ),
            Effect::Recover => Outcome::Recovered(
                self.call(log("recover"), |b| async move {
                    b.stream.recover().await.map(Box::new)
                })
                .await?,
            ),
            Effect::PutManifest {
                epoch,
                bytes,
                ttl_ms,
            } => Outcome::ManifestPut(
                self.call(log("put_manifest"), |b| async move {
                    b.liveness.put_manifest(epoch, rank, &bytes, ttl_ms).await
                })
                .await?,
            ),
            Effect::ReadNew { count } => Outcome::Read(
                self.call_typed(log("read_new"), |b| async move {
                    b.stream.read_new(rank, count).await
                })
                .await?,
            ),
            Effect::Ack { ids } => Outcome::Acked(
                self.call(
                    log("ack"),
                    |b| async move { b.stream.ack(rank, &ids).await },
                )
                .await?,
            ),
            Effect::AckThrough { through } => Outcome::AckedThrough(
                self.call(log("ack_through"), |b| async move {
                    b.stream.ack_through(rank, through).await
                })
                .await?,
            ),
            Effect::Trim { max_len } => Outcome::Trimmed(
                self.call(log("trim"), |b| async move {
                    b.stream.trim(max_len as usize).await
                })
                .await?,
            ),
            Effect::StreamLen => Outcome::StreamLen(
                self.call(
                    log("stream_len"),
                    |b| async move { b.stream.stream_len().await },
                )
                .await?,
            ),
            other => return Err(Carried::Fatal(format!("not a call of the log: {other:?}"))),
        })
    }

    /// One call of the log, raced against the shutdown; its error as text.
    async fn call<T, F, Fut>(
        &self,
        backends: Result<Backends, String>,
        f: F,
    ) -> Result<Result<T, String>, Carried>
    where
        F: FnOnce(Backends) -> Fut,
        Fut: std::future::Future<Output = tandem_durable::Result<T>>,
    {
        let b = match backends {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        tokio::select! {
            r = f(b) => Ok(r.map_err(|e| e.to_string())),
            _ = self.shutdown.cancelled() => Err(Carried::Stopped),
        }
    }

    /// [`Self::call`], its error kept typed (no completion log: [`DurableError::Unavailable`]).
    async fn call_typed<T, F, Fut>(
        &self,
        backends: Result<Backends, String>,
        f: F,
    ) -> Result<tandem_durable::Result<T>, Carried>
    where
        F: FnOnce(Backends) -> Fut,
        Fut: std::future::Future<Output = tandem_durable::Result<T>>,
    {
        let b = match backends {
            Ok(b) => b,
            Err(reason) => {
                return Ok(Err(DurableError::Unavailable {
                    url: String::new(),
                    op: "read_new",
                    reason,
                }))
            }
        };
        tokio::select! {
            r = f(b) => Ok(r),
            _ = self.shutdown.cancelled() => Err(Carried::Stopped),
        }
    }
}

impl EpochDriver {
    /// Start the protocol actor of `epoch` with a new core.
    fn start(&mut self, epoch: Epoch, start: EpochStart) -> Carried {
        self.span = None;
        self.span = Some(tracing::info_span!("epoch", epoch = epoch.0).entered());
        self.metrics.set_epoch(epoch.0);
        let s = Arc::new(self.settings.for_epoch(epoch));
        let core = match RankCore::new(
            core_config(&s, self.backends.is_some()),
            start,
            self.clock.now_ms(),
        ) {
            Ok(core) => core,
            Err(e) => return Carried::Fatal(e.to_string()),
        };
        let wiring = Wiring {
            events: self.events.clone(),
            store: self.store.clone().recipient(),
            log: self.backends.as_ref().map(|b| Log {
                stream: b.stream.clone(),
                liveness: b.liveness.clone(),
            }),
            metrics: self.metrics.clone(),
            max_frame_bytes: s.max_frame_bytes,
            pool: self.pool.clone(),
            cache_events: self.cache_events.clone(),
            ring: self.ring.clone(),
        };
        let protocol = ProtocolActor::new(core, self.clock, wiring).start();
        if !s.is_leader() {
            actix_rt::spawn(join_leader(s, protocol.clone(), self.fatal.clone()));
        }
        self.router.set(Some(protocol.clone()));
        self.current = Some(protocol);
        Carried::Done
    }

    /// Stop the current epoch's protocol actor.
    async fn stop_epoch(&mut self, reason: String) {
        if let Some(p) = self.current.take() {
            let _ = p.send(StopEpoch { reason }).await;
        }
        self.router.set(None);
        self.metrics
            .set_not_ready(Some(tandem_metrics::NotReadyReason::BetweenEpochs));
    }

    /// Stop the agent: drain the current epoch (a clean stop only), stop its actor, the HTTP
    /// server and the store; `outcome` is returned.
    pub async fn stop(
        mut self,
        outcome: Result<(), AgentRunError>,
        server: &actix_web::dev::ServerHandle,
        store_arbiter: actix::Arbiter,
    ) -> Result<(), AgentRunError> {
        if let Some(p) = &self.current {
            if outcome.is_ok() {
                let drain = Duration::from_millis(self.settings.config.protocol.drain_timeout_ms);
                if tokio::time::timeout(drain, p.send(Drain)).await.is_err() {
                    tracing::warn!(
                        timeout_ms = drain.as_millis() as u64,
                        "drain did not finish in time"
                    );
                }
            }
        }
        self.stop_epoch("agent stopping".into()).await;
        server.stop(true).await;
        let _ = std::fs::remove_file(&self.settings.engine_socket);
        store_arbiter.stop();
        outcome
    }
}

/// What the core of `s`'s epoch runs with.
fn core_config(s: &AgentSettings, durable: bool) -> CoreConfig {
    CoreConfig {
        epoch: s.epoch,
        rank: s.rank,
        world_size: s.world_size,
        shard_bytes: s.shard_bytes,
        layers_per_rank: s.layout.num_layers / s.layout.pp_size.max(1),
        window_steps: s.window_steps,
        retention_steps: s.retention_steps,
        max_frame_bytes: s.max_frame_bytes as u64,
        heartbeat_interval_ms: s.heartbeat_interval_ms,
        heartbeat_timeout_ms: s.heartbeat_timeout_ms,
        host_capacity_blocks: s.config.store.host_capacity_blocks,
        disk_capacity_blocks: s.config.store.disk_capacity_blocks,
        bind_timeout_ms: s.config.protocol.bind_timeout_ms,
        max_appends_in_flight: appends_in_flight(&s.config),
        append_wait_ms: s.config.protocol.append_wait_ms,
        durable,
        membership: s.membership.clone(),
        leader_addr: s.leader_addr.clone(),
    }
}

/// The write-ahead appends the leader may keep in flight: `protocol.max_appends_in_flight`, but
/// one with a Redis Cluster, whose client may re-send a failed write after a later one landed
/// (a confirmed step's record would then follow a later step's in the stream).
fn appends_in_flight(config: &tandem_config::TandemConfig) -> u32 {
    match config.redis.mode() {
        tandem_config::RedisMode::Cluster => 1,
        _ => config.protocol.max_appends_in_flight,
    }
}

/// A follower joins its leader, retrying while waiting can help (the two are in different
/// epochs, the leader still holds the old connection, the connection broke off). Other
/// refusals (version, group, fingerprint, secret) are fatal: restarting would not change them.
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
        let retry_ms = match &joined {
            Ok(()) => return,
            Err(JoinError::Io(_)) => Some(cadence::JOIN_RETRY_MS),
            Err(JoinError::Refused { reason, .. }) => cadence::join_retry_ms(reason),
            Err(_) => None,
        };
        match (retry_ms, joined) {
            (Some(ms), _) => tokio::time::sleep(Duration::from_millis(ms)).await,
            (None, Err(e)) => {
                let _ = fatal.send(e.into());
                return;
            }
            (None, Ok(())) => return,
        }
    }
}
