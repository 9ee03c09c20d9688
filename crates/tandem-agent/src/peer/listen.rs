//! The leader's listener: every follower connects here and proves it belongs to the group.
//!
//! For each connection: send `Challenge` with a fresh random nonce, read `Hello` within the
//! handshake deadline, let the `ProtocolActor` check it (version, group, fingerprint, secret,
//! epoch, rank) and either answer `Welcome` and forward every later message to the actor, or
//! answer `Refused { reason }` and close. Refusals are logged with the reason, never with the
//! secret or the proof.

use std::sync::atomic::{AtomicU64, Ordering};

use actix::Addr;
use rand::RngCore;
use tandem_proto::wire::Message;
use tokio::net::TcpListener;

use crate::peer::io::{write_message, MessageReader};
use crate::peer::link::PeerLink;
use crate::protocol::{AdmitPeer, FromPeer, PeerLost, ProtocolActor};
use crate::router::Router;

/// Connection ids, unique within the process.
static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// Accept followers forever (until the actor system stops); each connection is handed to the
/// protocol actor current when it arrives.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    handshake_timeout_ms: u64,
    max_frame_bytes: usize,
) {
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Some(actor) = router.current() else {
            tracing::debug!(peer = %addr, "connection between epochs closed");
            continue;
        };
        actix_rt::spawn(async move {
            if let Err(reason) =
                handshake(stream, actor, handshake_timeout_ms, max_frame_bytes).await
            {
                tracing::warn!(peer = %addr, %reason, "peer not admitted");
            }
        });
    }
}

async fn handshake(
    stream: tokio::net::TcpStream,
    actor: Addr<ProtocolActor>,
    handshake_timeout_ms: u64,
    max_frame_bytes: usize,
) -> Result<(), String> {
    let (read_half, mut write_half) = stream.into_split();
    let mut reader = MessageReader::new(read_half, max_frame_bytes);
    let mut nonce = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    write_message(
        &mut write_half,
        &Message::Challenge { nonce },
        max_frame_bytes,
    )
    .await
    .map_err(|e| e.to_string())?;
    let hello = match reader
        .next_within(handshake_timeout_ms)
        .await
        .map_err(|e| e.to_string())?
    {
        Message::Hello(h) => h,
        other => return Err(format!("expected hello, got {}", other.kind())),
    };
    let claimed_rank = hello.rank;
    // The link exists before admission so that admission, registration and the `Welcome` (or
    // `Refused`) answer are one step in the actor. A loss report carries the connection id so
    // that the actor ignores it unless this connection is the rank's admitted one.
    let conn = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
    let lost = actor.clone();
    let link = PeerLink::spawn(write_half, max_frame_bytes, move |reason| {
        lost.do_send(PeerLost {
            rank: claimed_rank,
            conn,
            reason,
        })
    });
    let admitted = actor
        .send(AdmitPeer {
            nonce,
            hello,
            link,
            conn,
        })
        .await
        .map_err(|e| format!("protocol actor unavailable: {e}"))?;
    let rank = match admitted {
        Ok(rank) => rank,
        Err(reason) => return Err(format!("refused rank {claimed_rank}: {reason}")),
    };
    loop {
        match reader.next().await {
            Ok(msg) => actor.do_send(FromPeer { rank, conn, msg }),
            Err(e) => {
                actor.do_send(PeerLost {
                    rank,
                    conn,
                    reason: e.to_string(),
                });
                return Ok(());
            }
        }
    }
}
