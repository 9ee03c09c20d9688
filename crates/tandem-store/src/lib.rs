//! Tandem's store engine (WIP)
pub mod bench;
pub mod block;
pub mod buffer;
pub mod checksum;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod disk;
pub mod host;
pub mod index;
pub mod manifest;
pub mod rebuild;
pub mod shm;
pub mod store;
pub mod tier;

pub use block::{BlockHash, Location};
pub use tier::TierKind;
