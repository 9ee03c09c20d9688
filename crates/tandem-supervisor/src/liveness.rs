//! Which ranks are silent, and which restarted inside the epoch, from their last heartbeats:
//! a pure judgement.
//!
//! A rank restarted inside the epoch when a heartbeat of the epoch names another
//! incarnation (process start of the rank's agent) than the one seen before in that epoch,
//! however quickly the new process came back: such a restart can be faster than one
//! heartbeat interval, so silence alone would miss it.
//!
//! A rank is silent when its last heartbeat is older than the timeout. A rank that has sent
//! nothing since the supervisor began watching the epoch (none at all, or only beats from
//! before: an agent being restarted, opening and verifying its tiers) gets the longer start-up
//! grace instead. Never reads a clock: `now_ms` and `watching_since_ms` are wall-clock ms
//! inputs.

use tandem_durable::liveness::Heartbeat;
use tandem_proto::Epoch;

/// Why a rank counts as failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Silence {
    /// The rank.
    pub rank: u32,
    /// Milliseconds since its last heartbeat, `None` when it never sent one.
    pub age_ms: Option<u64>,
}

impl Silence {
    /// A log- and report-friendly description.
    pub fn describe(&self, timeout_ms: u64) -> String {
        match self.age_ms {
            Some(age) => format!(
                "rank {} silent for {age} ms (heartbeat timeout {timeout_ms} ms)",
                self.rank
            ),
            None => format!("rank {} has sent no heartbeat", self.rank),
        }
    }
}

/// A rank whose agent process started again inside the epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reincarnation {
    /// The rank.
    pub rank: u32,
    /// The epoch it restarted inside.
    pub epoch: Epoch,
    /// The incarnation seen before in the epoch.
    pub was: u64,
    /// The incarnation its heartbeat names now.
    pub now: u64,
}

impl Reincarnation {
    /// A log- and report-friendly description.
    pub fn describe(&self) -> String {
        format!(
            "rank {} restarted inside epoch {} (heartbeat incarnation {} -> {})",
            self.rank, self.epoch, self.was, self.now
        )
    }
}

/// The ranks whose heartbeat of `epoch` names another incarnation than `known` holds for
/// them; `known` (one slot per rank, grown to `beats.len()`) then holds every incarnation
/// seen in `epoch`. Heartbeats of other epochs, and those without an incarnation (0, the
/// older form), change nothing. The caller clears `known` when the epoch moves.
pub fn changed_incarnations(
    known: &mut Vec<Option<u64>>,
    beats: &[Option<Heartbeat>],
    epoch: Epoch,
) -> Vec<Reincarnation> {
    if known.len() < beats.len() {
        known.resize(beats.len(), None);
    }
    let mut changed = Vec::new();
    for (rank, beat) in beats.iter().enumerate() {
        let Some(b) = beat else { continue };
        if b.epoch != epoch || b.incarnation == 0 {
            continue;
        }
        match known[rank].replace(b.incarnation) {
            Some(was) if was != b.incarnation => changed.push(Reincarnation {
                rank: rank as u32,
                epoch,
                was,
                now: b.incarnation,
            }),
            _ => {}
        }
    }
    changed
}

/// The ranks that are silent at `now_ms`.
pub fn silent_ranks(
    beats: &[Option<Heartbeat>],
    now_ms: u64,
    watching_since_ms: u64,
    timeout_ms: u64,
    grace_ms: u64,
) -> Vec<Silence> {
    beats
        .iter()
        .enumerate()
        .filter_map(|(rank, beat)| {
            let rank = rank as u32;
            match beat {
                Some(b) if b.unix_ms >= watching_since_ms => {
                    let age = now_ms.saturating_sub(b.unix_ms);
                    (age > timeout_ms).then_some(Silence {
                        rank,
                        age_ms: Some(age),
                    })
                }
                // Only beats from before the watch: judged like a rank still starting.
                Some(b) => {
                    (now_ms.saturating_sub(watching_since_ms) > grace_ms).then_some(Silence {
                        rank,
                        age_ms: Some(now_ms.saturating_sub(b.unix_ms)),
                    })
                }
                None => (now_ms.saturating_sub(watching_since_ms) > grace_ms)
                    .then_some(Silence { rank, age_ms: None }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(epoch: u64, incarnation: u64) -> Option<Heartbeat> {
        Some(Heartbeat {
            epoch: Epoch(epoch),
            unix_ms: 1,
            incarnation,
        })
    }

    #[test]
    fn a_new_incarnation_inside_the_epoch_is_a_restart() {
        let mut known = Vec::new();
        assert!(changed_incarnations(&mut known, &[of(4, 7), of(4, 9)], Epoch(4)).is_empty());
        // Same processes: nothing; rank 1 started again: reported once.
        assert!(changed_incarnations(&mut known, &[of(4, 7), of(4, 9)], Epoch(4)).is_empty());
        let changed = changed_incarnations(&mut known, &[of(4, 7), of(4, 10)], Epoch(4));
        assert_eq!(
            changed,
            [Reincarnation {
                rank: 1,
                epoch: Epoch(4),
                was: 9,
                now: 10
            }]
        );
        assert_eq!(
            changed[0].describe(),
            "rank 1 restarted inside epoch 4 (heartbeat incarnation 9 -> 10)"
        );
        assert!(changed_incarnations(&mut known, &[of(4, 7), of(4, 10)], Epoch(4)).is_empty());
        // Another epoch's beat, or one without an incarnation, changes nothing.
        assert!(changed_incarnations(&mut known, &[of(3, 1), of(4, 0)], Epoch(4)).is_empty());
        assert_eq!(known, [Some(7), Some(10)]);
    }

    fn beat(ms: u64) -> Option<Heartbeat> {
        Some(Heartbeat {
            epoch: Epoch(1),
            unix_ms: ms,
            incarnation: 1,
        })
    }

    #[test]
    fn stale_and_missing_ranks_are_silent_after_their_allowances() {
        let beats = [beat(10_000), beat(9_000), None];
        assert!(silent_ranks(&beats, 10_100, 0, 500, 5_000)
            .iter()
            .map(|s| s.rank)
            .eq([1, 2]));
        assert!(silent_ranks(&beats, 10_100, 8_000, 500, 5_000)
            .iter()
            .map(|s| s.rank)
            .eq([1]));
        assert!(
            silent_ranks(&beats, 10_100, 9_500, 500, 5_000).is_empty(),
            "rank 1 beat before the watch"
        );
        let s = &silent_ranks(&beats, 10_100, 0, 500, 5_000)[0];
        assert_eq!(
            s.describe(500),
            "rank 1 silent for 1100 ms (heartbeat timeout 500 ms)"
        );
        assert_eq!(
            Silence {
                rank: 2,
                age_ms: None
            }
            .describe(500),
            "rank 2 has sent no heartbeat"
        );
    }

    #[test]
    fn a_beat_from_before_the_watch_gets_the_start_up_grace() {
        // The group just restarted: an agent still opening its tiers is not judged before the
        // grace passes; one that beats again is judged by the timeout.
        assert!(silent_ranks(&[beat(1_000)], 10_400, 9_800, 500, 5_000).is_empty());
        assert_eq!(
            silent_ranks(&[beat(1_000)], 14_900, 9_800, 500, 5_000).len(),
            1
        );
        assert!(silent_ranks(&[beat(10_000)], 10_400, 9_800, 500, 5_000).is_empty());
        assert_eq!(
            silent_ranks(&[beat(10_000)], 10_600, 9_800, 500, 5_000).len(),
            1
        );
    }
}
