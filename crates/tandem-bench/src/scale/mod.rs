//! The scale benchmarks behind `tandem bench scale`: what a large tier, a large index and
//! many groups cost (docs/SCALE.md).
//!
//! # Layout
//! - [`index`]: [`bench_index`], the group index's memory per block and the cost of a
//!   lookup, an insert and an eviction at 10^5 to 10^7 blocks, and the leader's rebuild.
//! - [`groups`]: [`bench_groups`], synthetic groups' Redis traffic against one
//!   `redis-server` at a fixed step rate each, with its CPU: how many groups one Redis
//!   process carries.
//! - [`heap`]: heap bytes in use, to measure memory per block.
//! - [`redis_info`]: commands by name, a stream's length and memory, the open-file limit.
//! - [`restart`]: a disk tier full of blocks (real or sparse) and the time to open it, or to
//!   open it and read every shard back.
//!
//! Every figure sits next to a baseline of the same run; nothing is asserted, and nothing
//! here may be called from a test.

pub mod groups;
pub mod heap;
pub mod index;
pub mod redis_info;
pub mod restart;

pub use groups::{bench_groups, GroupsError, GroupsOptions, GroupsRow};
pub use index::{bench_index, IndexRow};
pub use restart::{fill_disk_tier, time_open, time_scrub, Fill, Filled, RestartBenchError};
