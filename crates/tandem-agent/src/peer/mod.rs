//! The TCP peer transport between the leader (rank 0) and its followers.
//!
//! - [`io`]: reading and writing whole protocol messages on a byte stream.
//! - [`link`]: the writer of one connection: at once from the sender, queued only when the
//!   socket would block.
//! - [`listen`]: the leader's listener: challenge, check the hello, admit or refuse.
//! - [`connect`]: a follower's connection to the leader and its side of the handshake.
//!
//! This module moves bytes and runs the handshake's IO. Every decision (admit, refuse, what a
//! message means) is made by the rank's core (`tandem_core::RankCore`, with the sans-IO
//! `Membership`, `Leader` or `Follower`), which the `ProtocolActor` drives.

pub mod connect;
pub mod io;
pub mod link;
pub mod listen;
