//! Per-rank page binding (docs/DESIGN.md invariant 8): a store or load started without page
//! ids is copied on a rank only once that rank's engine bound its own pages for the task, and
//! a rank that gets no bind by its deadline fails its shard.
//!
//! Owns [`PageBinds`], one per rank core: the tasks of this epoch that started without page
//! ids and that this rank has not copied or failed yet, each with the pages its engine bound,
//! the copy parked while it waits for them, and its deadline (`bind_timeout_ms` after the task
//! reached this rank: the follower received the frame that starts it, the leader sealed it).
//! A bind is checked against the task (one page per block of the task, in the order of its
//! `block_hashes` in that frame) and against this rank's registered pool, and refused with a
//! typed [`BindError`] that records nothing. A deadline that passes turns into a shard failure
//! that the rank core reports like any copy failure, so the quorum fails the task and every
//! engine sees the same `Failed` outcome.
//!
//! It never copies, reports or decides for the group: the leader and follower cores ask it
//! which copies are due and which shards failed, and carry that out.

use std::collections::{BTreeMap, BTreeSet};

use tandem_proto::engine::BindError;
use tandem_proto::{BlockHash, PageId, TaskId, TaskKind, TaskStart};

/// One task waiting on this rank for its engine's pages.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Entry {
    /// The task's blocks, as the frame that starts it lists them (the bind's order).
    blocks: Vec<BlockHash>,
    /// This engine's pages, once bound (one per entry of `blocks`).
    pages: Option<Vec<PageId>>,
    /// When this rank stops waiting for a bind, ms; `None` until the task reached this rank.
    deadline_ms: Option<u64>,
    /// The copy, due on this rank and waiting only for the bind.
    parked: Option<(TaskKind, TaskStart)>,
    /// The deadline passed without a bind: this rank's shard failed.
    expired: bool,
}

/// What to do with a copy that is due on this rank (see [`PageBinds::due`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Due {
    /// Copy it now: its pages are known (filled in from the bind where needed).
    Copy(TaskStart),
    /// Parked until the engine binds or the deadline passes.
    Waiting,
    /// Its shard already failed at the deadline: nothing to copy.
    Failed,
}

/// The binds of one rank in one epoch. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PageBinds {
    timeout_ms: u64,
    tasks: BTreeMap<TaskId, Entry>,
}

/// Whether `t` started without page ids and needs this rank's bind before its copy.
pub(crate) fn needs_bind(t: &TaskStart) -> bool {
    t.page_ids.is_empty() && !t.block_hashes.is_empty()
}

impl PageBinds {
    /// No task yet; a task waits at most `timeout_ms` for its bind once it reached this rank.
    pub(crate) fn new(timeout_ms: u64) -> PageBinds {
        PageBinds {
            timeout_ms,
            tasks: BTreeMap::new(),
        }
    }

    /// Tasks waiting for a bind or a copy on this rank.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }

    /// `task` (with `blocks`) started without page ids: binds are taken from now on. Its
    /// deadline starts with [`Self::arrived`]. A task with no blocks (every one was cached
    /// already) is bound from the start, to no page: an empty bind is answered, nothing waits.
    pub(crate) fn expect(&mut self, task: TaskId, blocks: Vec<BlockHash>) {
        let pages = blocks.is_empty().then(Vec::new);
        self.tasks.entry(task).or_insert(Entry {
            blocks,
            pages,
            deadline_ms: None,
            parked: None,
            expired: false,
        });
    }

    /// The frame starting `t` reached this rank at `now_ms`: its deadline starts (once).
    pub(crate) fn arrived(&mut self, t: &TaskStart, now_ms: u64) {
        if !t.page_ids.is_empty() {
            return;
        }
        self.expect(t.task, t.block_hashes.clone());
        if let Some(e) = self.tasks.get_mut(&t.task) {
            e.deadline_ms
                .get_or_insert(now_ms.saturating_add(self.timeout_ms));
        }
    }

    /// The engine binds `pages` for `task`; `pool_pages` is this rank's registered pool (`None`:
    /// none). Returns the copy that was parked waiting for this bind, now ready.
    ///
    /// Errors: [`BindError`] (unknown or finished task, a deadline already passed, a wrong
    /// count, a page out of the pool, other pages already bound); nothing is recorded.
    pub(crate) fn bind(
        &mut self,
        task: TaskId,
        pages: Vec<PageId>,
        pool_pages: Option<u64>,
    ) -> Result<Option<(TaskKind, TaskStart)>, BindError> {
        let Some(e) = self.tasks.get_mut(&task) else {
            return Err(BindError::UnknownTask { task });
        };
        if e.expired {
            return Err(BindError::Expired {
                task,
                bind_timeout_ms: self.timeout_ms,
            });
        }
        if pages.len() != e.blocks.len() {
            return Err(BindError::WrongCount {
                task,
                blocks: e.blocks.len() as u32,
                pages: pages.len() as u32,
            });
        }
        let pool = pool_pages.unwrap_or(0);
        if let Some(p) = pages.iter().find(|p| u64::from(p.0) >= pool) {
            return Err(BindError::PageOutOfRange {
                task,
                page: p.0,
                pool_pages: pool,
            });
        }
        match &e.pages {
            // The same bind again (a retried call): the same answer.
            Some(bound) if *bound == pages => return Ok(None),
            Some(_) => return Err(BindError::AlreadyBound { task }),
            None => e.pages = Some(pages),
        }
        Ok(e.parked.take().map(|(kind, t)| {
            let t = fill(&e.blocks, e.pages.as_deref().unwrap_or_default(), t);
            (kind, t)
        }))
    }

    /// Whether `task` has its pages (bound, or named at its start) on this rank; `false` for a
    /// task this rank does not know.
    pub(crate) fn knows(&self, task: TaskId) -> bool {
        self.tasks.contains_key(&task)
    }

    /// The copy of `t` is due on this rank (a follower's engine acknowledged the step that
    /// started it; the leader sealed it).
    pub(crate) fn due(&mut self, kind: TaskKind, t: TaskStart) -> Due {
        if !needs_bind(&t) {
            return Due::Copy(t);
        }
        let Some(e) = self.tasks.get_mut(&t.task) else {
            // Not expected (cannot happen: every frame's task arrives first): the copy goes
            // out without pages and the store refuses it, failing the shard with the counts.
            return Due::Copy(t);
        };
        if e.expired {
            return Due::Failed;
        }
        match &e.pages {
            Some(pages) => Due::Copy(fill(&e.blocks, pages, t)),
            None => {
                e.parked = Some((kind, t));
                Due::Waiting
            }
        }
    }

    /// Blocks a frame evicts leave the copies parked here (their store failed somewhere and
    /// the group dropped them).
    pub(crate) fn evicted(&mut self, evicted: &BTreeSet<BlockHash>) {
        for e in self.tasks.values_mut() {
            if let Some((_, t)) = e.parked.as_mut() {
                t.block_hashes.retain(|h| !evicted.contains(h));
                t.tiers.truncate(t.block_hashes.len());
            }
        }
    }

    /// The earliest deadline of a task still waiting for its bind, ms.
    pub(crate) fn poll_timeout(&self) -> Option<u64> {
        self.tasks
            .values()
            .filter(|e| !e.expired && e.pages.is_none())
            .filter_map(|e| e.deadline_ms)
            .min()
    }

    /// Deadlines at `now_ms`: every task still unbound past its deadline fails on this rank;
    /// returns them with the shard failure's reason, in task order.
    pub(crate) fn expire(&mut self, rank: u32, now_ms: u64) -> Vec<(TaskId, String)> {
        let timeout = self.timeout_ms;
        let mut failed = Vec::new();
        for (task, e) in &mut self.tasks {
            let due = e.deadline_ms.is_some_and(|d| now_ms >= d);
            if e.expired || e.pages.is_some() || !due {
                continue;
            }
            e.expired = true;
            e.parked = None;
            failed.push((
                *task,
                format!(
                    "rank {rank}: the engine bound no pages for task {task} within protocol.bind_timeout_ms = {timeout} ms"
                ),
            ));
        }
        failed
    }

    /// `task`'s outcome is known: nothing more waits for it.
    pub(crate) fn forget(&mut self, task: TaskId) {
        self.tasks.remove(&task);
    }
}

/// `t` with the pages bound for `blocks` filled in. `t.block_hashes` is `blocks` less any
/// block evicted since (an ordered subsequence), so each keeps the page of its position.
fn fill(blocks: &[BlockHash], pages: &[PageId], mut t: TaskStart) -> TaskStart {
    let mut out = Vec::with_capacity(t.block_hashes.len());
    let mut i = 0;
    for h in &t.block_hashes {
        while i < blocks.len() && blocks[i] != *h {
            i += 1;
        }
        if let Some(p) = pages.get(i) {
            out.push(*p);
        }
        i += 1;
    }
    t.page_ids = out;
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::RequestId;

    fn start(seq: u64, blocks: &[u128]) -> TaskStart {
        TaskStart {
            task: TaskId { epoch: 1, seq },
            request: RequestId(seq),
            block_hashes: blocks.iter().map(|b| BlockHash(*b)).collect(),
            page_ids: Vec::new(),
            tiers: Vec::new(),
        }
    }

    fn pages(p: &[u32]) -> Vec<PageId> {
        p.iter().map(|p| PageId(*p)).collect()
    }

    #[test]
    fn a_parked_copy_goes_out_with_the_bound_pages_less_evicted_blocks() {
        let mut b = PageBinds::new(100);
        let t = start(0, &[1, 2, 3]);
        b.arrived(&t, 10);
        assert_eq!(b.poll_timeout(), Some(110));
        assert_eq!(b.due(TaskKind::Store, t.clone()), Due::Waiting);
        b.evicted(&BTreeSet::from([BlockHash(2)]));
        let (kind, ready) = b
            .bind(t.task, pages(&[7, 8, 9]), Some(16))
            .unwrap()
            .unwrap();
        assert_eq!(kind, TaskKind::Store);
        assert_eq!(ready.block_hashes, vec![BlockHash(1), BlockHash(3)]);
        assert_eq!(ready.page_ids, pages(&[7, 9]));
        assert_eq!(b.poll_timeout(), None, "a bound task has no deadline");
        // The same bind again answers the same; other pages are refused.
        assert_eq!(b.bind(t.task, pages(&[7, 8, 9]), Some(16)), Ok(None));
        assert_eq!(
            b.bind(t.task, pages(&[1, 2, 3]), Some(16)),
            Err(BindError::AlreadyBound { task: t.task })
        );
    }

    #[test]
    fn bad_binds_are_refused_and_record_nothing() {
        let mut b = PageBinds::new(100);
        let t = start(0, &[1, 2]);
        let unknown = TaskId { epoch: 1, seq: 9 };
        assert_eq!(
            b.bind(unknown, pages(&[0]), Some(4)),
            Err(BindError::UnknownTask { task: unknown })
        );
        b.arrived(&t, 0);
        assert_eq!(
            b.bind(t.task, pages(&[0]), Some(4)),
            Err(BindError::WrongCount {
                task: t.task,
                blocks: 2,
                pages: 1
            })
        );
        assert_eq!(
            b.bind(t.task, pages(&[0, 4]), Some(4)),
            Err(BindError::PageOutOfRange {
                task: t.task,
                page: 4,
                pool_pages: 4
            })
        );
        assert_eq!(
            b.bind(t.task, pages(&[0, 1]), None),
            Err(BindError::PageOutOfRange {
                task: t.task,
                page: 0,
                pool_pages: 0
            })
        );
        // Nothing was recorded: a good bind still succeeds.
        assert_eq!(b.bind(t.task, pages(&[0, 1]), Some(4)), Ok(None));
        assert_eq!(
            b.due(TaskKind::Load, t.clone()),
            Due::Copy(TaskStart {
                page_ids: pages(&[0, 1]),
                ..t
            })
        );
    }

    #[test]
    fn no_bind_by_the_deadline_fails_the_shard_once_and_refuses_a_late_bind() {
        let mut b = PageBinds::new(100);
        let t = start(3, &[1]);
        b.arrived(&t, 0);
        assert_eq!(b.due(TaskKind::Store, t.clone()), Due::Waiting);
        assert!(b.expire(1, 99).is_empty());
        let failed = b.expire(1, 100);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].0, t.task);
        assert!(
            failed[0].1.contains("bind_timeout_ms = 100 ms"),
            "{}",
            failed[0].1
        );
        assert!(b.expire(1, 200).is_empty(), "a shard fails once");
        assert_eq!(b.poll_timeout(), None);
        assert_eq!(
            b.bind(t.task, pages(&[0]), Some(4)),
            Err(BindError::Expired {
                task: t.task,
                bind_timeout_ms: 100
            })
        );
        assert_eq!(b.due(TaskKind::Store, t.clone()), Due::Failed);
        b.forget(t.task);
        assert_eq!(b.len(), 0);
    }

    #[test]
    fn tasks_with_page_ids_or_no_blocks_need_no_bind() {
        let mut b = PageBinds::new(100);
        let mut t = start(0, &[1]);
        t.page_ids = pages(&[5]);
        b.arrived(&t, 0);
        assert_eq!(b.len(), 0, "a task with page ids waits for nothing");
        let empty = start(1, &[]);
        b.arrived(&empty, 0);
        assert_eq!(b.poll_timeout(), None, "no blocks: no deadline");
        assert_eq!(b.due(TaskKind::Store, t.clone()), Due::Copy(t));
        assert_eq!(
            b.due(TaskKind::Store, empty.clone()),
            Due::Copy(empty.clone())
        );
        assert!(b.expire(1, 1_000).is_empty());
        // An engine that binds every task of a frame started without page ids may bind this
        // one too: no page for no block.
        assert_eq!(b.bind(empty.task, Vec::new(), None), Ok(None));
        assert_eq!(
            b.bind(empty.task, pages(&[0]), Some(4)),
            Err(BindError::WrongCount {
                task: empty.task,
                blocks: 0,
                pages: 1
            })
        );
    }
}
