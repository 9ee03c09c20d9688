//! Heartbeat bookkeeping: when each follower was last heard from, on the leader's clock.
//!
//! Owns deadlines and the "silent" verdict. It never acts on a verdict: silence becomes a
//! [`crate::LeaderEvent::RankSilent`] for the supervisor, which restarts the group.

use crate::ids::Rank;
use std::collections::{BTreeMap, BTreeSet};

/// Last-seen times of a set of ranks and which of them were already reported silent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Liveness {
    timeout_ms: u64,
    last_seen: BTreeMap<Rank, u64>,
    silent: BTreeSet<Rank>,
}

impl Liveness {
    /// Track `ranks`, all considered seen at `start_ms`; a rank is silent once `timeout_ms`
    /// pass without a heartbeat.
    pub fn new(ranks: impl IntoIterator<Item = Rank>, start_ms: u64, timeout_ms: u64) -> Liveness {
        Liveness {
            timeout_ms,
            last_seen: ranks.into_iter().map(|r| (r, start_ms)).collect(),
            silent: BTreeSet::new(),
        }
    }

    /// `rank` was heard from at `now_ms` (ignored for untracked ranks; times never go back).
    pub fn touch(&mut self, rank: Rank, now_ms: u64) {
        if let Some(t) = self.last_seen.get_mut(&rank) {
            *t = (*t).max(now_ms);
            self.silent.remove(&rank);
        }
    }

    /// The earliest deadline of a rank not yet reported silent, in ms.
    pub fn next_deadline(&self) -> Option<u64> {
        self.last_seen
            .iter()
            .filter(|(r, _)| !self.silent.contains(r))
            .map(|(_, t)| t.saturating_add(self.timeout_ms))
            .min()
    }

    /// Ranks newly overdue at `now_ms`, with their last-seen time; each is reported once per
    /// silence.
    pub fn expire(&mut self, now_ms: u64) -> Vec<(Rank, u64)> {
        let overdue: Vec<(Rank, u64)> = self
            .last_seen
            .iter()
            .filter(|(r, t)| {
                !self.silent.contains(r) && t.saturating_add(self.timeout_ms) <= now_ms
            })
            .map(|(r, t)| (*r, *t))
            .collect();
        self.silent.extend(overdue.iter().map(|(r, _)| *r));
        overdue
    }

    /// The last time `rank` was heard from, in ms.
    pub fn last_seen(&self, rank: Rank) -> Option<u64> {
        self.last_seen.get(&rank).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_is_reported_once_until_heard_again() {
        let mut l = Liveness::new([Rank(1), Rank(2)], 100, 50);
        assert_eq!(l.next_deadline(), Some(150));
        l.touch(Rank(1), 140);
        assert_eq!(l.expire(149), vec![]);
        assert_eq!(l.expire(150), vec![(Rank(2), 100)]);
        assert_eq!(l.expire(160), vec![]);
        assert_eq!(l.next_deadline(), Some(190));
        l.touch(Rank(2), 170);
        l.touch(Rank(9), 170);
        l.touch(Rank(2), 10);
        assert_eq!(l.last_seen(Rank(2)), Some(170));
        assert_eq!(l.expire(250), vec![(Rank(1), 140), (Rank(2), 170)]);
        assert_eq!(l.next_deadline(), None);
    }
}
