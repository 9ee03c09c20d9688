//! Tandem's store engine: the data path of every rank.
//!
//! Block shards move between the engine's KV pages (shared memory) and this rank's tiers (host
//! DRAM in a shared-memory slab, then a preallocated file on local disk), with a checksum on
//! every slot verified on every read. It never decides placement: which blocks the group keeps,
//! in which tier, what is evicted, demoted or promoted is the leader's group index
//! (`tandem-core`), whose tier operations every rank applies in order
//! ([`store::Store::apply`]). Nothing here opens sockets, spawns threads or reads clocks (the
//! tier benchmark lives in the `tandem-bench` crate); the agent's StoreActor drives a
//! [`store::Store`].
//!
//! # Layout
//! - [`tier`]: the [`tier::TierSlots`] trait (fixed-size slots written from and read into
//!   byte slices) and the tier names ([`Tier`], defined once in the protocol core, with
//!   latency and capacity).
//! - [`checksum`]: the per-shard checksum (three CRC-32C lanes), computed in the same pass as
//!   the copy.
//! - [`shm`]: file-backed shared memory (create, open, map).
//! - [`buffer`]: engine regions registered by engines, and validated page views.
//! - [`host`]: the host tier, a slab in shared memory that survives an agent restart.
//! - [`disk`]: the disk tier, one preallocated file with positional I/O, each slot staged in
//!   a buffer the tier owns and moved through the [`disk::DiskIo`] seam (where the agent puts
//!   its deadline; [`disk::InlineIo`] by default).
//! - `cuda` (feature `cuda`): the device tier over cudarc, loaded dynamically.
//! - `device_region` (feature `cuda`): an engine's KV cache in GPU memory, opened from its
//!   CUDA IPC handle, copied page by page straight to and from host slices.
//! - [`layers`]: layerwise loads, one layer of every block at a time, checksums verified
//!   before the last layer is signalled.
//! - [`manifest`]: a rank's record of its shards, saved in turn into two copies (a torn save
//!   leaves the other).
//! - [`lock`]: [`lock::TierLock`], one process per rank's tiers (an exclusive lock taken before
//!   anything is opened, held for the process's life).
//! - [`fence`]: [`fence::Fence`], the incarnation and epoch every write to a slot or the
//!   manifest is checked against, so a process that lost the lock changes nothing.
//! - [`store`]: the per-rank [`store::Store`]: tiers + slots + checksums + manifest.
//! - `recover`: [`store::Store::open`], which takes over the manifest's entries on (re)start
//!   without reading shards (each read verifies), and [`store::Store::scrub`].
//! - [`batch`]: a task's shard copies prepared at once and run by the caller's
//!   [`batch::CopyRunner`] (several copy workers), checks and records as the single calls.
//! - [`block`]: [`BlockHash`] (from the protocol core) and [`Location`].
//!
//! # Invariants
//! The numbered invariants this crate keeps, and the tests that prove them, are in the
//! crate's README.md.

#![warn(missing_docs)]

pub mod batch;
pub mod block;
pub mod buffer;
pub mod checksum;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub mod device_region;
pub mod disk;
pub mod fence;
pub mod host;
pub mod layers;
pub mod lock;
pub mod manifest;
mod recover;
pub mod shm;
pub mod store;
pub mod tier;

pub use block::{BlockHash, Location};
pub use tier::Tier;
