//! One request's life in the leader engine: its lookup, and the load, store and recompute
//! tasks that follow, each with the pages it holds.
//!
//! ```text
//! admitted ──lookup──▶ running ──every part done──▶ complete
//!
//! part:   planned ──started(task)──▶ started ──outcome──▶ done(ok | failed)
//! load failed/aborted (or never started before a new epoch) ──▶ recompute part, same pages
//! ```
//!
//! A request holds pages from admission to completion: all its blocks' worth at admission,
//! then those its parts need (the rest go back at the lookup). Owns these transitions only;
//! the [`crate::scheduler::Scheduler`] owns the free list, the task index and the queue of
//! parts to issue, and it never does IO.

use tandem_proto::ids::{BlockHash, PageId, RequestId, TaskId, TaskKind};
use tandem_trace::{RequestHits, TraceRecord};

use crate::error::SchedError;

/// Which of a request's tasks a part is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Load the matched prefix into pages.
    Load,
    /// Store the blocks the engine computed (those past the matched prefix).
    Store,
    /// Store the blocks of a failed load after computing them again.
    Recompute,
}

impl Role {
    /// The task kind the agent sees for this role.
    pub fn kind(self) -> TaskKind {
        match self {
            Role::Load => TaskKind::Load,
            Role::Store | Role::Recompute => TaskKind::Store,
        }
    }

    /// Whether the engine writes the pages' content before issuing the task.
    pub fn computes(self) -> bool {
        !matches!(self, Role::Load)
    }

    fn name(self) -> &'static str {
        match self {
            Role::Load => "load",
            Role::Store => "store",
            Role::Recompute => "recompute",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where one part stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartState {
    /// Decided, not yet accepted by the agent.
    Planned,
    /// The agent started it as this task.
    Started(TaskId),
    /// Its outcome arrived (`true` when `Ok`); its pages were given up.
    Done(bool),
}

/// One task of a request: its blocks, in prefix order, and a page per block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Where the part stands.
    pub state: PartState,
    /// The blocks it moves.
    pub hashes: Vec<BlockHash>,
    /// The page of each block (same order); empty once done.
    pub pages: Vec<PageId>,
}

impl Part {
    fn planned(hashes: Vec<BlockHash>, pages: Vec<PageId>) -> Part {
        Part {
            state: PartState::Planned,
            hashes,
            pages,
        }
    }
}

/// One admitted request.
#[derive(Clone, Debug)]
pub struct RequestRun {
    id: RequestId,
    record: TraceRecord,
    reserved: Vec<PageId>,
    matched: Option<u64>,
    load: Option<Part>,
    store: Option<Part>,
    recompute: Option<Part>,
}

/// What [`RequestRun::plan`] decided after the lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// Parts to issue, in order (load first).
    pub roles: Vec<Role>,
    /// Reserved pages the parts do not need.
    pub unused_pages: Vec<PageId>,
}

impl RequestRun {
    /// A request admitted with `reserved` pages (at least one per block of `record`).
    pub fn new(id: RequestId, record: TraceRecord, reserved: Vec<PageId>) -> Self {
        RequestRun {
            id,
            record,
            reserved,
            matched: None,
            load: None,
            store: None,
            recompute: None,
        }
    }

    /// The request's id.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// The request's prefix block hashes.
    pub fn hashes(&self) -> Vec<BlockHash> {
        self.record
            .hash_ids
            .iter()
            .map(|&h| BlockHash::from(h))
            .collect()
    }

    /// Whether the lookup has not been answered yet.
    pub fn awaiting_lookup(&self) -> bool {
        self.matched.is_none()
    }

    /// The part of `role`, if planned.
    pub fn part(&self, role: Role) -> Option<&Part> {
        match role {
            Role::Load => self.load.as_ref(),
            Role::Store => self.store.as_ref(),
            Role::Recompute => self.recompute.as_ref(),
        }
    }

    fn part_mut(&mut self, role: Role) -> Option<&mut Part> {
        match role {
            Role::Load => self.load.as_mut(),
            Role::Store => self.store.as_mut(),
            Role::Recompute => self.recompute.as_mut(),
        }
    }

    /// Plan the parts after a lookup matched the first `matched` blocks: a load of those, and
    /// a store of the rest (each block once: repeats within the request are computed once).
    ///
    /// # Errors
    /// [`SchedError::MatchedTooMany`], [`SchedError::LookupTwice`].
    pub fn plan(&mut self, matched: u32) -> Result<Planned, SchedError> {
        let hashes = self.hashes();
        if matched as usize > hashes.len() {
            return Err(SchedError::MatchedTooMany {
                request: self.id.0,
                matched,
                blocks: hashes.len() as u64,
            });
        }
        if self.matched.is_some() {
            return Err(SchedError::LookupTwice { request: self.id.0 });
        }
        self.matched = Some(u64::from(matched));
        let (prefix, rest) = hashes.split_at(matched as usize);
        let mut fresh: Vec<BlockHash> = Vec::with_capacity(rest.len());
        for h in rest {
            if !prefix.contains(h) && !fresh.contains(h) {
                fresh.push(*h);
            }
        }
        let mut pages = std::mem::take(&mut self.reserved).into_iter();
        let mut roles = Vec::new();
        if !prefix.is_empty() {
            self.load = Some(Part::planned(
                prefix.to_vec(),
                pages.by_ref().take(prefix.len()).collect(),
            ));
            roles.push(Role::Load);
        }
        if !fresh.is_empty() {
            let n = fresh.len();
            self.store = Some(Part::planned(fresh, pages.by_ref().take(n).collect()));
            roles.push(Role::Store);
        }
        Ok(Planned {
            roles,
            unused_pages: pages.collect(),
        })
    }

    /// The agent started `role` as `task`.
    ///
    /// # Errors
    /// [`SchedError::Transition`] unless the part is planned.
    pub fn start(&mut self, role: Role, task: TaskId) -> Result<(), SchedError> {
        match self.part_mut(role) {
            Some(part) if part.state == PartState::Planned => {
                part.state = PartState::Started(task);
                Ok(())
            }
            _ => Err(self.transition(role, "started but not planned")),
        }
    }

    /// The outcome of `role` arrived; returns the part's blocks and pages (now the caller's
    /// to free or reuse).
    ///
    /// # Errors
    /// [`SchedError::Transition`] unless the part is started (or, for a load, planned: a
    /// load that never started before a new epoch ends here as failed).
    pub fn finish(
        &mut self,
        role: Role,
        ok: bool,
    ) -> Result<(Vec<BlockHash>, Vec<PageId>), SchedError> {
        let allowed = |s: PartState| {
            matches!(s, PartState::Started(_))
                || (role == Role::Load && s == PartState::Planned && !ok)
        };
        match self.part_mut(role) {
            Some(part) if allowed(part.state) => {
                part.state = PartState::Done(ok);
                Ok((part.hashes.clone(), std::mem::take(&mut part.pages)))
            }
            _ => Err(self.transition(role, "finished but not started")),
        }
    }

    /// After a failed load: recompute its blocks into the same `pages` and store them.
    ///
    /// # Errors
    /// [`SchedError::Transition`] when a recompute is already planned.
    pub fn plan_recompute(
        &mut self,
        hashes: Vec<BlockHash>,
        pages: Vec<PageId>,
    ) -> Result<(), SchedError> {
        if self.recompute.is_some() {
            return Err(self.transition(Role::Recompute, "planned twice"));
        }
        self.recompute = Some(Part::planned(hashes, pages));
        Ok(())
    }

    /// Whether the lookup is answered and every part is done.
    pub fn is_complete(&self) -> bool {
        let done = |p: &Option<Part>| {
            p.as_ref()
                .is_none_or(|p| matches!(p.state, PartState::Done(_)))
        };
        self.matched.is_some() && done(&self.load) && done(&self.store) && done(&self.recompute)
    }

    /// What the request's lookup hit (zero before the lookup).
    pub fn hits(&self) -> RequestHits {
        let hit_blocks = self.matched.unwrap_or(0);
        RequestHits {
            hit_blocks,
            blocks: self.record.blocks(),
            hit_tokens: self.record.prefix_tokens(hit_blocks),
            input_tokens: self.record.input_length,
        }
    }

    fn transition(&self, role: Role, what: &'static str) -> SchedError {
        SchedError::Transition {
            request: self.id.0,
            role,
            what,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(hash_ids: Vec<u64>, input_length: u64) -> RequestRun {
        let n = hash_ids.len() as u32;
        let record = TraceRecord {
            timestamp: 0,
            input_length,
            output_length: 1,
            hash_ids,
        };
        RequestRun::new(RequestId(7), record, (0..n).map(PageId).collect())
    }

    #[test]
    fn plan_splits_matched_prefix_from_fresh_blocks() {
        let mut r = run(vec![1, 2, 3, 4], 1800);
        assert!(r.awaiting_lookup());
        let planned = r.plan(2).unwrap();
        assert_eq!(planned.roles, vec![Role::Load, Role::Store]);
        assert!(planned.unused_pages.is_empty());
        assert_eq!(
            r.part(Role::Load).unwrap().hashes,
            vec![BlockHash(1), BlockHash(2)]
        );
        assert_eq!(
            r.part(Role::Load).unwrap().pages,
            vec![PageId(0), PageId(1)]
        );
        assert_eq!(
            r.part(Role::Store).unwrap().pages,
            vec![PageId(2), PageId(3)]
        );
        let hits = r.hits();
        assert_eq!(
            (
                hits.hit_blocks,
                hits.blocks,
                hits.hit_tokens,
                hits.input_tokens
            ),
            (2, 4, 1024, 1800)
        );
    }

    #[test]
    fn repeated_blocks_are_stored_once_and_spare_pages_return() {
        let mut r = run(vec![1, 2, 1, 3, 3], 2500);
        let planned = r.plan(1).unwrap();
        assert_eq!(
            r.part(Role::Store).unwrap().hashes,
            vec![BlockHash(2), BlockHash(3)]
        );
        assert_eq!(planned.unused_pages, vec![PageId(3), PageId(4)]);
    }

    #[test]
    fn state_machine_runs_to_completion() {
        let mut r = run(vec![1, 2], 1000);
        r.plan(1).unwrap();
        assert!(!r.is_complete());
        let (t1, t2) = (TaskId { epoch: 1, seq: 0 }, TaskId { epoch: 1, seq: 1 });
        r.start(Role::Load, t1).unwrap();
        r.start(Role::Store, t2).unwrap();
        let (hashes, pages) = r.finish(Role::Load, false).unwrap();
        assert_eq!(hashes, vec![BlockHash(1)]);
        r.plan_recompute(hashes, pages).unwrap();
        r.finish(Role::Store, true).unwrap();
        assert!(!r.is_complete(), "recompute still pending");
        r.start(Role::Recompute, TaskId { epoch: 1, seq: 2 })
            .unwrap();
        r.finish(Role::Recompute, true).unwrap();
        assert!(r.is_complete());
    }

    #[test]
    fn illegal_transitions_are_refused() {
        let mut r = run(vec![1, 2], 1000);
        let err = r.start(Role::Store, TaskId::default()).unwrap_err();
        assert_eq!(err.to_string(), "request 7: store started but not planned");
        assert_eq!(
            r.plan(3).unwrap_err().to_string(),
            "request 7: the lookup matched 3 blocks of 2"
        );
        r.plan(0).unwrap();
        assert_eq!(
            r.plan(0).unwrap_err().to_string(),
            "request 7: the lookup was answered twice"
        );
        assert_eq!(
            r.finish(Role::Store, true).unwrap_err().to_string(),
            "request 7: store finished but not started"
        );
        let err = r
            .plan_recompute(vec![], vec![])
            .and_then(|_| r.plan_recompute(vec![], vec![]))
            .unwrap_err();
        assert_eq!(err.to_string(), "request 7: recompute planned twice");
    }

    #[test]
    fn empty_request_completes_at_its_lookup() {
        let mut r = run(vec![], 0);
        assert_eq!(r.plan(0).unwrap().roles, vec![]);
        assert!(r.is_complete());
    }
}
