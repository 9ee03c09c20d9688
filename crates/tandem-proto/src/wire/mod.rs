//! The wire: messages peers exchange, their byte encoding, and the membership handshake
//! (docs/DESIGN.md invariants 4 and 7).
//!
//! Owns bytes in and bytes out. It never opens sockets and never decides group state.

pub mod codec;
pub mod handshake;
pub mod message;

pub use codec::{decode, encode, encode_checked, CodecError, HEADER_LEN, MAGIC, WIRE_VERSION};
pub use handshake::{
    hello_proof, GroupSecret, HandshakeError, Membership, Nonce, Proof, PROTOCOL_VERSION,
};
pub use message::{Ack, Heartbeat, Hello, Message, ShardReport};
