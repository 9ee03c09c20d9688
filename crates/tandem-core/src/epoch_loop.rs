//! The agent's epoch loop, sans IO: one rank's side of the supervisor's protocol, from the
//! group's first epoch to every restart (docs/DESIGN.md invariants 4 and 5).
//!
//! Owns [`EpochLoop`], a state machine over the `tandem_durable` traits: it decides which call
//! to make next ([`Effect`]), and the driver makes it and hands back the result
//! ([`Outcome`]). It decides: waiting for the supervisor's first epoch; that a process
//! restarted inside a running epoch it had joined must not serve it (it reports the failure
//! and waits for the next epoch); the recovery of a new epoch (retried, then fatal) and what
//! the epoch's core is started with (frame 0's reconciliation and aborts on the leader, the
//! redeliveries this rank's engine already acknowledged); publishing this rank's manifest
//! (retried, then given up); per heartbeat interval a heartbeat, the membership once the core
//! is ready, failure reports in order (a failed epoch's report again every interval until the
//! group moves on), the epoch watch, reading the completion stream (each
//! entry checked by `EntryCheck`) and, on the leader, trimming it; acknowledging the entries an
//! engine's acknowledgement covers, and, once the engine acknowledged frame 0, everything the
//! reconciliation settled; an acknowledgement the log refused is made again every interval
//! until it is taken (else a recovery would redeliver what the engine already applied). An
//! engine's acknowledgement only records its step: the log's acknowledgement (a read, then the
//! acknowledgement of what the step covers) goes at most once per `ack_interval_ms`
//! (`redis.ack_interval_ms`), at once when the last one is that old, else when it is (see
//! [`LoopConfig::ack_interval_ms`]); acknowledgements are cumulative, so the one made covers
//! every step recorded before it and never a step the engine did not acknowledge. It
//! tells the running core how the log answers ([`Effect::LogHealth`]): a failed heartbeat
//! makes the rank not ready, whatever its role, until one is written again; a read that finds
//! the completion stream gone ([`tandem_durable::DurableError::StreamLost`]) is told too (the
//! leader's core fails the epoch, so that the group moves to a new one), and what the leader's
//! core knew of the lost history ([`Event::HistoryLost`]) joins the next recovery. It never
//! does IO, reads a clock or sleeps: every input carries the
//! driver's `now_ms` (monotonic), every wait is [`EpochLoop::poll_timeout`].
//!
//! Calls go on two paths: the heartbeat on its own, every other call one at a time on the
//! other, in order. At most one heartbeat and one other call are in flight, side by side: a
//! heartbeat never waits behind a read, an acknowledgement or a report that waits out its
//! deadline (1,000 ms by default, longer than the 500 ms heartbeat timeout: the supervisor
//! would restart a group whose log only answered one call slowly; docs/RELIABILITY.md,
//! "Redis misbehaving while the group blocks on it"). The driver must carry the two
//! concurrently, never one after the other.
//!
//! Without a completion log the loop starts its one epoch at once and does nothing more.

use std::collections::VecDeque;

use tandem_durable::recovery::EntryCheck;
use tandem_durable::{
    AckTracker, DurableError, FailureReport, LoggedStep, Recovery, StreamEntryId,
};
use tandem_proto::{Epoch, InFlightTask, Rank, RankBlocks, Step, TaskOutcome};

use crate::cadence;
use crate::config::EpochStart;
use crate::output::Event;
use crate::status::LogHealth;

/// What the loop needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopConfig {
    /// This rank.
    pub rank: Rank,
    /// The epoch to run when the loop does not follow the counter (no completion log, or
    /// `tandem agent --epoch N`).
    pub epoch: Epoch,
    /// Follow the epoch counter (a supervisor moves the group); `false`: run `epoch` only.
    pub follow: bool,
    /// A completion log is configured.
    pub durable: bool,
    /// Heartbeat interval, ms (`supervisor.heartbeat_interval_ms`): the loop's cadence.
    pub heartbeat_interval_ms: u64,
    /// Heartbeat timeout, ms (`supervisor.heartbeat_timeout_ms`).
    pub heartbeat_timeout_ms: u64,
    /// Entries the leader keeps in the completion stream at least (`redis.stream_max_len`).
    pub stream_max_len: u64,
    /// Least time between two acknowledgements of this rank's engine's steps to the log, ms
    /// (`redis.ack_interval_ms`). An engine's acknowledgement of a step is recorded at once;
    /// the log's acknowledgement of the entries it covers (a read, then one acknowledgement)
    /// goes at once when the last one went this long ago or more, else when it is this old, and
    /// covers the newest step recorded by then. 0: one per engine acknowledgement (while one is
    /// being made, the next covers all that arrive meanwhile). It delays nothing an engine
    /// sees; a crash loses at most this long's acknowledgements, which the next recovery
    /// redelivers and the engine client drops (docs/DESIGN.md, "The reconciliation").
    pub ack_interval_ms: u64,
}

/// One call for the driver to make. Those marked *answered* take an [`Outcome`] back; the
/// others take none. [`Effect::Heartbeat`] has a path of its own: the loop asks for it while
/// another answered call is unanswered, and for another call while it is; at most one of each
/// is unanswered at a time (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// *Answered* [`Outcome::EpochRead`]: read the epoch counter.
    ReadEpoch,
    /// *Answered* [`Outcome::Members`]: the ranks that joined `epoch`.
    ReadMembers {
        /// The epoch.
        epoch: Epoch,
    },
    /// *Answered* [`Outcome::Reported`]: push a failure report for the supervisor.
    ReportFailure(FailureReport),
    /// *Answered* [`Outcome::HeartbeatWritten`]: this rank's heartbeat in `epoch`, stamped
    /// with the driver's wall clock, expiring after `ttl_ms`.
    Heartbeat {
        /// The epoch the rank runs.
        epoch: Epoch,
        /// Expiry, ms.
        ttl_ms: u64,
    },
    /// *Answered* [`Outcome::Joined`]: record this rank as a member of `epoch`.
    Join {
        /// The epoch.
        epoch: Epoch,
    },
    /// *Answered* [`Outcome::Recovered`]: read what the completion stream says the new epoch
    /// must settle.
    Recover,
    /// *Answered* [`Outcome::Blocks`]: the shards this rank's store holds.
    ListBlocks,
    /// *Answered* [`Outcome::ManifestPut`]: publish this rank's manifest for `epoch`.
    PutManifest {
        /// The epoch.
        epoch: Epoch,
        /// The encoded [`RankBlocks`].
        bytes: Vec<u8>,
        /// Expiry, ms.
        ttl_ms: u64,
    },
    /// Start the core of `epoch` with `start` (a `RankCore`, and on a follower the join of
    /// its leader); its events come back through [`EpochLoop::handle_event`].
    StartEpoch {
        /// The epoch.
        epoch: Epoch,
        /// What the previous epochs left it.
        start: EpochStart,
    },
    /// Stop the core of `epoch`: the group moved to `next`.
    StopEpoch {
        /// The epoch ending.
        epoch: Epoch,
        /// The epoch starting.
        next: Epoch,
    },
    /// *Answered* [`Outcome::Read`]: entries of the completion stream this rank has not read.
    ReadNew {
        /// At most this many.
        count: usize,
    },
    /// *Answered* [`Outcome::Acked`]: acknowledge these entries for this rank.
    Ack {
        /// The entries.
        ids: Vec<StreamEntryId>,
    },
    /// *Answered* [`Outcome::AckedThrough`]: acknowledge every entry up to `through`.
    AckThrough {
        /// The last entry the reconciliation settled.
        through: StreamEntryId,
    },
    /// *Answered* [`Outcome::Trimmed`]: trim the completion stream, keeping `max_len`.
    Trim {
        /// Entries kept at least.
        max_len: u64,
    },
    /// *Answered* [`Outcome::StreamLen`]: the stream's length.
    StreamLen,
    /// Hand the running core of `epoch` how the log answers
    /// ([`crate::RankCore::handle_log_health`]); sent when it changes.
    LogHealth {
        /// The epoch whose core runs.
        epoch: Epoch,
        /// What the log did.
        health: LogHealth,
    },
    /// A figure for the metrics.
    Note(Note),
    /// The loop cannot go on; the agent stops with this reason.
    Fatal(String),
}

impl Effect {
    /// Whether the loop waits for an [`Outcome`] of this effect.
    pub fn answered(&self) -> bool {
        !matches!(
            self,
            Effect::StartEpoch { .. }
                | Effect::StopEpoch { .. }
                | Effect::LogHealth { .. }
                | Effect::Note(_)
                | Effect::Fatal(_)
        )
    }
}

/// A figure the loop hands the metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// The log answered (`true`) or not a heartbeat.
    RedisUp(bool),
    /// Completion-stream entries ignored as copies or inconsistent, this many more.
    EntriesRejected(u64),
    /// Entries trimmed, this many more.
    Trimmed(u64),
    /// Entries in the stream now.
    StreamLength(u64),
    /// The group moved to a new epoch (a restart of this rank's protocol).
    Restarted,
}

/// The result of an answered [`Effect`]; errors are the log's, as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Of [`Effect::ReadEpoch`].
    EpochRead(Result<Epoch, String>),
    /// Of [`Effect::ReadMembers`].
    Members(Result<Vec<Rank>, String>),
    /// Of [`Effect::ReportFailure`].
    Reported(Result<(), String>),
    /// Of [`Effect::Heartbeat`].
    HeartbeatWritten(Result<(), String>),
    /// Of [`Effect::Join`].
    Joined(Result<(), String>),
    /// Of [`Effect::Recover`].
    Recovered(Result<Box<Recovery>, String>),
    /// Of [`Effect::ListBlocks`] (`None`: the store could not say).
    Blocks(Option<RankBlocks>),
    /// Of [`Effect::PutManifest`].
    ManifestPut(Result<(), String>),
    /// Of [`Effect::ReadNew`]; typed, because a stream that is gone
    /// ([`DurableError::StreamLost`]) ends the epoch.
    Read(Result<Vec<LoggedStep>, DurableError>),
    /// Of [`Effect::Ack`] (entries acknowledged).
    Acked(Result<u64, String>),
    /// Of [`Effect::AckThrough`].
    AckedThrough(Result<u64, String>),
    /// Of [`Effect::Trim`] (entries removed).
    Trimmed(Result<u64, String>),
    /// Of [`Effect::StreamLen`].
    StreamLen(Result<u64, String>),
}

/// One planned call.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Planned {
    ReadEpoch,
    ReadMembers(Epoch),
    Report(FailureReport),
    Heartbeat,
    Join,
    Recover,
    ListBlocks,
    PutManifest(Vec<u8>),
    /// A tick's read of the stream.
    ReadNew,
    /// The engine acknowledged `step`: read, then acknowledge what it covers.
    ReadForAck(Step),
    Ack(Vec<StreamEntryId>),
    AckThrough(StreamEntryId),
    Trim,
    StreamLen,
}

/// Where the loop stands.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Reading the counter until the supervisor starts the first epoch.
    FirstEpoch,
    /// Did this rank join `epoch` before (a process restarted inside it)?
    Members(Epoch),
    /// Restarted inside `epoch`: report, heartbeat, and wait for the next epoch.
    Outside(Epoch),
    /// Recovering for `epoch`, attempt `attempts`.
    Recovering { epoch: Epoch, attempts: u32 },
    /// Publishing this rank's manifest for `epoch`.
    Publishing {
        epoch: Epoch,
        start: EpochStart,
        ack_through: Option<StreamEntryId>,
        attempts: u32,
    },
    /// The core of `epoch` runs.
    Running(Box<Running>),
    /// Gave up.
    Stopped,
}

/// What a running epoch keeps between ticks.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Running {
    epoch: Epoch,
    /// The core is ready; this rank's membership is not recorded yet.
    join_pending: bool,
    /// Failure reports not pushed yet, oldest first.
    reports: VecDeque<FailureReport>,
    /// The core's failure, reported again every tick until the group moves on: a report the
    /// supervisor took and then lost (it crashed before moving the epoch) must not leave the
    /// group in a failed epoch for good.
    failed: Option<FailureReport>,
    /// Acknowledge every entry up to here once the engine acknowledged frame 0.
    ack_through: Option<StreamEntryId>,
    /// The log refused `ack_through` (the engine did acknowledge frame 0): again next tick.
    ack_through_retry: bool,
    /// The log's error last handed to the core ([`Effect::LogHealth`]); `None`: up.
    log_error: Option<String>,
    /// The newest step of this epoch the engine acknowledged whose acknowledgement to the log
    /// is not planned yet.
    engine_acked: Option<Step>,
    /// When that acknowledgement is due (ms); `None` while nothing waits.
    ack_due_ms: Option<u64>,
    /// When the last acknowledgement to the log was planned (ms); `None`: none yet.
    last_ack_ms: Option<u64>,
    /// The core was told the completion stream is gone.
    stream_lost: bool,
    ticks: u64,
}

/// The agent's epoch loop (see the module docs).
#[derive(Clone, Debug)]
pub struct EpochLoop {
    config: LoopConfig,
    phase: Phase,
    /// Calls planned, in order: the heartbeat goes on its own path, the others one at a time.
    queue: VecDeque<Planned>,
    /// The call in flight that is not a heartbeat.
    in_flight: Option<Planned>,
    /// A heartbeat is in flight (beside `in_flight`, never behind it).
    beating: bool,
    /// Effects that take no answer, in order.
    out: VecDeque<Effect>,
    /// When the loop next wants [`EpochLoop::handle_timeout`], ms.
    wake_ms: Option<u64>,
    tracker: AckTracker,
    /// Entries the engine acknowledged whose acknowledgement the log refused: made again
    /// every tick (and with the next one) until the log takes them.
    ack_retry: Vec<StreamEntryId>,
    /// Leader: what the core knew of a completion stream that was lost
    /// ([`Event::HistoryLost`]), merged into the next recovery.
    lost_history: Option<(Vec<InFlightTask>, Vec<TaskOutcome>)>,
    check: EntryCheck,
}

impl EpochLoop {
    /// A loop starting at `now_ms`.
    pub fn new(config: LoopConfig, now_ms: u64) -> EpochLoop {
        let mut l = EpochLoop {
            phase: Phase::Stopped,
            queue: VecDeque::new(),
            in_flight: None,
            beating: false,
            out: VecDeque::new(),
            wake_ms: None,
            tracker: AckTracker::new(),
            ack_retry: Vec::new(),
            lost_history: None,
            check: EntryCheck::new(),
            config,
        };
        if l.config.durable && l.config.follow {
            l.phase = Phase::FirstEpoch;
            l.queue.push_back(Planned::ReadEpoch);
        } else {
            l.start(l.config.epoch, now_ms);
        }
        l
    }

    /// The epoch whose core runs, if one does.
    pub fn running(&self) -> Option<Epoch> {
        match &self.phase {
            Phase::Running(r) => Some(r.epoch),
            _ => None,
        }
    }

    /// Whether the loop gave up (after [`Effect::Fatal`]).
    pub fn stopped(&self) -> bool {
        self.phase == Phase::Stopped
            && self.in_flight.is_none()
            && !self.beating
            && self.queue.is_empty()
    }

    /// The next call to make, if any: effects that take no answer first, then a planned
    /// heartbeat unless one is in flight (whatever other call is), then the next other call
    /// unless one is in flight. Call it until `None` after every input.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        if let Some(e) = self.out.pop_front() {
            return Some(e);
        }
        if !self.beating {
            if let Some(i) = self.queue.iter().position(|p| *p == Planned::Heartbeat) {
                self.queue.remove(i);
                self.beating = true;
                return Some(self.effect(&Planned::Heartbeat));
            }
        }
        if self.in_flight.is_some() {
            return None;
        }
        let i = self.queue.iter().position(|p| *p != Planned::Heartbeat)?;
        let planned = self.queue.remove(i)?;
        let effect = self.effect(&planned);
        self.in_flight = Some(planned);
        Some(effect)
    }

    /// When [`Self::handle_timeout`] must next be called (ms): the next interval's tick or
    /// wait, or an engine acknowledgement's turn to go to the log, whichever comes first.
    pub fn poll_timeout(&self) -> Option<u64> {
        let ack = match &self.phase {
            Phase::Running(run) => run.ack_due_ms,
            _ => None,
        };
        match (self.wake_ms, ack) {
            (Some(w), Some(a)) => Some(w.min(a)),
            (w, a) => w.or(a),
        }
    }

    fn ttl_ms(&self) -> u64 {
        self.config
            .heartbeat_timeout_ms
            .saturating_mul(cadence::HEARTBEAT_TTL_TIMEOUTS)
    }

    fn effect(&self, p: &Planned) -> Effect {
        let epoch = match &self.phase {
            Phase::Running(r) => r.epoch,
            Phase::Outside(e) | Phase::Members(e) => *e,
            Phase::Recovering { epoch, .. } | Phase::Publishing { epoch, .. } => *epoch,
            Phase::FirstEpoch | Phase::Stopped => self.config.epoch,
        };
        match p {
            Planned::ReadEpoch => Effect::ReadEpoch,
            Planned::ReadMembers(epoch) => Effect::ReadMembers { epoch: *epoch },
            Planned::Report(r) => Effect::ReportFailure(r.clone()),
            Planned::Heartbeat => Effect::Heartbeat {
                epoch,
                ttl_ms: self.ttl_ms(),
            },
            Planned::Join => Effect::Join { epoch },
            Planned::Recover => Effect::Recover,
            Planned::ListBlocks => Effect::ListBlocks,
            Planned::PutManifest(bytes) => Effect::PutManifest {
                epoch,
                bytes: bytes.clone(),
                ttl_ms: cadence::MANIFEST_TTL_MS,
            },
            Planned::ReadNew | Planned::ReadForAck(_) => Effect::ReadNew {
                count: cadence::READ_BATCH,
            },
            Planned::Ack(ids) => Effect::Ack { ids: ids.clone() },
            Planned::AckThrough(through) => Effect::AckThrough { through: *through },
            Planned::Trim => Effect::Trim {
                max_len: self.config.stream_max_len,
            },
            Planned::StreamLen => Effect::StreamLen,
        }
    }

    /// The time is `now_ms`: a wait is over.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        if let Phase::Running(run) = &self.phase {
            if run.ack_due_ms.is_some_and(|t| now_ms >= t) {
                self.plan_ack(now_ms);
            }
        }
        if self.wake_ms.is_none_or(|t| now_ms < t) {
            return;
        }
        self.wake_ms = None;
        match &self.phase {
            Phase::FirstEpoch => self.queue.push_back(Planned::ReadEpoch),
            Phase::Outside(e) => self.outside_round(*e),
            Phase::Recovering { .. } => self.queue.push_back(Planned::Recover),
            Phase::Publishing { .. } => self.queue.push_back(Planned::ListBlocks),
            Phase::Running(_) => self.tick(now_ms),
            Phase::Members(_) | Phase::Stopped => {}
        }
    }

    /// An event of the running epoch's core.
    pub fn handle_event(&mut self, event: &Event, now_ms: u64) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        match event {
            Event::Ready { epoch } if *epoch == r.epoch => r.join_pending = true,
            Event::Failed { epoch, reason } if *epoch == r.epoch => {
                let report = FailureReport {
                    epoch: *epoch,
                    rank: self.config.rank,
                    reason: reason.clone(),
                };
                r.failed.get_or_insert_with(|| report.clone());
                r.reports.push_back(report);
            }
            Event::HistoryLost {
                epoch,
                in_flight,
                unrevealed,
            } if *epoch == r.epoch => {
                tracing::warn!(
                    in_flight = in_flight.len(),
                    unrevealed = unrevealed.len(),
                    "the completion stream was lost: the next epoch settles what this leader knew of it"
                );
                self.lost_history = Some((in_flight.clone(), unrevealed.clone()));
            }
            Event::EngineAcked { epoch, step } if *epoch == r.epoch && self.config.durable => {
                // Recorded only: acknowledgements are cumulative, so the log's acknowledgement
                // goes at most once per interval and covers the newest step recorded by then
                // (one per step was a read, and often an XACK, per rank per step).
                r.engine_acked = Some(r.engine_acked.map_or(*step, |s| s.max(*step)));
                if r.ack_due_ms.is_none() {
                    let due = r.last_ack_ms.map_or(now_ms, |last| {
                        now_ms.max(last.saturating_add(self.config.ack_interval_ms))
                    });
                    r.ack_due_ms = Some(due);
                }
                if r.ack_due_ms.is_some_and(|t| t <= now_ms) {
                    self.plan_ack(now_ms);
                }
            }
            _ => {}
        }
    }

    /// The answer to a call in flight, at `now_ms`: [`Outcome::HeartbeatWritten`] answers the
    /// heartbeat, any other outcome the other call.
    pub fn handle_outcome(&mut self, outcome: Outcome, now_ms: u64) {
        if let Outcome::HeartbeatWritten(r) = outcome {
            if !std::mem::take(&mut self.beating) {
                tracing::warn!(
                    ?r,
                    "a heartbeat's outcome with no heartbeat in flight: ignored"
                );
                return;
            }
            self.heartbeat_written(r);
            return;
        }
        let Some(planned) = self.in_flight.take() else {
            tracing::warn!(?outcome, "an outcome with no call in flight: ignored");
            return;
        };
        match (planned, outcome) {
            (Planned::ReadEpoch, Outcome::EpochRead(r)) => self.epoch_read(r, now_ms),
            (Planned::ReadMembers(epoch), Outcome::Members(r)) => {
                if r.is_ok_and(|m| m.contains(&self.config.rank)) {
                    tracing::warn!(epoch = epoch.0, "this rank already joined the running epoch before a restart: waiting for the next one");
                    self.phase = Phase::Outside(epoch);
                    self.outside_round(epoch);
                } else {
                    self.start(epoch, now_ms);
                }
            }
            (Planned::Report(_), Outcome::Reported(r)) => {
                if let Phase::Running(run) = &mut self.phase {
                    if r.is_ok() {
                        run.reports.pop_front();
                        if let Some(next) = run.reports.front() {
                            self.queue.push_front(Planned::Report(next.clone()));
                        }
                    }
                }
            }
            (Planned::Join, Outcome::Joined(r)) => {
                if let (Phase::Running(run), Ok(())) = (&mut self.phase, r) {
                    run.join_pending = false;
                }
            }
            (Planned::Recover, Outcome::Recovered(r)) => self.recovered(r, now_ms),
            (Planned::ListBlocks, Outcome::Blocks(b)) => match b {
                Some(blocks) => self.queue.push_front(Planned::PutManifest(blocks.encode())),
                None => {
                    tracing::warn!("cannot list this rank's shards");
                    self.run(now_ms);
                }
            },
            (Planned::PutManifest(_), Outcome::ManifestPut(r)) => self.manifest_put(r, now_ms),
            (Planned::ReadNew, Outcome::Read(r)) => self.read(r),
            (Planned::ReadForAck(step), Outcome::Read(r)) => {
                self.read(r);
                if let Phase::Running(run) = &self.phase {
                    let mut ids = self.tracker.on_engine_ack(run.epoch, step);
                    ids.append(&mut self.ack_retry);
                    let mut next = Vec::new();
                    if !ids.is_empty() {
                        next.push(Planned::Ack(ids));
                    }
                    if let Some(through) = run.ack_through {
                        next.push(Planned::AckThrough(through));
                    }
                    for p in next.into_iter().rev() {
                        self.queue.push_front(p);
                    }
                }
            }
            (Planned::Ack(ids), Outcome::Acked(r)) => {
                if let Err(e) = r {
                    tracing::warn!(error = %e, entries = ids.len(), "cannot acknowledge delivered completions; again next interval");
                    self.ack_retry.extend(ids);
                    self.ack_retry.sort_unstable();
                    self.ack_retry.dedup();
                }
            }
            (Planned::AckThrough(_), Outcome::AckedThrough(r)) => {
                if let Phase::Running(run) = &mut self.phase {
                    match r {
                        Ok(_) => {
                            run.ack_through = None;
                            run.ack_through_retry = false;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot acknowledge the reconciled completions; again next interval");
                            run.ack_through_retry = true;
                        }
                    }
                }
            }
            (Planned::Trim, Outcome::Trimmed(r)) => match r {
                Ok(n) => self.out.push_back(Effect::Note(Note::Trimmed(n))),
                Err(e) => tracing::debug!(error = %e, "cannot trim the completion stream"),
            },
            (Planned::StreamLen, Outcome::StreamLen(r)) => {
                if let Ok(n) = r {
                    self.out.push_back(Effect::Note(Note::StreamLength(n)));
                }
            }
            (planned, outcome) => {
                tracing::error!(
                    ?planned,
                    ?outcome,
                    "an outcome that answers another call: ignored"
                );
            }
        }
    }

    /// A heartbeat's result: the metric, and the running core's readiness when it changes.
    fn heartbeat_written(&mut self, r: Result<(), String>) {
        if let Phase::Running(run) = &mut self.phase {
            self.out.push_back(Effect::Note(Note::RedisUp(r.is_ok())));
            let error = r.err();
            if error != run.log_error {
                let health = match &error {
                    None => LogHealth::Up,
                    Some(e) => LogHealth::Unavailable(e.clone()),
                };
                run.log_error = error;
                self.out.push_back(Effect::LogHealth {
                    epoch: run.epoch,
                    health,
                });
            }
        }
    }

    fn epoch_read(&mut self, r: Result<Epoch, String>, now_ms: u64) {
        match (&self.phase, r) {
            (Phase::FirstEpoch, Ok(e)) if e.0 > 0 => {
                self.phase = Phase::Members(e);
                self.queue.push_back(Planned::ReadMembers(e));
            }
            (Phase::FirstEpoch, r) => {
                match r {
                    Ok(_) => tracing::info!(
                        "waiting for the supervisor to start the group's first epoch"
                    ),
                    Err(e) => tracing::warn!(error = %e, "cannot read the epoch; retrying"),
                }
                self.wake_ms = Some(now_ms.saturating_add(cadence::FIRST_EPOCH_POLL_MS));
            }
            (Phase::Outside(e), Ok(current)) if current > *e => self.start(current, now_ms),
            (Phase::Outside(_), _) => {
                self.wake_ms = Some(now_ms.saturating_add(self.config.heartbeat_interval_ms));
            }
            (Phase::Running(run), Ok(current)) if current > run.epoch => {
                let epoch = run.epoch;
                tracing::info!(
                    from = epoch.0,
                    to = current.0,
                    "the group moved to a new epoch: restarting the protocol actor"
                );
                // The rest of this tick belonged to the old epoch.
                self.queue.clear();
                self.out.push_back(Effect::StopEpoch {
                    epoch,
                    next: current,
                });
                self.out.push_back(Effect::Note(Note::Restarted));
                self.start(current, now_ms);
            }
            _ => {}
        }
    }

    /// One round outside a running epoch this rank had joined: report it, heartbeat, and
    /// read the counter.
    fn outside_round(&mut self, epoch: Epoch) {
        let rank = self.config.rank;
        self.queue.push_back(Planned::Report(FailureReport {
            epoch,
            rank,
            reason: format!("agent of rank {rank} restarted inside epoch {epoch}"),
        }));
        self.queue.push_back(Planned::Heartbeat);
        self.queue.push_back(Planned::ReadEpoch);
    }

    /// Start `epoch`: recover first with a log, at once without.
    fn start(&mut self, epoch: Epoch, now_ms: u64) {
        if self.config.durable {
            self.phase = Phase::Recovering { epoch, attempts: 0 };
            self.queue.push_back(Planned::Recover);
        } else {
            self.phase = Phase::Publishing {
                epoch,
                start: EpochStart::default(),
                ack_through: None,
                attempts: 0,
            };
            self.run(now_ms);
        }
    }

    fn recovered(&mut self, r: Result<Box<Recovery>, String>, now_ms: u64) {
        let Phase::Recovering { epoch, attempts } = self.phase.clone() else {
            return;
        };
        let recovery = match r {
            Ok(r) => r,
            Err(e) if attempts < cadence::RECOVERY_ATTEMPTS => {
                tracing::warn!(error = %e, "cannot read the completion stream for recovery; retrying");
                self.phase = Phase::Recovering {
                    epoch,
                    attempts: attempts + 1,
                };
                self.wake_ms = Some(now_ms.saturating_add(cadence::RECOVERY_RETRY_MS));
                return;
            }
            Err(e) => {
                self.phase = Phase::Stopped;
                self.out.push_back(Effect::Fatal(format!(
                    "cannot read the completion stream for the recovery of epoch {epoch} after {} attempts: {e}",
                    attempts + 1
                )));
                return;
            }
        };
        if recovery.entries_rejected > 0 {
            tracing::warn!(
                rejected = recovery.entries_rejected,
                scanned = recovery.entries_scanned,
                "recovery ignored completion stream entries that are copies of earlier ones or inconsistent with their ids"
            );
            self.out.push_back(Effect::Note(Note::EntriesRejected(
                recovery.entries_rejected,
            )));
        }
        let rank = self.config.rank;
        let acknowledged = recovery
            .acknowledged_by_rank
            .get(rank.0 as usize)
            .cloned()
            .unwrap_or_default();
        let start = if rank == Rank(0) {
            // A stream lost under the last epoch: what this process's leader knew of it
            // joins what the log still says (the reconciliation keeps one copy per task).
            let (mut redelivered, mut in_flight) =
                (recovery.redelivered.clone(), recovery.in_flight.clone());
            if let Some((lost_in_flight, lost_unrevealed)) = self.lost_history.take() {
                redelivered.extend(lost_unrevealed);
                in_flight.extend(lost_in_flight);
            }
            EpochStart::leader(&redelivered, &in_flight, acknowledged)
        } else {
            EpochStart {
                acknowledged,
                ..EpochStart::default()
            }
        };
        self.phase = Phase::Publishing {
            epoch,
            start,
            ack_through: recovery.last_entry_id,
            attempts: 0,
        };
        self.queue.push_back(Planned::ListBlocks);
    }

    fn manifest_put(&mut self, r: Result<(), String>, now_ms: u64) {
        let Phase::Publishing { attempts, .. } = &mut self.phase else {
            return;
        };
        match r {
            Ok(()) => self.run(now_ms),
            Err(e) => {
                *attempts += 1;
                tracing::warn!(error = %e, "cannot publish this rank's manifest; retrying");
                if *attempts >= cadence::MANIFEST_PUBLISH_ATTEMPTS {
                    self.run(now_ms);
                } else {
                    self.wake_ms = Some(now_ms.saturating_add(cadence::MANIFEST_PUBLISH_RETRY_MS));
                }
            }
        }
    }

    /// The epoch's core starts; with a log, the first tick is at once.
    fn run(&mut self, now_ms: u64) {
        let Phase::Publishing {
            epoch,
            start,
            ack_through,
            ..
        } = std::mem::replace(&mut self.phase, Phase::Stopped)
        else {
            return;
        };
        self.out.push_back(Effect::StartEpoch { epoch, start });
        self.phase = Phase::Running(Box::new(Running {
            epoch,
            join_pending: false,
            reports: VecDeque::new(),
            failed: None,
            ack_through,
            ack_through_retry: false,
            log_error: None,
            engine_acked: None,
            ack_due_ms: None,
            last_ack_ms: None,
            stream_lost: false,
            ticks: 0,
        }));
        if self.config.durable {
            self.tick(now_ms);
        }
    }

    /// The engine's newest acknowledged step goes to the log now: read what was appended
    /// since, so that the acknowledgement covers every entry the engine has applied, then
    /// acknowledge what that step covers. One waiting read covers the newest step (while the
    /// log hangs, reads must not queue up ahead of the heartbeats).
    fn plan_ack(&mut self, now_ms: u64) {
        let Phase::Running(run) = &mut self.phase else {
            return;
        };
        run.ack_due_ms = None;
        let Some(step) = run.engine_acked.take() else {
            return;
        };
        run.last_ack_ms = Some(now_ms);
        let waiting = self.queue.iter_mut().find_map(|p| match p {
            Planned::ReadForAck(s) => Some(s),
            _ => None,
        });
        match waiting {
            Some(s) => *s = (*s).max(step),
            None => self.queue.push_back(Planned::ReadForAck(step)),
        }
    }

    /// One heartbeat interval of a running epoch.
    fn tick(&mut self, now_ms: u64) {
        let follow = self.config.follow;
        let leader = self.config.rank == Rank(0);
        let Phase::Running(run) = &mut self.phase else {
            return;
        };
        self.wake_ms = Some(now_ms.saturating_add(self.config.heartbeat_interval_ms));
        if self.queue.contains(&Planned::ReadNew) || self.in_flight == Some(Planned::ReadNew) {
            // The last tick is still being carried out (the log is slow): skip this one, but
            // for its heartbeat.
            plan_heartbeat(&mut self.queue);
            return;
        }
        run.ticks += 1;
        // The heartbeat is what tells the supervisor this rank lives, and its result is this
        // rank's readiness: it goes on its own path, beside the call in flight.
        plan_heartbeat(&mut self.queue);
        if run.join_pending {
            self.queue.push_back(Planned::Join);
        }
        if run.reports.is_empty() {
            if let Some(f) = &run.failed {
                run.reports.push_back(f.clone());
            }
        }
        if let Some(first) = run.reports.front() {
            self.queue.push_back(Planned::Report(first.clone()));
        }
        if follow {
            self.queue.push_back(Planned::ReadEpoch);
        }
        if !self.ack_retry.is_empty() {
            self.queue
                .push_back(Planned::Ack(std::mem::take(&mut self.ack_retry)));
        }
        if let (Some(through), true) = (run.ack_through, run.ack_through_retry) {
            self.queue.push_back(Planned::AckThrough(through));
        }
        self.queue.push_back(Planned::ReadNew);
        // The leader bounds the stream: entries every rank acknowledged go, beyond
        // redis.stream_max_len (a trim scans the retained stream, so not every tick).
        if leader && run.ticks % cadence::TRIM_EVERY_TICKS == 0 {
            self.queue.push_back(Planned::Trim);
            self.queue.push_back(Planned::StreamLen);
        }
    }

    /// Entries read: each checked against what the fenced append writes (a copy is counted and
    /// still acknowledged: it carries nothing), then tracked for acknowledgement.
    fn read(&mut self, r: Result<Vec<LoggedStep>, DurableError>) {
        match r {
            Ok(entries) => {
                let mut rejected = 0;
                for e in &entries {
                    if let Err(r) = self.check.check_step(e) {
                        tracing::warn!(rejection = %r, "completion stream entry ignored: a copy, or inconsistent with its id");
                        rejected += 1;
                    }
                }
                if rejected > 0 {
                    self.out
                        .push_back(Effect::Note(Note::EntriesRejected(rejected)));
                }
                self.tracker.on_read(&entries);
            }
            Err(e @ DurableError::StreamLost { .. }) => {
                if let Phase::Running(run) = &mut self.phase {
                    if run.stream_lost {
                        return;
                    }
                    run.stream_lost = true;
                    tracing::error!(error = %e, "the completion stream is gone: this epoch cannot go on");
                    self.out.push_back(Effect::LogHealth {
                        epoch: run.epoch,
                        health: LogHealth::StreamLost(e.to_string()),
                    });
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot read the completion stream"),
        }
    }
}

/// Plan an interval's heartbeat, unless one is planned already (one in flight that the log has
/// not answered yet does not hold the next one back: it goes when that one ends).
fn plan_heartbeat(queue: &mut VecDeque<Planned>) {
    if !queue.contains(&Planned::Heartbeat) {
        queue.push_front(Planned::Heartbeat);
    }
}
