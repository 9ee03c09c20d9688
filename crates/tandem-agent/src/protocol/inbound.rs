//! A follower's reading of its leader's connection, inside the `ProtocolActor`.
//!
//! The read runs as a future of the actor's own context: when a frame arrives, the socket's
//! readiness wakes the actor and the message goes to the core in the same poll, with no reader
//! task and no mailbox message between them (one task switch and one queued envelope fewer per
//! frame on every follower). The first read error (the leader closed, a bad message, a failed
//! socket) is the core's `handle_leader_lost`, once; the read ends with the actor.

use actix::{ActorFutureExt, AsyncContext, Context, WrapFuture};
use tokio::net::tcp::OwnedReadHalf;

use super::ProtocolActor;
use crate::peer::io::MessageReader;

impl ProtocolActor {
    /// Read the leader's next message, hand it to the core, and read again.
    pub(super) fn read_leader(
        &mut self,
        mut reader: MessageReader<OwnedReadHalf>,
        ctx: &mut Context<Self>,
    ) {
        let read = async move {
            let got = reader.next().await;
            (reader, got)
        };
        ctx.spawn(
            read.into_actor(self)
                .map(|(reader, got), actor, ctx| match got {
                    Ok(msg) => {
                        actor.input(ctx, |core, now| core.handle_leader_message(msg, now));
                        actor.read_leader(reader, ctx);
                    }
                    Err(e) => {
                        let reason = e.to_string();
                        actor.input(ctx, |core, now| core.handle_leader_lost(&reason, now));
                    }
                }),
        );
    }
}
