//! The size and shape of one block shard on one rank.
//!
//! Under PP a rank holds `num_layers / pp_size` layers; under TP it holds
//! `num_kv_heads / tp_size` KV heads. One block shard holds, for every layer on the rank, a K
//! and a V tensor of `kv_heads_per_rank × head_dim × tokens_per_block` elements. This module
//! only does the arithmetic; it never allocates.

use serde::Serialize;

/// Why a model layout cannot be split across the group.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// PP would give ranks different numbers of layers.
    #[error("num_layers = {num_layers} does not divide evenly by pp_size = {pp_size}")]
    LayersNotDivisible {
        /// Layers of the whole model.
        num_layers: u32,
        /// Pipeline-parallel degree.
        pp_size: u32,
    },
    /// TP would give ranks different numbers of KV heads.
    #[error("num_kv_heads = {num_kv_heads} does not divide evenly by tp_size = {tp_size}")]
    HeadsNotDivisible {
        /// KV heads of the whole model.
        num_kv_heads: u32,
        /// Tensor-parallel degree.
        tp_size: u32,
    },
    /// A size that must be positive is zero.
    #[error("{field} must be at least 1")]
    Zero {
        /// The field's name.
        field: &'static str,
    },
    /// The shard would not fit in 64-bit byte arithmetic.
    #[error("block shard size overflows: {layers_per_rank} layers × 2 × {kv_heads_per_rank} heads × {head_dim} × {dtype_bytes} bytes × {tokens_per_block} tokens")]
    Overflow {
        /// Layers on one rank.
        layers_per_rank: u32,
        /// KV heads on one rank.
        kv_heads_per_rank: u32,
        /// Elements per head.
        head_dim: u32,
        /// Bytes per element.
        dtype_bytes: u32,
        /// Tokens per block.
        tokens_per_block: u32,
    },
}

/// The shape of one block shard on every rank of a group (all ranks hold equal shards).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ShardLayout {
    /// Transformer layers held by one rank (`num_layers / pp_size`).
    pub layers_per_rank: u32,
    /// KV heads held by one rank (`num_kv_heads / tp_size`).
    pub kv_heads_per_rank: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// Bytes per element.
    pub dtype_bytes: u32,
    /// Tokens per block.
    pub tokens_per_block: u32,
    /// Bytes of one block shard:
    /// `layers_per_rank × 2 × kv_heads_per_rank × head_dim × dtype_bytes × tokens_per_block`.
    pub shard_bytes: u64,
}

impl ShardLayout {
    /// Compute the layout; refuses zero sizes and splits that are not even.
    ///
    /// # Errors
    /// [`LayoutError::Zero`], [`LayoutError::LayersNotDivisible`],
    /// [`LayoutError::HeadsNotDivisible`], [`LayoutError::Overflow`].
    pub fn new(
        num_layers: u32,
        num_kv_heads: u32,
        head_dim: u32,
        dtype_bytes: u32,
        tokens_per_block: u32,
        pp_size: u32,
        tp_size: u32,
    ) -> Result<Self, LayoutError> {
        for (field, v) in [
            ("model.num_layers", num_layers),
            ("model.num_kv_heads", num_kv_heads),
            ("model.head_dim", head_dim),
            ("model.dtype_bytes", dtype_bytes),
            ("group.tokens_per_block", tokens_per_block),
            ("group.pp_size", pp_size),
            ("group.tp_size", tp_size),
        ] {
            if v == 0 {
                return Err(LayoutError::Zero { field });
            }
        }
        if num_layers % pp_size != 0 {
            return Err(LayoutError::LayersNotDivisible {
                num_layers,
                pp_size,
            });
        }
        if num_kv_heads % tp_size != 0 {
            return Err(LayoutError::HeadsNotDivisible {
                num_kv_heads,
                tp_size,
            });
        }
        let layers_per_rank = num_layers / pp_size;
        let kv_heads_per_rank = num_kv_heads / tp_size;
        let shard_bytes = [
            2,
            kv_heads_per_rank,
            head_dim,
            dtype_bytes,
            tokens_per_block,
        ]
        .into_iter()
        .try_fold(u64::from(layers_per_rank), |acc, f| {
            acc.checked_mul(u64::from(f))
        })
        .ok_or(LayoutError::Overflow {
            layers_per_rank,
            kv_heads_per_rank,
            head_dim,
            dtype_bytes,
            tokens_per_block,
        })?;
        Ok(Self {
            layers_per_rank,
            kv_heads_per_rank,
            head_dim,
            dtype_bytes,
            tokens_per_block,
            shard_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_8b_on_pp2_tp2() {
        // 32 layers, 8 KV heads, head_dim 128, bf16, 512-token blocks.
        let l = ShardLayout::new(32, 8, 128, 2, 512, 2, 2).unwrap();
        assert_eq!(l.layers_per_rank, 16);
        assert_eq!(l.kv_heads_per_rank, 4);
        assert_eq!(l.shard_bytes, 16 * 2 * 4 * 128 * 2 * 512);
    }

    #[test]
    fn uneven_splits_are_refused_with_the_numbers() {
        let e = ShardLayout::new(30, 8, 128, 2, 512, 4, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "num_layers = 30 does not divide evenly by pp_size = 4"
        );
        let e = ShardLayout::new(32, 8, 128, 2, 512, 1, 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "num_kv_heads = 8 does not divide evenly by tp_size = 3"
        );
    }

    #[test]
    fn zero_and_overflow_are_refused() {
        let e = ShardLayout::new(32, 8, 0, 2, 512, 1, 1).unwrap_err();
        assert_eq!(e.to_string(), "model.head_dim must be at least 1");
        let e =
            ShardLayout::new(u32::MAX, u32::MAX, u32::MAX, u32::MAX, u32::MAX, 1, 1).unwrap_err();
        assert!(matches!(e, LayoutError::Overflow { .. }), "{e}");
        assert!(e.to_string().starts_with("block shard size overflows"));
    }
}
