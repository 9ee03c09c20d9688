//! The simulated network between a leader and its followers: one connection per admitted
//! follower, delivering in order (as TCP does) after a drawn latency, and the faults that act
//! on it (a lost connection, delays, duplicates, a partition that holds messages back).
//!
//! Owns [`Conn`] and the world's send, delivery, loss and join handlers. A lost message is
//! lost with its connection, as over TCP: both sides are told after a detection delay, and
//! nothing more is delivered on it. It decides nothing for the cores.

use rand::Rng;
use tandem_core::{cadence, ConnId};
use tandem_proto::{Epoch, Message, Rank};

use crate::config::{LOSS_DETECT_MS, NET_MAX_MS};
use crate::world::{Ev, World};

/// One leader–follower connection.
#[derive(Debug)]
pub(crate) struct Conn {
    /// The follower's rank.
    pub follower: u32,
    /// The follower's agent incarnation.
    pub follower_inc: u64,
    /// The leader's agent incarnation.
    pub leader_inc: u64,
    /// Still open.
    pub open: bool,
    /// The last delivery time scheduled in each direction (leader→follower, follower→leader):
    /// deliveries keep their order.
    pub last_at: [u64; 2],
}

impl World {
    /// Sends `msg` on `conn` (`to_leader`: follower to leader).
    pub(crate) fn send(&mut self, conn: ConnId, to_leader: bool, msg: Message) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if !c.open {
            return;
        }
        let rank = c.follower;
        let mut at = self.now + self.rng.gen_range(0..=NET_MAX_MS);
        if self.faults.slow_link_until[rank as usize] > self.now {
            at += self.rng.gen_range(20..=200);
        }
        at = at.max(self.faults.partitioned_until[rank as usize]);
        let dir = usize::from(to_leader);
        let copies = if self.faults.duplicate[rank as usize] > 0 {
            self.faults.duplicate[rank as usize] -= 1;
            self.report.faults_fired += 1;
            2
        } else {
            1
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        at = at.max(c.last_at[dir]);
        c.last_at[dir] = at;
        for _ in 0..copies {
            self.schedule(
                at,
                Ev::Deliver {
                    conn,
                    to_leader,
                    msg: msg.clone(),
                },
            );
        }
    }

    /// A message arrives.
    pub(crate) fn deliver(&mut self, conn: ConnId, to_leader: bool, msg: Message) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if !c.open {
            return;
        }
        let (follower, f_inc, l_inc) = (c.follower, c.follower_inc, c.leader_inc);
        self.note(|| {
            format!(
                "deliver {} on conn {conn} to_leader={to_leader}",
                msg.kind()
            )
        });
        let now = self.now;
        if to_leader {
            let Some(a) = self.agent_mut(0, l_inc) else {
                return;
            };
            if let Some(core) = a.core.as_mut() {
                core.handle_peer_message(conn, Rank(follower), &msg, now);
            }
            self.pump(0);
        } else {
            let Some(a) = self.agent_mut(follower, f_inc) else {
                return;
            };
            if a.link != Some(conn) {
                return;
            }
            if let Message::Frame(f) = &msg {
                a.last_arrived = Some(f.clone());
            }
            if let Some(core) = a.core.as_mut() {
                core.handle_leader_message(msg, now);
            }
            self.pump(follower);
        }
    }

    /// Closes `conn` and tells both sides after the detection delay.
    pub(crate) fn break_conn(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !c.open {
            return;
        }
        c.open = false;
        let at = self.now + LOSS_DETECT_MS;
        self.schedule(
            at,
            Ev::ConnLost {
                conn,
                leader_side: true,
            },
        );
        self.schedule(
            at,
            Ev::ConnLost {
                conn,
                leader_side: false,
            },
        );
    }

    /// One side of a closed connection notices.
    pub(crate) fn conn_lost(&mut self, conn: ConnId, leader_side: bool) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (follower, f_inc, l_inc) = (c.follower, c.follower_inc, c.leader_inc);
        let now = self.now;
        self.note(|| format!("conn {conn} of rank {follower} lost (leader side: {leader_side})"));
        if leader_side {
            if let Some(core) = self.agent_mut(0, l_inc).and_then(|a| a.core.as_mut()) {
                core.handle_peer_lost(conn, Rank(follower), "connection lost", now);
                self.pump(0);
            }
        } else if let Some(a) = self.agent_mut(follower, f_inc) {
            if a.link == Some(conn) {
                a.link = None;
                if let Some(core) = a.core.as_mut() {
                    core.handle_leader_lost("connection lost", now);
                }
                self.pump(follower);
            }
        }
    }

    /// Follower `rank` (agent `inc`, core of `epoch`) joins its leader: the handshake, then
    /// the link; refused or no leader yet: again after the cadence's pause.
    pub(crate) fn join(&mut self, rank: u32, inc: u64, epoch: Epoch) {
        let now = self.now;
        let Some(a) = self.agent_mut(rank, inc) else {
            return;
        };
        let Some(core) = a.core.as_ref() else {
            return;
        };
        if core.config().epoch != epoch || a.link.is_some() {
            return;
        }
        let membership = core.config().membership.clone();
        let leader_inc = self.agents[0].as_ref().map(|l| l.inc);
        let leader_ready = self.agents[0].as_ref().is_some_and(|l| l.core.is_some());
        let (Some(leader_inc), true) = (leader_inc, leader_ready) else {
            self.schedule(now + cadence::JOIN_RETRY_MS, Ev::Join { rank, inc, epoch });
            return;
        };
        let mut nonce = [0u8; 32];
        self.rng.fill(&mut nonce);
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        let hello = membership.hello(&nonce, Rank(rank));
        let admitted = self.agents[0]
            .as_mut()
            .and_then(|l| l.core.as_mut())
            .map(|c| c.handle_admit(conn, &nonce, &hello, now));
        self.pump(0);
        match admitted {
            Some(Ok(_)) => {
                self.conns.insert(
                    conn,
                    Conn {
                        follower: rank,
                        follower_inc: inc,
                        leader_inc,
                        open: true,
                        last_at: [now; 2],
                    },
                );
                self.note(|| format!("rank {rank} joined epoch {epoch} on conn {conn}"));
                if let Some(a) = self.agent_mut(rank, inc) {
                    a.link = Some(conn);
                    if let Some(core) = a.core.as_mut() {
                        core.handle_leader_linked(now);
                    }
                }
                self.pump(rank);
            }
            Some(Err(refusal)) => match cadence::join_retry_ms(&refusal) {
                Some(ms) => self.schedule(now + ms, Ev::Join { rank, inc, epoch }),
                None => self
                    .check
                    .fail(0, now, format!("join refused for good: {refusal}")),
            },
            None => self.schedule(now + cadence::JOIN_RETRY_MS, Ev::Join { rank, inc, epoch }),
        }
    }
}
