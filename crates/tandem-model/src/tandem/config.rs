//! The bounds and variant of one Tandem model run.
//!
//! Owns the knobs that size the state space (ranks, epochs, steps, stores, duplicate reports)
//! and their validation. Must never: hold state; a config is fixed for a whole check.

use thiserror::Error;

/// How the model drives the follower ranks' engines. Everything but [`Variant::Correct`] is a
/// deliberately broken driver, used to show that the properties can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Frames reach engines through the real follower core (positional reads, epoch fencing),
    /// and each rank filters outcomes its engine already acknowledged (the core's frame-0
    /// filter and the engine client's `undelivered_outcomes`).
    Correct,
    /// FlexKV's mistake: a follower's engine applies whatever frame arrives next on its link
    /// as its next step, without asking its core for `(epoch, step)`.
    ApplyByArrival,
    /// Both per-rank filters are skipped (the cores start knowing no acknowledgement, the
    /// engine keeps none): an engine applies every outcome of a frame, including redelivered
    /// ones it already acknowledged.
    NoEngineDedup,
}

/// Bounds of the model. The defaults ([`TandemConfig::ci`]) are what the CI test checks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TandemConfig {
    /// Follower ranks (ranks `1..=followers`); rank 0 is the leader. At least 1.
    pub followers: u32,
    /// Epochs the group may run: epoch 1 plus `epochs - 1` restarts (crashes). At least 1.
    pub epochs: u64,
    /// Frames the leader may seal per epoch (steps 0..steps_per_epoch). At least 1.
    pub steps_per_epoch: u64,
    /// Stores the leader's engine may start over the whole run (tasks).
    pub stores: u8,
    /// Duplicate shard reports the whole run may send: any rank may send its report of a task
    /// twice back to back (a retransmission) while this budget lasts.
    pub duplicate_reports: u8,
    /// W: the most steps the leader may seal ahead of the slowest acknowledgement. At least 1.
    pub window_steps: u64,
    /// Frames retained by leader and followers (frames). At least 1.
    pub retention_steps: u64,
    /// A follower's bounded wait lasts this long past the model clock (ms). At least 1.
    pub wait_timeout_ms: u64,
    /// Whether follower engines acknowledge applied steps to the leader (drives the window).
    pub acks: bool,
    /// Correct driver, or one of the deliberately broken ones.
    pub variant: Variant,
}

/// A configuration the model cannot run.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// A bound that must be at least 1 is 0.
    #[error("invalid model configuration: {field} must be at least 1")]
    Zero {
        /// The field that is 0.
        field: &'static str,
    },
}

impl TandemConfig {
    /// The bounds the CI test checks exhaustively: a leader and two followers, two epochs
    /// (one crash), two steps per epoch, one store, one duplicate report from any rank, window 1,
    /// acknowledgements on.
    pub fn ci() -> TandemConfig {
        TandemConfig {
            followers: 2,
            epochs: 2,
            steps_per_epoch: 2,
            stores: 1,
            duplicate_reports: 1,
            window_steps: 1,
            retention_steps: 2,
            wait_timeout_ms: 100,
            acks: true,
            variant: Variant::Correct,
        }
    }

    /// The same bounds with another variant.
    pub fn with_variant(mut self, variant: Variant) -> TandemConfig {
        self.variant = variant;
        self
    }

    /// Ranks in the group, leader included.
    pub fn world_size(&self) -> u32 {
        self.followers.saturating_add(1)
    }

    /// Checks every bound that must be at least 1.
    ///
    /// Errors: [`ConfigError::Zero`] naming the first such field that is 0.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let checks: [(&'static str, u64); 6] = [
            ("followers", u64::from(self.followers)),
            ("epochs", self.epochs),
            ("steps_per_epoch", self.steps_per_epoch),
            ("window_steps", self.window_steps),
            ("retention_steps", self.retention_steps),
            ("wait_timeout_ms", self.wait_timeout_ms),
        ];
        match checks.iter().find(|(_, v)| *v == 0) {
            Some((field, _)) => Err(ConfigError::Zero { field }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_bound_is_named() {
        let mut c = TandemConfig::ci();
        assert_eq!(c.validate(), Ok(()));
        c.window_steps = 0;
        let e = c.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid model configuration: window_steps must be at least 1"
        );
    }
}
