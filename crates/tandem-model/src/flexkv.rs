//! A model of the FIFO protocol that SGLang's FlexKV connector used, kept to show that the
//! checker can fail.
//!
//! Owns: the abstract FlexKV exchange (one leader, N followers, one ordered point-to-point
//! stream per follower carrying tagged messages) and its two safety properties.
//! Must never: depend on `tandem-proto`; this is the protocol Tandem replaces, not Tandem.
//!
//! # What is modelled
//!
//! Every rank runs the same scheduler loop. In each step it passes three call sites, in this
//! order:
//!
//! 1. `put_meta`: the leader sends `CMD_PUT_META` (the prefix-match metadata it got from the
//!    store) to every follower; a follower receives and expects `CMD_PUT_META`.
//! 2. `evict`: *only if this rank is under memory pressure* (a rank-local condition) the rank
//!    calls `evict()`, which polls store completions. On the leader that sends
//!    `CMD_STORE_COMPLETE` to every follower; on a follower it receives and expects
//!    `CMD_STORE_COMPLETE`.
//! 3. `layerwise`: the leader sends `CMD_LAYERWISE`; a follower receives and expects it.
//!
//! Each receiver picks the tag it expects from its own call site, and matching is by arrival
//! order on the stream. Tags are numbered `CMD_PUT_META = 1`, `CMD_LAYERWISE = 2`,
//! `CMD_STORE_COMPLETE = 3`, so a follower that evicts while the leader did not reads the
//! leader's `CMD_LAYERWISE` and fails with the connector's own words:
//! `Tag mismatch: expected CMD_STORE_COMPLETE, got 2`. (The numbering is the model's choice,
//! made so that the received tag 2 of the real error is `CMD_LAYERWISE`.) A follower that expects
//! a message the leader never sends blocks forever; that is the second property. It is
//! reachable when `evict()` sits at the end of the step ([`EvictAt::EndOfStep`]): a follower
//! that polls alone in the last step waits for a `CMD_STORE_COMPLETE` that never comes.

use std::collections::VecDeque;
use std::fmt;

use stateright::{Model, Property};

/// A message tag on the FlexKV stream; the discriminant is the wire number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tag {
    /// `CMD_PUT_META = 1`: prefix-match metadata for the step.
    PutMeta = 1,
    /// `CMD_LAYERWISE = 2`: the layer-wise transfer of the step.
    Layerwise = 2,
    /// `CMD_STORE_COMPLETE = 3`: the store completions found by a poll in `evict()`.
    StoreComplete = 3,
}

impl Tag {
    /// The connector's constant name, e.g. `CMD_STORE_COMPLETE`.
    pub fn name(self) -> &'static str {
        match self {
            Tag::PutMeta => "CMD_PUT_META",
            Tag::Layerwise => "CMD_LAYERWISE",
            Tag::StoreComplete => "CMD_STORE_COMPLETE",
        }
    }

    /// The numeric tag carried on the wire.
    pub fn number(self) -> u8 {
        self as u8
    }
}

/// Where a rank is in its scheduler loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Site {
    /// At the `put_meta` call site of the step.
    PutMeta,
    /// At `evict`, about to decide (from local memory pressure) whether to poll completions.
    Evict,
    /// A follower inside `evict()`, blocked in the receive of `CMD_STORE_COMPLETE`.
    AwaitStoreComplete,
    /// At the `layerwise` call site of the step.
    Layerwise,
    /// Past the last step.
    Done,
}

/// A rank's position: step number (from 0) and call site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    /// Scheduler step, from 0.
    pub step: u8,
    /// Call site within the step.
    pub site: Site,
}

/// The fault a follower raised; the connector raises it as a `RuntimeError` and stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TagMismatch {
    /// The tag the follower's call site expected.
    pub expected: Tag,
    /// The tag that arrived first on the stream.
    pub got: Tag,
}

impl fmt::Display for TagMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tag mismatch: expected {}, got {}",
            self.expected.name(),
            self.got.number()
        )
    }
}

/// One follower: its position, the ordered stream from the leader, and a fault if it raised one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FollowerState {
    /// Where this follower is in its loop.
    pub position: Position,
    /// Messages sent by the leader and not yet received, oldest first.
    pub stream: VecDeque<Tag>,
    /// Set when a receive read a tag other than the expected one; the follower stops.
    pub fault: Option<TagMismatch>,
}

impl FollowerState {
    /// The tag this follower is blocked receiving, if it is at a receive call site.
    pub fn awaiting(&self) -> Option<Tag> {
        if self.fault.is_some() {
            return None;
        }
        match self.position.site {
            Site::PutMeta => Some(Tag::PutMeta),
            Site::AwaitStoreComplete => Some(Tag::StoreComplete),
            Site::Layerwise => Some(Tag::Layerwise),
            Site::Evict | Site::Done => None,
        }
    }
}

/// Whole-group state of the FlexKV model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FlexKvState {
    /// The leader's position (rank 0).
    pub leader: Position,
    /// Followers, index `i` is rank `i + 1`.
    pub followers: Vec<FollowerState>,
}

/// One atomic move of one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlexKvAction {
    /// The leader passes `put_meta` or `layerwise` and sends the tag to every follower.
    LeaderSend(Tag),
    /// The leader passes `evict`; with pressure it polls and sends `CMD_STORE_COMPLETE`.
    LeaderEvict {
        /// Whether the leader's local memory pressure made it call `evict()`.
        pressure: bool,
    },
    /// A follower passes `evict`; with pressure it enters the receive of `CMD_STORE_COMPLETE`.
    FollowerEvict {
        /// The follower's rank (1-based).
        rank: u8,
        /// Whether this follower's local memory pressure made it call `evict()`.
        pressure: bool,
    },
    /// A follower's blocking receive returns the oldest message of its stream.
    FollowerRecv {
        /// The follower's rank (1-based).
        rank: u8,
    },
}

/// Where in the step a rank's `evict()` (and so its completion poll) happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EvictAt {
    /// Between `put_meta` and `layerwise` (allocating for the forward pass). A follower that
    /// polls alone reads the leader's `CMD_LAYERWISE`: `expected CMD_STORE_COMPLETE, got 2`.
    BeforeLayerwise,
    /// After `layerwise` (freeing memory at the end of the step). A follower that polls alone in
    /// the last step waits for a message the leader never sends: it blocks forever.
    EndOfStep,
}

/// The FlexKV FIFO model: `followers` followers, `steps` scheduler steps per rank.
#[derive(Clone, Debug)]
pub struct FlexKvModel {
    /// Number of followers (ranks `1..=followers`).
    pub followers: u8,
    /// Number of scheduler steps every rank runs.
    pub steps: u8,
    /// The call site of `evict()` within a step, the same on every rank.
    pub evict_at: EvictAt,
}

impl FlexKvModel {
    /// The group of the FlexKV fault: a leader and two followers, two steps, eviction before
    /// `layerwise`.
    pub fn small() -> Self {
        FlexKvModel {
            followers: 2,
            steps: 2,
            evict_at: EvictAt::BeforeLayerwise,
        }
    }

    /// The call sites of one step, in order.
    fn order(&self) -> [Site; 3] {
        match self.evict_at {
            EvictAt::BeforeLayerwise => [Site::PutMeta, Site::Evict, Site::Layerwise],
            EvictAt::EndOfStep => [Site::PutMeta, Site::Layerwise, Site::Evict],
        }
    }

    /// The position after a rank has passed `passed` (a follower's `AwaitStoreComplete` counts as
    /// passing `Evict`): the next call site of the step, or the next step, or `Done`.
    fn after(&self, position: Position, passed: Site) -> Position {
        let passed = if passed == Site::AwaitStoreComplete {
            Site::Evict
        } else {
            passed
        };
        let order = self.order();
        let index = order.iter().position(|s| *s == passed);
        match index.and_then(|i| order.get(i + 1)) {
            Some(site) => Position {
                step: position.step,
                site: *site,
            },
            None if position.step + 1 >= self.steps => Position {
                step: position.step + 1,
                site: Site::Done,
            },
            None => Position {
                step: position.step + 1,
                site: Site::PutMeta,
            },
        }
    }
}

impl Model for FlexKvModel {
    type State = FlexKvState;
    type Action = FlexKvAction;

    fn init_states(&self) -> Vec<FlexKvState> {
        let start = Position {
            step: 0,
            site: Site::PutMeta,
        };
        vec![FlexKvState {
            leader: start,
            followers: (0..self.followers)
                .map(|_| FollowerState {
                    position: start,
                    stream: VecDeque::new(),
                    fault: None,
                })
                .collect(),
        }]
    }

    fn actions(&self, state: &FlexKvState, actions: &mut Vec<FlexKvAction>) {
        match state.leader.site {
            Site::PutMeta => actions.push(FlexKvAction::LeaderSend(Tag::PutMeta)),
            Site::Evict => {
                actions.push(FlexKvAction::LeaderEvict { pressure: false });
                actions.push(FlexKvAction::LeaderEvict { pressure: true });
            }
            Site::Layerwise => actions.push(FlexKvAction::LeaderSend(Tag::Layerwise)),
            Site::AwaitStoreComplete | Site::Done => {}
        }
        for (i, follower) in state.followers.iter().enumerate() {
            let rank = i as u8 + 1;
            if follower.fault.is_some() {
                continue;
            }
            if follower.position.site == Site::Evict {
                actions.push(FlexKvAction::FollowerEvict {
                    rank,
                    pressure: false,
                });
                actions.push(FlexKvAction::FollowerEvict {
                    rank,
                    pressure: true,
                });
            } else if follower.awaiting().is_some() && !follower.stream.is_empty() {
                actions.push(FlexKvAction::FollowerRecv { rank });
            }
        }
    }

    fn next_state(&self, state: &FlexKvState, action: FlexKvAction) -> Option<FlexKvState> {
        let mut next = state.clone();
        match action {
            FlexKvAction::LeaderSend(tag) => {
                for follower in &mut next.followers {
                    follower.stream.push_back(tag);
                }
                next.leader = self.after(state.leader, state.leader.site);
            }
            FlexKvAction::LeaderEvict { pressure } => {
                if pressure {
                    for follower in &mut next.followers {
                        follower.stream.push_back(Tag::StoreComplete);
                    }
                }
                next.leader = self.after(state.leader, Site::Evict);
            }
            FlexKvAction::FollowerEvict { rank, pressure } => {
                let follower = next.followers.get_mut(usize::from(rank).checked_sub(1)?)?;
                follower.position = if pressure {
                    Position {
                        step: follower.position.step,
                        site: Site::AwaitStoreComplete,
                    }
                } else {
                    self.after(follower.position, Site::Evict)
                };
            }
            FlexKvAction::FollowerRecv { rank } => {
                let follower = next.followers.get_mut(usize::from(rank).checked_sub(1)?)?;
                let expected = follower.awaiting()?;
                let got = follower.stream.pop_front()?;
                if got != expected {
                    follower.fault = Some(TagMismatch { expected, got });
                } else {
                    follower.position = self.after(follower.position, follower.position.site);
                }
            }
        }
        Some(next)
    }

    fn format_action(&self, action: &FlexKvAction) -> String {
        match action {
            FlexKvAction::LeaderSend(tag) => {
                format!("rank 0 (leader) sends {} ({}) to every follower", tag.name(), tag.number())
            }
            FlexKvAction::LeaderEvict { pressure: false } => {
                "rank 0 (leader) has no memory pressure: no evict(), no completion poll".into()
            }
            FlexKvAction::LeaderEvict { pressure: true } => {
                "rank 0 (leader) under memory pressure: evict() polls completions, sends CMD_STORE_COMPLETE (3)".into()
            }
            FlexKvAction::FollowerEvict { rank, pressure: false } => {
                format!("rank {rank} has no memory pressure: no evict(), no receive")
            }
            FlexKvAction::FollowerEvict { rank, pressure: true } => {
                format!("rank {rank} under memory pressure: evict() waits for CMD_STORE_COMPLETE")
            }
            FlexKvAction::FollowerRecv { rank } => format!("rank {rank} receives from its stream"),
        }
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("no tag mismatch", |_, state| {
                state.followers.iter().all(|f| f.fault.is_none())
            }),
            Property::<Self>::always(
                "a CMD_STORE_COMPLETE receive reads CMD_STORE_COMPLETE",
                |_, state| {
                    state
                        .followers
                        .iter()
                        .all(|f| f.fault.is_none_or(|m| m.expected != Tag::StoreComplete))
                },
            ),
            Property::<Self>::always("no receive blocks forever", |_, state| {
                state.leader.site != Site::Done
                    || state
                        .followers
                        .iter()
                        .all(|f| f.awaiting().is_none() || !f.stream.is_empty())
            }),
            Property::<Self>::sometimes("every rank finishes", |_, state| {
                state.leader.site == Site::Done
                    && state
                        .followers
                        .iter()
                        .all(|f| f.position.site == Site::Done)
            }),
        ]
    }
}

/// Renders a counterexample path as numbered lines: each action, then the faults and blocked
/// receives it produced. `trace` is what [`stateright::Checker::discovery`] returned.
pub fn render_trace(
    model: &FlexKvModel,
    trace: &stateright::Path<FlexKvState, FlexKvAction>,
) -> String {
    let mut out = String::new();
    let steps = trace.clone().into_vec();
    let mut n = 0;
    for (state, action) in steps.iter() {
        let Some(action) = action else { continue };
        n += 1;
        out.push_str(&format!("{n:>2}. {}", model.format_action(action)));
        if let FlexKvAction::FollowerRecv { rank } = action {
            if let Some(f) = state.followers.get(usize::from(*rank) - 1) {
                if let (Some(expected), Some(got)) = (f.awaiting(), f.stream.front()) {
                    out.push_str(&format!(
                        " expecting {} (its own call site), gets {} ({})",
                        expected.name(),
                        got.name(),
                        got.number()
                    ));
                }
            }
        }
        out.push('\n');
    }
    if let Some((last, _)) = steps.last() {
        for (i, f) in last.followers.iter().enumerate() {
            if let Some(fault) = f.fault {
                out.push_str(&format!("    rank {}: RuntimeError: {fault}\n", i + 1));
            } else if let Some(tag) = f.awaiting() {
                if f.stream.is_empty() && last.leader.site == Site::Done {
                    out.push_str(&format!(
                        "    rank {}: blocked forever receiving {}\n",
                        i + 1,
                        tag.name()
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_mismatch_message_matches_the_connector() {
        let fault = TagMismatch {
            expected: Tag::StoreComplete,
            got: Tag::Layerwise,
        };
        assert_eq!(
            fault.to_string(),
            "Tag mismatch: expected CMD_STORE_COMPLETE, got 2"
        );
    }

    #[test]
    fn lockstep_run_without_pressure_finishes_cleanly() {
        let model = FlexKvModel {
            followers: 1,
            steps: 1,
            evict_at: EvictAt::BeforeLayerwise,
        };
        let mut state = model.init_states().remove(0);
        for action in [
            FlexKvAction::LeaderSend(Tag::PutMeta),
            FlexKvAction::FollowerRecv { rank: 1 },
            FlexKvAction::LeaderEvict { pressure: false },
            FlexKvAction::FollowerEvict {
                rank: 1,
                pressure: false,
            },
            FlexKvAction::LeaderSend(Tag::Layerwise),
            FlexKvAction::FollowerRecv { rank: 1 },
        ] {
            state = model.next_state(&state, action).expect("action applies");
        }
        assert_eq!(state.leader.site, Site::Done);
        assert_eq!(state.followers[0].position.site, Site::Done);
        assert!(state.followers[0].fault.is_none());
    }
}
