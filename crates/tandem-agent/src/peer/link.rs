//! The sending side of one peer connection: written at once by the sender, queued only when
//! the socket would block.
//!
//! Owns the write half of a TCP stream. Messages are encoded once by the sender (a frame
//! broadcast to every follower is encoded once and shared). [`PeerLink::send_encoded`] writes
//! the bytes to the socket from the caller, with a non-blocking write, when nothing is queued
//! before them; whatever the socket does not take (it would block, or took part) is queued, and
//! a writer task writes the queue in order when the socket is writable again. So the leader's
//! fan-out is one pass of `write` calls from the place that sealed the frame, with no task
//! switch per follower and no allocation per follower, and bytes never overtake one another.
//!
//! A write error is reported once, through the `on_close` callback, by the writer task (the
//! same path whether the direct write or the queued one failed); later messages are dropped.
//! It never reconnects: a connection lost inside an epoch is a rank failure. When every handle
//! is dropped, the writer writes what is queued, then the write half is shut down.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tandem_proto::wire::codec::{encode_checked, CodecError};
use tandem_proto::wire::Message;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Notify;

/// A handle to write messages on one peer connection. Cloning shares the connection; the
/// connection is closed (after its queue is written) when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct PeerLink {
    handle: Arc<Handle>,
    max_frame_bytes: usize,
}

/// What every clone of one link shares; dropping it releases the writer.
#[derive(Debug)]
struct Handle {
    shared: Arc<Shared>,
}

/// What the handles and the writer task share.
#[derive(Debug)]
struct Shared {
    stream: OwnedWriteHalf,
    state: Mutex<State>,
    /// Wakes the writer task: bytes queued, a failure to report, or the handles released.
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// Messages not fully written, in order; `at` bytes of the front one are written.
    queue: VecDeque<Queued>,
    /// The first write error; the writer reports it, and nothing is written after it.
    failed: Option<String>,
    /// Every handle is gone: write the queue, then end.
    released: bool,
}

#[derive(Debug)]
struct Queued {
    bytes: Arc<Vec<u8>>,
    at: usize,
}

/// What one non-blocking write pass left to do.
enum Wrote {
    /// Every byte was written.
    All,
    /// The socket would block after `at` bytes.
    Blocked(usize),
    /// The socket failed.
    Failed(String),
}

/// Write `bytes[at..]` without blocking, as far as the socket takes it.
fn write_some(stream: &OwnedWriteHalf, bytes: &[u8], mut at: usize) -> Wrote {
    while at < bytes.len() {
        match stream.try_write(&bytes[at..]) {
            Ok(0) => return Wrote::Failed("write failed: the socket took no bytes".into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Wrote::Blocked(at),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Wrote::Failed(format!("write failed: {e}")),
        }
    }
    Wrote::All
}

impl Shared {
    /// The state; a poisoned lock still holds consistent data (every update is one assignment
    /// or one queue operation), so it is used as it is.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.state().released = true;
        self.shared.wake.notify_one();
    }
}

/// What the writer task does next.
enum Next {
    Report(String),
    AwaitWritable,
    AwaitWork,
    End,
}

impl PeerLink {
    /// Take over `write_half` and start its writer task (on the current actix arbiter).
    /// `on_close` runs once, with the reason, when the connection can no longer be written
    /// (the task then ends).
    pub fn spawn(
        write_half: OwnedWriteHalf,
        max_frame_bytes: usize,
        on_close: impl FnOnce(String) + 'static,
    ) -> PeerLink {
        let shared = Arc::new(Shared {
            stream: write_half,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        });
        actix_rt::spawn(writer(shared.clone(), on_close));
        PeerLink {
            handle: Arc::new(Handle { shared }),
            max_frame_bytes,
        }
    }

    /// Encode and write (or queue) one message.
    ///
    /// # Errors
    /// [`CodecError::TooLarge`] past the frame limit. A closed connection is not an error here:
    /// its loss is reported once, by the reader or writer task.
    pub fn send(&self, msg: &Message) -> Result<(), CodecError> {
        let bytes = encode_checked(msg, self.max_frame_bytes)?;
        self.send_encoded(&Arc::new(bytes));
        Ok(())
    }

    /// Write bytes already encoded (a frame shared between followers): at once when nothing
    /// is queued before them and the socket takes them, else queued behind what is. Never
    /// blocks and never allocates unless the socket would block.
    pub fn send_encoded(&self, bytes: &Arc<Vec<u8>>) {
        let shared = &self.handle.shared;
        let mut state = shared.state();
        if state.failed.is_some() {
            return;
        }
        if !state.queue.is_empty() {
            state.queue.push_back(Queued {
                bytes: bytes.clone(),
                at: 0,
            });
            return;
        }
        match write_some(&shared.stream, bytes, 0) {
            Wrote::All => return,
            Wrote::Blocked(at) => state.queue.push_back(Queued {
                bytes: bytes.clone(),
                at,
            }),
            Wrote::Failed(reason) => state.failed = Some(reason),
        }
        drop(state);
        shared.wake.notify_one();
    }
}

/// The writer task: writes what the senders queued when the socket is writable again, reports
/// the first failure, and ends once every handle is gone and the queue is written.
async fn writer(shared: Arc<Shared>, on_close: impl FnOnce(String)) {
    loop {
        let next = {
            let mut state = shared.state();
            loop {
                if let Some(reason) = &state.failed {
                    break Next::Report(reason.clone());
                }
                let Some(front) = state.queue.front_mut() else {
                    break if state.released {
                        Next::End
                    } else {
                        Next::AwaitWork
                    };
                };
                match write_some(&shared.stream, &front.bytes, front.at) {
                    Wrote::All => drop(state.queue.pop_front()),
                    Wrote::Blocked(at) => {
                        front.at = at;
                        break Next::AwaitWritable;
                    }
                    Wrote::Failed(reason) => state.failed = Some(reason),
                }
            }
        };
        match next {
            Next::Report(reason) => return on_close(reason),
            Next::End => return,
            Next::AwaitWork => shared.wake.notified().await,
            Next::AwaitWritable => {
                if let Err(e) = shared.stream.writable().await {
                    shared.state().failed = Some(format!("write failed: {e}"));
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
