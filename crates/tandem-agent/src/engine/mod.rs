//! The engine endpoint: the Unix domain socket through which the local engine reaches its
//! agent.
//!
//! - [`endpoint`]: accepts engine connections, decodes requests, routes them to the
//!   `ProtocolActor` (protocol requests) or the `StoreActor` (buffer registration) and writes
//!   each reply.
//!
//! It carries requests and replies and nothing else: it never decides, never copies block
//! bytes (those move between shared memory and the tiers inside the `StoreActor`).

pub mod endpoint;
