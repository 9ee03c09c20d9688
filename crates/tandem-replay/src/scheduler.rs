//! The leader engine's scheduler, sans IO: which requests to admit, which pages they get,
//! which tasks to issue, and what each outcome means for pages and requests.
//!
//! The leader engine (the private `leader` module) drives it: `check_admission`/`admit` for
//! arriving requests, `on_lookup` with the agent's answer, `next_issue` for every part to hand to the
//! agent (`on_started` with the task id, `requeue` if the call failed), `on_outcome` for every
//! outcome a frame reveals, `on_lost` for a task whose outcome never came, `on_new_epoch`
//! after a group restart, and `take_completed` to collect finished requests.
//!
//! Rules it keeps:
//! - **Pages.** A request reserves one page per block at admission; pages come back when a
//!   store's outcome arrives (any result) or after a load's `Ok` outcome has been verified
//!   (the `verify` callback runs before the pages are free), never earlier.
//! - **Prefix order.** Requests are admitted first-in first-out, and a request waits while
//!   any of its blocks is being stored by another request. So a request's lookup sees every
//!   block stored by the requests before it, which is the arrival model of
//!   [`tandem_trace::PrefixCacheSim`]: with unlimited capacity the observed hit ratios equal
//!   the expected ones exactly.
//! - **Failed loads.** A load that fails, is aborted or is lost leaves its pages undefined:
//!   the blocks are computed again into the same pages and stored (a recompute part).
//!
//! It never does IO, reads clocks or touches page bytes.

use std::collections::{BTreeMap, HashMap, VecDeque};

use tandem_proto::frame::{OutcomeResult, TaskOutcome};
use tandem_proto::ids::{BlockHash, PageId, RequestId, TaskId};
use tandem_trace::{RequestHits, TraceRecord};

use crate::error::SchedError;
use crate::pages::PageFreeList;
use crate::request::{RequestRun, Role};

/// Whether the next request may be admitted now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Admit it.
    Ready,
    /// `max_in_flight` requests are running.
    InFlightFull,
    /// Fewer free pages than the request has blocks.
    WaitPages {
        /// Pages needed (the request's blocks).
        need: u32,
        /// Pages free now.
        free: u32,
    },
    /// Another request is storing one of its blocks.
    WaitPrefix {
        /// The first such block.
        block: BlockHash,
    },
    /// The request has more blocks than the pool has pages: it can never run.
    TooLarge {
        /// The request's blocks.
        blocks: u64,
        /// Pages in the pool.
        pages: u32,
    },
}

/// One part to hand to the agent: a load, or a store of computed pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    /// The request.
    pub request: RequestId,
    /// Which part.
    pub role: Role,
    /// Blocks, in prefix order.
    pub hashes: Vec<BlockHash>,
    /// A page per block.
    pub pages: Vec<PageId>,
}

/// What one outcome did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeEffect {
    /// Not a task of this scheduler (for example one of an earlier run).
    Unknown,
    /// A load finished `Ok`; its pages were verified and freed.
    Loaded,
    /// A load failed or was aborted; its blocks will be recomputed and stored.
    Recompute,
    /// A store (or recompute) ended; its pages are free.
    Stored {
        /// Whether it finished `Ok`.
        ok: bool,
    },
}

/// Counters of task outcomes, in blocks or tasks as named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStats {
    /// Blocks in stores and recomputes that finished `Ok`.
    pub blocks_stored: u64,
    /// Blocks in loads that finished `Ok`.
    pub blocks_loaded: u64,
    /// Loads that failed, were aborted or were lost (tasks).
    pub loads_failed: u64,
    /// Stores and recomputes that failed, were aborted or were lost (tasks).
    pub stores_failed: u64,
    /// Recompute parts planned after failed loads (tasks).
    pub recomputes: u64,
    /// Outcomes for tasks this scheduler never started.
    pub unknown_outcomes: u64,
}

/// A request whose parts are all done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    /// The request.
    pub request: RequestId,
    /// What its lookup hit.
    pub hits: RequestHits,
}

/// The leader engine's scheduling state.
#[derive(Clone, Debug)]
pub struct Scheduler {
    max_in_flight: usize,
    pages: PageFreeList,
    requests: BTreeMap<RequestId, RequestRun>,
    tasks: HashMap<TaskId, (RequestId, Role)>,
    storing: HashMap<BlockHash, u32>,
    to_issue: VecDeque<(RequestId, Role)>,
    completed: Vec<Completed>,
    stats: SchedStats,
}

impl Scheduler {
    /// A scheduler over a pool of `pool_pages` pages running at most `max_in_flight`
    /// requests at once.
    pub fn new(pool_pages: u32, max_in_flight: usize) -> Self {
        Scheduler {
            max_in_flight: max_in_flight.max(1),
            pages: PageFreeList::new(pool_pages),
            requests: BTreeMap::new(),
            tasks: HashMap::new(),
            storing: HashMap::new(),
            to_issue: VecDeque::new(),
            completed: Vec::new(),
            stats: SchedStats::default(),
        }
    }

    /// Whether `record` may be admitted now.
    pub fn check_admission(&self, record: &TraceRecord) -> Admission {
        let blocks = record.blocks();
        if blocks > u64::from(self.pages.pages()) {
            return Admission::TooLarge {
                blocks,
                pages: self.pages.pages(),
            };
        }
        if self.requests.len() >= self.max_in_flight {
            return Admission::InFlightFull;
        }
        if let Some(&h) = record
            .hash_ids
            .iter()
            .find(|&&h| self.storing.contains_key(&BlockHash::from(h)))
        {
            return Admission::WaitPrefix {
                block: BlockHash::from(h),
            };
        }
        if blocks > u64::from(self.pages.free()) {
            return Admission::WaitPages {
                need: blocks as u32,
                free: self.pages.free(),
            };
        }
        Admission::Ready
    }

    /// Admit `record` as request `id`, reserving a page per block. It then awaits its lookup.
    ///
    /// # Errors
    /// [`SchedError::NotAdmissible`] unless [`Scheduler::check_admission`] says `Ready`,
    /// [`SchedError::DuplicateRequest`].
    pub fn admit(&mut self, id: RequestId, record: TraceRecord) -> Result<(), SchedError> {
        match self.check_admission(&record) {
            Admission::Ready => {}
            other => {
                return Err(SchedError::NotAdmissible {
                    request: id.0,
                    why: format!("{other:?}"),
                })
            }
        }
        if self.requests.contains_key(&id) {
            return Err(SchedError::DuplicateRequest { request: id.0 });
        }
        let reserved =
            self.pages
                .take(record.hash_ids.len())
                .ok_or_else(|| SchedError::NotAdmissible {
                    request: id.0,
                    why: "pages vanished".into(),
                })?;
        self.requests
            .insert(id, RequestRun::new(id, record, reserved));
        Ok(())
    }

    /// Requests admitted whose lookup is not answered yet, oldest first.
    pub fn awaiting_lookup(&self) -> Vec<RequestId> {
        self.requests
            .values()
            .filter(|r| r.awaiting_lookup())
            .map(RequestRun::id)
            .collect()
    }

    /// The prefix block hashes of request `id`, for its lookup.
    ///
    /// # Errors
    /// [`SchedError::UnknownRequest`].
    pub fn lookup_hashes(&self, id: RequestId) -> Result<Vec<BlockHash>, SchedError> {
        Ok(self.run(id)?.hashes())
    }

    /// The lookup of `id` matched its first `matched` blocks: plan and queue its parts,
    /// return spare pages. A request with nothing to load or store completes here.
    ///
    /// # Errors
    /// [`SchedError::UnknownRequest`], and as [`RequestRun::plan`].
    pub fn on_lookup(&mut self, id: RequestId, matched: u32) -> Result<(), SchedError> {
        let run = self
            .requests
            .get_mut(&id)
            .ok_or(SchedError::UnknownRequest { request: id.0 })?;
        let planned = run.plan(matched)?;
        self.pages.give(&planned.unused_pages)?;
        for role in planned.roles {
            self.queue(id, role);
        }
        self.complete_if_done(id);
        Ok(())
    }

    /// The next planned part to hand to the agent, oldest first.
    pub fn next_issue(&mut self) -> Option<Issue> {
        while let Some((request, role)) = self.to_issue.pop_front() {
            let Some(part) = self.requests.get(&request).and_then(|r| r.part(role)) else {
                continue;
            };
            if part.state != crate::request::PartState::Planned {
                continue;
            }
            return Some(Issue {
                request,
                role,
                hashes: part.hashes.clone(),
                pages: part.pages.clone(),
            });
        }
        None
    }

    /// Put back an issue whose call failed; it goes first next time.
    pub fn requeue(&mut self, issue: Issue) {
        self.to_issue.push_front((issue.request, issue.role));
    }

    /// Parts planned but not yet issued.
    pub fn queued(&self) -> usize {
        self.to_issue.len()
    }

    /// The agent started `issue`'s part as `task`.
    ///
    /// # Errors
    /// [`SchedError::UnknownRequest`], and as [`RequestRun::start`].
    pub fn on_started(
        &mut self,
        request: RequestId,
        role: Role,
        task: TaskId,
    ) -> Result<(), SchedError> {
        self.requests
            .get_mut(&request)
            .ok_or(SchedError::UnknownRequest { request: request.0 })?
            .start(role, task)?;
        self.tasks.insert(task, (request, role));
        Ok(())
    }

    /// Apply one outcome. For a load that finished `Ok`, `verify(hashes, pages)` runs before
    /// its pages are freed.
    ///
    /// # Errors
    /// [`SchedError::KindMismatch`], page bookkeeping errors, and as [`RequestRun::finish`].
    pub fn on_outcome(
        &mut self,
        outcome: &TaskOutcome,
        verify: &mut dyn FnMut(&[BlockHash], &[PageId]),
    ) -> Result<OutcomeEffect, SchedError> {
        let Some(&(request, role)) = self.tasks.get(&outcome.task) else {
            self.stats.unknown_outcomes += 1;
            return Ok(OutcomeEffect::Unknown);
        };
        if role.kind() != outcome.kind {
            return Err(SchedError::KindMismatch {
                task: outcome.task,
                started: role.kind(),
                outcome: outcome.kind,
            });
        }
        self.tasks.remove(&outcome.task);
        self.finish(request, role, outcome.result == OutcomeResult::Ok, verify)
    }

    /// A started task whose outcome never came (not even in the reconciliation of a later
    /// epoch): treated as aborted.
    ///
    /// # Errors
    /// As [`Scheduler::on_outcome`].
    pub fn on_lost(&mut self, task: TaskId) -> Result<OutcomeEffect, SchedError> {
        let Some((request, role)) = self.tasks.remove(&task) else {
            return Ok(OutcomeEffect::Unknown);
        };
        self.finish(request, role, false, &mut |_, _| {})
    }

    /// The group moved to a new epoch: pins are gone, so a load not yet started becomes a
    /// recompute. Started tasks keep waiting for their outcome in the reconciliation.
    ///
    /// # Errors
    /// As [`RequestRun::finish`].
    pub fn on_new_epoch(&mut self) -> Result<(), SchedError> {
        let queued: Vec<(RequestId, Role)> = self.to_issue.drain(..).collect();
        for (request, role) in queued {
            if role == Role::Load {
                self.finish(request, Role::Load, false, &mut |_, _| {})?;
            } else {
                self.to_issue.push_back((request, role));
            }
        }
        Ok(())
    }

    /// Requests completed since the last call, in completion order.
    pub fn take_completed(&mut self) -> Vec<Completed> {
        std::mem::take(&mut self.completed)
    }

    /// Requests admitted and not complete.
    pub fn in_flight(&self) -> usize {
        self.requests.len()
    }

    /// Pages free now.
    pub fn free_pages(&self) -> u32 {
        self.pages.free()
    }

    /// Outcome counters so far.
    pub fn stats(&self) -> SchedStats {
        self.stats
    }

    fn finish(
        &mut self,
        request: RequestId,
        role: Role,
        ok: bool,
        verify: &mut dyn FnMut(&[BlockHash], &[PageId]),
    ) -> Result<OutcomeEffect, SchedError> {
        let run = self
            .requests
            .get_mut(&request)
            .ok_or(SchedError::UnknownRequest { request: request.0 })?;
        let (hashes, pages) = run.finish(role, ok)?;
        let effect = match (role, ok) {
            (Role::Load, true) => {
                verify(&hashes, &pages);
                self.stats.blocks_loaded += hashes.len() as u64;
                self.pages.give(&pages)?;
                OutcomeEffect::Loaded
            }
            (Role::Load, false) => {
                self.stats.loads_failed += 1;
                self.stats.recomputes += 1;
                run.plan_recompute(hashes.clone(), pages)?;
                self.mark_storing(&hashes);
                self.to_issue.push_back((request, Role::Recompute));
                OutcomeEffect::Recompute
            }
            (_, ok) => {
                if ok {
                    self.stats.blocks_stored += hashes.len() as u64;
                } else {
                    self.stats.stores_failed += 1;
                }
                self.unmark_storing(&hashes);
                self.pages.give(&pages)?;
                OutcomeEffect::Stored { ok }
            }
        };
        self.complete_if_done(request);
        Ok(effect)
    }

    fn queue(&mut self, request: RequestId, role: Role) {
        if role.computes() {
            if let Some(hashes) = self
                .requests
                .get(&request)
                .and_then(|r| r.part(role))
                .map(|p| p.hashes.clone())
            {
                self.mark_storing(&hashes);
            }
        }
        self.to_issue.push_back((request, role));
    }

    fn mark_storing(&mut self, hashes: &[BlockHash]) {
        for h in hashes {
            *self.storing.entry(*h).or_insert(0) += 1;
        }
    }

    fn unmark_storing(&mut self, hashes: &[BlockHash]) {
        for h in hashes {
            if let Some(n) = self.storing.get_mut(h) {
                *n -= 1;
                if *n == 0 {
                    self.storing.remove(h);
                }
            }
        }
    }

    fn complete_if_done(&mut self, id: RequestId) {
        if self.requests.get(&id).is_some_and(RequestRun::is_complete) {
            if let Some(run) = self.requests.remove(&id) {
                self.completed.push(Completed {
                    request: id,
                    hits: run.hits(),
                });
            }
        }
    }

    fn run(&self, id: RequestId) -> Result<&RequestRun, SchedError> {
        self.requests
            .get(&id)
            .ok_or(SchedError::UnknownRequest { request: id.0 })
    }
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
