//! What an agent reports about its epoch on `/status` and `/readyz`: the core's status and
//! the process id.

use serde::Serialize;

/// One rank's view of its epoch ([`tandem_core::RankStatus`], flattened) and this agent's
/// process id (for operators and fault-injection tools).
#[derive(Clone, Debug, Serialize)]
pub struct AgentStatus {
    /// The core's status.
    #[serde(flatten)]
    pub rank: tandem_core::RankStatus,
    /// The agent's process id.
    pub pid: u32,
}

impl AgentStatus {
    /// Ready in this epoch.
    pub fn ready(&self) -> bool {
        self.rank.ready
    }
}
