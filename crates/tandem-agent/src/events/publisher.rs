//! The ZeroMQ sockets of the event stream, its sequence numbers and its replay buffer.
//!
//! One tokio task owns them: it takes batches from [`EventSink`] in order, reserves one
//! sequence number per batch (in Redis, `LivenessStore::reserve_event_seqs`, so numbers never
//! go back across agent or group restarts; without Redis a counter from 0 in this process),
//! sends `(topic, seq as 8 big-endian bytes, msgpack batch)` on the PUB socket, and keeps the
//! newest `buffer_batches` for replay. A replay request on the ROUTER socket (vLLM's: the
//! start sequence number as 8 big-endian bytes, from a REQ or DEALER socket) is answered with
//! every kept batch from that number on, `(seq, batch)` each, then `(-1, empty)`.
//! While Redis is unreachable batches wait, in order, and are numbered once it answers.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tandem_config::EventsConfig;
use tandem_core::CacheEvent;
use tandem_durable::LivenessStore;
use tandem_proto::Epoch;
use tokio::sync::mpsc;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

pub use tandem_metrics::EventMetrics;

use super::wire::encode_batch;

/// The end-of-replay marker's sequence number: -1 as 8 big-endian bytes.
const END_SEQ: [u8; 8] = [0xff; 8];

/// Why the event stream could not start.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// A socket could not bind its endpoint.
    #[error("cannot bind the events {what} socket to {addr}: {reason}")]
    Bind {
        /// `PUB` or `ROUTER`.
        what: &'static str,
        /// The endpoint (`events.pub_addr` or `events.replay_addr`).
        addr: String,
        /// ZeroMQ's reason.
        reason: String,
    },
    /// `events.buffer_batches` is 0.
    #[error("events.buffer_batches must be at least 1")]
    NoBuffer,
}

/// Where the protocol actor hands batches of events; cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct EventSink(mpsc::UnboundedSender<(Epoch, Vec<CacheEvent>)>);

impl EventSink {
    /// Publish `events` of `epoch` as one batch (nothing when empty). A stopped publisher
    /// drops them, and so does the publisher for an epoch older than one it already published
    /// (a stopping epoch's actor can never add to the next epoch's view).
    pub fn publish(&self, epoch: Epoch, events: Vec<CacheEvent>) {
        if !events.is_empty() {
            let _ = self.0.send((epoch, events));
        }
    }
}

/// Bind the sockets of `cfg` and start the publishing task.
///
/// `seqs`: the Redis log that numbers batches (`None`: a counter in this process);
/// `block_size`: tokens per block, in every `BlockStored`.
///
/// # Errors
/// [`EventsError`]: a socket that cannot bind, an empty buffer.
pub async fn start(
    cfg: &EventsConfig,
    seqs: Option<Arc<dyn LivenessStore>>,
    block_size: u32,
    metrics: EventMetrics,
) -> Result<EventSink, EventsError> {
    if cfg.buffer_batches == 0 {
        return Err(EventsError::NoBuffer);
    }
    let mut publisher = PubSocket::new();
    publisher
        .bind(&cfg.pub_addr)
        .await
        .map_err(|e| EventsError::Bind {
            what: "PUB",
            addr: cfg.pub_addr.clone(),
            reason: e.to_string(),
        })?;
    let (req_tx, req_rx) = mpsc::channel(64);
    let replies = if cfg.replay_addr.is_empty() {
        None
    } else {
        let mut router = RouterSocket::new();
        router
            .bind(&cfg.replay_addr)
            .await
            .map_err(|e| EventsError::Bind {
                what: "ROUTER",
                addr: cfg.replay_addr.clone(),
                reason: e.to_string(),
            })?;
        let (send, mut recv) = router.split();
        // Receiving on its own task: a request is read whole whatever the publisher does.
        actix_rt::spawn(async move {
            while let Ok(m) = recv.recv().await {
                if req_tx.send(m).await.is_err() {
                    break;
                }
            }
        });
        Some(send)
    };
    tracing::info!(publish = %cfg.pub_addr, replay = %cfg.replay_addr, topic = %cfg.topic, "publishing KV cache events");
    let (tx, rx) = mpsc::unbounded_channel();
    let task = Publisher {
        publisher,
        replies,
        topic: Bytes::from(cfg.topic.clone().into_bytes()),
        buffer: VecDeque::new(),
        capacity: cfg.buffer_batches as usize,
        seqs,
        next_local: 0,
        block_size,
        metrics,
        epoch: Epoch(0),
    };
    actix_rt::spawn(task.run(rx, req_rx));
    Ok(EventSink(tx))
}

struct Publisher {
    publisher: PubSocket,
    replies: Option<zeromq::RouterSendHalf>,
    topic: Bytes,
    buffer: VecDeque<(u64, Bytes)>,
    capacity: usize,
    seqs: Option<Arc<dyn LivenessStore>>,
    next_local: u64,
    block_size: u32,
    metrics: EventMetrics,
    /// The newest epoch published.
    epoch: Epoch,
}

impl Publisher {
    async fn run(
        mut self,
        mut batches: mpsc::UnboundedReceiver<(Epoch, Vec<CacheEvent>)>,
        mut requests: mpsc::Receiver<ZmqMessage>,
    ) {
        loop {
            tokio::select! {
                b = batches.recv() => match b {
                    Some((epoch, events)) if epoch >= self.epoch => {
                        self.epoch = epoch;
                        self.publish(events).await
                    }
                    Some((epoch, _)) => tracing::warn!(epoch = epoch.0, newer = self.epoch.0, "KV cache events of an older epoch dropped"),
                    None => break,
                },
                Some(req) = requests.recv() => self.replay(req).await,
            }
        }
    }

    /// The next sequence number: reserved in Redis (retried until it answers), or local.
    async fn next_seq(&mut self) -> u64 {
        let Some(log) = &self.seqs else {
            self.next_local += 1;
            return self.next_local - 1;
        };
        let mut warned = false;
        loop {
            match log.reserve_event_seqs(1).await {
                Ok(seq) => return seq,
                Err(e) => {
                    if !warned {
                        tracing::warn!(error = %e, "cannot number a KV cache event batch; retrying");
                        warned = true;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    async fn publish(&mut self, events: Vec<CacheEvent>) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let payload = Bytes::from(encode_batch(ts, &events, self.block_size));
        let seq = self.next_seq().await;
        let msg = match ZmqMessage::try_from(vec![
            self.topic.clone(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            payload.clone(),
        ]) {
            Ok(m) => m,
            Err(e) => return tracing::error!(error = %e, "empty event message"),
        };
        // PUB drops for subscribers that are not connected or too slow: they replay.
        if let Err(e) = self.publisher.send(msg).await {
            tracing::warn!(error = %e, seq, "KV cache event batch not sent; subscribers can replay it");
        }
        if self.buffer.len() == self.capacity {
            self.buffer.pop_front();
        }
        self.buffer.push_back((seq, payload));
        self.metrics.events.add(events.len() as u64);
        self.metrics.batches.inc();
        self.metrics.last_seq.set(seq as i64);
    }

    async fn replay(&mut self, req: ZmqMessage) {
        let frames = req.into_vec();
        let [identity, delim, start] = frames.as_slice() else {
            return tracing::warn!(
                frames = frames.len(),
                "replay request is not (identity, empty, start seq)"
            );
        };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()) else {
            return tracing::warn!(bytes = start.len(), "replay start seq is not 8 bytes");
        };
        let start = u64::from_be_bytes(start);
        self.metrics.replay_requests.inc();
        let Some(replies) = &mut self.replies else {
            return;
        };
        let reply = |seq: Bytes, payload: Bytes| {
            ZmqMessage::try_from(vec![identity.clone(), delim.clone(), seq, payload])
        };
        for (seq, payload) in self.buffer.iter().filter(|(s, _)| *s >= start) {
            let seq = Bytes::copy_from_slice(&seq.to_be_bytes());
            if let Ok(m) = reply(seq, payload.clone()) {
                if replies.send(m).await.is_err() {
                    return;
                }
            }
        }
        if let Ok(m) = reply(Bytes::from_static(&END_SEQ), Bytes::new()) {
            let _ = replies.send(m).await;
        }
    }
}
