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
//!
//! Every figure sits next to a baseline of the same run; nothing is asserted, and nothing
//! here may be called from a test.

pub mod groups;
pub mod heap;
pub mod index;

pub use groups::{bench_groups, GroupsError, GroupsOptions, GroupsRow};
pub use index::{bench_index, IndexRow};
