//! The ProtocolActor: the driver of this rank's core for one epoch.
//!
//! It holds a [`RankCore`] (`tandem-core`), feeds it every input with the agent's `now_ms`
//! (engine calls, peer messages and losses, this rank's shard results, append and manifest
//! results, one timer at the core's `poll_timeout`) and carries out every output in order:
//! replies to the engine call they name (written to the engine's socket right here when the
//! socket takes them, else handed to its endpoint: `direct`), commands to the `StoreActor`, messages on peer links
//! (in their own order, after an engine answer of the same input: `outbox`), appends to the
//! completion stream and manifest reads (their results fed back), events to the runtime. It holds no rule: every decision is the core's. A new epoch gets a new
//! ProtocolActor and a new core: nothing of an old epoch's protocol resumes.
//!
//! - `direct`: an engine's reply written to its socket from the place that produced it.
//! - `handlers`: one handler per message, each an input of the core.
//! - `inbound`: a follower's reading of its leader's connection, inside the actor.
//! - `messages`: the messages it takes (re-exported here).
//! - [`status`]: what `/status` shows of it.
//! - [`index_blocks`]: the leader's group index for `/index`.
//! - `metrics`: the core's counters copied into the agent's metrics.
//! - `outbox`: peer messages in order, written in one pass after the engine's answer.
//! - [`ring`]: the frames engine reads are answered with, published into the rank's frame ring.

mod direct;
mod handlers;
mod inbound;
pub mod index_blocks;
mod messages;
mod metrics;
mod outbox;
pub mod ring;
pub mod status;

pub use messages::*;
pub use status::AgentStatus;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Recipient, SpawnHandle, WrapFuture};
use tandem_core::{CallRef, ConnId, Event, Output, RankCore, Role};
use tandem_durable::{CompletionStream, LivenessStore};
use tandem_proto::engine::{AgentError, EngineReply};
use tokio::sync::{mpsc, oneshot};

use crate::clock::Clock;
use crate::peer::link::PeerLink;
use crate::store_actor::{Carry, LayersCopied, ShardDone};

/// The completion log's two concerns the protocol uses (the leader appends and reads
/// manifests).
#[derive(Clone, Debug)]
pub struct Log {
    /// The completion stream.
    pub stream: Arc<dyn CompletionStream>,
    /// Manifests (and heartbeats, failure reports: the runtime's).
    pub liveness: Arc<dyn LivenessStore>,
}

/// What a protocol actor is wired to.
pub struct Wiring {
    /// The core's events, for the runtime.
    pub events: mpsc::UnboundedSender<Event>,
    /// The rank's store.
    pub store: Recipient<Carry>,
    /// The completion log, when Redis is configured.
    pub log: Option<Log>,
    /// The agent's metrics.
    pub metrics: Arc<tandem_metrics::AgentMetrics>,
    /// Largest wire message, bytes (`protocol.max_frame_bytes`).
    pub max_frame_bytes: usize,
    /// Pages of the engine's registered pool, as the store keeps it.
    pub pool: crate::store_actor::PoolSize,
    /// Rank 0 with `[events] enabled`: where the group's KV cache events go.
    pub cache_events: Option<crate::events::EventSink>,
    /// The rank's frame ring, when the agent has one.
    pub ring: Option<ring::SharedRing>,
}

/// One engine call being carried: where its answer goes (and the socket its reply may be
/// written to at once), and when an `end_step` arrived (for the frame latency histogram).
struct Pending {
    reply: oneshot::Sender<Answered>,
    direct: Option<DirectReply>,
    end_step_at: Option<Instant>,
}

/// The actor. See the module docs.
pub struct ProtocolActor {
    core: RankCore,
    clock: Clock,
    wiring: Wiring,
    calls: BTreeMap<CallRef, Pending>,
    next_call: u64,
    /// Leader: follower links by connection; follower: the leader's link.
    links: BTreeMap<ConnId, PeerLink>,
    leader_link: Option<PeerLink>,
    /// The one timer, and the time it is armed for.
    timer: Option<(u64, SpawnHandle)>,
    /// Rank 0's KV cache events (when enabled).
    cache_events: Option<crate::events::EventTap>,
    /// Peer messages and closes not carried out yet.
    outbox: outbox::Outbox,
    /// The frame ring's publisher (when the agent has a ring).
    ring: Option<ring::RingPublisher>,
    /// Closed once the last append handed out was answered to the core: the next one answers
    /// after it, so the core hears appends in the order they went out.
    last_append: Option<oneshot::Receiver<()>>,
}

impl ProtocolActor {
    /// The driver of `core`.
    pub fn new(core: RankCore, clock: Clock, wiring: Wiring) -> Self {
        let cache_events = match core.role() {
            Role::Leader(_) => wiring
                .cache_events
                .clone()
                .map(crate::events::EventTap::new),
            Role::Follower(_) => None,
        };
        let epoch = core.config().epoch.0;
        let ring = wiring
            .ring
            .clone()
            .map(|r| ring::RingPublisher::new(r, epoch));
        Self {
            cache_events,
            ring,
            core,
            clock,
            wiring,
            calls: BTreeMap::new(),
            next_call: 1,
            links: BTreeMap::new(),
            leader_link: None,
            timer: None,
            outbox: outbox::Outbox::default(),
            last_append: None,
        }
    }

    /// A new engine call; its answer goes to `reply`, its reply's bytes to `direct` when given.
    fn call(
        &mut self,
        reply: oneshot::Sender<Answered>,
        direct: Option<DirectReply>,
        end_step: bool,
    ) -> CallRef {
        let call = CallRef(self.next_call);
        self.next_call += 1;
        let end_step_at = end_step.then(Instant::now);
        self.calls.insert(
            call,
            Pending {
                reply,
                direct,
                end_step_at,
            },
        );
        call
    }

    /// Feed the core one input at the clock's `now_ms`, then carry out its outputs.
    fn input<T>(&mut self, ctx: &mut Context<Self>, f: impl FnOnce(&mut RankCore, u64) -> T) -> T {
        crate::fault::message(crate::fault::Actor::Protocol);
        let now = self.clock.now_ms();
        let result = f(&mut self.core, now);
        self.flush(ctx);
        result
    }

    /// Carry out every output of the core, in order (peer messages after the engine's answer,
    /// see `outbox`), then arm the timer for its deadline.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        // An answer the endpoint still has to write: peer messages wait until it has.
        let mut answered = false;
        while let Some(out) = self.core.poll_output() {
            match out {
                Output::Reply { call, reply } => {
                    if let (Some(tap), EngineReply::Frame(f)) = (&mut self.cache_events, &reply) {
                        tap.sealed(f);
                    }
                    answered |= !self.reply(call, reply);
                }
                Output::Store(command) => self.wiring.store.do_send(Carry {
                    command,
                    report_to: ctx.address().recipient::<ShardDone>(),
                    layers_to: ctx.address().recipient::<LayersCopied>(),
                }),
                Output::Send { to, msg } => self.queue_send(to, &msg),
                Output::Close { conn } => self.queue_close(conn),
                Output::Append(a) => self.append(a, ctx),
                Output::FetchManifests { epoch } => self.fetch_manifests(epoch, ctx),
                Output::Event(e) => {
                    if let (Some(tap), Event::Ready { epoch }, Role::Leader(l)) =
                        (&mut self.cache_events, &e, self.core.role())
                    {
                        tap.ready(*epoch, l);
                    }
                    drop(self.wiring.events.send(e))
                }
            }
        }
        if let Some(ring) = &mut self.ring {
            ring.publish(&self.core);
        }
        self.send_outbox(answered, ctx);
        self.arm(ctx);
    }

    /// Answer `call`: its reply is written to the engine's socket at once when the call came
    /// with one and the socket takes it whole (returns `true`); otherwise what is left goes to
    /// the endpoint, which writes it (`false`). A reply for no call returns `true`: nothing
    /// waits on it.
    fn reply(&mut self, call: CallRef, reply: EngineReply) -> bool {
        let Some(p) = self.calls.remove(&call) else {
            tracing::error!(%call, "a reply for no call");
            return true;
        };
        if let (Some(t), EngineReply::Frame(_)) = (p.end_step_at, &reply) {
            self.wiring.metrics.observe_frame_latency(t.elapsed());
        }
        let answer = match &p.direct {
            Some(direct) => direct::write(direct, reply),
            None => Answered::Reply(reply),
        };
        let written = matches!(answer, Answered::Written);
        // The endpoint is gone when this fails (the engine disconnected): nobody to answer.
        let _ = p.reply.send(answer);
        written
    }

    /// Append a step record, then hand the result to the core. Appends go out at once, in the
    /// order the core output them, on the log's one multiplexed connection (so several are in
    /// flight, in order, on the wire); each result reaches the core only after the previous
    /// append's did.
    fn append(&mut self, a: tandem_core::Append, ctx: &mut Context<Self>) {
        let Some(log) = self.wiring.log.clone() else {
            let now = self.clock.now_ms();
            return self.core.handle_appended(Ok(()), now);
        };
        let metrics = self.wiring.metrics.clone();
        let previous = self.last_append.take();
        let (done, next) = oneshot::channel::<()>();
        self.last_append = Some(next);
        let fut = async move {
            let t = Instant::now();
            // Spawned futures are first polled in spawn order: this XADD is queued on the
            // connection before any later append's.
            let r = log
                .stream
                .append_step(a.epoch, a.step, &a.started, &a.finished)
                .await;
            metrics.observe_redis_append_latency(t.elapsed());
            if let Some(previous) = previous {
                // Closed (never sent) once the previous result reached the core.
                let _ = previous.await;
            }
            r.map(drop)
        };
        ctx.spawn(fut.into_actor(self).map(move |result, actor, ctx| {
            let lost = match &result {
                Err(e @ tandem_durable::DurableError::StreamLost { .. }) => Some(e.to_string()),
                _ => None,
            };
            let result = result.map_err(|e| e.to_string());
            actor.input(ctx, |core, now| {
                core.handle_appended(result, now);
                if let Some(reason) = lost {
                    core.handle_log_health(tandem_core::LogHealth::StreamLost(reason), now);
                }
            });
            drop(done);
        }));
    }

    /// Read every rank's manifest, then hand them to the core (a failed read: none).
    fn fetch_manifests(&mut self, epoch: tandem_proto::Epoch, ctx: &mut Context<Self>) {
        let Some(log) = self.wiring.log.clone() else {
            let now = self.clock.now_ms();
            return self.core.handle_manifests(&[], now);
        };
        let fut = async move { log.liveness.manifests(epoch).await.unwrap_or_default() };
        ctx.spawn(
            fut.into_actor(self).map(|got, actor, ctx| {
                actor.input(ctx, |core, now| core.handle_manifests(&got, now))
            }),
        );
    }

    /// One timer, at the core's next deadline.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        let next = self.core.poll_timeout();
        if self.timer.as_ref().map(|(at, _)| *at) == next {
            return;
        }
        if let Some((_, handle)) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        let Some(at) = next else { return };
        // A millisecond more: the clock reads whole milliseconds, and a timer that fired early
        // would find nothing due.
        let wait = Duration::from_millis(at.saturating_sub(self.clock.now_ms()) + 1);
        let handle = ctx.run_later(wait, |actor, ctx| {
            actor.timer = None;
            actor.input(ctx, |core, now| core.handle_timeout(now));
        });
        self.timer = Some((at, handle));
    }

    /// Answer every call still carried (the actor stops).
    fn abandon_calls(&mut self, reason: &str) {
        for (_, p) in std::mem::take(&mut self.calls) {
            let reason = reason.to_string();
            let _ = p
                .reply
                .send(Answered::Reply(EngineReply::Error(AgentError::NotReady {
                    reason,
                })));
        }
    }
}

impl Actor for ProtocolActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(Duration::from_millis(250), |actor, _| actor.sync_metrics());
        self.flush(ctx);
        let config = self.core.config();
        tracing::info!(
            rank = config.rank.0,
            epoch = config.epoch.0,
            "protocol actor started"
        );
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        // Peer messages the core gave before the end still go out, as a queued link would.
        self.write_outbox();
        if let Some(ring) = &mut self.ring {
            ring.close();
        }
        self.abandon_calls("agent is restarting");
    }
}
