//! Which `ProtocolActor` is current. The engine endpoint, the HTTP handlers and the leader's
//! listener outlive epochs; each request goes to the actor of the epoch running now, or is
//! answered "not ready" between epochs.

use std::sync::{Arc, RwLock};

use actix::Addr;

use crate::protocol::ProtocolActor;

/// A shared handle on the current epoch's protocol actor.
#[derive(Clone, Default)]
pub struct Router(Arc<RwLock<Option<Addr<ProtocolActor>>>>);

impl Router {
    /// The current actor, if an epoch is running.
    pub fn current(&self) -> Option<Addr<ProtocolActor>> {
        self.0.read().ok().and_then(|g| g.clone())
    }

    /// Switch to `actor` (or to none, between epochs).
    pub fn set(&self, actor: Option<Addr<ProtocolActor>>) {
        if let Ok(mut g) = self.0.write() {
            *g = actor;
        }
    }
}
