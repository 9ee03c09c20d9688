//! The properties of the Tandem model: docs/DESIGN.md invariants stated over model states, plus
//! `sometimes` examples that prove the interesting states are reached.
//!
//! Owns the property names (tests look them up by name) and their conditions. Must never:
//! change a state; every condition is a pure function of the state.

use std::collections::BTreeSet;

use stateright::Property;
use tandem_proto::engine::AgentError;
use tandem_proto::{Frame, OutcomeResult, TaskId};

use super::model::TandemModel;
use super::state::{follower_of, leader_of, TandemState};

/// Invariants 1 and 2: every frame an engine applied as `(epoch, step)` is the frame the
/// leader sealed for `(epoch, step)`.
pub const APPLIES_LEADER_DECISION: &str =
    "an engine applies only the leader's frame for (epoch, step)";
/// Invariant 5: an engine sees each task's outcome at most once, restarts included.
pub const NO_OUTCOME_TWICE: &str = "no task outcome reaches an engine twice";
/// Invariant 5: in a quiescent state every durable outcome has reached every engine.
pub const DURABLE_REACHES_ALL: &str =
    "every durable outcome reaches every engine (quiescent states)";
/// Invariant 6: every pending wait has a finite deadline.
pub const WAITS_BOUNDED: &str = "every pending wait has a deadline";
/// Invariant 5: a frame reveals only outcomes already in the durable stream.
pub const REVEALS_ONLY_DURABLE: &str = "frames reveal only durable outcomes";
/// The durable stream holds at most one outcome per task.
pub const ONE_DURABLE_OUTCOME: &str = "the durable stream holds one outcome per task";
/// Invariant 4 and the rest: the state machines never did anything a correct run does not
/// (took an older epoch's message, sealed two frames for a step, answered a reread with
/// another frame, refused a message of the current epoch).
pub const NO_ANOMALY: &str = "no anomaly (stale message taken, double seal, unexpected rejection)";

/// Invariants 2 and 3: a load the group revealed `Ok` read only blocks a store the group
/// revealed `Ok` had written (no load of a refused, failed or unfinished store).
pub const LOAD_AFTER_STORE: &str = "a load revealed Ok reads only blocks a store revealed Ok wrote";

/// Example: a load finished and its outcome reached every engine.
pub const EX_LOAD_FINISHED: &str = "a load finishes Ok and reaches every engine";
/// Example: a store or load was refused (a full tier of pinned blocks, an unpinned load): its
/// task failed at once and the outcome was revealed.
pub const EX_REFUSED: &str = "a store or load is refused and its failure revealed";
/// Example: a refused append was made again and its outcome revealed.
pub const EX_APPEND_REFUSED: &str = "an append is refused, then its outcome revealed";
/// Example: a failed shard copy failed its task.
pub const EX_SHARD_FAILED: &str = "a failed shard copy fails its task";

/// Example: a store finished and its outcome reached every engine.
pub const EX_STORE_FINISHED: &str = "a store finishes and reaches every engine";
/// Example: the group moved to a new epoch.
pub const EX_EPOCH_CHANGE: &str = "the group restarts in a new epoch";
/// Example: a reconciliation redelivered an outcome and a follower engine applied it.
pub const EX_REDELIVERED: &str = "a reconciliation redelivers an outcome to a follower engine";
/// Example: a reconciliation reported an in-flight task aborted.
pub const EX_ABORTED: &str = "a reconciliation aborts an in-flight task";
/// Example: a message of an older epoch arrived and was rejected.
pub const EX_STALE_REJECTED: &str = "a stale message is rejected";
/// Example: a duplicate shard report was ignored.
pub const EX_DUPLICATE_REPORT: &str = "a duplicate shard report is ignored";
/// Example: a bounded wait ended at its deadline with a typed error.
pub const EX_WAIT_TIMED_OUT: &str = "a wait ends at its deadline with LeaderBehind";
/// Example: a quiescent state after a restart with every durable outcome delivered.
pub const EX_QUIESCENT_AFTER_RESTART: &str =
    "a restarted group becomes quiescent with outcomes delivered";

/// `applied` is the leader's `sealed` frame, as this rank's agent hands it to its engine:
/// frame 0 without redeliveries the engine had already acknowledged, nothing else changed.
fn same_decision(applied: &Frame, sealed: &Frame) -> bool {
    if applied == sealed {
        return true;
    }
    let (Some(a), Some(s)) = (&applied.reconciliation, &sealed.reconciliation) else {
        return false;
    };
    let mut filtered = sealed.clone();
    if let Some(r) = filtered.reconciliation.as_mut() {
        r.redelivered.retain(|o| a.redelivered.contains(o));
    }
    a.redelivered.len() <= s.redelivered.len() && &filtered == applied
}

fn applies_leader_decision(_: &TandemModel, s: &TandemState) -> bool {
    s.engines.iter().all(|e| {
        e.applied
            .iter()
            .all(|(key, frame)| s.sealed.get(key).is_some_and(|f| same_decision(frame, f)))
    })
}

fn no_outcome_twice(_: &TandemModel, s: &TandemState) -> bool {
    s.engines
        .iter()
        .all(|e| e.outcomes.values().all(|n| *n <= 1))
}

fn durable_delivered_everywhere(s: &TandemState) -> bool {
    s.durable
        .outcomes
        .iter()
        .all(|o| s.engines.iter().all(|e| e.outcomes.contains_key(&o.task)))
}

fn durable_reaches_all(_: &TandemModel, s: &TandemState) -> bool {
    !s.quiescent() || durable_delivered_everywhere(s)
}

fn waits_bounded(m: &TandemModel, s: &TandemState) -> bool {
    let horizon = s.now_ms.saturating_add(m.config.wait_timeout_ms);
    s.engines
        .iter()
        .skip(1)
        .zip(&s.followers)
        .all(|(engine, follower)| {
            engine.wait.is_none() || follower.poll_timeout().is_some_and(|d| d <= horizon)
        })
}

fn reveals_only_durable(_: &TandemModel, s: &TandemState) -> bool {
    s.sealed
        .values()
        .all(|f| f.outcomes().all(|o| s.durable.outcomes.contains(o)))
}

fn one_durable_outcome(_: &TandemModel, s: &TandemState) -> bool {
    let tasks: BTreeSet<TaskId> = s.durable.outcomes.iter().map(|o| o.task).collect();
    tasks.len() == s.durable.outcomes.len()
}

fn no_anomaly(_: &TandemModel, s: &TandemState) -> bool {
    s.anomalies.is_empty()
}

fn ex_store_finished(_: &TandemModel, s: &TandemState) -> bool {
    s.durable.outcomes.iter().any(|o| {
        o.result == OutcomeResult::Ok && s.engines.iter().all(|e| e.outcomes.contains_key(&o.task))
    })
}

fn ex_epoch_change(_: &TandemModel, s: &TandemState) -> bool {
    s.epoch.0 > 1
}

fn ex_redelivered(_: &TandemModel, s: &TandemState) -> bool {
    s.engines.iter().skip(1).any(|e| {
        e.applied.values().any(|f| {
            f.reconciliation
                .as_ref()
                .is_some_and(|r| !r.redelivered.is_empty())
        })
    })
}

fn ex_aborted(_: &TandemModel, s: &TandemState) -> bool {
    s.sealed.values().any(|f| {
        f.reconciliation
            .as_ref()
            .is_some_and(|r| !r.aborted.is_empty())
    })
}

fn ex_stale_rejected(_: &TandemModel, s: &TandemState) -> bool {
    leader_of(&s.leader).is_some_and(|l| l.stats().stale_epoch_rejected > 0)
        || s.followers
            .iter()
            .any(|f| follower_of(f).is_some_and(|f| f.stats().stale_epoch_rejected > 0))
}

fn ex_duplicate_report(_: &TandemModel, s: &TandemState) -> bool {
    leader_of(&s.leader).is_some_and(|l| l.stats().duplicate_reports > 0)
}

fn ex_wait_timed_out(_: &TandemModel, s: &TandemState) -> bool {
    s.engines
        .iter()
        .any(|e| matches!(e.failed, Some(AgentError::LeaderBehind { .. })))
}

fn ex_quiescent_after_restart(_: &TandemModel, s: &TandemState) -> bool {
    s.epoch.0 > 1
        && !s.durable.outcomes.is_empty()
        && s.quiescent()
        && durable_delivered_everywhere(s)
}

fn load_after_store(_: &TandemModel, s: &TandemState) -> bool {
    use tandem_proto::TaskKind;
    let started = |kind: TaskKind| {
        s.sealed
            .values()
            .flat_map(|f| f.started())
            .filter(move |(k, _)| *k == kind)
            .map(|(_, t)| t)
    };
    let ok = |task: TaskId| {
        s.sealed
            .values()
            .flat_map(Frame::outcomes)
            .any(|o| o.task == task && o.result == OutcomeResult::Ok)
    };
    started(TaskKind::Load).filter(|l| ok(l.task)).all(|load| {
        load.block_hashes
            .iter()
            .all(|h| started(TaskKind::Store).any(|st| st.block_hashes.contains(h) && ok(st.task)))
    })
}

fn ex_load_finished(_: &TandemModel, s: &TandemState) -> bool {
    s.durable.outcomes.iter().any(|o| {
        o.kind == tandem_proto::TaskKind::Load
            && o.result == OutcomeResult::Ok
            && s.engines.iter().all(|e| e.outcomes.contains_key(&o.task))
    })
}

fn ex_refused(_: &TandemModel, s: &TandemState) -> bool {
    s.sealed.values().flat_map(Frame::outcomes).any(|o| {
        matches!(&o.result, OutcomeResult::Failed { reason }
            if reason.contains("tier full") || reason.contains("did not match"))
    })
}

fn ex_append_refused(_: &TandemModel, s: &TandemState) -> bool {
    s.appends_failed > 0 && s.sealed.values().any(|f| !f.finished.is_empty())
}

fn ex_shard_failed(_: &TandemModel, s: &TandemState) -> bool {
    s.sealed.values().flat_map(Frame::outcomes).any(|o| {
        matches!(&o.result, OutcomeResult::Failed { reason } if reason == super::driver::SHARD_FAILED)
    })
}

/// Every property of the model for `m`'s bounds, `always` first, then the `sometimes`
/// examples (those of loads, refusals, refused appends and failed copies only when the bounds
/// allow them).
pub fn for_model(m: &TandemModel) -> Vec<Property<TandemModel>> {
    let c = &m.config;
    let mut all = all();
    if c.loads > 0 {
        all.push(Property::sometimes(EX_LOAD_FINISHED, ex_load_finished));
        all.push(Property::sometimes(EX_REFUSED, ex_refused));
    }
    if c.failed_appends > 0 {
        all.push(Property::sometimes(EX_APPEND_REFUSED, ex_append_refused));
    }
    if c.failed_shards > 0 {
        all.push(Property::sometimes(EX_SHARD_FAILED, ex_shard_failed));
    }
    all
}

/// The properties every bound has, `always` first, then the `sometimes` examples.
pub fn all() -> Vec<Property<TandemModel>> {
    vec![
        Property::always(APPLIES_LEADER_DECISION, applies_leader_decision),
        Property::always(NO_OUTCOME_TWICE, no_outcome_twice),
        Property::always(DURABLE_REACHES_ALL, durable_reaches_all),
        Property::always(WAITS_BOUNDED, waits_bounded),
        Property::always(REVEALS_ONLY_DURABLE, reveals_only_durable),
        Property::always(ONE_DURABLE_OUTCOME, one_durable_outcome),
        Property::always(NO_ANOMALY, no_anomaly),
        Property::always(LOAD_AFTER_STORE, load_after_store),
        Property::sometimes(EX_STORE_FINISHED, ex_store_finished),
        Property::sometimes(EX_EPOCH_CHANGE, ex_epoch_change),
        Property::sometimes(EX_REDELIVERED, ex_redelivered),
        Property::sometimes(EX_ABORTED, ex_aborted),
        Property::sometimes(EX_STALE_REJECTED, ex_stale_rejected),
        Property::sometimes(EX_DUPLICATE_REPORT, ex_duplicate_report),
        Property::sometimes(EX_WAIT_TIMED_OUT, ex_wait_timed_out),
        Property::sometimes(EX_QUIESCENT_AFTER_RESTART, ex_quiescent_after_restart),
    ]
}
