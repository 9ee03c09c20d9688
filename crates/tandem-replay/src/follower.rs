//! A follower engine (rank ≥ 1): reads frames positionally, in order, at moments chosen by
//! its own simulated memory pressure ([`crate::pressure`]), and applies each one.
//!
//! It starts at the step its agent's welcome names: the first frame its rank has not
//! acknowledged (docs/DESIGN.md, "The window"), which on a cluster an earlier replay used may
//! be before the leader's first step. Those earlier frames are read, applied and acknowledged
//! like any other (their outcomes are unseen ones: [`crate::ledger`]); skipping them would
//! leave them unacknowledged, and once they fill the window the leader could seal nothing.
//!
//! Applying frame `s`: first every outcome it reveals for the first time (a load `Ok` whose
//! start this engine saw: verify its pages with this rank's content; failed or aborted: nothing
//! to check), then every store started in it (compute its pages: write this rank's content;
//! the agent copies them only after this engine acknowledges the step). Then `ack(s)`, now or,
//! under pressure, later (an acknowledgement covers every earlier step; deferred ones are
//! flushed whenever the follower catches up with the leader).
//!
//! A `LeaderBehind` answer after the poll deadline only means the frame is not sealed yet.
//! Stale epoch, not ready and broken sockets are the engine session's
//! ([`tandem_client::EngineSession`]): it rejoins, and after a new epoch the follower reads
//! from step 0. The follower runs until the driver stops the run.

use tandem_client::{AgentError, Applied};
use tandem_proto::frame::OutcomeResult;
use tandem_proto::ids::{Step, TaskKind};

use crate::engine::{compute_pages, EngineBook, EngineReport, PageHistory};
use crate::error::EngineError;
use crate::params::ReplayParams;
use crate::pressure::{PressureClock, ReadPlan};
use crate::session::{Interrupt, Session};
use crate::shared::Shared;
use crate::view::FrameView;

/// Run follower engine `rank` until the run stops.
pub(crate) fn run_follower(
    rank: u32,
    params: &ReplayParams,
    shared: &Shared,
    run_id: &str,
) -> Result<EngineReport, EngineError> {
    let mut session = Session::open(rank, params, shared, run_id)?;
    // Where this rank's agent welcomed the engine: the first frame the rank has not
    // acknowledged (`FollowerCore::resume_step`). An earlier engine of the rank (the previous
    // replay on the same cluster) may have left frames unacknowledged; reading on from the
    // leader's step instead would skip them, and once they fill the window the leader seals
    // nothing more while this engine waits for a step past it.
    let resume = session.welcome().next_step;
    session.s().seek(resume);
    let mut follower = Follower {
        rank,
        params,
        shared,
        clock: PressureClock::new(params.pattern_for(rank), rank),
        book: EngineBook::new(rank),
        session,
        plan: None,
        pending_ack: false,
        history: PageHistory::default(),
    };
    shared.set_position(rank, follower.session.epoch(), None, "starting");
    let result = follower.run();
    let Follower { book, session, .. } = follower;
    match result {
        Ok(()) | Err(EngineError::Stopped { .. }) => {
            let (tally, open) = session.close();
            Ok(book.finish(tally, &open))
        }
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
    plan: Option<ReadPlan>,
    /// An applied frame whose ack was deferred (memory pressure).
    pending_ack: bool,
    history: PageHistory,
}

impl Follower<'_> {
    fn run(&mut self) -> Result<(), EngineError> {
        while !self.shared.stopped() {
            match self.read_next() {
                Ok(()) => {}
                Err(Interrupt::Fatal(e)) => return Err(e),
                Err(Interrupt::Agent(source)) => {
                    return Err(EngineError::Refused {
                        rank: self.rank,
                        call: "frame",
                        epoch: self.session.epoch(),
                        step: self.next(),
                        source,
                    })
                }
                Err(Interrupt::NewEpoch { from, waited_ms }) => self.new_epoch(from, waited_ms),
            }
        }
        Ok(())
    }

    /// The frame the session reads next.
    fn next(&mut self) -> u64 {
        self.session.s().step().0
    }

    fn applied(&mut self) -> Option<u64> {
        self.session.s().last_applied().map(|s| s.0)
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
        let step = self.next();
        let applied = self.applied();
        self.shared.set_position(
            self.rank,
            self.session.epoch(),
            applied,
            format!("reading frame {step}"),
        );
        let poll = self.params.deadlines.frame_poll;
        let applied = match self.session.s().next_frame(poll) {
            Ok(applied) => applied,
            Err(e) => return self.not_read(self.session.sort(e, "frame", step)),
        };
        self.apply(&applied)?;
        self.plan = None;
        self.shared
            .set_position(self.rank, self.session.epoch(), Some(step), "");
        for _ in 1..plan.reads {
            let again = self
                .session
                .s()
                .reread(Step(step), poll)
                .map_err(|e| self.session.sort(e, "frame", step))?;
            self.book.ledger.reread(again == applied.frame);
        }
        self.pending_ack = true;
        if plan.defer_ack {
            Ok(())
        } else {
            self.ack()
        }
    }

    /// The frame was not read: not sealed yet (flush a deferred ack and ask again), or worse.
    fn not_read(&mut self, i: Interrupt) -> Result<(), Interrupt> {
        match i {
            Interrupt::Agent(AgentError::LeaderBehind { .. }) => {
                if self.pending_ack {
                    self.ack()?;
                }
                self.clock.flushed();
                Ok(())
            }
            i => Err(i),
        }
    }

    /// Acknowledge every frame applied so far.
    fn ack(&mut self) -> Result<(), Interrupt> {
        let step = self.next();
        self.session
            .s()
            .ack()
            .map_err(|e| self.session.sort(e, "ack", step))?;
        self.pending_ack = false;
        Ok(())
    }

    fn apply(&mut self, applied: &Applied) -> Result<(), Interrupt> {
        let frame = &applied.frame;
        self.book.frame_read(frame.epoch.0);
        let view = FrameView::of(frame);
        self.book.ledger.observe(&view);
        let when = format!("by the first frame of epoch {}", frame.epoch);
        self.book.ledger.lost(&applied.observed.lost, &when);
        for d in &applied.observed.outcomes {
            let before = self.history.take_before(d.outcome.task);
            if let (TaskKind::Load, OutcomeResult::Ok, Some(start)) =
                (d.outcome.kind, &d.outcome.result, &d.start)
            {
                let pool = self.session.pool();
                self.book.verify(
                    pool,
                    self.rank,
                    &start.start.block_hashes,
                    &start.start.page_ids,
                    &before,
                );
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

    /// The session rejoined a new epoch: read it from step 0 (the session is there already).
    fn new_epoch(&mut self, from: u64, waited_ms: u64) {
        self.book.failed(from, waited_ms);
        self.pending_ack = false;
        self.plan = None;
        self.clock.flushed();
        self.shared
            .set_position(self.rank, self.session.epoch(), None, "rejoined");
    }
}
