//! The frame ring: sealed frames in shared memory, so that an engine reads `frame(s)` without
//! a socket round trip (issue 15).
//!
//! Each agent creates one ring (a memfd, [`RingWriter`]) and hands its descriptor to every
//! engine that asks (`EngineRequest::FrameRing`, answered with the descriptor by `SCM_RIGHTS`);
//! the engine maps it read only ([`RingReader`]). After every input of its rank core the agent
//! publishes each frame a `frame(s)` request would now be answered with (sealed on the leader,
//! received on a follower, with the rank's frame-0 filter applied), into the slot of its step,
//! and wakes the readers through the ring's futex word. A new epoch resets the ring; an epoch
//! that failed or stopped closes it.
//!
//! **Why a read is never torn or stale.** Every slot carries a seqlock (odd while the writer
//! changes it), its epoch and its step; a reader copies a slot out and keeps the copy only when
//! the seqlock did not move, the slot names the epoch and step asked for, the header still
//! names that epoch (a reset or close in between sends the reader to the socket) and the step
//! is still retained. The ring is a transport, not a rule: whatever it cannot answer (a frame
//! not published by the deadline, another epoch, a step its slot no longer holds or the agent
//! no longer retains, a frame bigger than a slot) is asked on the socket, whose answer is the
//! rank core's, so `LeaderBehind`, `FrameExpired`, `StaleEpoch` and `NotReady` are exactly
//! today's. A reader waiting on the futex checks the agent's socket every
//! [`reader::WAIT_SLICE`], so a dead agent is a typed error by the deadline.
//!
//! - [`layout`]: the bytes both sides map.
//! - [`writer`]: the agent's side.
//! - [`reader`]: the engine's side.

pub mod layout;
pub mod reader;
pub mod writer;

pub use layout::Geometry;
pub use reader::{Lookup, RingReader, Waited};
pub use writer::RingWriter;

/// Why a ring could not be made or mapped.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The agent could not create its ring.
    #[error("cannot create the frame ring: {reason}")]
    Create {
        /// The system's error.
        reason: String,
    },
    /// The engine could not map the ring's descriptor.
    #[error("cannot map the frame ring: {reason}")]
    Map {
        /// The system's error.
        reason: String,
    },
    /// The descriptor is not a ring this build can read.
    #[error("the frame ring's layout is not this build's: {reason}")]
    Layout {
        /// What differs.
        reason: String,
    },
}

#[cfg(test)]
mod tests;
