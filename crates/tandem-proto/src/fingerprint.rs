//! The configuration fingerprint a rank presents when it joins an epoch (docs/DESIGN.md invariant 7).
//!
//! Owns the list of configuration fields that every rank of a group must agree on, and the
//! comparison that names the first field that differs. It never reads configuration files:
//! `tandem-config` builds a fingerprint from a parsed configuration.

use serde::{Deserialize, Serialize};

/// The fields of a group's configuration that must be identical on every rank.
///
/// Sizes are counts (layers, heads, tokens) or bytes where the name says so.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
        let fields: [(&str, u64, u64); 9] = [
            (
                "world_size",
                self.world_size.into(),
                theirs.world_size.into(),
            ),
            ("pp_size", self.pp_size.into(), theirs.pp_size.into()),
            ("tp_size", self.tp_size.into(), theirs.tp_size.into()),
            (
                "tokens_per_block",
                self.tokens_per_block.into(),
                theirs.tokens_per_block.into(),
            ),
            (
                "num_layers",
                self.num_layers.into(),
                theirs.num_layers.into(),
            ),
            (
                "num_kv_heads",
                self.num_kv_heads.into(),
                theirs.num_kv_heads.into(),
            ),
            ("head_dim", self.head_dim.into(), theirs.head_dim.into()),
            (
                "dtype_bytes",
                self.dtype_bytes.into(),
                theirs.dtype_bytes.into(),
            ),
            ("shard_bytes", self.shard_bytes, theirs.shard_bytes),
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
}
