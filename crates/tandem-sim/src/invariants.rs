//! The checks the world runs over its own state after every event and at the end of a run
//! (rules 4 and 6 of [`crate::check`]); the rules over frames and outcomes are checked as
//! they happen, in [`crate::check::Checker`].
//!
//! Owns `after_event` and `end_checks`. Read only, apart from recording a violation.

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
                        let bound = p.issued_ms + d + if a.appending { LOG_SLOW_MAX_MS } else { 0 };
                        if now > bound {
                            Some(format!(
                                "rank {r}: call {call} ({:?}) made at {} ms still waits past its deadline",
                                p.req, p.issued_ms
                            ))
                        } else if timer.is_none() && !a.appending {
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
    /// outcome, unless the supervisor gave up.
    pub(crate) fn end_checks(&mut self) {
        if self.sup.gave_up {
            return;
        }
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
