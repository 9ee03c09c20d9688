//! A follower engine (rank ≥ 1): reads frames positionally, in order, at moments chosen by
//! its own simulated memory pressure ([`crate::pressure`]), and applies each one.
//!
//! Applying frame `s`: first every outcome it reveals for the first time (a load `Ok` whose
//! start this engine saw: verify its pages with this rank's content; failed or aborted: nothing
//! to check), then every store started in it (compute its pages: write this rank's content;
//! the agent copies them only after this engine acknowledges the step). Then `ack(s)`, now or,
//! under pressure, later (an acknowledgement covers every earlier step; deferred ones are
//! flushed whenever the follower catches up with the leader).
//!
//! A `LeaderBehind` answer after the poll deadline only means the frame is not sealed yet.
//! Stale epoch, not ready and broken sockets rejoin ([`crate::session`]); a new epoch is read
//! from step 0. The follower runs until the driver stops the run.

use std::time::Instant;

use tandem_client::{AgentError, ClientError};
use tandem_proto::frame::{Frame, OutcomeResult};
use tandem_proto::ids::{Step, TaskKind};

use crate::engine::{compute_pages, EngineBook, EngineReport, PageHistory};
use crate::error::EngineError;
use crate::params::ReplayParams;
use crate::pressure::{PressureClock, ReadPlan};
use crate::session::{classify, FailedCall, Failure, Fault, Session};
use crate::shared::Shared;
use crate::view::FrameView;

/// Run follower engine `rank` until the run stops.
pub(crate) fn run_follower(
    rank: u32,
    params: &ReplayParams,
    shared: &Shared,
    run_id: &str,
) -> Result<EngineReport, EngineError> {
    let session = Session::open(rank, params, shared, run_id)?;
    let start = loop {
        if shared.stopped() {
            return Err(EngineError::Stopped { rank });
        }
        if let Some(start) = shared.start() {
            break start;
        }
        shared.set_doing(rank, "waiting for the leader to join");
        shared.sleep(std::time::Duration::from_millis(5));
    };
    let next = if session.epoch() == start.0 {
        start.1
    } else {
        0
    };
    let mut follower = Follower {
        rank,
        params,
        shared,
        clock: PressureClock::new(params.pattern_for(rank), rank),
        book: EngineBook::new(rank),
        session,
        next,
        applied: None,
        plan: None,
        pending_ack: None,
        fault_since: None,
        history: PageHistory::default(),
    };
    shared.set_position(rank, follower.session.epoch(), None, "starting");
    match follower.run() {
        Ok(()) | Err(EngineError::Stopped { .. }) => Ok(follower.book.finish()),
        Err(e) => Err(e),
    }
}

struct Follower<'a> {
    rank: u32,
    params: &'a ReplayParams,
    shared: &'a Shared,
    session: Session,
    book: EngineBook,
    clock: PressureClock,
    next: u64,
    applied: Option<u64>,
    plan: Option<ReadPlan>,
    pending_ack: Option<u64>,
    fault_since: Option<Instant>,
    history: PageHistory,
}

enum Interrupt {
    Fault(Fault, &'static str),
    Fatal(EngineError),
}

impl Follower<'_> {
    fn run(&mut self) -> Result<(), EngineError> {
        while !self.shared.stopped() {
            match self.read_next() {
                Ok(()) => {}
                Err(Interrupt::Fatal(e)) => return Err(e),
                Err(Interrupt::Fault(fault, call)) => self.recover(fault, call)?,
            }
        }
        Ok(())
    }

    fn read_next(&mut self) -> Result<(), Interrupt> {
        let plan = *self.plan.get_or_insert_with(|| self.clock.next_plan());
        if plan.stall_ms > 0 {
            self.shared.set_doing(
                self.rank,
                format!("stalled {} ms (memory pressure)", plan.stall_ms),
            );
            self.shared
                .sleep(std::time::Duration::from_millis(plan.stall_ms));
            self.plan = Some(ReadPlan {
                stall_ms: 0,
                ..plan
            });
        }
        let step = Step(self.next);
        self.shared.set_position(
            self.rank,
            self.session.epoch(),
            self.applied,
            format!("reading frame {}", step.0),
        );
        let frame = match self
            .session
            .client()
            .frame(step, self.params.deadlines.frame_poll)
        {
            Ok(frame) => frame,
            Err(e) => return self.not_read(e),
        };
        self.fault_since = None;
        self.check_position(&frame)?;
        self.apply(&frame)?;
        self.applied = Some(step.0);
        self.next += 1;
        self.plan = None;
        self.shared
            .set_position(self.rank, self.session.epoch(), self.applied, "");
        for _ in 1..plan.reads {
            let again = self
                .session
                .client()
                .frame(step, self.params.deadlines.frame_poll)
                .map_err(|e| self.interrupt(e, "frame"))?;
            self.book.ledger.reread(again == frame);
        }
        if plan.defer_ack {
            self.pending_ack = Some(step.0);
            Ok(())
        } else {
            self.ack(step.0)
        }
    }

    /// The frame was not read: not sealed yet (flush a deferred ack and ask again), or a fault.
    fn not_read(&mut self, e: ClientError) -> Result<(), Interrupt> {
        match classify(e) {
            Failure::Agent(AgentError::LeaderBehind { .. }) => {
                self.fault_since = None;
                if let Some(step) = self.pending_ack {
                    self.ack(step)?;
                }
                self.clock.flushed();
                Ok(())
            }
            Failure::Fault(fault) => Err(Interrupt::Fault(fault, "frame")),
            Failure::Agent(source) => Err(self.fatal_refused("frame", source)),
            Failure::Protocol(detail) => Err(self.fatal_protocol("frame", detail)),
        }
    }

    fn ack(&mut self, step: u64) -> Result<(), Interrupt> {
        self.pending_ack = Some(step);
        self.session
            .client()
            .ack(Step(step))
            .map_err(|e| self.interrupt(e, "ack"))?;
        self.book.ledger.acked(self.session.epoch(), step);
        self.pending_ack = None;
        Ok(())
    }

    fn check_position(&self, frame: &Frame) -> Result<(), Interrupt> {
        if frame.epoch.0 == self.session.epoch() && frame.step.0 == self.next {
            return Ok(());
        }
        let detail = format!(
            "asked for step {} of epoch {}, got step {} of epoch {}",
            self.next,
            self.session.epoch(),
            frame.step,
            frame.epoch
        );
        Err(self.fatal_protocol("frame", detail))
    }

    fn apply(&mut self, frame: &Frame) -> Result<(), Interrupt> {
        self.book.frame_read(frame.epoch.0);
        let view = FrameView::of(frame);
        let observed = self.book.ledger.observe(&view);
        for (outcome, start) in &observed.fresh {
            let before = self.history.take_before(outcome.task);
            if let (TaskKind::Load, OutcomeResult::Ok, Some(start)) =
                (outcome.kind, &outcome.result, start)
            {
                let pool = self.session.pool();
                self.book
                    .verify(pool, self.rank, &start.hashes, &start.pages, &before);
            }
        }
        for start in &view.starts {
            self.history.started(start);
        }
        for start in view.starts.iter().filter(|s| s.kind == TaskKind::Store) {
            compute_pages(
                self.session.pool_mut(),
                self.rank,
                &start.hashes,
                &start.pages,
            )
            .map_err(|source| {
                Interrupt::Fatal(EngineError::Pool {
                    rank: self.rank,
                    source,
                })
            })?;
        }
        Ok(())
    }

    fn recover(&mut self, fault: Fault, call: &'static str) -> Result<(), EngineError> {
        let (rank, epoch) = (self.rank, self.session.epoch());
        let since = *self.fault_since.get_or_insert_with(Instant::now);
        if since.elapsed() > self.params.deadlines.recovery {
            let waited_ms = since.elapsed().as_millis() as u64;
            return Err(EngineError::Rejoin {
                rank,
                call,
                epoch,
                step: self.next,
                waited_ms,
                last: fault.to_string(),
            });
        }
        self.book.failed(epoch);
        self.shared.set_doing(
            rank,
            format!(
                "rejoining after {call} failed at step {}: {fault}",
                self.next
            ),
        );
        let rejoined = self.session.rejoin(
            &fault,
            FailedCall {
                call,
                step: self.next,
                mutates: false,
            },
            self.shared,
        )?;
        if rejoined.new_epoch {
            self.next = 0;
            self.applied = None;
            self.pending_ack = None;
            self.plan = None;
            self.clock.flushed();
            self.shared
                .set_position(rank, rejoined.welcome.epoch.0, None, "rejoined");
        }
        Ok(())
    }

    fn interrupt(&self, e: ClientError, call: &'static str) -> Interrupt {
        match classify(e) {
            Failure::Fault(fault) => Interrupt::Fault(fault, call),
            Failure::Agent(source) => self.fatal_refused(call, source),
            Failure::Protocol(detail) => self.fatal_protocol(call, detail),
        }
    }

    fn fatal_refused(&self, call: &'static str, source: AgentError) -> Interrupt {
        Interrupt::Fatal(EngineError::Refused {
            rank: self.rank,
            call,
            epoch: self.session.epoch(),
            step: self.next,
            source,
        })
    }

    fn fatal_protocol(&self, call: &'static str, detail: String) -> Interrupt {
        Interrupt::Fatal(EngineError::Protocol {
            rank: self.rank,
            call,
            epoch: self.session.epoch(),
            step: self.next,
            detail,
        })
    }
}
