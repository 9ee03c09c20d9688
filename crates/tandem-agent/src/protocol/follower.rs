//! A follower's role (ranks 1..world_size): the leader's frames, handed to the engine by
//! position, and this rank's shard copies.
//!
//! Owns the sans-IO `Follower`, the link to the leader, the engine's waiting `frame` calls and
//! the copies held back until the engine has acknowledged the step that started them. A
//! follower's engine applies frames at its own pace: it computes a store's pages when it
//! applies the frame that starts the store, and it still reads the pages of an earlier load
//! until it applies the frame that reports that load finished. Copying a store earlier could
//! store pages not yet written; copying a load earlier could overwrite pages the engine is
//! still verifying. It never decides anything for the group.

use std::collections::BTreeMap;

use actix::Addr;
use tandem_client::api::{AgentError, EngineReply, EngineRequest};
use tandem_proto::frame::TaskStart;
use tandem_proto::ids::{Epoch, Step};
use tandem_proto::wire::Message as WireMessage;
use tandem_proto::{Follower, FollowerError, FollowerEvent, WaitId};
use tokio::sync::oneshot;

use super::status::AgentStatus;
use crate::peer::link::PeerLink;
use crate::settings::AgentSettings;
use crate::store_actor::{ApplyTierOps, CopyLoads, CopyStores, ShardDone, StoreActor};

/// A follower's role. See the module docs.
pub struct FollowerRole {
    follower: Follower,
    rank: u32,
    link: Option<PeerLink>,
    waits: BTreeMap<WaitId, oneshot::Sender<EngineReply>>,
    /// Copies (loads, stores) started by frames the engine has not acknowledged yet, by step.
    held: BTreeMap<Step, (Vec<TaskStart>, Vec<TaskStart>)>,
    engine_acked: Option<Step>,
    heartbeat_interval_ms: u64,
    next_heartbeat_ms: u64,
    /// Frame requests from the engine.
    frames_read: u64,
}

impl FollowerRole {
    /// A follower of `settings.epoch`, not yet linked to the leader.
    pub fn new(settings: &AgentSettings) -> Self {
        Self {
            follower: Follower::new(settings.epoch, settings.rank, settings.retention_steps),
            rank: settings.rank.0,
            link: None,
            waits: BTreeMap::new(),
            held: BTreeMap::new(),
            engine_acked: None,
            heartbeat_interval_ms: settings.heartbeat_interval_ms,
            next_heartbeat_ms: 0,
            frames_read: 0,
        }
    }

    /// Counters of the sans-IO follower, and frame requests from the engine.
    pub fn stats(&self) -> (&tandem_proto::FollowerStats, u64) {
        (self.follower.stats(), self.frames_read)
    }

    /// Tasks this rank saw started without an outcome yet.
    pub fn tasks_in_flight(&self) -> usize {
        self.follower.open_tasks().len()
    }

    /// Admitted by the leader.
    pub fn is_linked(&self) -> bool {
        self.link.is_some()
    }

    /// The next step this rank expects from the leader.
    pub fn next_step(&self) -> Step {
        self.follower.received_step().map_or(Step(0), Step::next)
    }

    /// Admitted by the leader: send the first heartbeat at once.
    pub fn linked(&mut self, link: PeerLink, now: u64) {
        let _ = link.send(&self.follower.heartbeat(now));
        self.next_heartbeat_ms = now + self.heartbeat_interval_ms;
        self.link = Some(link);
        tracing::info!("admitted by the leader");
    }

    fn send(&self, msg: &WireMessage) {
        if let Some(link) = &self.link {
            if let Err(e) = link.send(msg) {
                tracing::error!(error = %e, "message exceeds the wire limit");
            }
        }
    }

    /// An engine request on a follower.
    pub fn engine(
        &mut self,
        req: EngineRequest,
        reply: oneshot::Sender<EngineReply>,
        now: u64,
        store: &Addr<StoreActor>,
    ) {
        if matches!(req, EngineRequest::Frame { .. }) {
            self.frames_read += 1;
        }
        let answer = match req {
            EngineRequest::Frame {
                step, deadline_ms, ..
            } => match self.follower.read(step) {
                Ok(Some(f)) => EngineReply::Frame(Box::new(f.clone())),
                Ok(None) => {
                    let wait = self.follower.wait(step, now.saturating_add(deadline_ms));
                    self.waits.insert(wait, reply);
                    return;
                }
                Err(e) => {
                    EngineReply::Error(map_follower_error(e, self.rank, self.follower.epoch()))
                }
            },
            EngineRequest::Ack { step, .. } => match self.follower.ack(step) {
                Ok(msg) => {
                    self.send(&msg);
                    self.engine_acked = Some(self.engine_acked.map_or(step, |a| a.max(step)));
                    self.release_copies(store);
                    EngineReply::Acked
                }
                // Acknowledging a step this rank never received: it is not (or no longer) in
                // step with the leader; the engine should wait and say hello again.
                Err(e) => EngineReply::Error(AgentError::NotReady {
                    reason: e.to_string(),
                }),
            },
            EngineRequest::Lookup { .. }
            | EngineRequest::Store { .. }
            | EngineRequest::Load { .. }
            | EngineRequest::EndStep { .. } => {
                EngineReply::Error(AgentError::NotLeader { rank: self.rank })
            }
            EngineRequest::Hello { .. } | EngineRequest::RegisterBuffer { .. } => {
                EngineReply::Error(AgentError::BadRequest {
                    reason: "routed to the wrong actor".into(),
                })
            }
        };
        let _ = reply.send(answer);
    }

    /// Copy the loads and stores of every acknowledged step.
    fn release_copies(&mut self, store: &Addr<StoreActor>) {
        let Some(acked) = self.engine_acked else {
            return;
        };
        let later = self.held.split_off(&acked.next());
        let (mut loads, mut stores) = (Vec::new(), Vec::new());
        for (l, s) in std::mem::replace(&mut self.held, later).into_values() {
            loads.extend(l);
            stores.extend(s);
        }
        let epoch = self.follower.epoch();
        if !loads.is_empty() {
            store.do_send(CopyLoads(epoch, loads));
        }
        if !stores.is_empty() {
            store.do_send(CopyStores(epoch, stores));
        }
    }

    /// A message from the leader; returns a failure reason when the epoch cannot go on.
    pub fn from_leader(&mut self, msg: WireMessage, store: &Addr<StoreActor>) -> Option<String> {
        let frame = match &msg {
            WireMessage::Frame(f) => Some(f.clone()),
            _ => None,
        };
        match self.follower.handle_message(msg) {
            Ok(()) => {}
            Err(FollowerError::StaleEpoch { ours, theirs }) => {
                tracing::debug!(%ours, %theirs, "stale-epoch frame rejected");
                return None;
            }
            Err(e) => return Some(format!("frame from the leader refused: {e}")),
        }
        if let Some(f) = frame {
            // A block evicted now must not be written later by a copy still held back (its
            // store failed on some rank and the group dropped it).
            let evicted: std::collections::BTreeSet<_> = f.evictions().collect();
            if !evicted.is_empty() {
                for (_, stores) in self.held.values_mut() {
                    for t in stores.iter_mut() {
                        drop_blocks(t, &evicted);
                    }
                }
            }
            if !f.tier_ops.is_empty() {
                store.do_send(ApplyTierOps(f.epoch, f.tier_ops.clone()));
            }
            if !f.loads.is_empty() || !f.stores.is_empty() {
                let held = self.held.entry(f.step).or_default();
                held.0.extend(f.loads.iter().cloned());
                held.1.extend(f.stores.iter().cloned());
                self.release_copies(store);
            }
        }
        self.drain_events();
        None
    }

    fn drain_events(&mut self) {
        while let Some(ev) = self.follower.poll_event() {
            let (wait, answer) = match ev {
                FollowerEvent::FrameReady { wait, frame } => {
                    (wait, EngineReply::Frame(Box::new(frame)))
                }
                FollowerEvent::WaitFailed { wait, error } => (
                    wait,
                    EngineReply::Error(map_follower_error(error, self.rank, self.follower.epoch())),
                ),
            };
            if let Some(reply) = self.waits.remove(&wait) {
                let _ = reply.send(answer);
            }
        }
    }

    /// This rank's shard of a task is done: report it to the leader.
    pub fn own_shard(&mut self, msg: ShardDone) {
        let report = self.follower.report(msg.task, msg.result);
        self.send(&report);
    }

    /// Timers: wait deadlines and heartbeats.
    pub fn tick(&mut self, now: u64) -> Option<String> {
        if self.follower.poll_timeout().is_some_and(|t| now >= t) {
            self.follower.handle_timeout(now);
            self.drain_events();
        }
        if self.link.is_some() && now >= self.next_heartbeat_ms {
            self.send(&self.follower.heartbeat(now));
            self.next_heartbeat_ms = now + self.heartbeat_interval_ms;
        }
        None
    }

    /// Answer every waiting engine call with `err`.
    pub fn fail_waits(&mut self, err: &AgentError) {
        for (wait, reply) in std::mem::take(&mut self.waits) {
            self.follower.cancel(wait);
            let _ = reply.send(EngineReply::Error(err.clone()));
        }
    }

    /// Status for `/status` and `/readyz`.
    pub fn status(&self, settings: &AgentSettings) -> AgentStatus {
        let ready = self.link.is_some();
        let stats = self.follower.stats();
        AgentStatus {
            group: settings.membership.group_id.0.clone(),
            rank: settings.rank.0,
            pid: std::process::id(),
            role: "follower",
            epoch: settings.epoch.0,
            ready,
            reason: (!ready)
                .then(|| format!("not yet admitted by the leader at {}", settings.leader_addr)),
            joined: Vec::new(),
            sealed_step: self.follower.received_step().map(|s| s.0),
            acked_step: self.follower.acked_step().map(|s| s.0),
            tasks_in_flight: self.follower.open_tasks().len() as u64,
            steps_sealed: stats.frames_received,
            stale_epoch_rejected: stats.stale_epoch_rejected,
            tasks_ok: 0,
            tasks_failed: 0,
            index_blocks: 0,
        }
    }
}

/// Remove `evicted` blocks from a held store task (with their pages and tiers).
fn drop_blocks(
    t: &mut TaskStart,
    evicted: &std::collections::BTreeSet<tandem_proto::ids::BlockHash>,
) {
    let keep: Vec<bool> = t
        .block_hashes
        .iter()
        .map(|h| !evicted.contains(h))
        .collect();
    if keep.iter().all(|k| *k) {
        return;
    }
    retain_mask(&mut t.block_hashes, &keep);
    retain_mask(&mut t.page_ids, &keep);
    retain_mask(&mut t.tiers, &keep);
}

fn retain_mask<T>(v: &mut Vec<T>, keep: &[bool]) {
    let mut i = 0;
    v.retain(|_| {
        let k = keep.get(i).copied().unwrap_or(true);
        i += 1;
        k
    });
}

/// The engine's view of a follower refusal.
pub fn map_follower_error(e: FollowerError, rank: u32, epoch: Epoch) -> AgentError {
    match e {
        FollowerError::LeaderBehind {
            epoch,
            wanted,
            sealed,
        } => AgentError::LeaderBehind {
            rank,
            epoch,
            wanted,
            sealed,
        },
        FollowerError::FrameExpired {
            wanted,
            oldest_retained,
        } => AgentError::FrameExpired {
            epoch,
            wanted,
            oldest: oldest_retained,
        },
        other => AgentError::NotReady {
            reason: other.to_string(),
        },
    }
}
