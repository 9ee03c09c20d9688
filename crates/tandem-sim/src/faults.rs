//! The faults, drawn from the seed: which one, where, for how long, and their end.
//!
//! Owns [`Faults`] (the switches the other handlers read: a slow or partitioned link, messages
//! to duplicate, appends to refuse, a slow log) and [`Heal`]. Faults: a crash of any rank's
//! agent (the supervisor relaunches it), a crash of the supervisor (it resumes from its saved
//! state), a lost connection (what a lost message is over TCP), delayed and duplicated peer
//! messages, a partition between the leader and a follower (messages held back), the log
//! unreachable (every call refused), slow (answers late) or refusing appends (also one in the
//! middle of several appends out, answered in order), a full tier
//! (store copies fail) and a corrupt shard (its next read fails its checksum).

use rand::Rng;

use crate::world::{Ev, World};

/// What the handlers read while faults are active.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// Per rank: messages on its link get an extra delay until then, ms.
    pub slow_link_until: Vec<u64>,
    /// Per rank: messages on its link are held back until then, ms.
    pub partitioned_until: Vec<u64>,
    /// Per rank: this many next messages on its link are delivered twice.
    pub duplicate: Vec<u32>,
    /// This many next appends are refused.
    pub fail_appends: u32,
    /// The log answers late until then, ms.
    pub log_slow_until: u64,
    /// `Some(k)`: the next `k` appends are taken and the one after is refused.
    pub fail_one_after: Option<u32>,
}

/// A timed fault that ends.
#[derive(Debug)]
pub(crate) enum Heal {
    /// The log is reachable again.
    LogUp,
}

impl World {
    /// Draws one fault and injects it.
    pub(crate) fn inject_fault(&mut self) {
        let now = self.now;
        let rank = self.rng.gen_range(0..self.world);
        let follower = (self.world > 1).then(|| self.rng.gen_range(1..self.world));
        let kind = self.rng.gen_range(0..12u32);
        self.report.faults += 1;
        let what = match (kind, follower) {
            (0, _) => {
                self.crash(rank, "killed");
                format!("crash of rank {rank}'s agent")
            }
            (1, _) => {
                self.crash_supervisor();
                let back = now + self.rng.gen_range(50..=800);
                self.schedule(back, Ev::LaunchSupervisor);
                "crash of the supervisor".to_string()
            }
            (2, Some(f)) => {
                let conn = self
                    .conns
                    .iter()
                    .rev()
                    .find(|(_, c)| c.open && c.follower == f)
                    .map(|(id, _)| *id);
                if let Some(conn) = conn {
                    self.break_conn(conn);
                }
                format!("a message to or from rank {f} lost with its connection")
            }
            (3, Some(f)) => {
                self.faults.slow_link_until[f as usize] = now + self.rng.gen_range(50..=600);
                format!("messages of rank {f} delayed")
            }
            (4, Some(f)) => {
                self.faults.duplicate[f as usize] += self.rng.gen_range(1..=3);
                format!("messages of rank {f} duplicated")
            }
            (5, Some(f)) => {
                self.faults.partitioned_until[f as usize] = now + self.rng.gen_range(50..=2_000);
                format!("rank {f} partitioned from the leader")
            }
            (6, _) => {
                self.log.set_unavailable(Some("injected outage"));
                let back = now + self.rng.gen_range(20..=1_500);
                self.schedule(back, Ev::Heal(Heal::LogUp));
                "the log unreachable".to_string()
            }
            (7, _) => {
                self.faults.log_slow_until = now + self.rng.gen_range(50..=1_000);
                "the log slow".to_string()
            }
            (8, _) => {
                self.faults.fail_appends += self.rng.gen_range(1..=3);
                "appends refused".to_string()
            }
            (9, _) => {
                self.stores[rank as usize].full_until_ms = now + self.rng.gen_range(20..=500);
                format!("rank {rank}'s tier full")
            }
            (10, _) => {
                let n = self.rng.gen_range(0..64);
                match self.stores[rank as usize].corrupt(n) {
                    Some(h) => format!("rank {rank}'s shard of block {h} corrupt"),
                    None => format!("rank {rank} holds no shard to corrupt"),
                }
            }
            (11, _) => {
                // Slow answers keep several appends out; one in the middle is refused.
                self.faults.log_slow_until = now + self.rng.gen_range(200..=1_000);
                self.faults.fail_one_after = Some(self.rng.gen_range(1..=3));
                "an append refused in the middle of the pipeline".to_string()
            }
            _ => "nothing (a link fault in a group of one)".to_string(),
        };
        self.note(|| format!("FAULT: {what}"));
    }

    /// A timed fault ends.
    pub(crate) fn heal(&mut self, h: Heal) {
        match h {
            Heal::LogUp => {
                self.log.set_unavailable(None);
                self.note(|| "the log is reachable again".to_string());
            }
        }
    }
}
