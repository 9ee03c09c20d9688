//! What one agent process needs to know, derived once from the configuration and the command
//! line.

use std::net::SocketAddr;
use std::path::PathBuf;

use tandem_config::TandemConfig;
use tandem_proto::ids::{Epoch, GroupId, Rank};
use tandem_proto::wire::handshake::{GroupSecret, Membership, PROTOCOL_VERSION};
use tandem_proto::{ConfigFingerprint, LayoutFingerprint};

/// Why settings could not be derived.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The rank is outside the group.
    #[error("rank {rank} is out of range: the group has {world_size} ranks (pp_size × tp_size)")]
    RankOutOfRange {
        /// The rank asked for.
        rank: u32,
        /// Ranks in the group.
        world_size: u32,
    },
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] tandem_config::ConfigError),
    /// An address does not parse.
    #[error("invalid address {value:?} for {key}: {reason}")]
    Address {
        /// The configuration key.
        key: &'static str,
        /// The value.
        value: String,
        /// The parser's message.
        reason: String,
    },
}

/// Everything an agent needs, resolved.
#[derive(Clone, Debug)]
pub struct AgentSettings {
    /// This rank.
    pub rank: Rank,
    /// The epoch this agent joins.
    pub epoch: Epoch,
    /// Ranks in the group.
    pub world_size: u32,
    /// Bytes of one block shard.
    pub shard_bytes: u64,
    /// The model layout this rank's persisted shards are keyed by.
    pub layout: LayoutFingerprint,
    /// What the handshake checks (group, version, fingerprint, secret, epoch).
    pub membership: Membership,
    /// Steps the leader may run ahead of the slowest acknowledgement.
    pub window_steps: u64,
    /// Sealed frames retained for re-reads, steps.
    pub retention_steps: u64,
    /// Largest wire message, bytes.
    pub max_frame_bytes: usize,
    /// Handshake deadline, milliseconds.
    pub handshake_timeout_ms: u64,
    /// How long a follower keeps trying to reach the leader, milliseconds.
    pub connect_timeout_ms: u64,
    /// Heartbeat interval, milliseconds.
    pub heartbeat_interval_ms: u64,
    /// Silence after which a peer has failed, milliseconds.
    pub heartbeat_timeout_ms: u64,
    /// Where the leader listens / followers connect.
    pub leader_addr: String,
    /// This rank's engine socket.
    pub engine_socket: PathBuf,
    /// This rank's HTTP address.
    pub http_addr: SocketAddr,
    /// The full configuration (tiers, Redis, logs).
    pub config: TandemConfig,
}

impl AgentSettings {
    /// Derive the settings of `rank` at `epoch`.
    ///
    /// # Errors
    /// [`SettingsError`] for a rank outside the group, a missing secret, a bad layout or an
    /// unparsable address.
    pub fn new(config: TandemConfig, rank: u32, epoch: Epoch) -> Result<Self, SettingsError> {
        tandem_config::load::require_secret(&config)?;
        let world_size = config.group.world_size();
        if rank >= world_size {
            return Err(SettingsError::RankOutOfRange { rank, world_size });
        }
        let fingerprint: ConfigFingerprint = config
            .fingerprint()
            .map_err(tandem_config::ConfigError::from)?;
        let layout = config
            .layout_fingerprint()
            .map_err(tandem_config::ConfigError::from)?;
        let http_host = config.network.http_host.clone();
        let port = u32::from(config.network.http_base_port) + rank;
        let http_text = format!("{http_host}:{port}");
        let http_addr =
            http_text
                .parse()
                .map_err(|e: std::net::AddrParseError| SettingsError::Address {
                    key: "network.http_host/http_base_port",
                    value: http_text.clone(),
                    reason: e.to_string(),
                })?;
        let membership = Membership {
            protocol_version: PROTOCOL_VERSION,
            group_id: GroupId(config.group.id.clone()),
            fingerprint: fingerprint.clone(),
            secret: GroupSecret::new(config.group.secret.as_bytes().to_vec()),
            epoch,
            world_size,
        };
        Ok(Self {
            rank: Rank(rank),
            epoch,
            world_size,
            shard_bytes: fingerprint.shard_bytes,
            layout,
            membership,
            window_steps: config.protocol.window_steps,
            retention_steps: config.protocol.frame_retention_steps,
            max_frame_bytes: config.protocol.max_frame_bytes as usize,
            handshake_timeout_ms: config.protocol.handshake_timeout_ms,
            connect_timeout_ms: config.protocol.handshake_timeout_ms.saturating_mul(15),
            heartbeat_interval_ms: config.supervisor.heartbeat_interval_ms,
            heartbeat_timeout_ms: config.supervisor.heartbeat_timeout_ms,
            leader_addr: config.network.leader_addr.clone(),
            engine_socket: PathBuf::from(&config.network.engine_socket_dir)
                .join(format!("rank{rank}.sock")),
            http_addr,
            config,
        })
    }

    /// These settings in `epoch` (the handshake's epoch too).
    pub fn for_epoch(&self, epoch: Epoch) -> AgentSettings {
        let mut s = self.clone();
        s.epoch = epoch;
        s.membership.epoch = epoch;
        s
    }

    /// Rank 0 leads.
    pub fn is_leader(&self) -> bool {
        self.rank.0 == 0
    }
}

#[cfg(test)]
mod tests {
    /// The leader's engine receives a frame as one reply: the reply's variant (1 byte), the
    /// frame (the `Message::Frame` payload less its 1-byte variant) and the call id (at most
    /// 10 bytes). The configuration's ceiling keeps that within the engine socket's limit.
    #[test]
    fn every_frame_a_peer_accepts_fits_one_engine_reply() {
        let ceiling = tandem_config::load::MAX_FRAME_BYTES_CEILING as usize;
        assert!(ceiling + 10 <= tandem_client::wire::MAX_MESSAGE_BYTES);
    }
}
