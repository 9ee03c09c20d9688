//! The leader's KV cache event stream: publishes, it never decides.
//!
//! What is published is `tandem_core::CacheEventDeriver`'s fold of the leader's sealed frames
//! (a block is stored only once a sealed frame revealed its store's `Ok` outcome); this module
//! only numbers, encodes, sends and keeps the batches for replay. It must never derive an
//! event itself, and never block the protocol actor (batches go through an unbounded channel
//! to one tokio task).
//!
//! - [`wire`]: vLLM's msgpack batch (`KVEventBatch` of `BlockStored` / `BlockRemoved` /
//!   `AllBlocksCleared`), pure.
//! - [`publisher`]: the ZeroMQ PUB and ROUTER sockets, the sequence numbers (reserved in Redis,
//!   so they never go back across restarts), the bounded replay buffer, the metrics.
//! - [`http`]: `GET /index`, the leader's group index in the stream's terms.
//! - [`tap`]: what the protocol actor holds on rank 0: the deriver and the sink.

pub mod http;
pub mod publisher;
pub mod tap;
pub mod wire;

pub use publisher::{start, EventMetrics, EventSink, EventsError};
pub use tap::EventTap;
