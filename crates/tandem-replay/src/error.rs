//! Every typed error of the crate, one enum per boundary: [`SchedError`] (the leader's
//! scheduler bookkeeping), [`EngineError`] (one simulated engine), [`ReplayError`] (what
//! [`crate::run_replay`] returns), and [`Positions`], where each rank stood when a run ended
//! in error.

use std::fmt;

use serde::Serialize;
use tandem_client::{AgentError, ClientError, PagePoolError};
use tandem_proto::ids::{TaskId, TaskKind};

use crate::pages::PageError;
use crate::request::Role;

/// The leader's scheduler refused a transition: an agent answer that contradicts the
/// engine's own record (or a bug in the engine).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    /// A lookup matched more blocks than the request has.
    #[error("request {request}: the lookup matched {matched} blocks of {blocks}")]
    MatchedTooMany {
        /// The request.
        request: u64,
        /// Blocks matched.
        matched: u32,
        /// Blocks of the request.
        blocks: u64,
    },
    /// A second lookup answer for one request.
    #[error("request {request}: the lookup was answered twice")]
    LookupTwice {
        /// The request.
        request: u64,
    },
    /// A part moved out of order (for example finished before it started).
    #[error("request {request}: {role} {what}")]
    Transition {
        /// The request.
        request: u64,
        /// The part.
        role: Role,
        /// What happened.
        what: &'static str,
    },
    /// The request is not in flight.
    #[error("request {request} is not in flight")]
    UnknownRequest {
        /// The request.
        request: u64,
    },
    /// The same request id was admitted twice.
    #[error("request {request} was admitted twice")]
    DuplicateRequest {
        /// The request.
        request: u64,
    },
    /// `admit` was called for a request that must wait.
    #[error("request {request} cannot be admitted now: {why}")]
    NotAdmissible {
        /// The request.
        request: u64,
        /// The admission check's answer.
        why: String,
    },
    /// An outcome's kind differs from the task the engine started.
    #[error("task {task}: the engine started a {started}, the outcome is for a {outcome}")]
    KindMismatch {
        /// The task.
        task: TaskId,
        /// What the engine started.
        started: TaskKind,
        /// What the outcome says.
        outcome: TaskKind,
    },
    /// Page bookkeeping failed.
    #[error(transparent)]
    Pages(#[from] PageError),
}

/// Why one simulated engine stopped before the end of the replay.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The first connection (with its hello and pool registration) did not succeed in time.
    #[error("rank {rank}: cannot join the group within {waited_ms} ms: {source}")]
    Join {
        /// The rank.
        rank: u32,
        /// How long it tried, milliseconds.
        waited_ms: u64,
        /// The last error.
        source: ClientError,
    },
    /// The engine's page pool could not be created or addressed.
    #[error("rank {rank}: {source}")]
    Pool {
        /// The rank.
        rank: u32,
        /// The pool's error.
        source: PagePoolError,
    },
    /// The agent's group size differs from the number of sockets the replay was given.
    #[error("rank {rank}: the agent reports a world size of {agent}, the replay was given {given} engine sockets")]
    WorldSize {
        /// The rank.
        rank: u32,
        /// The agent's world size.
        agent: u32,
        /// Sockets given.
        given: u32,
    },
    /// The agent refused a call in a way no retry can fix (a bug on one side).
    #[error("rank {rank}: the agent refused {call} at step {step} of epoch {epoch}: {source}")]
    Refused {
        /// The rank.
        rank: u32,
        /// The call.
        call: &'static str,
        /// The engine's epoch.
        epoch: u64,
        /// The engine's step.
        step: u64,
        /// The refusal.
        source: AgentError,
    },
    /// The agent answered something the contract does not allow.
    #[error("rank {rank}: protocol violation in {call} at step {step} of epoch {epoch}: {detail}")]
    Protocol {
        /// The rank.
        rank: u32,
        /// The call.
        call: &'static str,
        /// The engine's epoch.
        epoch: u64,
        /// The engine's step.
        step: u64,
        /// What was wrong.
        detail: String,
    },
    /// The group did not come back (or stayed not ready) within the recovery deadline.
    #[error("rank {rank}: could not rejoin the group within {waited_ms} ms after {call} failed at step {step} of epoch {epoch}; last error: {last}")]
    Rejoin {
        /// The rank.
        rank: u32,
        /// The call that failed first.
        call: &'static str,
        /// The engine's epoch when it failed.
        epoch: u64,
        /// The engine's step when it failed.
        step: u64,
        /// How long it tried, milliseconds.
        waited_ms: u64,
        /// The last error seen.
        last: String,
    },
    /// The connection broke during a call that changes group state, and the group stayed in
    /// the same epoch, so the engine cannot know whether the call took effect.
    #[error("rank {rank}: the connection broke during {call} at step {step} of epoch {epoch} and the group stayed in epoch {epoch} for {waited_ms} ms: cannot tell whether the {call} took effect")]
    Ambiguous {
        /// The rank.
        rank: u32,
        /// The call.
        call: &'static str,
        /// The epoch.
        epoch: u64,
        /// The step.
        step: u64,
        /// How long it waited for a new epoch, milliseconds.
        waited_ms: u64,
    },
    /// The leader could not seal a step: followers stayed more than the window behind.
    #[error("rank 0: could not seal step {step} of epoch {epoch} within {waited_ms} ms: {last}")]
    SealTimeout {
        /// The epoch.
        epoch: u64,
        /// The step.
        step: u64,
        /// How long it tried, milliseconds.
        waited_ms: u64,
        /// The last refusal.
        last: AgentError,
    },
    /// A request has more blocks than the page pool has pages.
    #[error("rank 0: request {request} has {blocks} blocks but the page pool has {pages} pages; raise pool_pages")]
    PoolTooSmall {
        /// The request (its 0-based position in the trace).
        request: u64,
        /// Its blocks.
        blocks: u64,
        /// Pages per pool.
        pages: u32,
    },
    /// The leader's scheduler refused an agent answer.
    #[error("rank 0 at step {step} of epoch {epoch}: {source}")]
    Scheduler {
        /// The epoch.
        epoch: u64,
        /// The step.
        step: u64,
        /// The refusal.
        source: SchedError,
    },
    /// The engine stopped because the run was stopped (another rank failed).
    #[error("rank {rank}: stopped because the run was stopped")]
    Stopped {
        /// The rank.
        rank: u32,
    },
}

/// Why [`crate::run_replay`] returned no summary.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The parameters cannot describe a run.
    #[error("bad replay parameters: {0}")]
    Params(String),
    /// An engine failed; the run was stopped.
    #[error("{source}\nwhere each rank stood:\n{positions}")]
    Engine {
        /// The first engine error.
        source: EngineError,
        /// Where each rank stood.
        positions: Positions,
    },
    /// No engine made progress for the stall deadline.
    #[error("no progress for {waited_ms} ms\nwhere each rank stood:\n{positions}")]
    Stalled {
        /// How long nothing moved, milliseconds.
        waited_ms: u64,
        /// Where each rank stood.
        positions: Positions,
    },
    /// The caller set [`crate::ReplayParams::cancel`].
    #[error("the replay was cancelled\nwhere each rank stood:\n{positions}")]
    Cancelled {
        /// Where each rank stood.
        positions: Positions,
    },
    /// An engine thread could not be started.
    #[error("cannot start the engine thread of rank {rank}: {source}")]
    Spawn {
        /// The rank.
        rank: u32,
        /// The OS error.
        source: std::io::Error,
    },
    /// An engine thread panicked (a bug).
    #[error("the engine thread of rank {rank} panicked: {message}")]
    Panicked {
        /// The rank.
        rank: u32,
        /// The panic message.
        message: String,
    },
}

/// Where one rank's engine stood.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RankPosition {
    /// The rank.
    pub rank: u32,
    /// The epoch it works in (`None` before it joined).
    pub epoch: Option<u64>,
    /// The last step it applied in that epoch.
    pub applied: Option<u64>,
    /// What it was doing, for example `reading frame 791` or `rejoining after end_step`.
    pub doing: String,
}

impl fmt::Display for RankPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = if self.rank == 0 { "leader" } else { "follower" };
        write!(f, "rank {} ({role}): ", self.rank)?;
        match (self.epoch, self.applied) {
            (None, _) => write!(f, "not joined")?,
            (Some(e), None) => write!(f, "epoch {e}, no step applied")?,
            (Some(e), Some(s)) => write!(f, "epoch {e}, applied step {s}")?,
        }
        if !self.doing.is_empty() {
            write!(f, "; {}", self.doing)?;
        }
        Ok(())
    }
}

/// Every rank's position, by rank.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Positions(pub Vec<RankPosition>);

impl fmt::Display for Positions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "  {p}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
