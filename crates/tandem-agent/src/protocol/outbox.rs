//! What the `ProtocolActor` sends to its peers, in order, and when: after the engine is
//! answered.
//!
//! Owns the order of peer messages and link closes. Every message is encoded once and written
//! to every link it goes to in one pass ([`PeerLink::send_encoded`] writes at once unless the
//! socket would block). When the outputs of one input answer an engine call too (the leader's
//! `end_step` that seals a frame; a follower's `ack`), that answer is on the engine's socket
//! before the peer messages go: usually the actor wrote it itself a moment before (`direct`),
//! and the messages go at once; when the endpoint's task still has to write it (the socket did
//! not take it whole, or the call came without a socket), the actor yields once, and the
//! endpoint's task, woken by the answer, runs first. So the leader's engine is not answered
//! behind the fan-out.
//! Nothing that matters is reordered: a frame is durable before any output reveals it, and an
//! engine's answer and a peer's message are independent of each other. Messages and closes
//! stay in the order the core gave them, across inputs: once something waits, everything after
//! it waits behind it. What waits when the actor stops is written then (`Actor::stopped`).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use actix::{ActorFutureExt, AsyncContext, Context, WrapFuture};
use tandem_core::{ConnId, Peer};
use tandem_proto::wire::codec::encode_checked;
use tandem_proto::Message as WireMessage;

use super::ProtocolActor;

/// One thing for the peer links, in the core's order.
enum Outgoing {
    /// Bytes of one encoded message, for these links.
    Send { to: Peer, bytes: Arc<Vec<u8>> },
    /// Drop a follower's link (after what was sent to it).
    Close(ConnId),
}

/// Peer messages and closes not carried out yet.
#[derive(Default)]
pub(super) struct Outbox {
    waiting: VecDeque<Outgoing>,
    /// A write of `waiting` is scheduled for the actor's next turn.
    scheduled: bool,
}

impl ProtocolActor {
    /// Encode `msg` once for `to`, behind what waits.
    pub(super) fn queue_send(&mut self, to: Peer, msg: &WireMessage) {
        match encode_checked(msg, self.wiring.max_frame_bytes) {
            Ok(bytes) => self.outbox.waiting.push_back(Outgoing::Send {
                to,
                bytes: Arc::new(bytes),
            }),
            Err(e) => {
                tracing::error!(error = %e, kind = msg.kind(), "message exceeds the wire limit")
            }
        }
    }

    /// Close `conn`'s link, behind what waits.
    pub(super) fn queue_close(&mut self, conn: ConnId) {
        self.outbox.waiting.push_back(Outgoing::Close(conn));
    }

    /// After one input's outputs: write what waits now, or, when an engine call's answer is
    /// left for its endpoint to write (`answered`), on the actor's next turn, after the
    /// endpoint wrote it.
    pub(super) fn send_outbox(&mut self, answered: bool, ctx: &mut Context<Self>) {
        if self.outbox.scheduled || self.outbox.waiting.is_empty() {
            return;
        }
        if !answered {
            return self.write_outbox();
        }
        self.outbox.scheduled = true;
        ctx.spawn(YieldOnce(false).into_actor(self).map(|(), actor, _| {
            actor.outbox.scheduled = false;
            actor.write_outbox();
        }));
    }

    /// Carry out everything that waits, in order: each message written to every link it goes
    /// to in one pass.
    pub(super) fn write_outbox(&mut self) {
        while let Some(out) = self.outbox.waiting.pop_front() {
            match out {
                Outgoing::Send {
                    to: Peer::Leader,
                    bytes,
                } => self.leader_link.iter().for_each(|l| l.send_encoded(&bytes)),
                Outgoing::Send {
                    to: Peer::Followers(conns),
                    bytes,
                } => conns
                    .iter()
                    .filter_map(|c| self.links.get(c))
                    .for_each(|l| l.send_encoded(&bytes)),
                Outgoing::Close(conn) => drop(self.links.remove(&conn)),
            }
        }
    }
}

/// Pending once (waking its task at once, so that the task goes behind the tasks woken before
/// it), then ready.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
