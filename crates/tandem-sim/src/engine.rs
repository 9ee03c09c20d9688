//! The simulated engines, one per rank: what an inference worker asks its agent and when.
//!
//! Owns [`Engine`] and the world's engine handlers. Rank 0's engine schedules: each step it may
//! look up a prefix and load what matched, store new blocks, then ends the step and applies
//! the sealed frame. A follower's engine reads frames by position at its own pace: it stalls,
//! reads a step again, reads ahead of the leader, and applies each frame in order. Every
//! engine says hello again when its agent or epoch changes, keeps its tasks in the client's
//! own task map (`tandem_client::TaskBook`, the rules a real engine session keeps), and hands
//! a page back only once the frame listing its task's outcome was applied. Each frame applied
//! goes to the checker first; a load the group calls `Ok` is checked byte for byte on every
//! rank.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;
use tandem_client::TaskBook;
use tandem_core::CallRef;
use tandem_proto::engine::{AgentError, EngineReply, EngineRequest};
use tandem_proto::{
    BlockHash, Epoch, Frame, OutcomeResult, PageId, RequestId, Step, TaskId, TaskKind,
};

use crate::config::{BLOCK_UNIVERSE, CALL_DEADLINE_MS};
use crate::store::content;
use crate::world::{Ev, World};

/// What a call in flight was.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    /// The request.
    pub req: EngineRequest,
    /// When it was made, ms.
    pub issued_ms: u64,
    /// Whether the engine applies the frame it returns (a read ahead or a re-read only
    /// compares it).
    pub apply: bool,
}

/// One rank's engine.
#[derive(Debug)]
pub(crate) struct Engine {
    rank: u32,
    /// The bytes of each page of its pool (one number per shard).
    pub pages: Vec<u64>,
    /// Its task map.
    pub book: TaskBook,
    /// The epoch it was welcomed into.
    epoch: Option<Epoch>,
    /// Leader: the step to end next; follower: the step to read next.
    step: Step,
    /// Calls in flight.
    pub pending: BTreeMap<CallRef, Pending>,
    next_call: u64,
    /// Leader: free pages, and the pages of each task in flight.
    free: BTreeSet<PageId>,
    busy: BTreeMap<TaskId, Vec<(BlockHash, PageId)>>,
    /// Leader: pages chosen for a request whose reply has not come.
    asked: BTreeMap<CallRef, Vec<(BlockHash, PageId)>>,
    /// Leader: the last lookup's matched prefix, to load in the same step.
    matched: Option<(RequestId, Vec<BlockHash>)>,
    next_request: u64,
    /// A tick is scheduled (at most one at a time).
    tick_pending: bool,
}

impl Engine {
    /// An engine of `pages` pages, not connected.
    pub(crate) fn new(rank: u32, pages: u32) -> Engine {
        Engine {
            rank,
            pages: vec![0; pages as usize],
            book: TaskBook::new(),
            epoch: None,
            step: Step(0),
            pending: BTreeMap::new(),
            next_call: 1,
            free: (0..pages).map(PageId).collect(),
            busy: BTreeMap::new(),
            asked: BTreeMap::new(),
            matched: None,
            next_request: 1,
            tick_pending: false,
        }
    }
}

pub(crate) fn wait_deadline(req: &EngineRequest) -> Option<u64> {
    match req {
        EngineRequest::EndStep { deadline_ms, .. } | EngineRequest::Frame { deadline_ms, .. } => {
            Some(*deadline_ms)
        }
        _ => None,
    }
}

impl World {
    fn issue(&mut self, r: u32, req: EngineRequest, apply: bool) -> CallRef {
        let e = &mut self.engines[r as usize];
        let call = CallRef(e.next_call);
        e.next_call += 1;
        e.pending.insert(
            call,
            Pending {
                req: req.clone(),
                issued_ms: self.now,
                apply,
            },
        );
        self.note(|| format!("rank {r}: engine asks {req:?}"));
        self.engine_call(r, call, req);
        call
    }

    fn tick_after(&mut self, r: u32, lo: u64, hi: u64) {
        if std::mem::replace(&mut self.engines[r as usize].tick_pending, true) {
            return;
        }
        let at = self.now + self.rng.gen_range(lo..=hi);
        self.schedule(at, Ev::EngineTick(r));
    }

    /// The agent went away (a crash, or the end of an epoch): every call in flight fails and
    /// the engine says hello again later.
    pub(crate) fn engine_disconnected(&mut self, r: u32) {
        let calls: Vec<CallRef> = self.engines[r as usize].pending.keys().copied().collect();
        for call in calls {
            let reason = "agent connection closed".to_string();
            self.engine_reply(r, call, EngineReply::Error(AgentError::NotReady { reason }));
        }
        self.engines[r as usize].epoch = None;
    }

    /// Rank `r`'s engine acts.
    pub(crate) fn engine_tick(&mut self, r: u32) {
        self.engines[r as usize].tick_pending = false;
        if !self.engines[r as usize].pending.is_empty() {
            return; // one call at a time; the reply schedules the next tick
        }
        let Some(epoch) = self.engines[r as usize].epoch else {
            self.issue(r, EngineRequest::hello(r), false);
            if self.engines[r as usize].epoch.is_none() {
                self.tick_after(r, 10, 40);
            }
            return;
        };
        if r == 0 {
            self.leader_step(epoch);
        } else {
            self.follower_read(r, epoch);
        }
    }

    fn follower_read(&mut self, r: u32, epoch: Epoch) {
        let next = self.engines[r as usize].step;
        let roll: u32 = self.rng.gen_range(0..100);
        let (step, apply) = if roll < 5 && next.0 > 0 {
            (Step(next.0 - 1), false) // a re-read
        } else if roll < 8 {
            (Step(next.0 + self.rng.gen_range(1..=3)), false) // a read ahead
        } else {
            (next, true)
        };
        let req = EngineRequest::Frame {
            epoch,
            step,
            deadline_ms: CALL_DEADLINE_MS,
        };
        self.issue(r, req, apply);
    }

    /// One step of the leader's engine, in one tick (lookups, loads and stores are answered
    /// at once): maybe a lookup and the load of what it matched, maybe a store, then
    /// `end_step`, which may wait.
    fn leader_step(&mut self, epoch: Epoch) {
        let step = self.engines[0].step;
        if self.active() {
            if self.rng.gen_bool(0.5) {
                let blocks = self.prefix();
                let request = self.request();
                let req = EngineRequest::Lookup {
                    epoch,
                    step,
                    request,
                    block_hashes: blocks,
                };
                self.issue(0, req, false);
            }
            if let Some((request, blocks)) = self.engines[0].matched.take() {
                // A lookup's pins last until its request loads or is released: an engine that
                // decides not to load (or has no pages for it) gives them back.
                let loaded = self.rng.gen_bool(0.8)
                    && self.ask_task_for(epoch, step, request, blocks, false);
                if !loaded {
                    self.issue(0, EngineRequest::Release { epoch, request }, false);
                }
            }
            if self.rng.gen_bool(0.5) && self.engines[0].epoch == Some(epoch) {
                let blocks = self.prefix();
                self.ask_task(epoch, step, blocks, true);
            }
        }
        if self.engines[0].epoch != Some(epoch) || !self.engines[0].pending.is_empty() {
            return; // a refusal ended the session; the next tick says hello
        }
        let req = EngineRequest::EndStep {
            epoch,
            step,
            deadline_ms: CALL_DEADLINE_MS,
        };
        self.issue(0, req, true);
    }

    fn prefix(&mut self) -> Vec<BlockHash> {
        let first = self.rng.gen_range(0..BLOCK_UNIVERSE);
        let len = self.rng.gen_range(1..=3u64);
        (first..first + len)
            .map(|b| BlockHash::from(b * 7 + 1))
            .collect()
    }

    fn request(&mut self) -> RequestId {
        let e = &mut self.engines[0];
        e.next_request += 1;
        RequestId(e.next_request)
    }

    fn ask_task(&mut self, epoch: Epoch, step: Step, blocks: Vec<BlockHash>, store: bool) {
        let request = self.request();
        self.ask_task_for(epoch, step, request, blocks, store);
    }

    /// A store (writing the blocks into fresh pages on every rank first) or a load into
    /// fresh pages; nothing when pages run short. True when the request was issued.
    fn ask_task_for(
        &mut self,
        epoch: Epoch,
        step: Step,
        request: RequestId,
        blocks: Vec<BlockHash>,
        store: bool,
    ) -> bool {
        if self.engines[0].free.len() < blocks.len() || blocks.is_empty() {
            return false;
        }
        let pages: Vec<PageId> = (0..blocks.len())
            .filter_map(|_| self.engines[0].free.pop_first())
            .collect();
        if store {
            for e in &mut self.engines {
                for (h, p) in blocks.iter().zip(&pages) {
                    e.pages[p.0 as usize] = content(*h, e.rank);
                }
            }
        }
        let held: Vec<(BlockHash, PageId)> = blocks.iter().copied().zip(pages.clone()).collect();
        let req = if store {
            EngineRequest::Store {
                epoch,
                step,
                request,
                block_hashes: blocks,
                page_ids: pages,
            }
        } else {
            EngineRequest::Load {
                epoch,
                step,
                request,
                block_hashes: blocks,
                page_ids: pages,
            }
        };
        let call = CallRef(self.engines[0].next_call);
        self.engines[0].asked.insert(call, held);
        self.issue(0, req, false);
        true
    }

    /// The agent answers call `call` of rank `r`'s engine.
    pub(crate) fn engine_reply(&mut self, r: u32, call: CallRef, reply: EngineReply) {
        let Some(p) = self.engines[r as usize].pending.remove(&call) else {
            return;
        };
        self.note(|| format!("rank {r}: engine gets {reply:?}"));
        let asked = self.engines[r as usize].asked.remove(&call);
        match (p.req, reply) {
            (
                EngineRequest::HelloVersioned { .. },
                EngineReply::Welcome {
                    epoch, next_step, ..
                },
            ) => {
                let e = &mut self.engines[r as usize];
                if e.epoch != Some(epoch) {
                    e.step = if r == 0 { next_step } else { Step(0) };
                }
                e.epoch = Some(epoch);
                self.tick_after(r, 0, 2);
            }
            (EngineRequest::Lookup { request, .. }, EngineReply::Lookup(l)) => {
                let n = (l.matched_blocks as usize).min(l.block_hashes.len());
                if l.pinned && n > 0 {
                    self.engines[0].matched = Some((request, l.block_hashes[..n].to_vec()));
                }
            }
            (EngineRequest::Store { request, .. }, EngineReply::Started { task }) => {
                self.started(task, TaskKind::Store, request, asked);
            }
            (EngineRequest::Load { request, .. }, EngineReply::Started { task }) => {
                self.started(task, TaskKind::Load, request, asked);
            }
            (EngineRequest::EndStep { epoch, step, .. }, EngineReply::Frame(f))
            | (EngineRequest::Frame { epoch, step, .. }, EngineReply::Frame(f)) => {
                if p.apply {
                    self.apply_frame(r, epoch, step, &f);
                    let e = &mut self.engines[r as usize];
                    e.step = step.next();
                    let ack = EngineRequest::Ack { epoch, step };
                    self.issue(r, ack, false);
                } else {
                    self.check.applied_read(r, epoch, step, &f, self.now);
                }
                self.follow_up(r);
            }
            (EngineRequest::Release { .. }, EngineReply::Released { .. }) => {}
            (EngineRequest::Ack { epoch, step }, EngineReply::Acked) => {
                self.engines[r as usize].book.acked(epoch, step);
            }
            (req, EngineReply::Error(err)) => {
                if let Some(held) = asked {
                    // Refused: nothing was recorded, the pages are the engine's again.
                    self.engines[0].free.extend(held.iter().map(|(_, p)| *p));
                }
                self.engine_error(r, &req, &err);
            }
            (req, reply) => {
                let what = format!("rank {r}: {req:?} answered {reply:?}");
                self.check.fail(0, self.now, what);
            }
        }
    }

    /// A store or load was taken as `task`: its pages are busy until its outcome.
    fn started(
        &mut self,
        task: TaskId,
        kind: TaskKind,
        request: RequestId,
        asked: Option<Vec<(BlockHash, PageId)>>,
    ) {
        self.report.tasks_requested += 1;
        let e = &mut self.engines[0];
        e.book.requested(task, kind, request);
        if let Some(held) = asked {
            e.busy.insert(task, held);
        }
    }

    /// The next tick after a frame: now, or after a stall.
    fn follow_up(&mut self, r: u32) {
        let roll: u32 = self.rng.gen_range(0..1000);
        if roll < 3 && self.active() {
            self.tick_after(r, 200, 1_500); // a long stall
        } else {
            self.tick_after(r, 1, 15);
        }
    }

    fn engine_error(&mut self, r: u32, req: &EngineRequest, err: &AgentError) {
        match err {
            AgentError::StaleEpoch { .. } | AgentError::NotReady { .. } => {
                self.engines[r as usize].epoch = None;
                self.engines[0].matched = self.engines[0].matched.take().filter(|_| r != 0);
                self.tick_after(r, 10, 50);
            }
            AgentError::WrongStep { expected, .. } if r == 0 => {
                self.engines[0].step = *expected;
                self.tick_after(r, 1, 5);
            }
            _ => {
                self.note(|| format!("rank {r}: {req:?} refused: {err}"));
                self.tick_after(r, 1, 20);
            }
        }
    }

    /// Rank `r`'s engine applies `frame` as step `step` of `epoch`: the checker sees it, the
    /// task map settles what it settles, pages of finished tasks come back.
    fn apply_frame(&mut self, r: u32, epoch: Epoch, step: Step, frame: &Frame) {
        let now = self.now;
        self.check.applied(r, epoch, step, frame, now);
        let before = self.engines[r as usize].book.tally();
        let observed = self.engines[r as usize].book.observe(frame);
        let after = self.engines[r as usize].book.tally();
        if !observed.lost.is_empty() {
            let ids: Vec<TaskId> = observed.lost.iter().map(|s| s.start.task).collect();
            let what = format!(
                "rank {r}: tasks {ids:?} started and never settled by epoch {epoch}'s frame 0"
            );
            self.check.fail(3, now, what);
        }
        if after.repeated_starts > before.repeated_starts {
            let what = format!("rank {r}: frame (epoch {epoch}, step {step}) starts a task again");
            self.check.fail(3, now, what);
        }
        if r != 0 {
            return;
        }
        let mut settled: Vec<(TaskId, bool)> = observed
            .outcomes
            .iter()
            .map(|d| {
                let ok_load =
                    d.outcome.kind == TaskKind::Load && d.outcome.result == OutcomeResult::Ok;
                (d.outcome.task, ok_load)
            })
            .collect();
        settled.extend(observed.not_started.iter().map(|t| (t.task, false)));
        for (task, ok_load) in settled {
            let Some(held) = self.engines[0].busy.remove(&task) else {
                continue;
            };
            if ok_load {
                for e in &self.engines {
                    for (h, p) in &held {
                        if e.pages[p.0 as usize] != content(*h, e.rank) {
                            let what = format!(
                                "load {task} finished Ok but rank {}'s page {} does not hold block {h}",
                                e.rank, p.0
                            );
                            self.check.fail(5, now, what);
                        }
                    }
                }
            }
            self.engines[0].free.extend(held.iter().map(|(_, p)| *p));
        }
    }
}
