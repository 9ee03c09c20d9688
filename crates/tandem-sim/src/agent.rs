//! One rank's agent, simulated as its drivers: the epoch loop's calls made against the
//! completion log's in-memory twin, the epoch's rank core started and stopped as the loop
//! says, and every output of the core carried out (replies to the engine, store commands,
//! peer messages, appends, manifest reads, events back to the loop).
//!
//! Owns [`Agent`] and the world's `pump`, the one place outputs are carried. Like the real
//! agent's actors it holds no rule: every decision is the core's or the loop's. The broken
//! drivers of [`crate::Broken`] live here, where the real driver's code would be.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use rand::Rng;
use tandem_core::{
    CallRef, ConnId, CoreConfig, Effect, EpochLoop, Event, LoopConfig, Outcome, Output, Peer,
    RankCore,
};
use tandem_durable::{CompletionStream, EpochStore, Heartbeat, LivenessStore};
use tandem_proto::engine::EngineReply;
use tandem_proto::wire::handshake::{GroupSecret, Membership, PROTOCOL_VERSION};
use tandem_proto::{ConfigFingerprint, Epoch, Frame, GroupId, Rank, TaskId};

use crate::config::{
    Broken, ACK_INTERVAL_MS, APPENDS_IN_FLIGHT, APPEND_WAIT_MS, BIND_TIMEOUT_MS, DISK_BLOCKS,
    HEARTBEAT_INTERVAL_MS, HEARTBEAT_TIMEOUT_MS, HOST_BLOCKS, LOG_SLOW_MAX_MS, RETENTION_STEPS,
    WALL_BASE_MS, WINDOW_STEPS,
};
use crate::store::Copy;
use crate::world::{Ev, World};

/// One incarnation of a rank's agent process.
#[derive(Debug)]
pub(crate) struct Agent {
    /// Which launch this is (never reused).
    pub inc: u64,
    /// The epoch loop.
    pub lp: EpochLoop,
    /// The running epoch's core.
    pub core: Option<RankCore>,
    /// Follower: the connection to the leader.
    pub link: Option<ConnId>,
    /// Follower: the frame that arrived last (what the broken driver hands out).
    pub last_arrived: Option<Frame>,
    /// The running core's appends out, oldest first, not answered yet.
    pub appends: VecDeque<AppendOut>,
    /// Which core the appends are of (one more at every epoch start).
    pub core_gen: u64,
    /// When the last append answer scheduled reaches the core (answers keep their order).
    pub last_answer_ms: u64,
}

impl Agent {
    /// Whether an append is out, not answered yet.
    pub(crate) fn appending(&self) -> bool {
        !self.appends.is_empty()
    }
}

/// One append out, as the driver remembers it: the starts and the outcomes it holds.
#[derive(Debug)]
pub(crate) struct AppendOut {
    /// Starts.
    pub starts: Vec<TaskId>,
    /// Outcomes.
    pub outcomes: Vec<TaskId>,
}

/// A log answer that comes late (the log is slow).
#[derive(Debug)]
pub(crate) enum LogAnswer {
    /// For the epoch loop's call in flight.
    Loop(Outcome),
    /// For an append of core `core_gen`.
    Appended {
        /// [`Agent::core_gen`] of the core that made it.
        core_gen: u64,
        /// The log's answer as told to the core.
        result: Result<(), String>,
        /// What that append holds.
        held: AppendOut,
    },
    /// For the core's manifest read.
    Manifests(Vec<Option<Vec<u8>>>),
}

/// The value of a future of the in-memory log, which is always ready at once.
pub(crate) fn ready<T>(f: impl Future<Output = T>) -> T {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("the in-memory log never waits"),
    }
}

fn text<T>(r: tandem_durable::Result<T>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

/// The core settings of `rank` in `epoch` for a group of `world`.
pub(crate) fn core_config(world: u32, rank: u32, epoch: Epoch) -> CoreConfig {
    CoreConfig {
        epoch,
        rank: Rank(rank),
        world_size: world,
        shard_bytes: 64,
        layers_per_rank: 1,
        window_steps: WINDOW_STEPS,
        retention_steps: RETENTION_STEPS,
        max_frame_bytes: 1 << 20,
        heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS,
        heartbeat_timeout_ms: HEARTBEAT_TIMEOUT_MS,
        host_capacity_blocks: HOST_BLOCKS,
        disk_capacity_blocks: DISK_BLOCKS,
        durable: true,
        membership: Membership {
            protocol_version: PROTOCOL_VERSION,
            group_id: GroupId("sim".into()),
            fingerprint: ConfigFingerprint::default(),
            secret: GroupSecret::new(b"simulated group secret".to_vec()),
            epoch,
            world_size: world,
        },
        leader_addr: "rank0".into(),
        bind_timeout_ms: BIND_TIMEOUT_MS,
        max_appends_in_flight: APPENDS_IN_FLIGHT,
        append_wait_ms: APPEND_WAIT_MS,
    }
}

impl World {
    /// Agent `inc` of `rank`, if that one is running.
    pub(crate) fn agent_mut(&mut self, rank: u32, inc: u64) -> Option<&mut Agent> {
        self.agents[rank as usize].as_mut().filter(|a| a.inc == inc)
    }

    /// Rank `r`'s agent process starts (a fresh epoch loop that follows the counter).
    pub(crate) fn launch(&mut self, r: u32) {
        if self.agents[r as usize].is_some() {
            return;
        }
        let inc = self.next_inc;
        self.next_inc += 1;
        let config = LoopConfig {
            rank: Rank(r),
            epoch: Epoch(1),
            follow: true,
            durable: true,
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS,
            heartbeat_timeout_ms: HEARTBEAT_TIMEOUT_MS,
            stream_max_len: 64,
            ack_interval_ms: ACK_INTERVAL_MS,
        };
        self.note(|| format!("rank {r}: agent {inc} starts"));
        self.agents[r as usize] = Some(Agent {
            inc,
            lp: EpochLoop::new(config, self.now),
            core: None,
            link: None,
            last_arrived: None,
            appends: VecDeque::new(),
            core_gen: 0,
            last_answer_ms: 0,
        });
        self.pump(r);
    }

    /// Rank `r`'s agent process dies (`why`): its connections break, its engine's calls
    /// fail, its copies in flight are lost; the supervisor sees it exit.
    pub(crate) fn crash(&mut self, r: u32, why: &str) {
        let Some(a) = self.agents[r as usize].take() else {
            return;
        };
        let inc = a.inc;
        self.note(|| format!("rank {r}: agent {inc} dies: {why}"));
        self.cut_off(r, inc);
        self.sup
            .exited
            .push(format!("agent of rank {r} exited: {why}"));
    }

    /// Agent `inc` of rank `r` is gone: every connection it had breaks, its engine is cut off.
    fn cut_off(&mut self, r: u32, inc: u64) {
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.open && (c.follower_inc == inc || c.leader_inc == inc))
            .map(|(id, _)| *id)
            .collect();
        for c in conns {
            self.break_conn(c);
        }
        self.engine_disconnected(r);
    }

    /// Carries out everything rank `r`'s core and epoch loop ask for, until neither has more.
    pub(crate) fn pump(&mut self, r: u32) {
        loop {
            let Some(a) = self.agents[r as usize].as_mut() else {
                return;
            };
            let inc = a.inc;
            if let Some(out) = a.core.as_mut().and_then(RankCore::poll_output) {
                self.output(r, inc, out);
                continue;
            }
            let Some(effect) = a.lp.poll_effect() else {
                return;
            };
            self.effect(r, inc, effect);
        }
    }

    fn output(&mut self, r: u32, inc: u64, out: Output) {
        let now = self.now;
        match out {
            Output::Reply { call, reply } => {
                if r == 0 {
                    if let EngineReply::Frame(f) = &reply {
                        self.check.sealed(f, now);
                    }
                }
                self.engine_reply(r, call, reply);
            }
            Output::Store(tandem_core::StoreCommand::ApplyTierOps { .. })
                if r != 0 && self.cfg.broken == Some(Broken::FollowerSkipsTierOps) => {}
            Output::Store(cmd) => {
                self.note(|| format!("rank {r}: store {cmd:?}"));
                for copy in self.stores[r as usize].command(cmd) {
                    let delay = if self.rng.gen_bool(0.6) {
                        0
                    } else {
                        self.rng.gen_range(1..=20)
                    };
                    self.schedule(now + delay, Ev::CopyDone { rank: r, inc, copy });
                }
            }
            Output::Send { to, msg } => match to {
                Peer::Leader => {
                    if let Some(conn) = self.agents[r as usize].as_ref().and_then(|a| a.link) {
                        self.send(conn, true, msg);
                    }
                }
                Peer::Followers(conns) => {
                    if let tandem_proto::Message::Frame(f) = &msg {
                        self.check.sealed(f, now);
                        for conn in conns {
                            self.send(conn, false, msg.clone());
                        }
                    }
                }
            },
            Output::Close { conn } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.open = false;
                }
            }
            Output::Append(a) => self.append(r, inc, a),
            Output::FetchManifests { epoch } => {
                let got = ready(self.log.manifests(epoch)).unwrap_or_default();
                self.answer(r, inc, LogAnswer::Manifests(got));
            }
            Output::Event(e) => {
                self.note(|| format!("rank {r}: event {e:?}"));
                if let Event::Failed { .. } = e {
                    self.report.epoch_failures += 1;
                }
                if let Some(a) = self.agent_mut(r, inc) {
                    a.lp.handle_event(&e, now);
                }
            }
        }
    }

    /// The leader's append: made against the log at once, in the order the core output it
    /// (failing while a fault says so), then answered now or, with a slow log, later; answers
    /// reach the core in the order the appends went out, as on one Redis connection.
    fn append(&mut self, r: u32, inc: u64, a: tandem_core::Append) {
        if let Some(k) = self.faults.fail_one_after {
            // The next `k` appends are taken, the one after is refused.
            if k == 0 {
                self.faults.fail_one_after = None;
                self.faults.fail_appends += 1;
            } else {
                self.faults.fail_one_after = Some(k - 1);
            }
        }
        let result = if self.faults.fail_appends > 0 {
            self.faults.fail_appends -= 1;
            self.report.faults_fired += 1;
            Err("injected: append refused".to_string())
        } else {
            text(ready(self.log.append_step(
                a.epoch,
                a.step,
                &a.started,
                &a.finished,
            )))
            .map(drop)
        };
        let starts: Vec<TaskId> = a.started.iter().map(|s| s.start.task).collect();
        let outcomes: Vec<TaskId> = a.finished.iter().map(|o| o.task).collect();
        if result.is_ok() {
            self.check.appended(&starts, &outcomes, self.now);
        }
        self.note(|| format!("rank {r}: append step {} -> {result:?}", a.step));
        let told = match self.cfg.broken {
            Some(Broken::AppendedBeforeDurable) => Ok(()),
            _ => result,
        };
        let now = self.now;
        let slow = self.faults.log_slow_until > now;
        let delay = if slow {
            self.rng.gen_range(1..=LOG_SLOW_MAX_MS)
        } else {
            0
        };
        let Some(ag) = self.agent_mut(r, inc) else {
            return;
        };
        ag.appends.push_back(AppendOut {
            starts: starts.clone(),
            outcomes: outcomes.clone(),
        });
        let out = ag.appends.len() as u64;
        let core_gen = ag.core_gen;
        let answer = LogAnswer::Appended {
            core_gen,
            result: told,
            held: AppendOut { starts, outcomes },
        };
        self.report.max_appends_out = self.report.max_appends_out.max(out);
        let in_order = self.cfg.broken != Some(Broken::AnswersAppendsOutOfOrder);
        let Some(ag) = self.agent_mut(r, inc) else {
            return;
        };
        if out == 1 && delay == 0 {
            ag.last_answer_ms = now;
            return self.log_answer(r, inc, answer);
        }
        // Never before an earlier append's answer (unless the driver is broken that way).
        let at = if in_order {
            (now + delay).max(ag.last_answer_ms)
        } else {
            now + delay
        };
        ag.last_answer_ms = at;
        self.schedule(
            at,
            Ev::LogAnswer {
                rank: r,
                inc,
                answer,
            },
        );
    }

    /// Hands `answer` to agent `inc` of `r` now, or later while the log is slow.
    fn answer(&mut self, r: u32, inc: u64, answer: LogAnswer) {
        if self.faults.log_slow_until > self.now {
            let at = self.now + self.rng.gen_range(1..=LOG_SLOW_MAX_MS);
            self.schedule(
                at,
                Ev::LogAnswer {
                    rank: r,
                    inc,
                    answer,
                },
            );
        } else {
            self.log_answer(r, inc, answer);
        }
    }

    /// A log answer reaches agent `inc` of `r` (dropped if that agent is gone).
    pub(crate) fn log_answer(&mut self, r: u32, inc: u64, answer: LogAnswer) {
        let now = self.now;
        let Some(a) = self.agent_mut(r, inc) else {
            return;
        };
        match answer {
            LogAnswer::Loop(o) => a.lp.handle_outcome(o, now),
            LogAnswer::Appended {
                core_gen,
                result,
                held,
            } => {
                if core_gen != a.core_gen {
                    // For a core of an epoch that is over.
                    return self.pump(r);
                }
                // The core takes it as the answer of its oldest append out.
                a.appends.pop_front();
                let refused = result.is_err();
                let later = !a.appends.is_empty();
                if !refused {
                    self.check.confirmed(&held.starts, &held.outcomes);
                }
                let Some(a) = self.agent_mut(r, inc) else {
                    return;
                };
                if let Some(c) = a.core.as_mut() {
                    c.handle_appended(result, now);
                }
                if refused && later {
                    self.report.pipelined_refusals += 1;
                }
            }
            LogAnswer::Manifests(got) => {
                if let Some(c) = a.core.as_mut() {
                    c.handle_manifests(&got, now);
                }
            }
        }
        self.pump(r);
    }

    fn effect(&mut self, r: u32, inc: u64, effect: Effect) {
        let now = self.now;
        let rank = Rank(r);
        let log = self.log.clone();
        let outcome = match effect {
            Effect::StartEpoch { epoch, start } => {
                self.note(|| format!("rank {r}: epoch {epoch} starts"));
                match RankCore::new(core_config(self.world, r, epoch), start, now) {
                    Ok(core) => {
                        if let Some(a) = self.agent_mut(r, inc) {
                            a.core = Some(core);
                            a.link = None;
                            a.last_arrived = None;
                            a.appends.clear();
                            a.core_gen += 1;
                            a.last_answer_ms = 0;
                        }
                        if r != 0 {
                            self.schedule(
                                now,
                                Ev::Join {
                                    rank: r,
                                    inc,
                                    epoch,
                                },
                            );
                        }
                    }
                    Err(e) => self.check.fail(0, now, format!("core refused: {e}")),
                }
                return;
            }
            Effect::StopEpoch { epoch, next } => {
                self.note(|| format!("rank {r}: epoch {epoch} stops for {next}"));
                let reason = format!("the group moved from epoch {epoch} to epoch {next}");
                if let Some(c) = self.agent_mut(r, inc).and_then(|a| a.core.as_mut()) {
                    c.handle_stop(&reason);
                }
                // The stopped core's last replies go out before it is dropped.
                while let Some(out) = self
                    .agent_mut(r, inc)
                    .and_then(|a| a.core.as_mut())
                    .and_then(RankCore::poll_output)
                {
                    if let Output::Reply { call, reply } = out {
                        self.engine_reply(r, call, reply);
                    }
                }
                if let Some(a) = self.agent_mut(r, inc) {
                    a.core = None;
                    a.link = None;
                }
                self.cut_off(r, inc);
                return;
            }
            Effect::Note(n) => {
                if n == tandem_core::Note::Restarted {
                    self.report.rank_restarts += 1;
                }
                return;
            }
            Effect::Fatal(reason) => {
                self.crash(r, &reason);
                return;
            }
            Effect::LogHealth { health, .. } => {
                // The pump carries out what the core does with it.
                if let Some(c) = self.agent_mut(r, inc).and_then(|a| a.core.as_mut()) {
                    c.handle_log_health(health, now);
                }
                return;
            }
            Effect::ListBlocks => Outcome::Blocks(Some(self.stores[r as usize].manifest(r))),
            Effect::ReadEpoch => Outcome::EpochRead(text(ready(log.current_epoch()))),
            Effect::ReadMembers { epoch } => Outcome::Members(text(ready(log.members(epoch)))),
            Effect::ReportFailure(rep) => Outcome::Reported(text(ready(log.report_failure(&rep)))),
            Effect::Heartbeat { epoch, ttl_ms } => {
                let beat = Heartbeat {
                    epoch,
                    unix_ms: WALL_BASE_MS + now,
                    incarnation: 0,
                };
                Outcome::HeartbeatWritten(text(ready(log.heartbeat(rank, beat, ttl_ms))))
            }
            Effect::Join { epoch } => Outcome::Joined(text(ready(log.join(epoch, rank))).map(drop)),
            Effect::Recover => Outcome::Recovered(text(ready(log.recover())).map(Box::new)),
            Effect::PutManifest {
                epoch,
                bytes,
                ttl_ms,
            } => Outcome::ManifestPut(text(ready(log.put_manifest(epoch, rank, &bytes, ttl_ms)))),
            Effect::ReadNew { count } => Outcome::Read(ready(log.read_new(rank, count))),
            Effect::Ack { ids } => Outcome::Acked(text(ready(log.ack(rank, &ids)))),
            Effect::AckThrough { through } => {
                Outcome::AckedThrough(text(ready(log.ack_through(rank, through))))
            }
            Effect::Trim { max_len } => Outcome::Trimmed(text(ready(log.trim(max_len as usize)))),
            Effect::StreamLen => Outcome::StreamLen(text(ready(log.stream_len()))),
        };
        self.answer(r, inc, LogAnswer::Loop(outcome));
    }

    /// A copy finishes: its shard result goes to the core that asked (if still running).
    pub(crate) fn copy_done(&mut self, r: u32, inc: u64, copy: Copy) {
        let now = self.now;
        if self.agent_mut(r, inc).is_none() {
            return;
        }
        let pages = &mut self.engines[r as usize].pages;
        let result = match self.stores[r as usize].finish(&copy, pages, r, now) {
            Ok(result) => result,
            Err(reused) => {
                self.check.fail(5, now, reused);
                return;
            }
        };
        let task = copy.task.task;
        self.note(|| format!("rank {r}: copy of {task} done: {result:?}"));
        if let Some(c) = self.agent_mut(r, inc).and_then(|a| a.core.as_mut()) {
            if c.config().epoch == copy.epoch {
                c.handle_shard_done(task, result, now);
            }
        }
        self.pump(r);
    }

    /// A call the engine made: into the core of rank `r`, or, for the broken driver, a
    /// frame read answered with the frame that arrived last.
    pub(crate) fn engine_call(
        &mut self,
        r: u32,
        call: CallRef,
        req: tandem_proto::engine::EngineRequest,
    ) {
        let now = self.now;
        if r != 0 && self.cfg.broken == Some(Broken::FollowerAppliesArrivalOrder) {
            if let tandem_proto::engine::EngineRequest::Frame { .. } = &req {
                let last = self.agents[r as usize]
                    .as_ref()
                    .and_then(|a| a.last_arrived.clone());
                if let Some(f) = last {
                    self.engine_reply(r, call, EngineReply::Frame(Box::new(f)));
                    return;
                }
            }
        }
        match self.agents[r as usize]
            .as_mut()
            .and_then(|a| a.core.as_mut())
        {
            Some(core) => {
                core.handle_engine(call, req, now);
                self.pump(r);
            }
            None => {
                let reason = format!("rank {r}: no epoch running");
                let err = tandem_proto::engine::AgentError::NotReady { reason };
                self.engine_reply(r, call, EngineReply::Error(err));
            }
        }
    }
}
