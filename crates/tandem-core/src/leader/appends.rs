//! The leader's write-ahead pipeline: the appends in flight to the completion log, answered in
//! the order they went out (docs/DESIGN.md invariant 5).
//!
//! An `end_step` hands what became persistable (the leader's persist batch, and frame 0's
//! aborts of the previous epoch) to its driver as one [`crate::Append`], while fewer than
//! `max_appends_in_flight` are out. A frame reveals only what confirmed appends hold.
//!
//! Each append carries a step, its *stamp*: the frame of that step is never sealed before the
//! append is answered, so what it holds is revealed by that frame or an earlier one (ranks
//! acknowledge a stream entry once their engine acknowledged the frame of its step, and
//! recovery trusts those acknowledgements). An append made at step `s` is stamped
//! `s + max_appends_in_flight - 1` (never below an earlier stamp): `end_step(s)` waits for its
//! own append at most `append_wait_ms`, and without a time bound for every append stamped `s`
//! or earlier. With one append in flight that is the append of the step itself. Frame 0's
//! aborts and a drain are stamped with their own step and waited for without a time bound.
//! When its own append is answered within that wait, what finished while it was out (the
//! leader copies its shard when a task starts, so a quick task of a group of one rank is done
//! by then) rides one more append, stamped like it, which the `end_step` waits for the same way.
//!
//! The driver answers `handle_appended` once per append, in the order they went out. A refused
//! append's starts and outcomes are queued again, first; later appends stand on their own
//! answers (what they hold never depends on an append that is not confirmed: nothing is
//! revealed before it is durable). It never does IO.

use std::collections::VecDeque;

use tandem_proto::engine::AgentError;
use tandem_proto::{BatchId, Epoch, PersistBatch, Step, TaskOutcome};

use super::LeaderCore;
use crate::output::{Append, CallRef, Output};
use crate::shared::Shared;

/// One append out to the driver.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct InFlight {
    /// Its place in the order the appends went out.
    seq: u64,
    /// The step it carries: the frame of that step waits for its answer.
    stamp: Step,
    /// The leader's persist batch it holds, if any.
    batch: Option<BatchId>,
    /// The previous epoch's aborted tasks it holds.
    aborted: Vec<TaskOutcome>,
}

/// The `end_step` waiting for appends to be answered before it seals.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct AppendWait {
    /// The call to answer once sealed; `None` once the epoch failed (answered then).
    call: Option<CallRef>,
    step: Step,
    /// The `end_step`'s window deadline.
    deadline_ms: u64,
    /// Sealing waits until this append (and every earlier one) is answered.
    required: Option<u64>,
    /// Sealing also waits for this one (its own), until `until_ms`.
    wanted: Option<u64>,
    /// See `wanted`; `None`: no time bound.
    until_ms: Option<u64>,
    /// Whether what finishes while `wanted` is out may still go out in one more append that
    /// this `end_step` waits for too (once per `end_step`).
    ride: bool,
}

/// The appends out, oldest first, and the `end_step` waiting for some of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Appends {
    out: VecDeque<InFlight>,
    next_seq: u64,
    last_stamp: Option<Step>,
    wait: Option<AppendWait>,
}

impl Appends {
    /// Whether an `end_step` waits for an append.
    pub(super) fn waiting(&self) -> bool {
        self.wait.is_some()
    }

    /// Appends out, not answered yet.
    pub(super) fn out(&self) -> usize {
        self.out.len()
    }

    /// When the waiting `end_step` stops waiting for its own append.
    pub(super) fn poll_timeout(&self) -> Option<u64> {
        self.wait
            .as_ref()
            .filter(|w| w.wanted.is_some())
            .and_then(|w| w.until_ms)
    }

    /// Aborts in appends out.
    pub(super) fn aborted_out(&self) -> impl Iterator<Item = &TaskOutcome> {
        self.out.iter().flat_map(|a| a.aborted.iter())
    }

    /// The waiting `end_step`'s call, taken to be refused (the epoch failed or stops); the
    /// wait itself lasts until its appends are answered.
    pub(super) fn take_call(&mut self) -> Option<CallRef> {
        self.wait.as_mut().and_then(|w| w.call.take())
    }

    /// Whether append `seq` and every earlier one were answered.
    fn answered(&self, seq: u64) -> bool {
        self.out.front().is_none_or(|a| a.seq > seq)
    }

    /// The newest append out whose stamp is `step` or earlier: sealing `step` waits for it.
    pub(super) fn blocking(&self, step: Step) -> Option<u64> {
        self.out
            .iter()
            .rev()
            .find(|a| a.stamp <= step)
            .map(|a| a.seq)
    }
}

/// How an `end_step` waits for the write-ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flush {
    /// The engine's `end_step`: waits for its own append at most `append_wait_ms`.
    Step,
    /// A drain: waits for every append out.
    All,
}

impl LeaderCore {
    /// `end_step(step)` with a completion log: hand out what became persistable, then seal now
    /// or wait for an append first. `deadline_ms` is the window wait's deadline.
    pub(super) fn append_then_seal(
        &mut self,
        sh: &mut Shared,
        call: CallRef,
        (step, deadline_ms): (Step, u64),
        flush: Flush,
        now_ms: u64,
    ) {
        let max = sh.config.max_appends_in_flight.max(1);
        let unbounded = flush == Flush::All || !self.aborted_pending.is_empty();
        // Stamped with its own step when waited for without a time bound, else as late as the
        // pipeline allows.
        let lag = if unbounded { 0 } else { u64::from(max - 1) };
        let mut own = None;
        if self.appends.out.len() < max as usize {
            let batch = self.leader.poll_persist();
            let aborted = std::mem::take(&mut self.aborted_pending);
            if batch.is_some() || !aborted.is_empty() {
                let stamp = Step(step.0.saturating_add(lag));
                own = Some(self.issue(sh, stamp, batch.as_ref(), aborted));
            }
        }
        if !self.aborted_pending.is_empty() {
            // Every append slot is taken (never at frame 0 in practice: its aborts go out in the
            // epoch's first append); the reconciliation waits for its aborts.
            let reason = format!(
                "{} write-ahead appends in flight, the reconciliation of epoch {} is not durable yet",
                self.appends.out.len(),
                self.leader.epoch()
            );
            return sh.refuse(call, AgentError::NotReady { reason });
        }
        let (required, wanted) = if unbounded {
            (self.appends.out.back().map(|a| a.seq), None)
        } else if sh.config.append_wait_ms == 0 {
            (self.appends.blocking(step), None)
        } else {
            (self.appends.blocking(step), own)
        };
        // At least `append_wait_ms` on a clock of whole milliseconds; no bound past the clock's
        // end.
        let until_ms = now_ms
            .checked_add(sh.config.append_wait_ms)
            .and_then(|t| t.checked_add(1));
        self.appends.wait = Some(AppendWait {
            call: Some(call),
            step,
            deadline_ms,
            required,
            wanted,
            until_ms,
            ride: wanted.is_some(),
        });
        self.maybe_end_wait(sh, now_ms);
    }

    /// Hand out one append stamped `stamp` (or the last stamp, if later); returns its place in
    /// the order.
    fn issue(
        &mut self,
        sh: &mut Shared,
        stamp: Step,
        batch: Option<&PersistBatch>,
        aborted: Vec<TaskOutcome>,
    ) -> u64 {
        let stamp = self.appends.last_stamp.map_or(stamp, |l| l.max(stamp));
        self.appends.last_stamp = Some(stamp);
        let seq = self.appends.next_seq;
        self.appends.next_seq += 1;
        sh.push(Output::Append(append_record(
            sh.epoch(),
            stamp,
            &aborted,
            batch,
        )));
        self.appends.out.push_back(InFlight {
            seq,
            stamp,
            batch: batch.map(|b| b.id),
            aborted,
        });
        seq
    }

    /// The oldest append out is durable (`Ok`) or failed (the log's reason).
    pub(crate) fn appended(&mut self, sh: &mut Shared, result: Result<(), String>, now_ms: u64) {
        let Some(a) = self.appends.out.pop_front() else {
            tracing::warn!("an append result with no append in flight: ignored");
            return;
        };
        match result {
            Ok(()) => {
                self.log_error = None;
                if let Some(id) = a.batch {
                    if let Err(e) = self.leader.handle_persisted(id) {
                        tracing::error!(error = %e, "persist batch refused");
                    }
                }
                self.ride(sh, &a, now_ms);
            }
            Err(reason) => {
                if self.log_error.is_none() {
                    tracing::warn!(%reason, "completion log unavailable: sealing on, revealing nothing new");
                }
                self.log_error = Some(reason.clone());
                if let Some(id) = a.batch {
                    if let Err(e) = self.leader.handle_persist_failed(id) {
                        tracing::error!(error = %e, "persist batch refused");
                    }
                }
                if !a.aborted.is_empty() {
                    // The reconciliation cannot be revealed before its aborts are durable: they
                    // wait again, and the `end_step` waiting for them is refused.
                    let mut aborted = a.aborted;
                    aborted.append(&mut self.aborted_pending);
                    self.aborted_pending = aborted;
                    if let Some(w) = self.appends.wait.take() {
                        if let Some(call) = w.call {
                            let reason = format!("completion log unavailable, the reconciliation of epoch {} is not durable yet: {reason}", self.leader.epoch());
                            sh.refuse(call, AgentError::NotReady { reason });
                        }
                    }
                    return;
                }
            }
        }
        self.maybe_end_wait(sh, now_ms);
        // A seal the window held may have waited for this append.
        self.retry_end_waits(sh, now_ms);
    }

    /// The waiting `end_step`'s own append `own` was answered `Ok` within its
    /// `append_wait_ms`: what finished while it was out (a task of this very step whose copies
    /// all ended before its start was durable, or any other outcome) goes out at once in one
    /// more append, stamped like `own`, and the `end_step` waits for it as for its own
    /// (without a time bound if that stamp is the step itself). So a task whose every shard is
    /// done before its start's append is answered finishes in the frame that starts it. Once
    /// per `end_step`.
    fn ride(&mut self, sh: &mut Shared, own: &InFlight, now_ms: u64) {
        let max = sh.config.max_appends_in_flight.max(1) as usize;
        let rides = self.appends.wait.as_ref().is_some_and(|w| {
            w.ride && w.wanted == Some(own.seq) && w.until_ms.is_none_or(|t| now_ms < t)
        });
        if !rides || self.appends.out.len() >= max {
            return;
        }
        let Some(batch) = self.leader.poll_persist() else {
            return;
        };
        let seq = self.issue(sh, own.stamp, Some(&batch), Vec::new());
        let Some(step) = self.appends.wait.as_ref().map(|w| w.step) else {
            return;
        };
        let required = self.appends.blocking(step);
        if let Some(w) = &mut self.appends.wait {
            w.ride = false;
            w.wanted = Some(seq);
            w.required = required;
        }
    }

    /// The waiting `end_step` seals once the appends it waits for are answered.
    fn maybe_end_wait(&mut self, sh: &mut Shared, now_ms: u64) {
        let appends = &self.appends;
        let done = |seq: Option<u64>| seq.is_none_or(|s| appends.answered(s));
        let Some(w) = &appends.wait else {
            return;
        };
        if !(done(w.required) && done(w.wanted)) {
            return;
        }
        let Some(w) = self.appends.wait.take() else {
            return;
        };
        if let Some(call) = w.call {
            self.seal_or_wait(sh, call, w.step, w.deadline_ms, now_ms);
        }
    }

    /// Timers at `now_ms`: an `end_step` that waited `append_wait_ms` for its own append stops
    /// waiting for it (and seals unless an earlier append must be answered first).
    pub(super) fn append_timeout(&mut self, sh: &mut Shared, now_ms: u64) {
        if let Some(w) = &mut self.appends.wait {
            if w.until_ms.is_some_and(|t| now_ms >= t) {
                w.wanted = None;
            }
        }
        self.maybe_end_wait(sh, now_ms);
    }
}

/// The record of an append, for the driver.
fn append_record(
    epoch: Epoch,
    stamp: Step,
    aborted: &[TaskOutcome],
    batch: Option<&PersistBatch>,
) -> Append {
    let mut finished = aborted.to_vec();
    finished.extend(batch.map(|b| b.outcomes.clone()).unwrap_or_default());
    Append {
        epoch,
        step: stamp,
        started: batch.map(|b| b.started.clone()).unwrap_or_default(),
        finished,
    }
}
