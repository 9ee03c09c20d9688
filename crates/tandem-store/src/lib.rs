//! Tandem's store engine (WIP)
pub mod block;
pub mod buffer;
pub mod checksum;
pub mod disk;
pub mod host;
pub mod shm;
pub mod tier;
