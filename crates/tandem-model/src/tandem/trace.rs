//! Short, readable traces of Tandem model paths, for test output and reports.
//!
//! Owns the text form of a path. Must never: affect checking; it only reads states.

use stateright::Path;
use tandem_proto::Message;

use super::model::TandemAction;
use super::state::TandemState;

fn describe_message(msg: &Message) -> String {
    match msg {
        Message::Frame(f) => format!("frame ({}, {})", f.epoch, f.step),
        Message::ShardReport(r) => format!("shard report of task {} (epoch {})", r.task, r.epoch),
        Message::Ack(a) => format!("ack of step {} (epoch {})", a.step, a.epoch),
        other => other.kind().to_string(),
    }
}

fn describe(state: &TandemState, action: &TandemAction) -> String {
    let link = |queues: &[std::collections::VecDeque<Message>], rank: u32| {
        let i = usize::try_from(rank).ok().and_then(|r| r.checked_sub(1));
        i.and_then(|i| queues.get(i))
            .and_then(|q| q.front())
            .map(describe_message)
    };
    match action {
        TandemAction::StartStore => {
            format!("leader engine starts a store in step {}", state.open_step())
        }
        TandemAction::Seal => format!(
            "leader engine ends step ({}, {}) (sealed once durable and within the window)",
            state.epoch,
            state.open_step()
        ),
        TandemAction::Persist => {
            "the driver's append (task starts, outcomes) lands in the durable stream".into()
        }
        TandemAction::PersistConfirm => {
            "driver confirms the append to the leader's core: the step is sealed".into()
        }
        TandemAction::LookupLoad => format!(
            "leader engine looks up a stored block and loads it in step {}",
            state.open_step()
        ),
        TandemAction::RefuseAppend => {
            "the log refuses the driver's append; the core is told it failed".into()
        }
        TandemAction::Report {
            rank,
            task,
            failed: true,
            ..
        } => format!("rank {rank}'s copy of task {task} fails (full tier, corrupt shard)"),
        TandemAction::Report {
            rank,
            task,
            twice: false,
            ..
        } => {
            format!("rank {rank} reports its shard of task {task}")
        }
        TandemAction::Report {
            rank,
            task,
            twice: true,
            ..
        } => {
            format!("rank {rank} reports its shard of task {task}, twice (a duplicate)")
        }
        TandemAction::DeliverToFollower { rank } => format!(
            "rank {rank} receives {}",
            link(&state.to_follower, *rank).unwrap_or_else(|| "nothing".into())
        ),
        TandemAction::DeliverToLeader { rank } => format!(
            "leader receives from rank {rank}: {}",
            link(&state.to_leader, *rank).unwrap_or_else(|| "nothing".into())
        ),
        TandemAction::Read { rank } => {
            let step = state
                .engines
                .get(*rank as usize)
                .map(|e| e.next_step.0)
                .unwrap_or(0);
            format!("rank {rank}'s engine asks for step {step} (bounded wait)")
        }
        TandemAction::Reread { rank } => format!("rank {rank}'s engine rereads its last step"),
        TandemAction::Timeout { rank } => format!("rank {rank}'s wait deadline passes"),
        TandemAction::Crash => format!(
            "a rank fails: the group restarts in epoch {} (old messages stay in flight)",
            state.epoch.0 + 1
        ),
    }
}

/// What an action changed at the engines: frames applied (and as which position) and outcomes
/// delivered, read from the states before and after it.
fn effects(before: &TandemState, after: &TandemState) -> Vec<String> {
    let mut notes = Vec::new();
    for (rank, (b, a)) in before.engines.iter().zip(&after.engines).enumerate() {
        for ((epoch, step), frame) in &a.applied {
            if !b.applied.contains_key(&(*epoch, *step)) {
                let mut note = format!(
                    "rank {rank}'s engine applies frame ({}, {})",
                    frame.epoch, frame.step
                );
                if (frame.epoch, frame.step) != (*epoch, *step) {
                    note.push_str(&format!(" as its step ({epoch}, {step})"));
                }
                notes.push(note);
            }
        }
        for (task, count) in &a.outcomes {
            if b.outcomes.get(task) != Some(count) {
                notes.push(format!(
                    "the outcome of task {task} reaches rank {rank}'s engine (time {count})"
                ));
            }
        }
    }
    notes
}

/// Numbered lines, one per action of `path`, each said in terms of the state it acted on,
/// with what it changed at the engines.
pub fn render(path: &Path<TandemState, TandemAction>) -> String {
    let mut out = String::new();
    let steps = path.clone().into_vec();
    for (n, pair) in steps.windows(2).enumerate() {
        let [(before, Some(action)), (after, _)] = pair else {
            continue;
        };
        out.push_str(&format!("{:>2}. {}\n", n + 1, describe(before, action)));
        for note in effects(before, after) {
            out.push_str(&format!("      -> {note}\n"));
        }
    }
    out
}
