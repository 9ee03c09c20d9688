//! What each follower engine thread did last, for the report of a case that did not finish.
//!
//! A follower thread records every session call it makes (which call, the step it named, when it
//! began) and the reply once it returns; a run of `LeaderBehind` replies is folded into one
//! entry with a count. When the leader gives up on a task, [`FollowerTrace::describe`] says
//! whether the follower was inside one call (and for how long) or kept being told that its
//! frame was not sealed, with the last frame it applied and acknowledged. Owns only the record:
//! it never decides anything and never waits.

use std::sync::Mutex;
use std::time::Instant;

/// One follower thread's last call and where its session stood.
#[derive(Debug, Default)]
pub(crate) struct FollowerTrace(Mutex<TraceState>);

#[derive(Debug, Default)]
struct TraceState {
    /// The call under way or made last (`connect`, `register_pool`, `frame`, `ack`).
    call: &'static str,
    /// The step it named.
    step: Option<u64>,
    /// When it began.
    began: Option<Instant>,
    /// Its reply, once it returned (`None`: still inside it).
    reply: Option<String>,
    /// `LeaderBehind` replies in a row, and when the first of them was asked.
    behind: u64,
    behind_since: Option<Instant>,
    /// The last frame the session applied and acknowledged.
    applied: Option<u64>,
    acked: Option<u64>,
    /// Frames applied in this case.
    frames: u64,
}

impl FollowerTrace {
    fn state(&self) -> std::sync::MutexGuard<'_, TraceState> {
        // A poisoned record is still a record: the thread that held it only wrote plain fields.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `call`, naming `step`, begins now.
    pub(crate) fn begin(&self, call: &'static str, step: Option<u64>) {
        let mut s = self.state();
        s.call = call;
        s.step = step;
        s.began = Some(Instant::now());
        s.reply = None;
    }

    /// The call under way returned `reply`; `leader_behind`: it was refused with
    /// `LeaderBehind` (counted, the run's first ask kept).
    pub(crate) fn end(&self, reply: String, leader_behind: bool) {
        let mut s = self.state();
        if leader_behind {
            if s.behind == 0 {
                s.behind_since = s.began;
            }
            s.behind += 1;
        } else {
            s.behind = 0;
            s.behind_since = None;
        }
        s.reply = Some(reply);
    }

    /// The session applied frame `step`.
    pub(crate) fn applied(&self, step: u64) {
        let mut s = self.state();
        s.applied = Some(step);
        s.frames += 1;
    }

    /// The session acknowledged up to `step`.
    pub(crate) fn acked(&self, step: u64) {
        self.state().acked = Some(step);
    }

    /// One line: the call under way (and for how long) or the last reply (with the run of
    /// `LeaderBehind` replies), then the last frame applied and acknowledged.
    pub(crate) fn describe(&self, rank: u32) -> String {
        let s = self.state();
        let ms = |t: Option<Instant>| t.map_or(0, |t| t.elapsed().as_millis());
        let step = s.step.map_or(String::new(), |st| format!(" step {st}"));
        let call = match &s.reply {
            None => format!("inside {}({}) for {} ms", s.call, step.trim(), ms(s.began)),
            Some(r) if s.behind > 0 => format!(
                "last call {}({}) → {r}; {} LeaderBehind replies in a row over the last {} ms",
                s.call,
                step.trim(),
                s.behind,
                ms(s.behind_since)
            ),
            Some(r) => format!(
                "last call {}({}) → {r}, {} ms ago",
                s.call,
                step.trim(),
                ms(s.began)
            ),
        };
        let opt = |v: Option<u64>| v.map_or("none".to_string(), |v| v.to_string());
        format!(
            "rank {rank} engine: {call}; applied step {}, acknowledged step {}, {} frames applied in this case",
            opt(s.applied),
            opt(s.acked),
            s.frames
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_under_way_and_a_run_of_leader_behind_are_told_apart() {
        let t = FollowerTrace::default();
        t.begin("frame", Some(345));
        assert!(
            t.describe(1).contains("inside frame(step 345)"),
            "{}",
            t.describe(1)
        );
        t.end("LeaderBehind".into(), true);
        t.begin("frame", Some(345));
        t.end("LeaderBehind".into(), true);
        let d = t.describe(1);
        assert!(d.contains("2 LeaderBehind replies in a row"), "{d}");
        t.begin("frame", Some(345));
        t.end("frame 345".into(), false);
        t.applied(345);
        t.acked(345);
        let d = t.describe(1);
        assert!(!d.contains("LeaderBehind"), "{d}");
        assert!(
            d.contains("applied step 345, acknowledged step 345, 1 frames"),
            "{d}"
        );
    }
}
