//! The label values of Tandem's metric families, defined once.
//!
//! Owns the closed sets of label values (task kind, task result, tier, direction, group
//! state, not-ready reason, store refusal reason) and their exact spelling in the
//! exposition. Every set is small and fixed, so the metric structs create every series up
//! front: an update is then one atomic operation on a handle, never a map lookup, and every
//! series is visible (at 0) from the first scrape.
//! This module never touches a metric.

/// The kind of a task (label `kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// Copy blocks from the engine's pages into the tiers (`store`).
    Store,
    /// Copy blocks from the tiers into the engine's pages (`load`).
    Load,
}

impl TaskKind {
    /// Every kind, in exposition order.
    pub const ALL: [TaskKind; 2] = [TaskKind::Store, TaskKind::Load];

    /// The label value: `store` or `load`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Store => "store",
            TaskKind::Load => "load",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// How a task ended (label `result` of `tandem_tasks_finished_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskResult {
    /// Every rank finished its shard (`ok`).
    Ok,
    /// A rank reported a failure, or the leader failed the task (`failed`).
    Failed,
    /// The epoch ended while the task was in flight; the next epoch reported it aborted
    /// (`aborted`).
    Aborted,
}

impl TaskResult {
    /// Every result, in exposition order.
    pub const ALL: [TaskResult; 3] = [TaskResult::Ok, TaskResult::Failed, TaskResult::Aborted];

    /// The label value: `ok`, `failed` or `aborted`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskResult::Ok => "ok",
            TaskResult::Failed => "failed",
            TaskResult::Aborted => "aborted",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// A storage tier of a rank (label `tier`): the one definition in the protocol core, labelled
/// by [`Tier::name`]. Only [`Tier::PLACED`] (host, disk) have series.
pub use tandem_proto::Tier;

/// The position of `tier` in [`Tier::PLACED`] (the series arrays' index); `None` for a tier
/// no rank places blocks in (the device tier), which has no series.
pub(crate) fn tier_index(tier: Tier) -> Option<usize> {
    Tier::PLACED.iter().position(|t| *t == tier)
}

/// Which way bytes moved between the engine's pages and a tier (label `direction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Engine pages into the tier (`store`).
    Store,
    /// The tier into engine pages (`load`).
    Load,
}

impl Direction {
    /// Every direction, in exposition order.
    pub const ALL: [Direction; 2] = [Direction::Store, Direction::Load];

    /// The label value: `store` or `load`.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Store => "store",
            Direction::Load => "load",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// How the group stands as the supervisor sees it (label `state` of
/// `tandem_supervisor_group_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// Waiting for every rank of the first epoch to join (`starting`).
    Starting,
    /// Every rank alive in the current epoch (`healthy`).
    Healthy,
    /// A rank failed; the group is moving to a new epoch (`restarting`).
    Restarting,
    /// The restart limit was exceeded; the outer supervisor (systemd, compose) takes over
    /// (`failed`).
    Failed,
    /// Draining after SIGTERM (`stopping`).
    Stopping,
}

impl GroupState {
    /// Every state, in exposition order.
    pub const ALL: [GroupState; 5] = [
        GroupState::Starting,
        GroupState::Healthy,
        GroupState::Restarting,
        GroupState::Failed,
        GroupState::Stopping,
    ];

    /// The label value: `starting`, `healthy`, `restarting`, `failed` or `stopping`.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Starting => "starting",
            GroupState::Healthy => "healthy",
            GroupState::Restarting => "restarting",
            GroupState::Failed => "failed",
            GroupState::Stopping => "stopping",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Why a rank is not ready (label `reason` of `tandem_not_ready`). A closed set of causes,
/// so that an alert can name the cause without a label per free-text message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotReadyReason {
    /// The leader waits for followers to join, or a follower for the leader to admit it
    /// (`joining`).
    Joining,
    /// The leader rebuilds the group index from every rank's manifest (`rebuilding_index`).
    RebuildingIndex,
    /// The Redis completion log does not answer this rank: the leader's appends fail, or the
    /// rank's own heartbeats (any rank), or its completion stream is gone (`completion_log`).
    CompletionLog,
    /// The epoch failed; the rank waits for the supervisor's next epoch (`epoch_failed`).
    EpochFailed,
    /// No protocol actor runs: the agent moves between epochs (`between_epochs`).
    BetweenEpochs,
    /// The leader's window has been full for longer than the heartbeat timeout: a follower
    /// stopped acknowledging (`window_stalled`; the rank is `tandem_window_stalled_follower`).
    WindowStalled,
}

impl NotReadyReason {
    /// Every reason, in exposition order.
    pub const ALL: [NotReadyReason; 6] = [
        NotReadyReason::Joining,
        NotReadyReason::RebuildingIndex,
        NotReadyReason::CompletionLog,
        NotReadyReason::EpochFailed,
        NotReadyReason::BetweenEpochs,
        NotReadyReason::WindowStalled,
    ];

    /// The label value: `joining`, `rebuilding_index`, `completion_log`, `epoch_failed`,
    /// `between_epochs` or `window_stalled`.
    pub fn as_str(self) -> &'static str {
        match self {
            NotReadyReason::Joining => "joining",
            NotReadyReason::RebuildingIndex => "rebuilding_index",
            NotReadyReason::CompletionLog => "completion_log",
            NotReadyReason::EpochFailed => "epoch_failed",
            NotReadyReason::BetweenEpochs => "between_epochs",
            NotReadyReason::WindowStalled => "window_stalled",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Why the leader refused a store task (label `reason` of `tandem_stores_refused_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// The target tier is full and every block in it is pinned (`tier_full`).
    TierFull,
    /// Any other refusal of the group index (`other`).
    Other,
}

impl RefusalReason {
    /// Every reason, in exposition order.
    pub const ALL: [RefusalReason; 2] = [RefusalReason::TierFull, RefusalReason::Other];

    /// The label value: `tier_full` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::TierFull => "tier_full",
            RefusalReason::Other => "other",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_follow_all_order() {
        for (i, k) in TaskKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
        }
        for (i, r) in TaskResult::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        for (i, t) in Tier::PLACED.iter().enumerate() {
            assert_eq!(tier_index(*t), Some(i));
        }
        assert_eq!(tier_index(Tier::Device), None);
        for (i, d) in Direction::ALL.iter().enumerate() {
            assert_eq!(d.index(), i);
        }
        for (i, s) in GroupState::ALL.iter().enumerate() {
            assert_eq!(s.index(), i);
        }
        for (i, r) in NotReadyReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        for (i, r) in RefusalReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }

    #[test]
    fn label_values_are_lowercase_words() {
        let all: Vec<&str> = TaskKind::ALL
            .iter()
            .map(|k| k.as_str())
            .chain(TaskResult::ALL.iter().map(|r| r.as_str()))
            .chain(Tier::PLACED.iter().map(|t| t.name()))
            .chain(Direction::ALL.iter().map(|d| d.as_str()))
            .chain(GroupState::ALL.iter().map(|s| s.as_str()))
            .collect();
        assert_eq!(
            all,
            [
                "store",
                "load",
                "ok",
                "failed",
                "aborted",
                "host",
                "disk",
                "store",
                "load",
                "starting",
                "healthy",
                "restarting",
                "failed",
                "stopping"
            ]
        );
    }
}
