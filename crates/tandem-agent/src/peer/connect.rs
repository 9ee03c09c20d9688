//! A follower's connection to the leader.
//!
//! Connect (retrying while the leader starts, up to a deadline), answer the leader's
//! `Challenge` with a `Hello` built by the sans-IO `Membership`, and wait for `Welcome` or
//! `Refused`. After admission the connection's reader and writer go to the `ProtocolActor`,
//! which reads every message from the leader itself; the end of the connection is reported once
//! and never silently re-established.

use std::time::{Duration, Instant};

use actix::Addr;
use tandem_proto::ids::Rank;
use tandem_proto::wire::handshake::{HandshakeError, Membership};
use tandem_proto::wire::Message;
use tokio::net::TcpStream;

use crate::peer::io::{write_message, MessageReader, PeerIoError};
use crate::peer::link::PeerLink;
use crate::protocol::{LeaderLinked, LeaderLost, ProtocolActor};

/// Why a follower could not join its leader.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// No connection within the deadline.
    #[error("cannot reach the leader at {addr} within {waited_ms} ms: {last}")]
    Unreachable {
        /// The leader's address.
        addr: String,
        /// How long it tried, milliseconds.
        waited_ms: u64,
        /// The last connect error.
        last: String,
    },
    /// The leader refused this rank (names the differing field).
    #[error("the leader refused rank {rank}: {reason}")]
    Refused {
        /// This rank.
        rank: Rank,
        /// The leader's reason.
        reason: HandshakeError,
    },
    /// The handshake broke off.
    #[error("handshake with the leader failed: {0}")]
    Io(#[from] PeerIoError),
    /// The leader answered out of turn.
    #[error("handshake with the leader failed: expected {expected}, got {got}")]
    Unexpected {
        /// What the handshake expected.
        expected: &'static str,
        /// What arrived.
        got: &'static str,
    },
}

/// Join the leader at `addr` as `rank`; on success the connection is handed to `actor`.
///
/// # Errors
/// A [`JoinError`]; the caller treats it as fatal for this rank.
pub async fn join(
    addr: String,
    membership: Membership,
    rank: Rank,
    actor: Addr<ProtocolActor>,
    connect_timeout_ms: u64,
    handshake_timeout_ms: u64,
    max_frame_bytes: usize,
) -> Result<(), JoinError> {
    let started = Instant::now();
    let stream = loop {
        match TcpStream::connect(&addr).await {
            Ok(s) => break s,
            Err(e) if started.elapsed() >= Duration::from_millis(connect_timeout_ms) => {
                return Err(JoinError::Unreachable {
                    addr,
                    waited_ms: started.elapsed().as_millis() as u64,
                    last: e.to_string(),
                })
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    };
    let _ = stream.set_nodelay(true);
    let (read_half, mut write_half) = stream.into_split();
    let mut reader = MessageReader::new(read_half, max_frame_bytes);
    let nonce = match reader.next_within(handshake_timeout_ms).await? {
        Message::Challenge { nonce } => nonce,
        other => {
            return Err(JoinError::Unexpected {
                expected: "challenge",
                got: other.kind(),
            })
        }
    };
    let hello = Message::Hello(membership.hello(&nonce, rank));
    write_message(&mut write_half, &hello, max_frame_bytes).await?;
    match reader.next_within(handshake_timeout_ms).await? {
        Message::Welcome { .. } => {}
        Message::Refused { reason } => return Err(JoinError::Refused { rank, reason }),
        other => {
            return Err(JoinError::Unexpected {
                expected: "welcome",
                got: other.kind(),
            })
        }
    }
    let lost = actor.clone();
    let link = PeerLink::spawn(write_half, max_frame_bytes, move |reason| {
        lost.do_send(LeaderLost { reason })
    });
    // The actor reads the leader's messages itself: a frame goes from the socket to the core
    // with no task or mailbox between them.
    actor.do_send(LeaderLinked { link, reader });
    Ok(())
}
