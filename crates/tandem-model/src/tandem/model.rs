//! The Tandem model: the stateright `Model` whose transitions drive the rank cores the agents
//! run (`tandem-core`'s `RankCore`: the leader's and the followers') through every
//! interleaving of engine operations, shard reports, message deliveries, engine reads, wait
//! deadlines, appends and crashes.
//!
//! Owns the actions and the driver glue (what an agent's actors do with each output of a
//! core). Must never: re-implement a protocol decision; when the driver needs one (which
//! outcomes a rank's engine still needs, what a new epoch reconciles) it calls `tandem-proto`
//! or `tandem-core`.

use std::collections::{BTreeMap, VecDeque};

use stateright::{Model, Property};
use tandem_core::EpochStart;
use tandem_proto::{Epoch, TaskId};

use super::config::{ConfigError, TandemConfig, Variant};
use super::properties;
use super::state::{DurableLog, EngineState, TandemState};

/// One atomic move of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TandemAction {
    /// The leader's engine starts a store in the open step.
    StartStore,
    /// The leader's engine looks up a stored block in the open step and loads it (a task
    /// when the lookup pinned it, a refusal otherwise).
    LookupLoad,
    /// The log refuses the append the leader's core asked for: the driver answers the core
    /// with the error, nothing is durable.
    RefuseAppend,
    /// The leader's engine ends the open step: sealed at once (rank 0's engine applies the
    /// frame), or after the append the core asks for, or once the window opens.
    Seal,
    /// The append the leader's core asked for lands in the durable log.
    Persist,
    /// The driver confirms the append to the core (`handle_appended`): the step is sealed.
    PersistConfirm,
    /// `rank` finished its shard of `task` and reports it; `twice`: the report is sent twice
    /// back to back (a retransmission, a duplicate the leader must ignore).
    Report {
        /// The reporting rank.
        rank: u32,
        /// The task.
        task: TaskId,
        /// Whether a duplicate follows the report.
        twice: bool,
        /// Whether the copy failed (a full tier, a corrupt shard).
        failed: bool,
    },
    /// The oldest message on the leader → `rank` link arrives.
    DeliverToFollower {
        /// The receiving follower rank.
        rank: u32,
    },
    /// The oldest message on the `rank` → leader link arrives.
    DeliverToLeader {
        /// The sending follower rank.
        rank: u32,
    },
    /// Follower `rank`'s engine asks for the frame of its next step with a deadline: it
    /// applies the frame at once if it is there, otherwise it blocks in a bounded wait that
    /// ends when the frame arrives or the deadline passes.
    Read {
        /// The follower rank.
        rank: u32,
    },
    /// Follower `rank`'s engine reads the frame of the step it applied last, again.
    Reread {
        /// The follower rank.
        rank: u32,
    },
    /// The model clock reaches follower `rank`'s earliest wait deadline.
    Timeout {
        /// The follower rank.
        rank: u32,
    },
    /// A rank fails; the supervisor restarts the whole group in the next epoch.
    Crash,
}

/// The Tandem model for one configuration.
#[derive(Clone, Debug)]
pub struct TandemModel {
    /// The bounds and variant.
    pub config: TandemConfig,
}

/// The epoch every run starts in.
pub const FIRST_EPOCH: Epoch = Epoch(1);

impl TandemModel {
    /// A model for `config`.
    ///
    /// Errors: [`ConfigError::Zero`] when a bound that must be at least 1 is 0.
    pub fn new(config: TandemConfig) -> Result<TandemModel, ConfigError> {
        config.validate()?;
        Ok(TandemModel { config })
    }

    pub(super) fn dedup(&self) -> bool {
        self.config.variant != Variant::NoEngineDedup
    }
}

impl Model for TandemModel {
    type State = TandemState;
    type Action = TandemAction;

    fn init_states(&self) -> Vec<TandemState> {
        let Some((leader, followers)) = self.cores(FIRST_EPOCH, EpochStart::default(), &[]) else {
            return Vec::new();
        };
        let links = usize::try_from(self.config.followers).unwrap_or(0);
        vec![TandemState {
            epoch: FIRST_EPOCH,
            leader,
            followers,
            to_follower: vec![VecDeque::new(); links],
            to_leader: vec![VecDeque::new(); links],
            persisting: None,
            sealing: false,
            durable: DurableLog::default(),
            engines: (0..=links).map(|_| EngineState::new(FIRST_EPOCH)).collect(),
            sealed: BTreeMap::new(),
            stores_started: 0,
            duplicates_sent: 0,
            loads_started: 0,
            appends_failed: 0,
            shards_failed: 0,
            now_ms: 0,
            anomalies: Vec::new(),
        }]
    }

    fn actions(&self, s: &TandemState, actions: &mut Vec<TandemAction>) {
        if s.engines.iter().any(|e| e.failed.is_some()) {
            // A rank is down: the supervisor's restart is the only thing left to happen.
            if s.epoch.0 < self.config.epochs {
                actions.push(TandemAction::Crash);
            }
            return;
        }
        let open = s.open_step();
        if open.0 < self.config.steps_per_epoch {
            if s.stores_started < self.config.stores {
                actions.push(TandemAction::StartStore);
            }
            if s.loads_started < self.config.loads && s.stores_started > 0 {
                actions.push(TandemAction::LookupLoad);
            }
            if !s.sealing {
                actions.push(TandemAction::Seal);
            }
        }
        match s.persisting {
            Some((_, false)) => {
                actions.push(TandemAction::Persist);
                if s.appends_failed < self.config.failed_appends {
                    actions.push(TandemAction::RefuseAppend);
                }
            }
            Some((_, true)) => actions.push(TandemAction::PersistConfirm),
            None => {}
        }
        for (rank, engine) in s.engines.iter().enumerate() {
            let rank = rank as u32;
            if engine.failed.is_some() {
                continue;
            }
            let duplicates_left = s.duplicates_sent < self.config.duplicate_reports;
            let failures_left = s.shards_failed < self.config.failed_shards;
            for (task, sent) in &engine.shards {
                if *sent == 0 {
                    let task = *task;
                    actions.push(TandemAction::Report {
                        rank,
                        task,
                        twice: false,
                        failed: false,
                    });
                    if duplicates_left {
                        actions.push(TandemAction::Report {
                            rank,
                            task,
                            twice: true,
                            failed: false,
                        });
                    }
                    if failures_left {
                        actions.push(TandemAction::Report {
                            rank,
                            task,
                            twice: false,
                            failed: true,
                        });
                    }
                }
            }
        }
        for rank in 1..=self.config.followers {
            let i = rank as usize;
            if s.to_follower.get(i - 1).is_some_and(|q| !q.is_empty()) {
                actions.push(TandemAction::DeliverToFollower { rank });
            }
            if s.to_leader.get(i - 1).is_some_and(|q| !q.is_empty()) {
                actions.push(TandemAction::DeliverToLeader { rank });
            }
            let Some(engine) = s.engines.get(i) else {
                continue;
            };
            if self.config.variant == Variant::ApplyByArrival || engine.failed.is_some() {
                continue;
            }
            if engine.wait.is_none() {
                actions.push(TandemAction::Read { rank });
                actions.push(TandemAction::Reread { rank });
            }
            if engine.wait.is_some() {
                actions.push(TandemAction::Timeout { rank });
            }
        }
        if s.epoch.0 < self.config.epochs {
            actions.push(TandemAction::Crash);
        }
    }

    fn next_state(&self, last: &TandemState, action: TandemAction) -> Option<TandemState> {
        let mut s = last.clone();
        match action {
            TandemAction::StartStore => self.start_store(&mut s),
            TandemAction::LookupLoad => self.lookup_load(&mut s)?,
            TandemAction::RefuseAppend => self.refuse_append(&mut s)?,
            TandemAction::Seal => self.seal(&mut s)?,
            TandemAction::Persist => Self::persist(&mut s)?,
            TandemAction::PersistConfirm => self.persist_confirm(&mut s)?,
            TandemAction::Report {
                rank,
                task,
                twice,
                failed,
            } => self.report(&mut s, rank, task, twice, failed)?,
            TandemAction::DeliverToFollower { rank } => self.deliver_to_follower(&mut s, rank)?,
            TandemAction::DeliverToLeader { rank } => self.deliver_to_leader(&mut s, rank)?,
            TandemAction::Read { rank } => self.read(&mut s, rank)?,
            TandemAction::Reread { rank } => Self::reread(&mut s, rank)?,
            TandemAction::Timeout { rank } => self.timeout(&mut s, rank)?,
            TandemAction::Crash => self.crash(&mut s)?,
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::for_model(self)
    }
}
