//! `GetIndexBlocks`: the leader's group index as a router should see it, for `/index` (what a
//! KV cache event subscriber's view is compared with).

use actix::{Context, Handler, Message, MessageResult};
use tandem_core::Role;
use tandem_proto::{BlockHash, Epoch, Tier};

use super::ProtocolActor;

/// Ask rank 0's protocol actor for every complete block of its group index, with its tier;
/// `None` on a follower.
#[derive(Message)]
#[rtype(result = "Option<(Epoch, Vec<(BlockHash, Tier)>)>")]
pub struct GetIndexBlocks;

impl Handler<GetIndexBlocks> for ProtocolActor {
    type Result = MessageResult<GetIndexBlocks>;
    /// The leader's complete blocks, sorted by hash; `None` on a follower.
    fn handle(&mut self, _: GetIndexBlocks, _: &mut Context<Self>) -> Self::Result {
        let Role::Leader(l) = self.core.role() else {
            return MessageResult(None);
        };
        let index = l.index();
        let mut blocks: Vec<_> = Tier::PLACED
            .into_iter()
            .flat_map(|t| index.lru_order(t).into_iter().map(move |h| (h, t)))
            .filter(|(h, _)| index.contains(*h))
            .collect();
        blocks.sort();
        MessageResult(Some((l.leader().epoch(), blocks)))
    }
}
