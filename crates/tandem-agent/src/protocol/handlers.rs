//! The ProtocolActor's handlers: each message is one input of the core, followed by carrying
//! out its outputs. No handler decides anything.

use actix::{ActorContext, Context, Handler, MessageResult, ResponseFuture};
use tandem_core::ConnId;
use tandem_proto::engine::{EngineReply, EngineRequest};
use tandem_proto::wire::handshake::HandshakeError;
use tandem_proto::Rank;
use tokio::sync::oneshot;

use super::{
    AdmitPeer, AgentStatus, Answered, Drain, EngineCall, EngineDisconnected, FromPeer, GetStatus,
    LeaderLinked, LeaderLost, LogHealth, PeerLost, ProtocolActor, StopEpoch,
};
use crate::store_actor::{LayersCopied, ShardDone};

impl Handler<EngineCall> for ProtocolActor {
    type Result = ();
    /// An engine request: answered now or when its wait ends (the pool's size told first).
    fn handle(&mut self, msg: EngineCall, ctx: &mut Context<Self>) {
        let end_step = matches!(msg.req, EngineRequest::EndStep { .. });
        let call = self.call(msg.reply, msg.direct, end_step);
        let pool = self.wiring.pool.get();
        self.input(ctx, |core, now| {
            core.handle_pool(pool);
            core.handle_engine(call, msg.req, now)
        });
    }
}

impl Handler<EngineDisconnected> for ProtocolActor {
    type Result = ();
    /// The engine's connection closed.
    fn handle(&mut self, msg: EngineDisconnected, ctx: &mut Context<Self>) {
        self.input(ctx, |core, now| {
            core.handle_engine_disconnect(msg.attached, &msg.reason, now)
        });
    }
}

impl Handler<AdmitPeer> for ProtocolActor {
    type Result = Result<Rank, HandshakeError>;
    /// A follower's hello: admitted or refused (the answer goes on its link).
    fn handle(&mut self, msg: AdmitPeer, ctx: &mut Context<Self>) -> Self::Result {
        let conn = ConnId(msg.conn);
        self.links.insert(conn, msg.link);
        self.input(ctx, |core, now| {
            core.handle_admit(conn, &msg.nonce, &msg.hello, now)
        })
    }
}

impl Handler<FromPeer> for ProtocolActor {
    type Result = ();
    /// A follower's report, ack or heartbeat.
    fn handle(&mut self, msg: FromPeer, ctx: &mut Context<Self>) {
        self.input(ctx, |core, now| {
            core.handle_peer_message(ConnId(msg.conn), msg.rank, &msg.msg, now)
        });
    }
}

impl Handler<PeerLost> for ProtocolActor {
    type Result = ();
    /// A follower's connection ended.
    fn handle(&mut self, msg: PeerLost, ctx: &mut Context<Self>) {
        self.input(ctx, |core, now| {
            core.handle_peer_lost(ConnId(msg.conn), msg.rank, &msg.reason, now)
        });
    }
}

impl Handler<LeaderLinked> for ProtocolActor {
    type Result = ();
    /// Admitted by the leader: its link, and its messages read from now on.
    fn handle(&mut self, msg: LeaderLinked, ctx: &mut Context<Self>) {
        self.leader_link = Some(msg.link);
        self.read_leader(msg.reader, ctx);
        self.input(ctx, |core, now| core.handle_leader_linked(now));
    }
}

impl Handler<LeaderLost> for ProtocolActor {
    type Result = ();
    /// The leader's connection ended.
    fn handle(&mut self, msg: LeaderLost, ctx: &mut Context<Self>) {
        self.input(ctx, |core, now| core.handle_leader_lost(&msg.reason, now));
    }
}

impl Handler<ShardDone> for ProtocolActor {
    type Result = ();
    /// This rank's shard of a task is done.
    fn handle(&mut self, msg: ShardDone, ctx: &mut Context<Self>) {
        self.input(ctx, |core, now| {
            core.handle_shard_done(msg.task, msg.result, now)
        });
    }
}

impl Handler<LayersCopied> for ProtocolActor {
    type Result = ();
    /// This rank's store copied more layers of a layerwise load.
    fn handle(&mut self, msg: LayersCopied, ctx: &mut Context<Self>) {
        self.input(ctx, |core, now| {
            core.handle_layers_copied(msg.task, msg.layers_ready, now)
        });
    }
}

impl Handler<GetStatus> for ProtocolActor {
    type Result = MessageResult<GetStatus>;
    /// Status for `/status` and `/readyz`.
    fn handle(&mut self, _: GetStatus, _: &mut Context<Self>) -> Self::Result {
        MessageResult(AgentStatus {
            rank: self.core.status(),
            pid: std::process::id(),
        })
    }
}

impl Handler<Drain> for ProtocolActor {
    type Result = ResponseFuture<()>;
    /// Seal the open step (leader) before a shutdown; done when sealed (or not needed).
    fn handle(&mut self, _: Drain, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        let call = self.call(tx, None, false);
        self.input(ctx, |core, now| core.handle_drain(call, now));
        Box::pin(async move {
            match rx.await {
                Ok(Answered::Reply(EngineReply::Frame(f))) => tracing::info!(
                    step = f.step.0,
                    outcomes = f.finished.len(),
                    "drained: open step sealed"
                ),
                Ok(Answered::Reply(EngineReply::Error(e))) => {
                    tracing::warn!(error = %e, "drain could not seal the open step")
                }
                _ => {}
            }
        })
    }
}

impl Handler<LogHealth> for ProtocolActor {
    type Result = ();
    /// How the log answers this rank: readiness, or the end of the epoch for a lost stream.
    fn handle(&mut self, msg: LogHealth, ctx: &mut Context<Self>) {
        self.input(ctx, |core, now| core.handle_log_health(msg.0, now));
    }
}

impl Handler<StopEpoch> for ProtocolActor {
    type Result = ();
    /// End this epoch's protocol.
    fn handle(&mut self, msg: StopEpoch, ctx: &mut Context<Self>) {
        self.sync_metrics();
        self.input(ctx, |core, _| core.handle_stop(&msg.reason));
        tracing::info!(reason = %msg.reason, "protocol actor stopping");
        ctx.stop();
    }
}
