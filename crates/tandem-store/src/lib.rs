//! Tandem's store engine (WIP)
pub mod block;
pub mod buffer;
pub mod checksum;
pub mod disk;
pub mod host;
pub mod index;
pub mod manifest;
pub mod rebuild;
pub mod shm;
pub mod tier;
