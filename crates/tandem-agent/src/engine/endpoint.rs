//! The engine socket server. One request at a time per connection, each answered once, in
//! order, under the call id the request named (a bare request without one is answered bare).
//! A request for the `ProtocolActor` (every one but a hello, `FrameRing` and the store's) hands
//! the actor the socket with it, and the actor writes the reply itself when the socket takes it
//! whole (`protocol::DirectReply`): the reply moves in the same turn as the core's output, with
//! no task hop first. This task waits for that call's answer before it reads the next request,
//! so the socket has one writer at a time; what the actor could not write, it writes.
//!
//! A malformed request is answered with `BadRequest` under [`CallId::NONE`] (its own id cannot
//! be read from a body that does not decode) and the connection closes (the byte stream cannot
//! be trusted after a bad length); an engine disconnect is logged and reported to the
//! `ProtocolActor`, which counts it as the engine's failure.
//!
//! Bytes are read with `recvmsg` so that a page pool's descriptor passed with a
//! `RegisterBuffer` (`SCM_RIGHTS`, see `tandem_client::fdpass`) reaches the `StoreActor` with
//! that request; a descriptor that arrives with any other request is closed. The answer to
//! `FrameRing` goes the other way: the rank's frame ring's descriptor travels with its bytes.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix::Addr;
use tandem_client::api::{AgentError, BufferSource, CallId, EngineReply, EngineRequest};
use tandem_client::fdpass::{recv_with_fds, send_with_fd, FdLedger, MessageFds};
use tandem_client::wire::{decode_call, encode, encode_call, split_message, WireError};
use tokio::io::Interest;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;

use crate::protocol::ring::SharedRing;
use crate::protocol::{Answered, DirectReply, EngineCall, EngineDisconnected};
use crate::router::Router;
use crate::store_actor::{PoolSource, RegisterBuffer, RegisterDevice, StoreActor};

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
    ring: Option<SharedRing>,
) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let (router, store, ring) = (router.clone(), store.clone(), ring.clone());
                actix_rt::spawn(async move {
                    let mut attached = false;
                    let reason =
                        match serve_one(stream, &router, &store, &ring, &mut attached).await {
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
    stream: UnixStream,
    router: &Router,
    store: &Addr<StoreActor>,
    ring: &Option<SharedRing>,
    attached: &mut bool,
) -> Result<(), WireError> {
    // Shared with the protocol actor, which writes a reply itself while this task waits for
    // the call's answer (`DirectReply`): one writer at a time, as requests are one at a time.
    let stream = Arc::new(stream);
    let mut inbound = Inbound::new();
    loop {
        let (payload, fds) = match inbound.next(&stream).await {
            Ok(Some(message)) => message,
            Ok(None) => return Ok(()),
            Err(e @ WireError::TooLarge { .. }) => {
                reply(&stream, Some(CallId::NONE), &bad_request(&e)).await?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let (req, call) = match decode_call::<EngineRequest>(&payload) {
            Ok(r) => r,
            Err(e) => {
                reply(&stream, Some(CallId::NONE), &bad_request(&e)).await?;
                return Err(e);
            }
        };
        if matches!(req, EngineRequest::FrameRing) {
            reply_ring(&stream, call, ring).await?;
            continue;
        }
        let hello = matches!(
            req,
            EngineRequest::Hello { .. } | EngineRequest::HelloVersioned { .. }
        );
        // A hello's answer is read here (it attaches the connection), so it is not written
        // by the actor.
        let direct = (!hello).then(|| DirectReply {
            stream: stream.clone(),
            call,
        });
        match route(req, fds, router, store, direct).await {
            Answered::Written => {}
            Answered::Rest(bytes) => write_all(&stream, &bytes).await?,
            Answered::Reply(answer) => {
                *attached |= hello && matches!(answer, EngineReply::Welcome { .. });
                reply(&stream, call, &answer).await?;
            }
        }
    }
}

/// Bytes read from the engine socket at a time.
const READ_CHUNK: usize = 64 * 1024;

/// The reading side of one engine connection: whole requests, each with the descriptors that
/// arrived with it. Every byte is read with `recvmsg`, so a descriptor is never dropped by a
/// plain read, and each one goes to the request it came with ([`FdLedger`]).
struct Inbound {
    /// Bytes read and not yet part of a whole request (the buffer grows as bytes arrive, never
    /// to a header's claimed length up front).
    buf: Vec<u8>,
    /// Stream position of `buf[0]`.
    start: u64,
    fds: FdLedger,
    chunk: Box<[u8]>,
}

impl Inbound {
    fn new() -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            fds: FdLedger::default(),
            chunk: vec![0u8; READ_CHUNK].into_boxed_slice(),
        }
    }

    /// The next whole request's payload and descriptors; `None` when the engine closed the
    /// connection between requests.
    ///
    /// # Errors
    /// [`WireError::TooLarge`] as soon as a header claims more than the limit;
    /// [`WireError::Io`] when the socket fails or closes mid-request.
    async fn next(
        &mut self,
        stream: &UnixStream,
    ) -> Result<Option<(Vec<u8>, MessageFds)>, WireError> {
        loop {
            if let Some((range, used)) = split_message(&self.buf)? {
                let payload = self.buf[range].to_vec();
                let fds = self.fds.take(self.start, self.start + used as u64);
                self.buf.drain(..used);
                self.start += used as u64;
                return Ok(Some((payload, fds)));
            }
            let chunk = &mut self.chunk;
            let got = stream
                .async_io(Interest::READABLE, || recv_with_fds(stream, chunk))
                .await?;
            if got.bytes == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(WireError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "engine closed mid-message",
                )));
            }
            self.buf.extend_from_slice(&self.chunk[..got.bytes]);
            let end = self.start + self.buf.len() as u64;
            self.fds.received(end, got);
        }
    }
}

/// The pool a `RegisterBuffer` names, or why it cannot be had: a request by descriptor must
/// bring exactly one.
fn pool_source(source: BufferSource, mut fds: MessageFds) -> Result<PoolSource, AgentError> {
    match source {
        BufferSource::Path(path) => Ok(PoolSource::Path(path)),
        BufferSource::Descriptor if fds.truncated || fds.fds.len() != 1 => {
            Err(AgentError::Buffer {
                reason: format!(
                    "register_buffer by descriptor arrived with {}{} descriptors; exactly one expected",
                    fds.fds.len(),
                    if fds.truncated { " (more were cut)" } else { "" }
                ),
            })
        }
        BufferSource::Descriptor => Ok(PoolSource::Descriptor(fds.fds.remove(0))),
    }
}

/// Carry out one request: the store's own requests here, every other by the protocol actor,
/// which may write the reply itself to `direct` ([`Answered::Written`]).
async fn route(
    req: EngineRequest,
    fds: MessageFds,
    router: &Router,
    store: &Addr<StoreActor>,
    direct: Option<DirectReply>,
) -> Answered {
    let unavailable = |e: actix::MailboxError| {
        EngineReply::Error(AgentError::NotReady {
            reason: format!("agent is restarting: {e}"),
        })
    };
    let is_register_fd = matches!(
        req,
        EngineRequest::RegisterBuffer {
            source: BufferSource::Descriptor,
            ..
        }
    );
    if !fds.fds.is_empty() && !is_register_fd {
        // Descriptors no request asked for: closed here (dropped), the request goes on.
        tracing::warn!(
            descriptors = fds.fds.len(),
            "engine passed descriptors with a request that takes none; closed them"
        );
    }
    let reply = match req {
        EngineRequest::RegisterBuffer {
            source,
            size_bytes,
            page_size_bytes,
        } => match pool_source(source, fds) {
            Err(e) => EngineReply::Error(e),
            Ok(source) => match store
                .send(RegisterBuffer {
                    source,
                    size_bytes,
                    page_size_bytes,
                })
                .await
            {
                Ok(Ok(pages)) => EngineReply::Registered { pages },
                Ok(Err(e)) => EngineReply::Error(e),
                Err(e) => unavailable(e),
            },
        },
        EngineRequest::RegisterDevice {
            ordinal,
            ipc_handle,
            pages,
            page_size_bytes,
        } => match store
            .send(RegisterDevice {
                ordinal,
                ipc_handle,
                pages,
                page_size_bytes,
            })
            .await
        {
            Ok(Ok(pages)) => EngineReply::Registered { pages },
            Ok(Err(e)) => EngineReply::Error(e),
            Err(e) => unavailable(e),
        },
        req => {
            let Some(protocol) = router.current() else {
                return Answered::Reply(EngineReply::Error(AgentError::NotReady {
                    reason: "the agent is between epochs".into(),
                }));
            };
            let (tx, rx) = oneshot::channel();
            protocol.do_send(EngineCall {
                req,
                reply: tx,
                direct,
            });
            return rx.await.unwrap_or_else(|_| {
                Answered::Reply(EngineReply::Error(AgentError::NotReady {
                    reason: "agent is restarting".into(),
                }))
            });
        }
    };
    Answered::Reply(reply)
}

fn bad_request(e: &WireError) -> EngineReply {
    EngineReply::Error(AgentError::BadRequest {
        reason: e.to_string(),
    })
}

/// Answer `FrameRing`: the ring's geometry, with its descriptor on the reply's first byte; an
/// agent without a ring refuses (the engine reads frames on the socket).
async fn reply_ring(
    stream: &UnixStream,
    call: Option<CallId>,
    ring: &Option<SharedRing>,
) -> Result<(), WireError> {
    // A duplicate of the descriptor, so the lock is not held across the write.
    let held = ring.as_ref().and_then(|r| {
        let ring = r.lock().ok()?;
        let g = ring.geometry();
        Some((ring.fd().try_clone_to_owned(), g))
    });
    let (fd, geometry) = match held {
        Some((Ok(fd), g)) => (fd, g),
        Some((Err(e), _)) => {
            let answer = EngineReply::Error(AgentError::NotReady {
                reason: format!("the frame ring's descriptor cannot be passed: {e}"),
            });
            return reply(stream, call, &answer).await;
        }
        None => {
            let answer = EngineReply::Error(AgentError::NotReady {
                reason: "this agent has no frame ring".into(),
            });
            return reply(stream, call, &answer).await;
        }
    };
    let answer = EngineReply::FrameRing {
        slots: geometry.slots,
        slot_bytes: geometry.slot_bytes,
    };
    let bytes = match call {
        Some(call) => encode_call(&answer, call)?,
        None => encode(&answer)?,
    };
    let sent = stream
        .async_io(Interest::WRITABLE, || {
            send_with_fd(stream, &bytes, fd.as_fd())
        })
        .await?;
    write_all(stream, &bytes[sent..]).await
}

/// Write `answer` under `call` (bare when the request named no call).
async fn reply(
    stream: &UnixStream,
    call: Option<CallId>,
    answer: &EngineReply,
) -> Result<(), WireError> {
    let bytes = match call {
        Some(call) => encode_call(answer, call)?,
        None => encode(answer)?,
    };
    write_all(stream, &bytes).await
}

/// Write all of `bytes` to the (shared) engine socket, waiting for room as needed.
async fn write_all(stream: &UnixStream, mut bytes: &[u8]) -> Result<(), WireError> {
    while !bytes.is_empty() {
        let n = stream
            .async_io(Interest::WRITABLE, || stream.try_write(bytes))
            .await?;
        if n == 0 {
            return Err(WireError::Io(std::io::ErrorKind::WriteZero.into()));
        }
        bytes = &bytes[n..];
    }
    Ok(())
}
