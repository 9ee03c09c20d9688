//! The messages the `ProtocolActor` takes: engine requests, peer connection events, status
//! queries and the end of an epoch. Each declares its reply type; the handlers live with the
//! actor.

use std::sync::Arc;

use actix::Message;
use tandem_client::api::{CallId, EngineReply, EngineRequest};
use tandem_proto::ids::Rank;
use tandem_proto::wire::handshake::{HandshakeError, Nonce};
use tandem_proto::wire::{Hello, Message as WireMessage};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

use super::status::AgentStatus;
use crate::peer::io::MessageReader;
use crate::peer::link::PeerLink;

/// One engine request; the answer goes back on `reply` exactly once (possibly later, for a
/// request that waits).
#[derive(Message)]
#[rtype(result = "()")]
pub struct EngineCall {
    /// The request.
    pub req: EngineRequest,
    /// Where the one answer goes.
    pub reply: oneshot::Sender<Answered>,
    /// The engine's socket, when the actor may write the reply itself.
    pub direct: Option<DirectReply>,
}

/// The engine socket a reply may be written to at once, from the place that produced it, and
/// the call id it goes under. Its endpoint waits for the [`Answered`] of this call before it
/// reads the next request, so the actor is the socket's only writer meanwhile.
#[derive(Clone, Debug)]
pub struct DirectReply {
    /// The engine's connection.
    pub stream: Arc<UnixStream>,
    /// The id the request named (`None`: answered bare).
    pub call: Option<CallId>,
}

/// How an [`EngineCall`] was answered.
#[derive(Debug)]
pub enum Answered {
    /// The whole reply is on the engine's socket (written by the actor).
    Written,
    /// The reply's encoded bytes the socket did not take at once, for the endpoint to write.
    Rest(Vec<u8>),
    /// The reply, for the endpoint to encode and write.
    Reply(EngineReply),
}

/// The engine's connection closed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EngineDisconnected {
    /// Why.
    pub reason: String,
    /// Whether that connection said hello (was an engine of some epoch).
    pub attached: bool,
}

/// Leader: a follower answered the challenge; admit it (and send `Welcome`) or refuse it (and
/// send `Refused`). Admission and registration of its link are one step.
#[derive(Message)]
#[rtype(result = "Result<Rank, HandshakeError>")]
pub struct AdmitPeer {
    /// The nonce sent in the challenge.
    pub nonce: Nonce,
    /// The follower's hello.
    pub hello: Hello,
    /// The connection's writer.
    pub link: PeerLink,
    /// The connection's id.
    pub conn: u64,
}

/// Leader: a message from an admitted follower's connection.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FromPeer {
    /// The rank admitted on this connection.
    pub rank: Rank,
    /// The connection's id.
    pub conn: u64,
    /// The message.
    pub msg: WireMessage,
}

/// Leader: a follower's connection ended.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PeerLost {
    /// The rank on that connection.
    pub rank: Rank,
    /// The connection's id (ignored unless it is the rank's admitted connection).
    pub conn: u64,
    /// Why.
    pub reason: String,
}

/// Follower: admitted by the leader; here are the connection's writer and reader (the actor
/// reads the leader's messages from it until the connection ends).
#[derive(Message)]
#[rtype(result = "()")]
pub struct LeaderLinked {
    /// The writer.
    pub link: PeerLink,
    /// The reader, past the handshake.
    pub reader: MessageReader<OwnedReadHalf>,
}

/// Follower: the leader's connection ended (or the join failed).
#[derive(Message)]
#[rtype(result = "()")]
pub struct LeaderLost {
    /// Why.
    pub reason: String,
}

/// The agent's status in this epoch.
#[derive(Message)]
#[rtype(result = "AgentStatus")]
pub struct GetStatus;

/// How the completion log answers this rank's epoch loop (`tandem_core::Effect::LogHealth`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct LogHealth(pub tandem_core::LogHealth);

/// Stop this epoch's protocol (a restart or a shutdown): pending engine waits are answered
/// `NotReady` and the actor stops.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopEpoch {
    /// Why (logged and given to waiting engines).
    pub reason: String,
}

/// SIGTERM: the leader seals its open step, with every start and outcome made durable first,
/// so that followers hold everything decided; then the caller stops the epoch. Followers have
/// nothing to drain. Completes when the frame is sealed (or could not be).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain;
