//! The configuration fingerprint a rank presents when it joins an epoch (docs/DESIGN.md invariant 7).
//!
//! Owns the list of configuration fields that every rank of a group must agree on, and the
//! comparison that names the first field that differs, and the [`LayoutFingerprint`] a rank's
//! persisted shards are keyed by (the store drops shards written under another layout). It
//! never reads configuration files: `tandem-config` builds both from a parsed configuration.

use serde::{Deserialize, Serialize};

/// The fields of a group's configuration that must be identical on every rank: the model
/// layout that fixes the block-shard size, and every setting the leader decides for every rank
/// with (tier capacities in its group index, the frame size limit, the window and retention,
/// heartbeat timing), since the leader only ever knows its own values.
///
/// Sizes are counts (layers, heads, tokens, blocks, steps), bytes or milliseconds where the
/// name says so.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConfigFingerprint {
    /// Ranks in the group, `pp_size × tp_size`.
    pub world_size: u32,
    /// Pipeline-parallel degree (layers are split this many ways).
    pub pp_size: u32,
    /// Tensor-parallel degree (KV heads are split this many ways).
    pub tp_size: u32,
    /// Tokens in one KV block.
    pub tokens_per_block: u32,
    /// Transformer layers of the whole model.
    pub num_layers: u32,
    /// KV heads of the whole model.
    pub num_kv_heads: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// Bytes per KV element (2 for fp16/bf16).
    pub dtype_bytes: u32,
    /// Bytes of one block shard on one rank, derived from the fields above.
    pub shard_bytes: u64,
    /// Host tier capacity of each rank, in blocks: the leader's group index places and evicts
    /// blocks for every rank with its own value.
    pub host_capacity_blocks: u64,
    /// Disk tier capacity of each rank, in blocks (0: no disk tier), used as the host's.
    pub disk_capacity_blocks: u64,
    /// Largest wire message, in bytes: a frame the leader seals within its own limit must be
    /// accepted by every follower.
    pub max_frame_bytes: u32,
    /// Steps the leader seals ahead of the slowest acknowledgement (W).
    pub window_steps: u64,
    /// Sealed frames each rank keeps for positional re-reads, in steps (at least W).
    pub frame_retention_steps: u64,
    /// Interval of a follower's heartbeats, in milliseconds.
    pub heartbeat_interval_ms: u64,
    /// Silence after which the leader judges a follower failed, in milliseconds.
    pub heartbeat_timeout_ms: u64,
}

/// One field on which two fingerprints disagree.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FieldMismatch {
    /// The field's name as it appears in [`ConfigFingerprint`].
    pub field: String,
    /// The value this side holds, rendered as text.
    pub ours: String,
    /// The value the other side presented, rendered as text.
    pub theirs: String,
}

impl ConfigFingerprint {
    /// Compare with the fingerprint a peer presented; `None` when they agree, otherwise the
    /// first differing field in declaration order.
    pub fn first_mismatch(&self, theirs: &ConfigFingerprint) -> Option<FieldMismatch> {
        let (a, b) = (self, theirs);
        let fields: [(&str, u64, u64); 16] = [
            ("world_size", a.world_size.into(), b.world_size.into()),
            ("pp_size", a.pp_size.into(), b.pp_size.into()),
            ("tp_size", a.tp_size.into(), b.tp_size.into()),
            (
                "tokens_per_block",
                a.tokens_per_block.into(),
                b.tokens_per_block.into(),
            ),
            ("num_layers", a.num_layers.into(), b.num_layers.into()),
            ("num_kv_heads", a.num_kv_heads.into(), b.num_kv_heads.into()),
            ("head_dim", a.head_dim.into(), b.head_dim.into()),
            ("dtype_bytes", a.dtype_bytes.into(), b.dtype_bytes.into()),
            ("shard_bytes", a.shard_bytes, b.shard_bytes),
            (
                "host_capacity_blocks",
                a.host_capacity_blocks,
                b.host_capacity_blocks,
            ),
            (
                "disk_capacity_blocks",
                a.disk_capacity_blocks,
                b.disk_capacity_blocks,
            ),
            (
                "max_frame_bytes",
                a.max_frame_bytes.into(),
                b.max_frame_bytes.into(),
            ),
            ("window_steps", a.window_steps, b.window_steps),
            (
                "frame_retention_steps",
                a.frame_retention_steps,
                b.frame_retention_steps,
            ),
            (
                "heartbeat_interval_ms",
                a.heartbeat_interval_ms,
                b.heartbeat_interval_ms,
            ),
            (
                "heartbeat_timeout_ms",
                a.heartbeat_timeout_ms,
                b.heartbeat_timeout_ms,
            ),
        ];
        fields
            .iter()
            .find(|(_, a, b)| a != b)
            .map(|(field, a, b)| FieldMismatch {
                field: (*field).to_string(),
                ours: a.to_string(),
                theirs: b.to_string(),
            })
    }
}

/// The model layout a rank's shards were written under: what the bytes of a shard mean. The
/// store records it in its manifest and drops every persisted shard (host and disk tier) when
/// it opens under another one, so a restart with a changed model never serves old bytes as
/// new KV, even where the shard size happens to stay the same (fp16 → fp8 with twice the
/// heads, layers traded for heads, another model of the same shape).
///
/// Sizes are counts, bytes where the name says so. The default is the empty layout (no model
/// id, every size 0), for stores opened outside an agent (tools, tests).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LayoutFingerprint {
    /// The model's name (`model.id`; empty when the configuration names none).
    pub model_id: String,
    /// Pipeline-parallel degree.
    pub pp_size: u32,
    /// Tensor-parallel degree.
    pub tp_size: u32,
    /// Tokens in one KV block.
    pub tokens_per_block: u32,
    /// Transformer layers of the whole model.
    pub num_layers: u32,
    /// KV heads of the whole model.
    pub num_kv_heads: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// Bytes per KV element.
    pub dtype_bytes: u32,
    /// Bytes of one block shard on one rank.
    pub shard_bytes: u64,
}

impl std::fmt::Display for LayoutFingerprint {
    /// `model=<id> pp=.. tp=.. tokens_per_block=.. layers=.. kv_heads=.. head_dim=..
    /// dtype_bytes=.. shard_bytes=..` (for logs that print two of them side by side).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "model={:?} pp={} tp={} tokens_per_block={} layers={} kv_heads={} head_dim={} dtype_bytes={} shard_bytes={}",
            self.model_id,
            self.pp_size,
            self.tp_size,
            self.tokens_per_block,
            self.num_layers,
            self.num_kv_heads,
            self.head_dim,
            self.dtype_bytes,
            self.shard_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ConfigFingerprint {
        ConfigFingerprint {
            world_size: 4,
            pp_size: 2,
            tp_size: 2,
            tokens_per_block: 512,
            num_layers: 32,
            num_kv_heads: 8,
            head_dim: 128,
            dtype_bytes: 2,
            shard_bytes: 16 * 2 * 4 * 128 * 2 * 512,
            host_capacity_blocks: 400,
            disk_capacity_blocks: 4096,
            max_frame_bytes: 16 << 20,
            window_steps: 8,
            frame_retention_steps: 1024,
            heartbeat_interval_ms: 100,
            heartbeat_timeout_ms: 500,
        }
    }

    #[test]
    fn equal_fingerprints_agree() {
        assert_eq!(sample().first_mismatch(&sample()), None);
    }

    #[test]
    fn mismatch_names_the_field_and_both_values() {
        let mut other = sample();
        other.tokens_per_block = 256;
        let m = sample().first_mismatch(&other).expect("differs");
        assert_eq!(m.field, "tokens_per_block");
        assert_eq!(m.ours, "512");
        assert_eq!(m.theirs, "256");
    }

    #[test]
    fn every_setting_the_leader_decides_with_is_compared() {
        type Change = fn(&mut ConfigFingerprint);
        let cases: [(&str, Change); 7] = [
            ("host_capacity_blocks", |f| f.host_capacity_blocks = 200),
            ("disk_capacity_blocks", |f| f.disk_capacity_blocks = 0),
            ("max_frame_bytes", |f| f.max_frame_bytes = 4096),
            ("window_steps", |f| f.window_steps = 4),
            ("frame_retention_steps", |f| f.frame_retention_steps = 8),
            ("heartbeat_interval_ms", |f| f.heartbeat_interval_ms = 50),
            ("heartbeat_timeout_ms", |f| f.heartbeat_timeout_ms = 5000),
        ];
        for (field, change) in cases {
            let mut other = sample();
            change(&mut other);
            let m = sample().first_mismatch(&other).expect("differs");
            assert_eq!(m.field, field);
            assert_ne!(m.ours, m.theirs);
        }
        let mut other = sample();
        other.host_capacity_blocks = 200;
        let m = sample().first_mismatch(&other).unwrap();
        assert_eq!((m.ours.as_str(), m.theirs.as_str()), ("400", "200"));
    }

    #[test]
    fn a_layout_prints_every_field() {
        let l = LayoutFingerprint {
            model_id: "llama-3-8b".into(),
            pp_size: 1,
            tp_size: 2,
            tokens_per_block: 16,
            num_layers: 32,
            num_kv_heads: 8,
            head_dim: 128,
            dtype_bytes: 2,
            shard_bytes: 4096,
        };
        assert_eq!(
            l.to_string(),
            "model=\"llama-3-8b\" pp=1 tp=2 tokens_per_block=16 layers=32 kv_heads=8 head_dim=128 dtype_bytes=2 shard_bytes=4096"
        );
    }
}
