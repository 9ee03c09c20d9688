//! The write-ahead appends of one [`super::RedisLog`], sent in batches: one task takes every
//! append queued since it last ran and sends them as one pipeline.
//!
//! Owns the order of the appends on the wire and their deadline. Each
//! [`crate::CompletionStream::append_step`] encodes its XADD and queues it here (in the order
//! the calls were first polled); the task, at its next turn, takes everything queued (at
//! most [`MAX_BATCH`] per pipeline) and sends it with [`Conn::each`]: one message to the
//! connection, one write, one deadline timer for the batch, and one answer per append, in
//! order (an error reply, such as the fence refusing a stale epoch, fails only its own
//! append). Batches reach the connection in the order they were made, and a batch is sent
//! without waiting for the answer of the one before, so several are in flight on the one
//! multiplexed connection, as single appends were. An append that is alone when the task
//! runs goes out alone: nothing is held back to wait for company.
//!
//! Why: one append per call cost 4 to 8 µs of the client's CPU with 8 or 32 in flight (a
//! deadline timer, the connection's channel message and response timer, and a future polled
//! again on every wake-up of the task that awaits a set of them); a batch pays those once,
//! and the callers only wait on a one-shot channel (about half the CPU per append at 8 and
//! 32 in flight; a task hop more with one in flight). docs/BENCHMARKS.md, "Write-ahead cost
//! (redis)".
//!
//! Every queued append is answered: by its batch's answer, by the batch's
//! [`DurableError::Timeout`] (deadline `op_timeout_ms` from when the batch was sent), or,
//! when the task is gone (its runtime shut down), by [`DurableError::Unavailable`]. An
//! append whose caller gave up (dropped its future) before its batch was made is not sent,
//! as the multiplexed connection does not send a command nobody waits for.

use crate::conn::Conn;
use crate::error::{DurableError, Result};
use redis::{Cmd, Pipeline};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{mpsc, oneshot};

/// The most appends sent in one pipeline.
pub(crate) const MAX_BATCH: usize = 256;

/// The operation name every append's errors carry.
const OP: &str = "append_step";

/// One queued append: its command and where its answer goes.
struct Request {
    cmd: Cmd,
    answer: oneshot::Sender<Result<Option<String>>>,
}

/// The handle the log's clones share: queue an append, read how many batches went out.
#[derive(Clone)]
pub(crate) struct Appender {
    queue: mpsc::UnboundedSender<Request>,
    batches: Arc<AtomicU64>,
    url: String,
}

impl fmt::Debug for Appender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Appender")
            .field("batches", &self.batches.load(Ordering::Relaxed))
            .finish()
    }
}

impl Appender {
    /// Starts the task that sends the appends on `conn` (on the current tokio runtime, the
    /// one that made the connection). The task ends once every handle is dropped and every
    /// batch it sent is answered.
    pub(crate) fn start(conn: Conn) -> Appender {
        let (queue, requests) = mpsc::unbounded_channel();
        let batches = Arc::new(AtomicU64::new(0));
        let url = conn.masked_url();
        tokio::spawn(run(conn, requests, batches.clone()));
        Appender {
            queue,
            batches,
            url,
        }
    }

    /// Queues the XADD `cmd` and waits for its answer (`None`: no stream, the command's
    /// `NOMKSTREAM` held). Queued in the order of the calls' first polls.
    ///
    /// # Errors
    /// The answer's (see [`Conn::each`]); [`DurableError::Unavailable`] when the sending
    /// task is gone.
    pub(crate) async fn append(&self, cmd: Cmd) -> Result<Option<String>> {
        let (answer, answered) = oneshot::channel();
        if self.queue.send(Request { cmd, answer }).is_err() {
            return Err(self.gone());
        }
        answered.await.unwrap_or_else(|_| Err(self.gone()))
    }

    /// Batches sent so far (each one pipeline, one round trip), by every clone.
    pub(crate) fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    fn gone(&self) -> DurableError {
        DurableError::Unavailable {
            url: self.url.clone(),
            op: OP,
            reason: "the task that sends the appends has stopped (its runtime shut down)".into(),
        }
    }
}

/// A batch sent and not yet answered.
type InFlight = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The sending task: at each turn, polls the batches in flight, then makes a batch of
/// everything queued and polls it once (so that it is on the connection's queue before any
/// later batch).
async fn run(conn: Conn, mut requests: mpsc::UnboundedReceiver<Request>, batches: Arc<AtomicU64>) {
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut open = true;
    let mut taken = Vec::with_capacity(MAX_BATCH);
    std::future::poll_fn(|cx: &mut Context<'_>| {
        in_flight.retain_mut(|batch| batch.as_mut().poll(cx).is_pending());
        while open {
            match requests.poll_recv_many(cx, &mut taken, MAX_BATCH) {
                Poll::Ready(0) => open = false,
                Poll::Ready(_) => {
                    let mut batch: InFlight =
                        Box::pin(send(conn.clone(), std::mem::take(&mut taken)));
                    batches.fetch_add(1, Ordering::Relaxed);
                    if batch.as_mut().poll(cx).is_pending() {
                        in_flight.push_back(batch);
                    }
                }
                Poll::Pending => break,
            }
        }
        if open || !in_flight.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
}

/// Sends `requests` as one pipeline and answers each.
async fn send(conn: Conn, requests: Vec<Request>) {
    let mut pipe = Pipeline::with_capacity(requests.len());
    let mut answers = Vec::with_capacity(requests.len());
    for Request { cmd, answer } in requests {
        if !answer.is_closed() {
            pipe.add_command(cmd);
            answers.push(answer);
        }
    }
    if answers.is_empty() {
        return;
    }
    match conn.each::<Option<String>>(OP, &pipe).await {
        Ok(results) => {
            for (answer, result) in answers.into_iter().zip(results) {
                // A caller that gave up meanwhile takes no answer.
                let _ = answer.send(result);
            }
        }
        Err(e) => {
            for answer in answers {
                let _ = answer.send(Err(e.clone()));
            }
        }
    }
}
