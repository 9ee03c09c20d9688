//! An in-process stand-in for a group of agents, for testing the engines' side of the contract
//! (steps, positional frames, acknowledgements, epochs, reconciliation, broken sockets)
//! without processes, Redis or a supervisor. The real agents are exercised by the workspace
//! tests; this one exists so that restarts can be driven deterministically.
//!
//! It keeps the contract's rules the engines rely on: one frame per step, sealed in order and
//! re-readable; the leader at most `window` steps ahead of the slowest follower; a task is
//! carried out (every rank's shard copied, from or into that rank's pages) only once every
//! rank acknowledged the step that started it, and revealed in the next sealed frame. A
//! restart after sealing step `restart_every − 1` moves to a new epoch whose frame 0
//! reconciles: in-flight tasks aborted, unrevealed outcomes and those a rank did not
//! acknowledge delivered again to that rank.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use tandem_client::api::{AgentError, BufferSource, EngineReply, EngineRequest};
use tandem_client::wire::{read_call, write_call};
use tandem_proto::frame::{
    Frame, LookupResult, OutcomeResult, Reconciliation, TaskOutcome, TaskStart,
};
use tandem_proto::ids::{BlockHash, Epoch, PageId, RequestId, Step, TaskId, TaskKind};

/// How the fake group behaves.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FakeSpec {
    pub world: u32,
    pub shard_bytes: u64,
    pub window: u64,
    /// Restart after sealing this many steps of an epoch.
    pub restart_every: Option<u64>,
    pub restarts: u32,
    /// On a restart, drop every engine connection (an agent process died) instead of
    /// answering `StaleEpoch` on the same connection.
    pub break_sockets: bool,
}

/// The running fake group; its listeners stop when it is dropped.
pub(crate) struct FakeGroup {
    pub sockets: Vec<PathBuf>,
    pub dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    shared: Arc<(Mutex<State>, Condvar)>,
}

struct Pending {
    kind: TaskKind,
    request: RequestId,
    step: u64,
    hashes: Vec<BlockHash>,
    pages: Vec<PageId>,
}

struct State {
    spec: FakeSpec,
    epoch: u64,
    generation: u64,
    next_step: u64,
    open: Frame,
    sealed: BTreeMap<u64, Frame>,
    redelivered: Vec<Vec<TaskOutcome>>,
    acks: Vec<Option<u64>>,
    pools: Vec<Option<MmapMut>>,
    data: HashMap<(u32, u128), Vec<u8>>,
    cached: HashSet<u128>,
    inflight: BTreeMap<TaskId, Pending>,
    done: Vec<TaskOutcome>,
    revealed: Vec<(u64, TaskOutcome)>,
    seq: u64,
    restarts_left: u32,
    restarts_done: u32,
}

/// The one place that builds a `TaskStart` (its fields follow tandem-proto).
fn task_start(
    task: TaskId,
    request: RequestId,
    hashes: Vec<BlockHash>,
    pages: Vec<PageId>,
) -> TaskStart {
    TaskStart {
        task,
        request,
        block_hashes: hashes,
        page_ids: pages,
        tiers: Vec::new(),
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeGroup {
    pub(crate) fn start(spec: FakeSpec) -> FakeGroup {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = State {
            spec,
            epoch: 1,
            generation: 0,
            next_step: 0,
            open: Frame::empty(Epoch(1), Step(0)),
            sealed: BTreeMap::new(),
            redelivered: vec![Vec::new(); spec.world as usize],
            acks: vec![None; spec.world as usize],
            pools: (0..spec.world).map(|_| None).collect(),
            data: HashMap::new(),
            cached: HashSet::new(),
            inflight: BTreeMap::new(),
            done: Vec::new(),
            revealed: Vec::new(),
            seq: 0,
            restarts_left: spec.restarts,
            restarts_done: 0,
        };
        let shared = Arc::new((Mutex::new(state), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut sockets = Vec::new();
        for rank in 0..spec.world {
            let path = dir.path().join(format!("rank{rank}.sock"));
            let listener = UnixListener::bind(&path).expect("bind");
            listener.set_nonblocking(true).expect("nonblocking");
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::spawn(move || accept_loop(rank, listener, shared, stop));
            sockets.push(path);
        }
        FakeGroup {
            sockets,
            dir,
            stop,
            shared,
        }
    }

    pub(crate) fn restarts_done(&self) -> u32 {
        lock(&self.shared.0).restarts_done
    }

    pub(crate) fn pool_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for FakeGroup {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn accept_loop(
    rank: u32,
    listener: UnixListener,
    shared: Arc<(Mutex<State>, Condvar)>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let shared = shared.clone();
                let generation = lock(&shared.0).generation;
                std::thread::spawn(move || serve(rank, stream, generation, shared));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

fn serve(rank: u32, mut stream: UnixStream, generation: u64, shared: Arc<(Mutex<State>, Condvar)>) {
    let _ = stream.set_nonblocking(false);
    loop {
        let Ok((req, call)) = read_call::<EngineRequest>(&mut stream) else {
            return;
        };
        if lock(&shared.0).generation != generation {
            return;
        }
        let reply = handle(rank, req, &shared);
        if lock(&shared.0).generation != generation {
            return;
        }
        if write_call(&mut stream, &reply, call).is_err() {
            return;
        }
    }
}

fn handle(rank: u32, req: EngineRequest, shared: &(Mutex<State>, Condvar)) -> EngineReply {
    let (m, cv) = shared;
    let mut s = lock(m);
    let epoch_of = |req: &EngineRequest| match req {
        EngineRequest::Lookup { epoch, .. }
        | EngineRequest::Store { epoch, .. }
        | EngineRequest::Load { epoch, .. }
        | EngineRequest::EndStep { epoch, .. }
        | EngineRequest::Frame { epoch, .. }
        | EngineRequest::Ack { epoch, .. } => Some(epoch.0),
        _ => None,
    };
    if let Some(e) = epoch_of(&req) {
        if e != s.epoch {
            return EngineReply::Error(AgentError::StaleEpoch {
                ours: Epoch(s.epoch),
                theirs: Epoch(e),
            });
        }
    }
    match req {
        EngineRequest::Hello { .. } | EngineRequest::HelloVersioned { .. } => {
            EngineReply::Welcome {
                epoch: Epoch(s.epoch),
                rank,
                world_size: s.spec.world,
                shard_bytes: s.spec.shard_bytes,
                next_step: Step(s.next_step),
            }
        }
        EngineRequest::RegisterBuffer {
            source,
            size_bytes,
            page_size_bytes,
        } => {
            // The replay's pools have a path; the fake reads requests with plain reads, which
            // cannot take a descriptor.
            let BufferSource::Path(path) = source else {
                return EngineReply::Error(AgentError::Buffer {
                    reason: "the fake agent maps pools by path only".into(),
                });
            };
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .expect("pool file");
            // SAFETY: test-only mapping of the engine's pool; pages are touched only as tasks say.
            let map = unsafe { MmapMut::map_mut(&file) }.expect("map pool");
            s.pools[rank as usize] = Some(map);
            EngineReply::Registered {
                pages: size_bytes / page_size_bytes,
            }
        }
        EngineRequest::Lookup {
            request,
            block_hashes,
            ..
        } => {
            let matched = block_hashes
                .iter()
                .take_while(|h| s.cached.contains(&h.0))
                .count() as u32;
            let result = LookupResult {
                request,
                block_hashes,
                matched_blocks: matched,
                pinned: true,
            };
            s.open.lookups.push(result.clone());
            EngineReply::Lookup(result)
        }
        EngineRequest::Store {
            request,
            block_hashes,
            page_ids,
            ..
        } => start(&mut s, TaskKind::Store, request, block_hashes, page_ids),
        EngineRequest::Load {
            request,
            block_hashes,
            page_ids,
            ..
        } => start(&mut s, TaskKind::Load, request, block_hashes, page_ids),
        EngineRequest::EndStep {
            step, deadline_ms, ..
        } => {
            if step.0 != s.next_step {
                return EngineReply::Error(AgentError::WrongStep {
                    expected: Step(s.next_step),
                    got: step,
                });
            }
            let until = Instant::now() + Duration::from_millis(deadline_ms);
            let epoch = s.epoch;
            loop {
                if s.epoch != epoch {
                    return EngineReply::Error(AgentError::StaleEpoch {
                        ours: Epoch(s.epoch),
                        theirs: Epoch(epoch),
                    });
                }
                let slowest = s
                    .acks
                    .iter()
                    .skip(1)
                    .map(|a| a.map_or(-1, |v| v as i64))
                    .min()
                    .unwrap_or(i64::MAX);
                if (step.0 as i64) <= slowest.saturating_add(s.spec.window as i64) {
                    break;
                }
                let now = Instant::now();
                if now >= until {
                    let slowest_ack =
                        (slowest >= 0 && slowest != i64::MAX).then_some(Step(slowest as u64));
                    // The slowest follower: the lowest rank among equals.
                    let rank = (1..s.acks.len())
                        .min_by_key(|&r| s.acks[r].map_or(-1, |v| v as i64))
                        .unwrap_or(0) as u32;
                    return EngineReply::Error(AgentError::WindowFull {
                        step,
                        rank,
                        slowest_ack,
                        window: s.spec.window,
                    });
                }
                s = cv
                    .wait_timeout(s, until - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            complete_ready(&mut s);
            let next = Frame::empty(Epoch(s.epoch), Step(step.0 + 1));
            let mut frame = std::mem::replace(&mut s.open, next);
            frame.finished = std::mem::take(&mut s.done);
            for o in &frame.finished {
                s.revealed.push((step.0, o.clone()));
            }
            s.sealed.insert(step.0, frame);
            s.next_step += 1;
            let reply = EngineReply::Frame(Box::new(frame_for(&s, 0, step.0)));
            if s.spec.restart_every.is_some_and(|n| s.next_step >= n) && s.restarts_left > 0 {
                restart(&mut s);
            }
            cv.notify_all();
            reply
        }
        EngineRequest::Frame {
            step, deadline_ms, ..
        } => {
            let until = Instant::now() + Duration::from_millis(deadline_ms);
            let epoch = s.epoch;
            loop {
                if s.epoch != epoch {
                    return EngineReply::Error(AgentError::StaleEpoch {
                        ours: Epoch(s.epoch),
                        theirs: Epoch(epoch),
                    });
                }
                if s.sealed.contains_key(&step.0) {
                    return EngineReply::Frame(Box::new(frame_for(&s, rank, step.0)));
                }
                let now = Instant::now();
                if now >= until {
                    let sealed = s.next_step.checked_sub(1).map(Step);
                    return EngineReply::Error(AgentError::LeaderBehind {
                        rank,
                        epoch: Epoch(epoch),
                        wanted: step,
                        sealed,
                    });
                }
                s = cv
                    .wait_timeout(s, until - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        EngineRequest::Ack { step, .. } => {
            let a = &mut s.acks[rank as usize];
            *a = Some(a.map_or(step.0, |v| v.max(step.0)));
            cv.notify_all();
            EngineReply::Acked
        }
        EngineRequest::Bind { task, .. } => EngineReply::Bound { task },
        EngineRequest::Release { .. } => EngineReply::Released { blocks: 0 },
    }
}

fn start(
    s: &mut State,
    kind: TaskKind,
    request: RequestId,
    hashes: Vec<BlockHash>,
    pages: Vec<PageId>,
) -> EngineReply {
    let task = TaskId {
        epoch: s.epoch,
        seq: s.seq,
    };
    s.seq += 1;
    let t = task_start(task, request, hashes.clone(), pages.clone());
    match kind {
        TaskKind::Store => s.open.stores.push(t),
        TaskKind::Load => s.open.loads.push(t),
    }
    s.inflight.insert(
        task,
        Pending {
            kind,
            request,
            step: s.next_step,
            hashes,
            pages,
        },
    );
    EngineReply::Started { task }
}

/// Carry out every task whose start step all ranks acknowledged.
fn complete_ready(s: &mut State) {
    let all_acked =
        |step: u64, acks: &[Option<u64>]| acks.iter().all(|a| a.is_some_and(|v| v >= step));
    let ready: Vec<TaskId> = s
        .inflight
        .iter()
        .filter(|(_, p)| all_acked(p.step, &s.acks))
        .map(|(t, _)| *t)
        .collect();
    for task in ready {
        let Some(p) = s.inflight.remove(&task) else {
            continue;
        };
        let shard = s.spec.shard_bytes as usize;
        let mut result = OutcomeResult::Ok;
        for rank in 0..s.spec.world {
            for (h, page) in p.hashes.iter().zip(&p.pages) {
                let range = page.0 as usize * shard..(page.0 as usize + 1) * shard;
                let Some(pool) = s.pools[rank as usize].as_mut() else {
                    result = OutcomeResult::Failed {
                        reason: format!("rank {rank} has no pool"),
                    };
                    continue;
                };
                match p.kind {
                    TaskKind::Store => {
                        let bytes = pool[range].to_vec();
                        s.data.insert((rank, h.0), bytes);
                    }
                    TaskKind::Load => match s.data.get(&(rank, h.0)) {
                        Some(bytes) => pool[range].copy_from_slice(bytes),
                        None => {
                            result = OutcomeResult::Failed {
                                reason: format!("rank {rank} lacks block {h}"),
                            }
                        }
                    },
                }
            }
        }
        if p.kind == TaskKind::Store && result == OutcomeResult::Ok {
            s.cached.extend(p.hashes.iter().map(|h| h.0));
        }
        s.done.push(TaskOutcome {
            task,
            kind: p.kind,
            request: p.request,
            result,
        });
    }
}

/// Frame `step` as `rank` sees it: frame 0 of a restarted epoch carries that rank's
/// redeliveries.
fn frame_for(s: &State, rank: u32, step: u64) -> Frame {
    let mut f = s
        .sealed
        .get(&step)
        .cloned()
        .unwrap_or_else(|| Frame::empty(Epoch(s.epoch), Step(step)));
    if let Some(r) = f.reconciliation.as_mut() {
        r.redelivered = s.redelivered[rank as usize].clone();
    }
    f
}

fn restart(s: &mut State) {
    let aborted: Vec<TaskOutcome> = std::mem::take(&mut s.inflight)
        .into_iter()
        .map(|(task, p)| TaskOutcome {
            task,
            kind: p.kind,
            request: p.request,
            result: OutcomeResult::Aborted,
        })
        .collect();
    let unrevealed = std::mem::take(&mut s.done);
    for rank in 0..s.spec.world as usize {
        let acked = s.acks[rank];
        let mut again = unrevealed.clone();
        again.extend(
            s.revealed
                .iter()
                .filter(|(step, _)| acked.is_none_or(|a| *step > a))
                .map(|(_, o)| o.clone()),
        );
        s.redelivered[rank] = again;
    }
    s.epoch += 1;
    s.restarts_left -= 1;
    s.restarts_done += 1;
    if s.spec.break_sockets {
        s.generation += 1;
    }
    s.next_step = 0;
    s.sealed.clear();
    s.revealed.clear();
    s.acks = vec![None; s.spec.world as usize];
    s.open = Frame::empty(Epoch(s.epoch), Step(0));
    s.open.reconciliation = Some(Reconciliation {
        redelivered: Vec::new(),
        aborted,
    });
}
