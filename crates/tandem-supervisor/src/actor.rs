//! The `SupervisorActor`: the driver of the restart state machine, on actix.
//!
//! Owns the machine, the launched agents and the published view between rounds. Each round
//! ([`Observe`]) runs atomically (no other message interleaves): it hands the machine the
//! due deadline, reads the group through the `tandem_durable` traits (failure reports,
//! heartbeats, membership) plus the launched agents' exits, carries out the machine's
//! [`Effect`]s in order (save the state, move the epoch, relaunch agents, give up) and
//! publishes the view. It decides nothing itself: every decision is [`RestartMachine`]'s.
//!
//! It stops when the [`CancellationToken`] it was given is cancelled (also in the middle of
//! a round: every call to the log is raced against it) or when the machine gives up; either
//! way it stops the launched agents, waits for them, and sends its [`Exit`] once. It never
//! reads a clock but the [`WallClock`] it was given, and never touches Redis but through
//! [`EpochStore`] and [`LivenessStore`], so tests drive it with `tandem_durable::MemoryLog`
//! and a `ManualClock`, one [`Observe`] at a time.
//!
//! Unlike actix's own `Supervisor` (one actor's context restarted, no limit, no backoff),
//! this actor restarts a whole group of processes, one_for_all, within a restart limit and
//! with backoff, and its state survives its own restart (it lives in the log).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorContext, ActorFutureExt, AsyncContext, AtomicResponse, Context, Handler, Message,
    SpawnHandle, WrapFuture,
};
use tandem_durable::{DurableError, EpochStore, LivenessStore, WallClock};
use tandem_proto::{Epoch, Rank};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::cadence::Cadence;
use crate::launcher::Launcher;
use crate::restart::{Effect, Observation, RestartMachine};
use crate::runner::{Exit, SupervisorError};
use crate::view::{view, Published, RestartRecord, Sight, RESTART_HISTORY_LEN};

/// The group's durable state, as the supervisor uses it.
#[derive(Clone, Debug)]
pub struct Backends {
    /// The epoch counter, the saved state, membership.
    pub epochs: Arc<dyn EpochStore>,
    /// Heartbeats and failure reports.
    pub liveness: Arc<dyn LivenessStore>,
}

/// Everything a [`SupervisorActor`] is built from.
pub struct SupervisorWiring {
    /// The group's name (for the view).
    pub group: String,
    /// Ranks in the group.
    pub world_size: u32,
    /// The machine, continuing from the stored state.
    pub machine: RestartMachine,
    /// The log.
    pub backends: Backends,
    /// The wall clock every time is read from.
    pub clock: Arc<dyn WallClock>,
    /// The agents this supervisor launched (`tandem up`), if any.
    pub launcher: Option<Launcher>,
    /// Where the view and the metrics go.
    pub published: Published,
    /// Timing and batch sizes.
    pub cadence: Cadence,
    /// The restart window, ms (for the view's `restarts_in_window`).
    pub window_ms: u64,
    /// A number in `[0, 1)` per restart decision (randomness in production, fixed in tests).
    pub jitter: Box<dyn FnMut() -> f64>,
    /// Cancelled to stop the actor.
    pub shutdown: CancellationToken,
    /// When true the actor runs a round every [`Cadence::round_ms`] and at each backoff
    /// deadline by itself; when false only on [`Observe`] (tests).
    pub autonomous: bool,
    /// Receives the [`Exit`] once the actor stopped its agents.
    pub done: oneshot::Sender<Result<Exit, SupervisorError>>,
}

/// Run one round now: the due deadline, one observation of the group, the machine's effects.
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "()")]
pub struct Observe;

/// What a round owns while it runs (taken out of the actor and put back after).
struct Parts {
    machine: RestartMachine,
    launcher: Option<Launcher>,
    jitter: Box<dyn FnMut() -> f64>,
    /// Agent exits seen while the log could not be read: failures once it is back.
    exits_unjudged: Vec<String>,
    /// The restarts this supervisor ordered, oldest first, at most [`RESTART_HISTORY_LEN`]
    /// (for the status page; never read by a decision).
    history: Vec<RestartRecord>,
}

/// The log, the clock and the token, as a round uses them.
#[derive(Clone)]
struct Io {
    backends: Backends,
    clock: Arc<dyn WallClock>,
    cadence: Cadence,
    shutdown: CancellationToken,
    published: Published,
}

/// Cancelled, or the call's own result.
enum Call<T> {
    Done(T),
    Cancelled,
}

impl Io {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Awaits `fut` unless the shutdown comes first.
    async fn call<T>(&self, fut: impl Future<Output = T>) -> Call<T> {
        tokio::select! {
            v = fut => Call::Done(v),
            _ = self.shutdown.cancelled() => Call::Cancelled,
        }
    }
}

/// How a round ended.
enum Ending {
    /// Go on; the view shows what was seen (`None`: the round saw nothing new).
    Continue(Option<Seen>),
    /// The shutdown came.
    Cancelled,
    /// Stop with this exit.
    Stop(Result<Exit, SupervisorError>),
}

/// What a round saw, for the view.
struct Seen {
    beats: Vec<Option<tandem_durable::Heartbeat>>,
    members: Vec<Rank>,
    redis: String,
}

/// The supervisor of one group, on actix (see the module docs).
pub struct SupervisorActor {
    group: String,
    world_size: u32,
    io: Io,
    window_ms: u64,
    autonomous: bool,
    parts: Option<Parts>,
    done: Option<oneshot::Sender<Result<Exit, SupervisorError>>>,
    wake: Option<SpawnHandle>,
    /// What the last round saw, republished with a fresh age every round.
    last_seen: Seen,
}

impl SupervisorActor {
    /// An actor from `w` (start it with [`Actor::start`]).
    pub fn new(w: SupervisorWiring) -> Self {
        SupervisorActor {
            group: w.group,
            world_size: w.world_size,
            io: Io {
                backends: w.backends,
                clock: w.clock,
                cadence: w.cadence,
                shutdown: w.shutdown,
                published: w.published,
            },
            window_ms: w.window_ms,
            autonomous: w.autonomous,
            parts: Some(Parts {
                machine: w.machine,
                launcher: w.launcher,
                jitter: w.jitter,
                exits_unjudged: Vec::new(),
                history: Vec::new(),
            }),
            done: Some(w.done),
            wake: None,
            last_seen: Seen {
                beats: Vec::new(),
                members: Vec::new(),
                redis: "ok".into(),
            },
        }
    }

    /// After a round: put the parts back, publish, and stop or schedule the next wake.
    fn after_round(&mut self, parts: Parts, ending: Ending, ctx: &mut Context<Self>) {
        let deadline = parts.machine.poll_timeout();
        self.parts = Some(parts);
        match ending {
            Ending::Continue(seen) => {
                if let Some(seen) = seen {
                    self.last_seen = seen;
                }
                self.publish();
                self.schedule_wake(deadline, ctx);
            }
            Ending::Cancelled => self.finish(Ok(Exit::Stopped), ctx),
            Ending::Stop(exit) => {
                self.publish();
                self.finish(exit, ctx);
            }
        }
    }

    /// A round at the backoff deadline, so that a restart is not late by up to a round. A
    /// deadline already due is left to the next regular round (no busy loop while the epoch
    /// cannot be moved).
    fn schedule_wake(&mut self, deadline: Option<u64>, ctx: &mut Context<Self>) {
        if let Some(h) = self.wake.take() {
            ctx.cancel_future(h);
        }
        let Some(at) = deadline.filter(|_| self.autonomous) else {
            return;
        };
        let wait = at.saturating_sub(self.io.now_ms());
        if wait > 0 {
            self.wake = Some(ctx.notify_later(Observe, Duration::from_millis(wait)));
        }
    }

    fn publish(&self) {
        let Some(parts) = &self.parts else { return };
        let seen = &self.last_seen;
        let v = view(
            &self.group,
            self.world_size,
            &parts.machine,
            Sight {
                beats: &seen.beats,
                members: &seen.members,
                redis: &seen.redis,
                history: &parts.history,
            },
            self.io.cadence.heartbeat_timeout_ms,
            self.window_ms,
            self.io.now_ms(),
        );
        self.io
            .published
            .publish(v, self.io.cadence.heartbeat_timeout_ms);
    }

    /// Stops the launched agents, waits for them, sends `exit` and stops the actor. Runs
    /// once; later calls do nothing.
    fn finish(&mut self, exit: Result<Exit, SupervisorError>, ctx: &mut Context<Self>) {
        let Some(done) = self.done.take() else {
            return;
        };
        let launcher = self.parts.as_mut().and_then(|p| p.launcher.take());
        let grace = Duration::from_millis(self.io.cadence.agent_stop_grace_ms);
        ctx.wait(
            async move {
                if let Some(mut l) = launcher {
                    l.stop(grace).await;
                }
            }
            .into_actor(self)
            .map(move |(), _, ctx| {
                let _ = done.send(exit);
                ctx.stop();
            }),
        );
    }
}

impl Actor for SupervisorActor {
    type Context = Context<Self>;

    /// Watches the shutdown token; when autonomous, runs a first round now and one every
    /// [`Cadence::round_ms`].
    fn started(&mut self, ctx: &mut Context<Self>) {
        let token = self.io.shutdown.clone();
        ctx.spawn(
            async move { token.cancelled().await }
                .into_actor(self)
                .map(|(), act, ctx| act.finish(Ok(Exit::Stopped), ctx)),
        );
        if self.autonomous {
            ctx.notify(Observe);
            ctx.run_interval(Duration::from_millis(self.io.cadence.round_ms), |_, ctx| {
                ctx.notify(Observe)
            });
        }
    }

    /// Reports a stop that did not come through the actor's own finish (the system
    /// stopped) as a clean stop.
    fn stopped(&mut self, _: &mut Context<Self>) {
        if let Some(done) = self.done.take() {
            let _ = done.send(Ok(Exit::Stopped));
        }
    }
}

impl Handler<Observe> for SupervisorActor {
    type Result = AtomicResponse<Self, ()>;

    /// Runs one round atomically; does nothing once the actor is stopping.
    fn handle(&mut self, _: Observe, _: &mut Context<Self>) -> Self::Result {
        let parts = match self.parts.take() {
            Some(p) if self.done.is_some() => p,
            other => {
                self.parts = other;
                return AtomicResponse::new(Box::pin(actix::fut::ready(())));
            }
        };
        let io = self.io.clone();
        AtomicResponse::new(Box::pin(
            round(parts, io)
                .into_actor(self)
                .map(|(parts, ending), act, ctx| act.after_round(parts, ending, ctx)),
        ))
    }
}

/// One round (see the module docs).
async fn round(mut parts: Parts, io: Io) -> (Parts, Ending) {
    let due = parts.machine.handle_timeout(io.now_ms());
    if let Some(end) = carry_out(&mut parts, &io, due).await {
        return (parts, end);
    }
    if parts.machine.gave_up() {
        return (parts, Ending::Continue(None));
    }
    if let Some(l) = parts.launcher.as_mut() {
        let exits = l.exited().into_iter().map(|(_, why)| why);
        parts.exits_unjudged.extend(exits);
    }
    let seen = match observe(&io, parts.machine.epoch()).await {
        Call::Cancelled => return (parts, Ending::Cancelled),
        Call::Done(seen) => seen,
    };
    let now = io.now_ms();
    let (effects, sight) = match seen {
        Ok((reports, beats, members)) => {
            let observation = Observation {
                exited: std::mem::take(&mut parts.exits_unjudged),
                reports,
                beats,
                members,
            };
            let jitter = (parts.jitter)();
            let effects = parts.machine.handle_observation(&observation, now, jitter);
            let sight = Seen {
                beats: observation.beats,
                members: observation.members,
                redis: "ok".into(),
            };
            (effects, sight)
        }
        Err(e) => {
            // Blind without Redis: decide nothing, and judge heartbeats afresh once it is back.
            parts.machine.handle_blind(now);
            let sight = Seen {
                beats: Vec::new(),
                members: Vec::new(),
                redis: e.to_string(),
            };
            (Vec::new(), sight)
        }
    };
    match carry_out(&mut parts, &io, effects).await {
        Some(end) => (parts, end),
        None => (parts, Ending::Continue(Some(sight))),
    }
}

/// Failure reports, heartbeats and the members of `epoch`; the first error of the three.
async fn observe(io: &Io, epoch: Epoch) -> Call<Result<ReadGroup, DurableError>> {
    let liveness = &io.backends.liveness;
    let read = async {
        let (reports, bad) = liveness.take_failures(io.cadence.reports_per_round).await?;
        for b in bad {
            tracing::warn!(%b, "failure report dropped");
        }
        let beats = liveness.heartbeats().await?;
        let members = io.backends.epochs.members(epoch).await?;
        Ok((reports, beats, members))
    };
    io.call(read).await
}

/// What [`observe`] reads: reports, heartbeats, members.
type ReadGroup = (
    Vec<tandem_durable::FailureReport>,
    Vec<Option<tandem_durable::Heartbeat>>,
    Vec<Rank>,
);

/// Carries out `effects` in order (and the effects they lead to); `Some` when the round
/// must end there.
async fn carry_out(parts: &mut Parts, io: &Io, effects: Vec<Effect>) -> Option<Ending> {
    let mut queue = VecDeque::from(effects);
    let epoch_of = |p: &Parts| p.machine.epoch().0;
    let mut moved_from: Option<u64> = None;
    while let Some(effect) = queue.pop_front() {
        match effect {
            Effect::Failure(f) => {
                tracing::warn!(epoch = epoch_of(parts), failure = %f, "rank failure");
            }
            Effect::Recovered { epoch, recovery_ms } => {
                tracing::info!(epoch = epoch.0, recovery_ms = ?recovery_ms, "every rank joined the new epoch");
            }
            Effect::RestartScheduled { delay_ms, reason } => {
                let m = &io.published.metrics;
                m.set_restart_backoff(Duration::from_millis(delay_ms));
                m.set_group_state(tandem_metrics::GroupState::Restarting);
                tracing::info!(epoch = epoch_of(parts), backoff_ms = delay_ms, %reason, "the whole group restarts after the backoff");
            }
            Effect::Save(state) => {
                match io
                    .call(io.backends.epochs.save_supervisor_state(&state))
                    .await
                {
                    Call::Cancelled => return Some(Ending::Cancelled),
                    Call::Done(Err(e)) => {
                        tracing::warn!(error = %e, "cannot save the supervisor state")
                    }
                    Call::Done(Ok(())) => {}
                }
            }
            Effect::MoveEpoch => {
                let drain = io.cadence.reports_drained_at_restart;
                if let Call::Cancelled = io.call(io.backends.liveness.take_failures(drain)).await {
                    return Some(Ending::Cancelled);
                }
                match io.call(io.backends.epochs.next_epoch()).await {
                    Call::Cancelled => return Some(Ending::Cancelled),
                    Call::Done(Ok(epoch)) => {
                        moved_from = Some(parts.machine.epoch().0);
                        queue.extend(parts.machine.handle_epoch_moved(epoch, io.now_ms()));
                    }
                    Call::Done(Err(e)) => {
                        tracing::warn!(error = %e, "cannot increment the epoch; will retry");
                        parts.machine.handle_move_failed(io.now_ms());
                    }
                }
            }
            Effect::Restarted {
                epoch,
                backoff_ms,
                reason,
            } => {
                io.published.metrics.restarts().inc();
                parts.history.push(RestartRecord {
                    unix_ms: io.now_ms(),
                    from_epoch: moved_from.unwrap_or(0),
                    epoch: epoch.0,
                    cause: reason.clone(),
                    backoff_ms,
                });
                let extra = parts.history.len().saturating_sub(RESTART_HISTORY_LEN);
                parts.history.drain(..extra);
                tracing::info!(epoch = epoch.0, backoff_ms, %reason, "group restarting into a new epoch");
            }
            Effect::RelaunchAgents => {
                if let Some(l) = parts.launcher.as_mut() {
                    if let Err(source) = l.relaunch_missing() {
                        return Some(Ending::Stop(Err(SupervisorError::Io {
                            what: "cannot relaunch agents".into(),
                            source,
                        })));
                    }
                }
            }
            Effect::GiveUp { reason } => {
                tracing::error!(%reason, "restart limit reached: the group is marked failed");
                return Some(Ending::Stop(Ok(Exit::GroupFailed(reason))));
            }
        }
    }
    None
}
