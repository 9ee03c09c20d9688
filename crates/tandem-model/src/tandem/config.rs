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
    /// The driver tells the leader's core that a refused append is durable (needs a
    /// `failed_appends` budget): a frame may reveal what the log never took.
    ConfirmRefusedAppend,
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
    /// Stores the leader's engine may ask for over the whole run (tasks, or refusals).
    pub stores: u8,
    /// Duplicate shard reports the whole run may send: any rank may send its report of a task
    /// twice back to back (a retransmission) while this budget lasts.
    pub duplicate_reports: u8,
    /// Lookups the leader's engine may make over the whole run, each followed in the same
    /// step by the load of the looked-up block (started when the lookup pinned it, refused
    /// otherwise).
    pub loads: u8,
    /// Appends the completion log may refuse over the whole run (the core seals on revealing
    /// nothing new and appends the batch again).
    pub failed_appends: u8,
    /// Shard copies that may fail over the whole run (a full tier, a corrupt shard): the rank
    /// reports the shard failed and the task fails.
    pub failed_shards: u8,
    /// Host tier capacity of every rank, blocks (no disk tier): small, a store into a tier
    /// whose blocks are all pinned is refused.
    pub host_blocks: u64,
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
            loads: 0,
            failed_appends: 0,
            failed_shards: 0,
            host_blocks: 64,
            window_steps: 1,
            retention_steps: 2,
            wait_timeout_ms: 100,
            acks: true,
            variant: Variant::Correct,
        }
    }

    /// The bounds of the CI check of the task paths: a leader and one follower, one epoch,
    /// three steps, two stores and one lookup with its load (a host tier of one block, so a
    /// store into it while its block is pinned is refused, and a load whose lookup matched
    /// nothing is refused), one refused append and one failed shard copy. Restarts are
    /// [`TandemConfig::ci`]'s.
    pub fn ci_tasks() -> TandemConfig {
        TandemConfig {
            followers: 1,
            epochs: 1,
            steps_per_epoch: 3,
            stores: 2,
            duplicate_reports: 0,
            loads: 1,
            failed_appends: 1,
            failed_shards: 1,
            host_blocks: 1,
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
        let checks: [(&'static str, u64); 7] = [
            ("followers", u64::from(self.followers)),
            ("epochs", self.epochs),
            ("steps_per_epoch", self.steps_per_epoch),
            ("window_steps", self.window_steps),
            ("retention_steps", self.retention_steps),
            ("wait_timeout_ms", self.wait_timeout_ms),
            ("host_blocks", self.host_blocks),
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
