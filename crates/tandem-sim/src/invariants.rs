//! The checks the world runs over its own state after every event and at the end of a run
//! (rules 4 and 6 of [`crate::check`]); the rules over frames and outcomes are checked as
//! they happen, in [`crate::check::Checker`].
//!
//! Owns `after_event` and `end_checks`. Read only, apart from recording a violation.

use tandem_core::Role;
use tandem_proto::Tier;

use crate::config::LOG_SLOW_MAX_MS;
use crate::world::World;

impl World {
    /// Rule 4: every engine call that waits has a deadline the core will keep (its timer is
    /// armed, and the call is not older than its deadline, plus the log's slowest answer
    /// while an append is out); a call that does not wait was answered within its event.
    pub(crate) fn after_event(&mut self) {
        let now = self.now;
        for r in 0..self.world {
            let e = &self.engines[r as usize];
            let Some(a) = self.agents[r as usize].as_ref() else {
                if let Some((call, p)) = e.pending.iter().next() {
                    let what = format!("rank {r}: call {call} ({:?}) outlived its agent", p.req);
                    self.check.fail(4, now, what);
                }
                continue;
            };
            let timer = a.core.as_ref().and_then(|c| c.poll_timeout());
            for (call, p) in &e.pending {
                let what = match crate::engine::wait_deadline(&p.req) {
                    None => Some(format!(
                        "rank {r}: call {call} ({:?}) not answered at once",
                        p.req
                    )),
                    Some(d) => {
                        let bound =
                            p.issued_ms + d + if a.appending() { LOG_SLOW_MAX_MS } else { 0 };
                        if now > bound {
                            Some(format!(
                                "rank {r}: call {call} ({:?}) made at {} ms still waits past its deadline",
                                p.req, p.issued_ms
                            ))
                        } else if timer.is_none() && !a.appending() {
                            Some(format!(
                                "rank {r}: call {call} ({:?}) waits with no timer armed",
                                p.req
                            ))
                        } else {
                            None
                        }
                    }
                };
                if let Some(what) = what {
                    self.check.fail(4, now, what);
                    return;
                }
            }
        }
    }

    /// Rule 6, after the settle time with no fault: every task an engine saw started has its
    /// outcome, unless the supervisor gave up; then rule 7.
    pub(crate) fn end_checks(&mut self) {
        if self.sup.gave_up {
            return;
        }
        self.blocks_agree();
        let now = self.now;
        for r in 0..self.world {
            let open = self.engines[r as usize].book.open_tasks();
            if open > 0 {
                let what = format!(
                    "rank {r}'s engine still waits for {open} outcomes after the settle time"
                );
                self.check.fail(6, now, what);
            }
        }
    }
}

impl World {
    /// Rule 7, at the end of a run whose ranks all run the leader's epoch and hold every frame
    /// it sealed: every block the leader's group index holds unpinned is held by every rank's
    /// store, in the tier the index says.
    fn blocks_agree(&mut self) {
        let now = self.now;
        let Some(leader) = self.agents[0].as_ref().and_then(|a| a.core.as_ref()) else {
            return;
        };
        let Role::Leader(l) = leader.role() else {
            return;
        };
        if !leader.ready() || leader.failure().is_some() {
            return;
        }
        let epoch = leader.config().epoch;
        let sealed = l.next_step();
        let caught_up = (1..self.world).all(|r| {
            self.agents[r as usize]
                .as_ref()
                .and_then(|a| a.core.as_ref())
                .is_some_and(|c| match c.role() {
                    Role::Follower(f) => c.config().epoch == epoch && f.next_step() == sealed,
                    Role::Leader(_) => false,
                })
        });
        if !caught_up {
            return;
        }
        self.report.blocks_checked = true;
        let index = l.index();
        let mut wrong = None;
        'blocks: for tier in [Tier::Host, Tier::Disk] {
            for h in index.lru_order(tier) {
                if index.is_pinned(h) {
                    continue;
                }
                for (r, store) in self.stores.iter().enumerate() {
                    let held = store.shards.get(&h).map(|s| s.tier);
                    if held != Some(tier) {
                        wrong = Some(format!(
                            "block {h} is in the {tier:?} tier of the group index, rank {r} holds it in {held:?}"
                        ));
                        break 'blocks;
                    }
                }
            }
        }
        if let Some(what) = wrong {
            self.check.fail(7, now, what);
        }
    }
}
