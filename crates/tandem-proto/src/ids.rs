//! Identifiers shared by every message and state machine: epochs, steps, ranks, tasks,
//! requests, blocks and pages.
//!
//! Owns only the newtypes and their text forms. It never allocates ids: task ids come from
//! the [`crate::Leader`], epochs from the supervisor's Redis counter.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A generation of the group; it increases on every group restart (docs/DESIGN.md invariant 4).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Epoch(pub u64);

/// One scheduler iteration of the engines, numbered from 0 within an epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Step(pub u64);

/// One member of the group, `0..world_size`; rank 0 is the leader.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Rank(pub u32);

/// A group-unique task id: the epoch that started the task and a sequence number within it.
///
/// Unique across epochs and process restarts because epochs come from a Redis counter and
/// never repeat; `seq` counts from 0 in each epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct TaskId {
    /// Epoch whose leader started the task.
    pub epoch: u64,
    /// Sequence number within that epoch, from 0.
    pub seq: u64,
}

/// The engine's id of one inference request.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct RequestId(pub u64);

/// The chained prefix hash that names one block (it depends on every token before it).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct BlockHash(pub u64);

/// Index of one KV page in an engine's page pool (the same index on every rank).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct PageId(pub u32);

/// The name of the group a rank belongs to (one model instance).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GroupId(pub String);

/// What a task moves: engine pages to the tiers (store) or tiers to engine pages (load).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TaskKind {
    /// Copy blocks from the engine's pages into the tiers.
    Store,
    /// Copy blocks from the tiers into the engine's pages.
    Load,
}

/// A storage tier of a rank, as the leader names it in frames. Defined once here; the store
/// engine maps it to its own tier implementations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Tier {
    /// Host memory: a preallocated slab of slots, microseconds, capacity in the tens of GiB.
    Host,
    /// Local disk: a preallocated file of slots, tens to hundreds of microseconds, capacity in TiB.
    Disk,
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::Host => "host",
            Tier::Disk => "disk",
        })
    }
}

impl Step {
    /// The step after this one.
    pub fn next(self) -> Step {
        Step(self.0.saturating_add(1))
    }
}

impl TaskId {
    /// The task id for sequence number `seq` of `epoch`.
    pub fn new(epoch: Epoch, seq: u64) -> TaskId {
        TaskId {
            epoch: epoch.0,
            seq,
        }
    }
}

macro_rules! display_inner {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    )*};
}
display_inner!(Epoch, Step, Rank, RequestId, PageId, GroupId);

impl fmt::Display for BlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Display for TaskId {
    /// `epoch.seq`, for example `3.17`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.epoch, self.seq)
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskKind::Store => "store",
            TaskKind::Load => "load",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms() {
        assert_eq!(Epoch(3).to_string(), "3");
        assert_eq!(Step(812).to_string(), "812");
        assert_eq!(Rank(2).to_string(), "2");
        assert_eq!(TaskId::new(Epoch(3), 17).to_string(), "3.17");
        assert_eq!(BlockHash(0xab).to_string(), "00000000000000ab");
        assert_eq!(GroupId("g".into()).to_string(), "g");
        assert_eq!(TaskKind::Store.to_string(), "store");
        assert_eq!(TaskKind::Load.to_string(), "load");
        assert_eq!(Tier::Host.to_string(), "host");
        assert_eq!(Tier::Disk.to_string(), "disk");
        assert_eq!(Step(1).next(), Step(2));
        assert_eq!(Step(u64::MAX).next(), Step(u64::MAX));
    }

    #[test]
    fn task_ids_order_by_epoch_then_seq() {
        assert!(TaskId::new(Epoch(1), 99) < TaskId::new(Epoch(2), 0));
        assert!(TaskId::new(Epoch(2), 0) < TaskId::new(Epoch(2), 1));
    }
}
