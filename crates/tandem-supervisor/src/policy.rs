//! Restart intensity and backoff, OTP `one_for_all` style, as a pure state machine.
//!
//! Owns the decision "restart now, after a delay, or give up" from the restart history and
//! the clock the caller passes in. It never sleeps, reads a clock or draws randomness: `now_ms`
//! (wall-clock ms, so that a restarted supervisor continues the same window) and `jitter`
//! (a number in `[0, 1)`) are inputs.

/// The limits: at most `max_restarts` restarts within `window_ms`, with exponential backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Restarts allowed within the window (R).
    pub max_restarts: u32,
    /// The window, ms (T).
    pub window_ms: u64,
    /// Backoff before the first restart in a window, ms.
    pub backoff_initial_ms: u64,
    /// Largest backoff, ms.
    pub backoff_max_ms: u64,
}

/// What to do about a failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Restart the group after `delay_ms` milliseconds.
    Restart {
        /// Backoff before the restart, ms.
        delay_ms: u64,
    },
    /// Past the limit: mark the group failed.
    GiveUp {
        /// Names the limit and the failures that reached it.
        reason: String,
    },
}

impl RestartPolicy {
    /// Decide about a failure at `now_ms`, given the times of earlier restarts (`history`, ms).
    /// Restarts older than the window no longer count. The backoff doubles with each restart
    /// still in the window and after `recovered_ms` (when the group last became healthy again
    /// after a restart; 0 if never), capped, then scaled by `0.5 + jitter / 2` so that groups
    /// restarted together do not stampede. A restart that reached a healthy group therefore
    /// resets the backoff, while every restart in the window still counts towards the limit.
    pub fn decide(
        &self,
        history: &[u64],
        recovered_ms: u64,
        now_ms: u64,
        jitter: f64,
        failure: &str,
    ) -> Decision {
        let in_window = |t: &&u64| now_ms.saturating_sub(**t) < self.window_ms;
        let recent = history.iter().filter(in_window).count() as u32;
        if recent >= self.max_restarts {
            return Decision::GiveUp {
                reason: format!(
                    "{recent} restarts within {} s reached the limit of {} (last failure: {failure})",
                    self.window_ms / 1000,
                    self.max_restarts
                ),
            };
        }
        let streak = history
            .iter()
            .filter(in_window)
            .filter(|t| **t > recovered_ms)
            .count() as u32;
        let exp = self
            .backoff_initial_ms
            .saturating_mul(1u64 << streak.min(32));
        let capped = exp.min(self.backoff_max_ms) as f64;
        let delay_ms = (capped * (0.5 + jitter.clamp(0.0, 1.0) / 2.0)).round() as u64;
        Decision::Restart { delay_ms }
    }

    /// The history to keep after a restart at `now_ms`: restarts inside the window, plus this one.
    pub fn record(&self, history: &[u64], now_ms: u64) -> Vec<u64> {
        let mut kept: Vec<u64> = history
            .iter()
            .copied()
            .filter(|t| now_ms.saturating_sub(*t) < self.window_ms)
            .collect();
        kept.push(now_ms);
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: RestartPolicy = RestartPolicy {
        max_restarts: 3,
        window_ms: 60_000,
        backoff_initial_ms: 100,
        backoff_max_ms: 1_000,
    };

    #[test]
    fn backoff_doubles_and_is_capped_with_jitter() {
        assert_eq!(
            P.decide(&[], 0, 1_000_000, 1.0, "x"),
            Decision::Restart { delay_ms: 100 }
        );
        assert_eq!(
            P.decide(&[], 0, 1_000_000, 0.0, "x"),
            Decision::Restart { delay_ms: 50 }
        );
        assert_eq!(
            P.decide(&[999_000], 0, 1_000_000, 1.0, "x"),
            Decision::Restart { delay_ms: 200 }
        );
        let big = RestartPolicy {
            max_restarts: 10,
            ..P
        };
        let h: Vec<u64> = (0..6).map(|i| 999_000 + i).collect();
        assert_eq!(
            big.decide(&h, 0, 1_000_000, 1.0, "x"),
            Decision::Restart { delay_ms: 1_000 }
        );
    }

    #[test]
    fn a_recovery_resets_the_backoff_but_not_the_limit() {
        let big = RestartPolicy {
            max_restarts: 10,
            ..P
        };
        let h: Vec<u64> = (0..6).map(|i| 999_000 + i).collect();
        // Recovered after the fourth restart: two restarts since, 100 × 2².
        assert_eq!(
            big.decide(&h, 999_003, 1_000_000, 1.0, "x"),
            Decision::Restart { delay_ms: 400 }
        );
        // Recovered after the last: the first backoff again.
        assert_eq!(
            big.decide(&h, 999_005, 1_000_000, 1.0, "x"),
            Decision::Restart { delay_ms: 100 }
        );
        // The limit counts every restart in the window, recovered or not.
        assert!(matches!(
            P.decide(&[999_000, 999_001, 999_002], 999_002, 1_000_000, 1.0, "x"),
            Decision::GiveUp { .. }
        ));
    }

    #[test]
    fn past_the_limit_gives_up_naming_it() {
        let h = [950_000, 960_000, 970_000];
        match P.decide(&h, 0, 1_000_000, 0.5, "rank 2 connection lost") {
            Decision::GiveUp { reason } => {
                assert_eq!(reason, "3 restarts within 60 s reached the limit of 3 (last failure: rank 2 connection lost)")
            }
            d => panic!("expected give-up, got {d:?}"),
        }
    }

    #[test]
    fn old_restarts_leave_the_window() {
        let h = [100, 200, 300];
        assert!(matches!(
            P.decide(&h, 0, 1_000_000, 0.5, "x"),
            Decision::Restart { .. }
        ));
        assert_eq!(P.record(&h, 1_000_000), vec![1_000_000]);
    }
}
