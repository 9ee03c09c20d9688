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
//! Failures within an epoch are the engine session's ([`tandem_client::EngineSession`]): it
//! rejoins and asks again (a seal whose reply was lost is read back). After a new epoch the
//! leader restarts at step 0, whose frame settles every earlier task: outcomes, tasks that
//! never started, tasks lost.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tandem_client::{AgentError, Applied, SessionError};
use tandem_proto::frame::LookupResult;
use tandem_proto::ids::{RequestId, Step, TaskId, TaskKind};
use tandem_trace::{HitTotals, PrefixCacheSim, TraceRecord};

use crate::engine::{compute_pages, EngineBook, EngineReport};
use crate::error::{EngineError, SchedError};
use crate::params::ReplayParams;
use crate::scheduler::{Admission, Issue, SchedStats, Scheduler};
use crate::session::{Interrupt, Session};
use crate::shared::Shared;
use crate::source::{Head, RequestSource};
use crate::view::FrameView;

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
}

impl<'a, I: Iterator<Item = TraceRecord>> Leader<'a, I> {
    fn new(params: &'a ReplayParams, shared: &'a Shared, session: Session, requests: I) -> Self {
        let welcome = session.welcome();
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
                Ok(()) => {}
                Err(Interrupt::Fatal(e)) => return Err(e),
                Err(Interrupt::Agent(source)) => {
                    // Every call handles the refusals it expects; any other ends the engine.
                    return Err(EngineError::Refused {
                        rank: 0,
                        call: "a step",
                        epoch: self.epoch(),
                        step: self.step,
                        source,
                    });
                }
                Err(Interrupt::NewEpoch { from, waited_ms }) => self.new_epoch(from, waited_ms)?,
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
                let applied = self.seal(Step(step))?;
                self.apply(&applied)?;
                self.phase = Phase::Ack;
            }
            Phase::Ack => {
                self.session
                    .s()
                    .ack()
                    .map_err(|e| self.interrupt(e, "ack"))?;
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
                .s()
                .lookup(id, &hashes)
                .map_err(|e| self.interrupt(e, "lookup"))?;
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

    fn issue(&mut self, _: Step, issue: Issue) -> Result<(), Interrupt> {
        if issue.role.computes() {
            compute_pages(self.session.pool_mut(), 0, &issue.hashes, &issue.pages)
                .map_err(|source| EngineError::Pool { rank: 0, source })?;
        }
        let kind = issue.role.kind();
        let session = self.session.s();
        let result = match kind {
            TaskKind::Load => session.load(issue.request, &issue.hashes, &issue.pages),
            TaskKind::Store => session.store(issue.request, &issue.hashes, &issue.pages),
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
                return Err(self.interrupt(e, call));
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

    /// Seal step `s` (retried while the window is full) and return what its frame brought.
    fn seal(&mut self, s: Step) -> Result<Applied, Interrupt> {
        let t0 = Instant::now();
        loop {
            if self.shared.stopped() {
                return Err(EngineError::Stopped { rank: 0 }.into());
            }
            let err = match self.session.s().end_step(self.params.deadlines.end_step) {
                Ok(applied) => {
                    if applied.sealed_here {
                        self.latencies.push(t0.elapsed().as_micros() as u64);
                    }
                    return Ok(applied);
                }
                Err(e) => e,
            };
            match self.session.sort(err, "end_step", s.0) {
                Interrupt::Agent(last @ AgentError::WindowFull { .. }) => {
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
                Interrupt::Agent(source) => {
                    return Err(self.session.refused(source, "end_step", s.0))
                }
                other => return Err(other),
            }
        }
    }

    fn apply(&mut self, applied: &Applied) -> Result<(), Interrupt> {
        let frame = &applied.frame;
        self.book.frame_read(frame.epoch.0);
        let view = FrameView::of(frame);
        self.book.ledger.observe(&view);
        if applied.sealed_here {
            self.check_content(&view);
        }
        let observed = &applied.observed;
        for d in &observed.outcomes {
            self.started.remove(&d.outcome.task);
            let (book, pool) = (&mut self.book, self.session.pool());
            let result = self.sched.on_outcome(&d.outcome, &mut |hashes, pages| {
                book.verify(pool, 0, hashes, pages, &[])
            });
            result.map_err(|e| self.sched_error(e))?;
        }
        let when = format!("by the first frame of epoch {}", frame.epoch);
        self.book.ledger.lost(&observed.lost, &when);
        // Lost, or requested and never listed by a frame of their epoch: no outcome will come.
        // Their requests go on as after a failure.
        let settled = observed.lost.iter().map(|l| l.start.task);
        let never = observed.not_started.iter().map(|r| r.task);
        for task in settled.chain(never).collect::<Vec<_>>() {
            self.started.remove(&task);
            self.sched.on_lost(task).map_err(|e| self.sched_error(e))?;
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

    /// The session rejoined a new epoch: the open step's work is void; start again at step 0,
    /// whose frame settles every earlier task.
    fn new_epoch(&mut self, from: u64, waited_ms: u64) -> Result<(), EngineError> {
        self.book.failed(from, waited_ms);
        self.shared.add_epoch_change();
        self.started.clear();
        self.sched
            .on_new_epoch()
            .map_err(|source| EngineError::Scheduler {
                epoch: from,
                step: self.step,
                source,
            })?;
        let welcome = self.session.welcome();
        self.step = 0;
        self.catch_up_until = welcome.next_step.0;
        self.phase = Phase::Work;
        self.lookups.clear();
        self.shared
            .set_position(0, welcome.epoch.0, None, "rejoined");
        Ok(())
    }

    /// A failed call: a new epoch goes back to the loop; any refusal or other error here ends
    /// the engine.
    fn interrupt(&self, e: SessionError, call: &'static str) -> Interrupt {
        match self.session.sort(e, call, self.step) {
            Interrupt::Agent(source) => self.session.refused(source, call, self.step),
            other => other,
        }
    }

    fn sched_error(&self, source: SchedError) -> Interrupt {
        Interrupt::Fatal(EngineError::Scheduler {
            epoch: self.epoch(),
            step: self.step,
            source,
        })
    }

    fn finish(self) -> LeaderReport {
        let shard_bytes = self.session.welcome().shard_bytes;
        let (tally, open) = self.session.close();
        LeaderReport {
            observed: self.observed,
            expected: self.expected.totals(),
            sched: self.sched.stats(),
            steps: self.steps,
            step_latency_us: self.latencies,
            content_mismatches: self.content_mismatches,
            mismatch_samples: self.mismatch_samples,
            shard_bytes,
            engine: self.book.finish(tally, &open),
        }
    }
}
