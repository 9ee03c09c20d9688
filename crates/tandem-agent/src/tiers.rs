//! Translation between the protocol's names for tiers and tier operations (what frames carry)
//! and the store engine's (what the tiers implement). One place, so that the two never drift.

use tandem_proto::frame::TierOp;
use tandem_proto::ids::Tier;
use tandem_store::index::Move;
use tandem_store::tier::TierKind;

/// The store tier a frame's tier names.
pub fn store_tier(t: Tier) -> TierKind {
    match t {
        Tier::Host => TierKind::Host,
        Tier::Disk => TierKind::Disk,
    }
}

/// The frame's name for a store tier; `None` for tiers a frame never names (device memory).
pub fn frame_tier(k: TierKind) -> Option<Tier> {
    match k {
        TierKind::Host => Some(Tier::Host),
        TierKind::Disk => Some(Tier::Disk),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// The frame's operation for a move of the group index's plan.
pub fn tier_op(m: Move) -> TierOp {
    match m {
        Move::Demote(h) => TierOp::Demote(h),
        Move::Promote(h) => TierOp::Promote(h),
        Move::Drop(h) => TierOp::Evict(h),
    }
}

/// The store's move for a frame's tier operation.
pub fn store_move(op: TierOp) -> Move {
    match op {
        TierOp::Demote(h) => Move::Demote(h),
        TierOp::Promote(h) => Move::Promote(h),
        TierOp::Evict(h) => Move::Drop(h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::ids::BlockHash;

    #[test]
    fn round_trips() {
        for t in [Tier::Host, Tier::Disk] {
            assert_eq!(frame_tier(store_tier(t)), Some(t));
        }
        for op in [
            TierOp::Evict(BlockHash(1)),
            TierOp::Demote(BlockHash(2)),
            TierOp::Promote(BlockHash(3)),
        ] {
            assert_eq!(tier_op(store_move(op)), op);
        }
    }
}
