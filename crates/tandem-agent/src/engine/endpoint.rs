//! The engine socket server. One request at a time per connection, each answered once, in
//! order, under the call id the request named (a bare request without one is answered bare).
//!
//! A malformed request is answered with `BadRequest` under [`CallId::NONE`] (its own id cannot
//! be read from a body that does not decode) and the connection closes (the byte stream cannot
//! be trusted after a bad length); an engine disconnect is logged and reported to the
//! `ProtocolActor`, which counts it as the engine's failure.

use std::path::{Path, PathBuf};

use actix::Addr;
use tandem_client::api::{AgentError, CallId, EngineReply, EngineRequest};
use tandem_client::wire::{check_len, decode_call, encode, encode_call, WireError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;

use crate::protocol::{EngineCall, EngineDisconnected};
use crate::router::Router;
use crate::store_actor::{RegisterBuffer, StoreActor};

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// Creating the socket's directory or binding failed.
    #[error("cannot listen on engine socket {path}: {source}")]
    Bind {
        /// The socket path.
        path: String,
        /// The IO error.
        source: std::io::Error,
    },
}

/// Bind the engine socket at `path` (a stale file from a dead agent is removed first).
///
/// # Errors
/// [`EndpointError::Bind`].
pub fn bind(path: &Path) -> Result<UnixListener, EndpointError> {
    let err = |source| EndpointError::Bind {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    UnixListener::bind(path).map_err(err)
}

/// Serve engine connections until the actor system stops.
pub async fn serve(
    listener: UnixListener,
    socket: PathBuf,
    router: Router,
    store: Addr<StoreActor>,
) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let (router, store) = (router.clone(), store.clone());
                actix_rt::spawn(async move {
                    let mut attached = false;
                    let reason = match serve_one(stream, &router, &store, &mut attached).await {
                        Ok(()) => "engine closed the connection".to_string(),
                        Err(e) => e.to_string(),
                    };
                    if let Some(p) = router.current() {
                        p.do_send(EngineDisconnected { reason, attached });
                    }
                });
            }
            Err(e) => {
                tracing::warn!(socket = %socket.display(), error = %e, "engine accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

async fn serve_one(
    mut stream: UnixStream,
    router: &Router,
    store: &Addr<StoreActor>,
    attached: &mut bool,
) -> Result<(), WireError> {
    let mut payload = Vec::new();
    loop {
        let mut header = [0u8; 4];
        match stream.read_exact(&mut header).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let len = match check_len(header) {
            Ok(len) => len,
            Err(e) => {
                reply(&mut stream, Some(CallId::NONE), &bad_request(&e)).await?;
                return Err(e);
            }
        };
        // Grow the buffer as bytes arrive, never to the claimed length up front: a header that
        // claims the limit and then idles costs nothing.
        payload.clear();
        let got = (&mut stream)
            .take(len as u64)
            .read_to_end(&mut payload)
            .await?;
        if got < len {
            return Err(WireError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "engine closed mid-message",
            )));
        }
        let (req, call) = match decode_call::<EngineRequest>(&payload) {
            Ok(r) => r,
            Err(e) => {
                reply(&mut stream, Some(CallId::NONE), &bad_request(&e)).await?;
                return Err(e);
            }
        };
        let hello = matches!(req, EngineRequest::Hello { .. });
        let answer = route(req, router, store).await;
        *attached |= hello && matches!(answer, EngineReply::Welcome { .. });
        reply(&mut stream, call, &answer).await?;
    }
}

async fn route(req: EngineRequest, router: &Router, store: &Addr<StoreActor>) -> EngineReply {
    let unavailable = |e: actix::MailboxError| {
        EngineReply::Error(AgentError::NotReady {
            reason: format!("agent is restarting: {e}"),
        })
    };
    match req {
        EngineRequest::RegisterBuffer {
            path,
            size_bytes,
            page_size_bytes,
        } => {
            match store
                .send(RegisterBuffer {
                    path,
                    size_bytes,
                    page_size_bytes,
                })
                .await
            {
                Ok(Ok(pages)) => EngineReply::Registered { pages },
                Ok(Err(e)) => EngineReply::Error(e),
                Err(e) => unavailable(e),
            }
        }
        req => {
            let Some(protocol) = router.current() else {
                return EngineReply::Error(AgentError::NotReady {
                    reason: "the agent is between epochs".into(),
                });
            };
            let (tx, rx) = oneshot::channel();
            protocol.do_send(EngineCall { req, reply: tx });
            rx.await.unwrap_or_else(|_| {
                EngineReply::Error(AgentError::NotReady {
                    reason: "agent is restarting".into(),
                })
            })
        }
    }
}

fn bad_request(e: &WireError) -> EngineReply {
    EngineReply::Error(AgentError::BadRequest {
        reason: e.to_string(),
    })
}

/// Write `answer` under `call` (bare when the request named no call).
async fn reply(
    stream: &mut UnixStream,
    call: Option<CallId>,
    answer: &EngineReply,
) -> Result<(), WireError> {
    let bytes = match call {
        Some(call) => encode_call(answer, call)?,
        None => encode(answer)?,
    };
    stream.write_all(&bytes).await?;
    Ok(())
}
