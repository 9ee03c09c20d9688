//! The leader engine (rank 0): runs the scheduler, drives one step at a time through its
//! agent, applies each sealed frame, and ends the run once every follower has caught up.
//!
//! A step goes through three phases, so that a failure resumes at the right place:
//! 1. **work**: issue queued parts (recomputes, retries), answer pending lookups, admit new
//!    requests (lookup; load of the matched prefix; compute and store the rest, all in the
//!    same step: the store does not wait for the load, the simulated prefill needs no KV);
//! 2. **seal**: `end_step`, retried while the window is full, then apply the frame: record it
//!    in the ledger, check it lists exactly the lookups and tasks of this step, verify loads
//!    that finished `Ok`, free pages, plan recomputes for failed loads;
//! 3. **ack**.
//!
//! After a failure in the same epoch the phase resumes (a seal whose reply was lost is read
//! back with `frame`); after a new epoch it restarts at step 0, whose frame reconciles.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tandem_proto::frame::{Frame, LookupResult};
use tandem_proto::ids::{RequestId, Step, TaskId, TaskKind};
use tandem_trace::{HitTotals, PrefixCacheSim, TraceRecord};

use crate::engine::{compute_pages, EngineBook, EngineReport};
use crate::error::{EngineError, SchedError};
use crate::params::ReplayParams;
use crate::scheduler::{Admission, Issue, SchedStats, Scheduler};
use crate::session::{classify, FailedCall, Failure, Fault, Session};
use crate::shared::Shared;
use crate::source::{Head, RequestSource};
use crate::view::FrameView;
use tandem_client::AgentError;

/// Frame-content differences described in full; the rest are only counted.
pub(crate) const MAX_MISMATCH_SAMPLES: usize = 8;

/// Longest idle wait between checks while no request is due, and the drain step interval.
const IDLE_TICK: Duration = Duration::from_millis(20);

/// What the leader engine measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LeaderReport {
    /// The accounting every engine keeps.
    pub engine: EngineReport,
    /// Hit ratios from the lookup answers.
    pub observed: HitTotals,
    /// Hit ratios [`PrefixCacheSim`] expects for the same requests in the same order.
    pub expected: HitTotals,
    /// Task outcome counters.
    pub sched: SchedStats,
    /// Steps sealed.
    pub steps: u64,
    /// `end_step` latency per sealed step, µs.
    pub step_latency_us: Vec<u64>,
    /// Frames whose lookups or started tasks differ from what the leader did in that step.
    pub content_mismatches: u64,
    /// The first of those differences, described.
    pub mismatch_samples: Vec<String>,
    /// Bytes of one block shard.
    pub shard_bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Work,
    Seal,
    Ack,
}

enum Interrupt {
    Fault(Fault, FailedCall),
    Fatal(EngineError),
}

impl From<EngineError> for Interrupt {
    fn from(e: EngineError) -> Self {
        Interrupt::Fatal(e)
    }
}

/// Run the leader engine over `requests` until every request completed and every follower
/// applied the last frame.
pub(crate) fn run_leader<I: Iterator<Item = TraceRecord>>(
    params: &ReplayParams,
    requests: I,
    shared: &Shared,
    run_id: &str,
) -> Result<LeaderReport, EngineError> {
    let session = Session::open(0, params, shared, run_id)?;
    let mut leader = Leader::new(params, shared, session, requests);
    leader.run()?;
    Ok(leader.finish())
}

struct Leader<'a, I> {
    params: &'a ReplayParams,
    shared: &'a Shared,
    session: Session,
    sched: Scheduler,
    book: EngineBook,
    source: RequestSource<I>,
    expected: PrefixCacheSim,
    observed: HitTotals,
    step: u64,
    phase: Phase,
    catch_up_until: u64,
    lookups: Vec<LookupResult>,
    started: BTreeSet<TaskId>,
    latencies: Vec<u64>,
    content_mismatches: u64,
    mismatch_samples: Vec<String>,
    steps: u64,
    last_step_at: Instant,
    fault_since: Option<Instant>,
}

impl<'a, I: Iterator<Item = TraceRecord>> Leader<'a, I> {
    fn new(params: &'a ReplayParams, shared: &'a Shared, session: Session, requests: I) -> Self {
        let welcome = session.welcome();
        shared.set_start(welcome.epoch.0, welcome.next_step.0);
        shared.set_position(0, welcome.epoch.0, None, "starting");
        Leader {
            params,
            shared,
            sched: Scheduler::new(params.pool_pages, params.max_in_flight),
            book: EngineBook::new(0),
            source: RequestSource::new(requests, params.speed, Instant::now()),
            expected: PrefixCacheSim::new(params.expected_capacity),
            observed: HitTotals::default(),
            step: welcome.next_step.0,
            phase: Phase::Work,
            catch_up_until: 0,
            lookups: Vec::new(),
            started: BTreeSet::new(),
            latencies: Vec::new(),
            content_mismatches: 0,
            mismatch_samples: Vec::new(),
            steps: 0,
            last_step_at: Instant::now()
                .checked_sub(params.min_step_interval)
                .unwrap_or_else(Instant::now),
            fault_since: None,
            session,
        }
    }

    fn run(&mut self) -> Result<(), EngineError> {
        loop {
            if self.shared.stopped() {
                return Err(EngineError::Stopped { rank: 0 });
            }
            if self.phase == Phase::Work {
                let finished = self.finished();
                if finished
                    && self
                        .shared
                        .target()
                        .is_some_and(|t| t.0 == self.epoch() && self.shared.followers_reached(t))
                {
                    return Ok(());
                }
                if let Some(wait) = self.idle_wait(finished) {
                    self.shared.sleep(wait);
                    self.shared.leader_progressed();
                    continue;
                }
            }
            match self.advance() {
                Ok(()) => self.fault_since = None,
                Err(Interrupt::Fatal(e)) => return Err(e),
                Err(Interrupt::Fault(fault, failed)) => self.recover(fault, failed)?,
            }
        }
    }

    fn epoch(&self) -> u64 {
        self.session.epoch()
    }

    fn finished(&mut self) -> bool {
        self.sched.in_flight() == 0
            && self.sched.queued() == 0
            && self.source.is_exhausted(Instant::now())
    }

    /// How long to wait before the next step, if it should not run now.
    fn idle_wait(&mut self, finished: bool) -> Option<Duration> {
        let since = self.last_step_at.elapsed();
        if finished {
            // Drain: seal a step now and then, so that a restart is noticed and its frame 0
            // reconciles; otherwise wait for the followers.
            return (since < IDLE_TICK
                && self.shared.target().is_some_and(|t| t.0 == self.epoch()))
            .then(|| IDLE_TICK - since);
        }
        if since < self.params.min_step_interval {
            return Some(self.params.min_step_interval - since);
        }
        if self.sched.in_flight() == 0 && self.sched.queued() == 0 {
            if let Head::NotDue(wait) = self.source.head(Instant::now()) {
                self.shared.set_doing(
                    0,
                    format!("waiting {} ms for the next request", wait.as_millis()),
                );
                return Some(wait.min(IDLE_TICK));
            }
        }
        None
    }

    fn advance(&mut self) -> Result<(), Interrupt> {
        let (epoch, step) = (self.epoch(), self.step);
        match self.phase {
            Phase::Work => {
                self.last_step_at = Instant::now();
                if step >= self.catch_up_until {
                    self.shared.set_doing(0, format!("step {step}: admitting"));
                    self.work(Step(step))?;
                }
                self.phase = Phase::Seal;
            }
            Phase::Seal => {
                self.shared.set_doing(0, format!("sealing step {step}"));
                let (frame, ours) = self.seal(Step(step))?;
                self.apply(&frame, ours)?;
                self.phase = Phase::Ack;
            }
            Phase::Ack => {
                self.session
                    .client()
                    .ack(Step(step))
                    .map_err(|e| self.interrupt(e, "ack", false))?;
                self.book.ledger.acked(epoch, step);
                self.shared.set_position(0, epoch, Some(step), "");
                self.shared.leader_progressed();
                self.shared.add_step();
                self.steps += 1;
                if self.finished() && self.shared.target().is_none_or(|t| t.0 != epoch) {
                    self.shared.set_target(epoch, step);
                }
                self.step += 1;
                self.lookups.clear();
                self.phase = Phase::Work;
            }
        }
        Ok(())
    }

    fn work(&mut self, s: Step) -> Result<(), Interrupt> {
        while let Some(issue) = self.sched.next_issue() {
            self.issue(s, issue)?;
        }
        for id in self.sched.awaiting_lookup() {
            self.lookup(s, id)?;
        }
        for _ in 0..self.params.max_admit_per_step {
            let record = match self.source.head(Instant::now()) {
                Head::Due(r) => r,
                _ => break,
            };
            match self.sched.check_admission(record) {
                Admission::Ready => {}
                Admission::TooLarge { blocks, pages } => {
                    return Err(EngineError::PoolTooSmall {
                        request: self.source.next_id(),
                        blocks,
                        pages,
                    }
                    .into())
                }
                _ => break,
            }
            let Some((id, record)) = self.source.pop() else {
                break;
            };
            self.expected.observe(&record);
            self.sched
                .admit(id, record)
                .map_err(|e| self.sched_error(e))?;
            self.lookup(s, id)?;
        }
        Ok(())
    }

    fn lookup(&mut self, s: Step, id: RequestId) -> Result<(), Interrupt> {
        let hashes = self
            .sched
            .lookup_hashes(id)
            .map_err(|e| self.sched_error(e))?;
        let matched = if hashes.is_empty() {
            0
        } else {
            let result = self
                .session
                .client()
                .lookup(s, id, hashes)
                .map_err(|e| self.interrupt(e, "lookup", false))?;
            let matched = result.matched_blocks;
            self.lookups.push(result);
            matched
        };
        self.sched
            .on_lookup(id, matched)
            .map_err(|e| self.sched_error(e))?;
        while let Some(issue) = self.sched.next_issue() {
            self.issue(s, issue)?;
        }
        Ok(())
    }

    fn issue(&mut self, s: Step, issue: Issue) -> Result<(), Interrupt> {
        if issue.role.computes() {
            compute_pages(self.session.pool_mut(), 0, &issue.hashes, &issue.pages)
                .map_err(|source| EngineError::Pool { rank: 0, source })?;
        }
        let kind = issue.role.kind();
        let client = self.session.client();
        let result = match kind {
            TaskKind::Load => {
                client.load(s, issue.request, issue.hashes.clone(), issue.pages.clone())
            }
            TaskKind::Store => {
                client.store(s, issue.request, issue.hashes.clone(), issue.pages.clone())
            }
        };
        let task = match result {
            Ok(task) => task,
            Err(e) => {
                let call = if kind == TaskKind::Load {
                    "load"
                } else {
                    "store"
                };
                self.sched.requeue(issue);
                return Err(self.interrupt(e, call, true));
            }
        };
        self.sched
            .on_started(issue.request, issue.role, task)
            .map_err(|e| self.sched_error(e))?;
        // A task starts when a frame lists it (its start is logged first); until then it is
        // only requested. The ledger notes it from that frame.
        self.started.insert(task);
        Ok(())
    }

    /// Seal step `s`; returns its frame and whether this call sealed it (rather than reading
    /// back a frame sealed by a call whose reply was lost).
    fn seal(&mut self, s: Step) -> Result<(Frame, bool), Interrupt> {
        let t0 = Instant::now();
        loop {
            if self.shared.stopped() {
                return Err(EngineError::Stopped { rank: 0 }.into());
            }
            let err = match self
                .session
                .client()
                .end_step(s, self.params.deadlines.end_step)
            {
                Ok(frame) => {
                    self.latencies.push(t0.elapsed().as_micros() as u64);
                    return Ok((frame, true));
                }
                Err(e) => e,
            };
            match classify(err) {
                Failure::Agent(last @ AgentError::WindowFull { .. }) => {
                    if t0.elapsed() > self.params.deadlines.window {
                        let waited_ms = t0.elapsed().as_millis() as u64;
                        return Err(EngineError::SealTimeout {
                            epoch: self.epoch(),
                            step: s.0,
                            waited_ms,
                            last,
                        }
                        .into());
                    }
                    self.shared
                        .set_doing(0, format!("sealing step {}: {last}", s.0));
                    self.shared.sleep(Duration::from_millis(2));
                }
                Failure::Agent(AgentError::WrongStep { expected, .. }) if expected > s => {
                    let frame = self
                        .session
                        .client()
                        .frame(s, self.params.deadlines.end_step)
                        .map_err(|e| self.interrupt(e, "frame", false))?;
                    return Ok((frame, false));
                }
                Failure::Fault(fault) => {
                    return Err(Interrupt::Fault(
                        fault,
                        FailedCall {
                            call: "end_step",
                            step: s.0,
                            mutates: false,
                        },
                    ))
                }
                Failure::Agent(source) => return Err(self.refused("end_step", source)),
                Failure::Protocol(detail) => return Err(self.protocol("end_step", detail)),
            }
        }
    }

    fn apply(&mut self, frame: &Frame, ours: bool) -> Result<(), Interrupt> {
        if frame.epoch.0 != self.epoch() || frame.step.0 != self.step {
            let detail = format!(
                "asked for step {} of epoch {}, got step {} of epoch {}",
                self.step,
                self.epoch(),
                frame.step,
                frame.epoch
            );
            return Err(self.protocol("end_step", detail));
        }
        self.book.frame_read(frame.epoch.0);
        let view = FrameView::of(frame);
        if ours {
            self.check_content(&view);
        }
        let observed = self.book.ledger.observe(&view);
        for (outcome, _) in &observed.fresh {
            self.started.remove(&outcome.task);
            let (book, pool) = (&mut self.book, self.session.pool());
            let result = self.sched.on_outcome(outcome, &mut |hashes, pages| {
                book.verify(pool, 0, hashes, pages, &[])
            });
            result.map_err(|e| self.sched_error(e))?;
        }
        for lost in &observed.lost {
            self.sched
                .on_lost(lost.task)
                .map_err(|e| self.sched_error(e))?;
        }
        for done in self.sched.take_completed() {
            self.observed.add(done.hits);
            self.shared.add_requests_done(1);
        }
        Ok(())
    }

    /// Count every lookup of this step missing from its frame, and every task a frame lists
    /// that the leader did not request or listed before.
    fn check_content(&mut self, view: &FrameView) {
        let mut found = Vec::new();
        for l in self.lookups.iter().filter(|l| !view.lookups.contains(l)) {
            found.push(format!(
                "its lookup for request {} is missing or differs",
                l.request
            ));
        }
        let in_frame: BTreeSet<TaskId> = view.starts.iter().map(|s| s.task).collect();
        for task in in_frame.difference(&self.started) {
            found.push(format!(
                "it lists task {task}, which the leader did not request (or listed it already)"
            ));
        }
        // Requested tasks not listed yet are not a mismatch: a start is revealed by the first
        // frame sealed after it is logged, which is later while Redis is unreachable.
        self.started.retain(|t| !in_frame.contains(t));
        self.content_mismatches += found.len() as u64;
        for what in found {
            if self.mismatch_samples.len() < MAX_MISMATCH_SAMPLES {
                self.mismatch_samples.push(format!(
                    "frame {} of epoch {}: {what}",
                    view.step, view.epoch
                ));
            }
        }
    }

    fn recover(&mut self, fault: Fault, failed: FailedCall) -> Result<(), EngineError> {
        let epoch = self.epoch();
        let since = *self.fault_since.get_or_insert_with(Instant::now);
        if since.elapsed() > self.params.deadlines.recovery {
            let waited_ms = since.elapsed().as_millis() as u64;
            return Err(EngineError::Rejoin {
                rank: 0,
                call: failed.call,
                epoch,
                step: self.step,
                waited_ms,
                last: fault.to_string(),
            });
        }
        self.book.failed(epoch);
        self.shared.set_doing(
            0,
            format!(
                "rejoining after {} failed at step {}: {fault}",
                failed.call, self.step
            ),
        );
        let rejoined = self.session.rejoin(&fault, failed, self.shared)?;
        if rejoined.new_epoch {
            self.shared.add_epoch_change();
            // Requested but never listed by a frame of their epoch: they never started, and no
            // outcome will come. Their requests go on as after a failure.
            for task in std::mem::take(&mut self.started) {
                self.sched
                    .on_lost(task)
                    .map_err(|source| EngineError::Scheduler {
                        epoch,
                        step: self.step,
                        source,
                    })?;
            }
            self.sched
                .on_new_epoch()
                .map_err(|source| EngineError::Scheduler {
                    epoch,
                    step: self.step,
                    source,
                })?;
            self.step = 0;
            self.catch_up_until = rejoined.welcome.next_step.0;
            self.phase = Phase::Work;
            self.lookups.clear();
            self.shared
                .set_position(0, rejoined.welcome.epoch.0, None, "rejoined");
        }
        Ok(())
    }

    fn interrupt(
        &self,
        e: tandem_client::ClientError,
        call: &'static str,
        mutates: bool,
    ) -> Interrupt {
        match classify(e) {
            Failure::Fault(fault) => Interrupt::Fault(
                fault,
                FailedCall {
                    call,
                    step: self.step,
                    mutates,
                },
            ),
            Failure::Agent(source) => self.refused(call, source),
            Failure::Protocol(detail) => self.protocol(call, detail),
        }
    }

    fn refused(&self, call: &'static str, source: AgentError) -> Interrupt {
        Interrupt::Fatal(EngineError::Refused {
            rank: 0,
            call,
            epoch: self.epoch(),
            step: self.step,
            source,
        })
    }

    fn protocol(&self, call: &'static str, detail: String) -> Interrupt {
        Interrupt::Fatal(EngineError::Protocol {
            rank: 0,
            call,
            epoch: self.epoch(),
            step: self.step,
            detail,
        })
    }

    fn sched_error(&self, source: SchedError) -> Interrupt {
        Interrupt::Fatal(EngineError::Scheduler {
            epoch: self.epoch(),
            step: self.step,
            source,
        })
    }

    fn finish(self) -> LeaderReport {
        LeaderReport {
            observed: self.observed,
            expected: self.expected.totals(),
            sched: self.sched.stats(),
            steps: self.steps,
            step_latency_us: self.latencies,
            content_mismatches: self.content_mismatches,
            mismatch_samples: self.mismatch_samples,
            shard_bytes: self.session.welcome().shard_bytes,
            engine: self.book.finish(),
        }
    }
}
