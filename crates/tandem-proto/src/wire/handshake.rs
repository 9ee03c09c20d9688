//! The membership handshake a rank passes to join an epoch (docs/DESIGN.md invariant 7).
//!
//! Sequence on a new peer connection: the leader sends [`Message::Challenge`] with a fresh
//! random nonce; the follower answers [`Message::Hello`] built by [`Membership::hello`]; the
//! leader checks it with [`Membership::check_hello`] and answers `Welcome` or
//! `Refused { reason }`.
//!
//! Owns the checks and the proof of the group secret. It never generates randomness (the
//! driver supplies the nonce) and never puts the secret into any message, error or log.
//!
//! [`Message::Challenge`]: super::Message::Challenge
//! [`Message::Hello`]: super::Message::Hello

use crate::fingerprint::{ConfigFingerprint, FieldMismatch};
use crate::ids::{Epoch, GroupId, Rank};
use crate::wire::message::Hello;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::BTreeSet;
use std::fmt;
use thiserror::Error;

/// The protocol version this build speaks (frame semantics, message set, handshake rules).
/// Version 2: 128-bit block hashes, and every setting the leader decides with in the
/// configuration fingerprint. Version 3: frame 0's reconciliation carries no pin list.
/// Version 4: a store or load may start without page ids (`TaskStart::page_ids` empty): each
/// rank's engine binds its own pages, and lookup pins last until the request's load or release.
/// Version 5: frames carry the leader's layerwise plans (`Frame::layerwise`).
pub const PROTOCOL_VERSION: u16 = 5;

/// 32 random bytes the leader sends in a challenge.
pub type Nonce = [u8; 32];
/// HMAC-SHA256 proof of the group secret.
pub type Proof = [u8; 32];

/// The secret every rank of a group shares. Its `Debug` form never shows the bytes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct GroupSecret(Vec<u8>);

impl GroupSecret {
    /// Wrap the secret's bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> GroupSecret {
        GroupSecret(bytes.into())
    }
}

impl fmt::Debug for GroupSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GroupSecret(<redacted>)")
    }
}

/// Why a rank was refused; each variant names the field that differs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum HandshakeError {
    /// The peers speak different protocol versions.
    #[error("protocol version differs: leader speaks {ours}, rank speaks {theirs}")]
    ProtocolVersion {
        /// The leader's version.
        ours: u16,
        /// The joining rank's version.
        theirs: u16,
    },
    /// The joining rank belongs to another group.
    #[error("group id differs: leader is in group '{ours}', rank claims group '{theirs}'")]
    GroupId {
        /// The leader's group.
        ours: GroupId,
        /// The group the rank claims.
        theirs: GroupId,
    },
    /// A configuration field differs.
    #[error(
        "configuration fingerprint differs in field {}: leader has {}, rank has {}",
        .0.field, .0.ours, .0.theirs
    )]
    Fingerprint(FieldMismatch),
    /// The rank is not a follower rank of this group (`1..world_size`).
    #[error("rank {rank} is out of range for world size {world_size}")]
    RankOutOfRange {
        /// The rank claimed.
        rank: Rank,
        /// Ranks in the group.
        world_size: u32,
    },
    /// The proof does not match the group secret (or the nonce it answers).
    #[error("bad group secret: the proof does not match")]
    BadSecret,
    /// The rank presented another epoch than the leader's.
    #[error("stale epoch: leader is at epoch {ours}, rank presented epoch {theirs}")]
    StaleEpoch {
        /// The leader's epoch.
        ours: Epoch,
        /// The epoch the rank presented.
        theirs: Epoch,
    },
    /// Another connection already holds this rank in this epoch (rank 0 is the leader's).
    #[error("rank {rank} has already joined epoch {epoch}")]
    DuplicateRank {
        /// The rank claimed.
        rank: Rank,
        /// The epoch.
        epoch: Epoch,
    },
}

/// Compute the proof: HMAC-SHA256 keyed by the group secret over
/// `nonce ‖ len(group_id) as u32 BE ‖ group_id bytes ‖ rank as u32 BE ‖ epoch as u64 BE`.
pub fn hello_proof(
    secret: &GroupSecret,
    nonce: &Nonce,
    group_id: &GroupId,
    rank: Rank,
    epoch: Epoch,
) -> Proof {
    let mut mac = new_mac(secret);
    feed(&mut mac, nonce, group_id, rank, epoch);
    mac.finalize().into_bytes().into()
}

fn new_mac(secret: &GroupSecret) -> Hmac<Sha256> {
    // HMAC accepts keys of every length, so this never fails; an empty fallback key keeps
    // the function total without a panic.
    <Hmac<Sha256> as Mac>::new_from_slice(&secret.0)
        .unwrap_or_else(|_| <Hmac<Sha256> as Mac>::new_from_slice(&[0u8; 32]).expect("32-byte key"))
}

fn feed(mac: &mut Hmac<Sha256>, nonce: &Nonce, group_id: &GroupId, rank: Rank, epoch: Epoch) {
    let gid = group_id.0.as_bytes();
    mac.update(nonce);
    mac.update(&(gid.len() as u32).to_be_bytes());
    mac.update(gid);
    mac.update(&rank.0.to_be_bytes());
    mac.update(&epoch.0.to_be_bytes());
}

/// What one side knows about the group it belongs to, for building and checking hellos.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Membership {
    /// The protocol version spoken; [`PROTOCOL_VERSION`] except in tests.
    pub protocol_version: u16,
    /// The group.
    pub group_id: GroupId,
    /// This side's configuration fingerprint.
    pub fingerprint: ConfigFingerprint,
    /// The group secret.
    pub secret: GroupSecret,
    /// The epoch this side runs in.
    pub epoch: Epoch,
    /// Ranks in the group.
    pub world_size: u32,
}

impl Membership {
    /// Follower side: the hello answering the leader's `nonce`, for rank `rank`.
    pub fn hello(&self, nonce: &Nonce, rank: Rank) -> Hello {
        Hello {
            protocol_version: self.protocol_version,
            group_id: self.group_id.clone(),
            rank,
            epoch: self.epoch,
            fingerprint: self.fingerprint.clone(),
            proof: hello_proof(&self.secret, nonce, &self.group_id, rank, self.epoch),
        }
    }

    /// Leader side: check a hello answering `nonce`, given the follower ranks already joined
    /// in this epoch. Returns the admitted rank.
    ///
    /// Checks, in order: protocol version, group id, proof of the secret (verified in
    /// constant time), epoch, rank range (`1..world_size`; rank 0 is the leader), fingerprint,
    /// duplicate rank. The first failing check is returned.
    pub fn check_hello(
        &self,
        nonce: &Nonce,
        hello: &Hello,
        joined: &BTreeSet<Rank>,
    ) -> Result<Rank, HandshakeError> {
        if hello.protocol_version != self.protocol_version {
            return Err(HandshakeError::ProtocolVersion {
                ours: self.protocol_version,
                theirs: hello.protocol_version,
            });
        }
        if hello.group_id != self.group_id {
            return Err(HandshakeError::GroupId {
                ours: self.group_id.clone(),
                theirs: hello.group_id.clone(),
            });
        }
        let mut mac = new_mac(&self.secret);
        feed(&mut mac, nonce, &hello.group_id, hello.rank, hello.epoch);
        if mac.verify_slice(&hello.proof).is_err() {
            return Err(HandshakeError::BadSecret);
        }
        if hello.epoch != self.epoch {
            return Err(HandshakeError::StaleEpoch {
                ours: self.epoch,
                theirs: hello.epoch,
            });
        }
        if hello.rank.0 >= self.world_size {
            return Err(HandshakeError::RankOutOfRange {
                rank: hello.rank,
                world_size: self.world_size,
            });
        }
        if let Some(m) = self.fingerprint.first_mismatch(&hello.fingerprint) {
            return Err(HandshakeError::Fingerprint(m));
        }
        if hello.rank == Rank(0) || joined.contains(&hello.rank) {
            return Err(HandshakeError::DuplicateRank {
                rank: hello.rank,
                epoch: self.epoch,
            });
        }
        Ok(hello.rank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint() -> ConfigFingerprint {
        ConfigFingerprint {
            world_size: 4,
            pp_size: 2,
            tp_size: 2,
            tokens_per_block: 512,
            num_layers: 32,
            num_kv_heads: 8,
            head_dim: 128,
            dtype_bytes: 2,
            shard_bytes: 1 << 20,
            host_capacity_blocks: 400,
            disk_capacity_blocks: 4096,
            max_frame_bytes: 16 << 20,
            window_steps: 8,
            frame_retention_steps: 1024,
            heartbeat_interval_ms: 100,
            heartbeat_timeout_ms: 500,
        }
    }

    fn membership() -> Membership {
        Membership {
            protocol_version: PROTOCOL_VERSION,
            group_id: GroupId("g1".into()),
            fingerprint: fingerprint(),
            secret: GroupSecret::new(b"s3cret-bytes".to_vec()),
            epoch: Epoch(3),
            world_size: 4,
        }
    }

    const NONCE: Nonce = [7; 32];

    fn check(peer: &Membership, rank: u32) -> Result<Rank, HandshakeError> {
        membership().check_hello(&NONCE, &peer.hello(&NONCE, Rank(rank)), &BTreeSet::new())
    }

    #[test]
    fn matching_hello_is_admitted() {
        assert_eq!(check(&membership(), 2), Ok(Rank(2)));
    }

    #[test]
    fn each_mismatch_names_its_field() {
        let mut p = membership();
        p.protocol_version = 9;
        assert_eq!(
            check(&p, 1),
            Err(HandshakeError::ProtocolVersion {
                ours: PROTOCOL_VERSION,
                theirs: 9
            })
        );
        // Ranks of earlier releases (64-bit hashes; pins in frame 0; no per-rank binds; no
        // layerwise plans in frames) are refused by name.
        for old in [1, 2, 3, 4] {
            let mut p = membership();
            p.protocol_version = old;
            assert_eq!(
                check(&p, 1).map_err(|e| e.to_string()),
                Err(HandshakeError::ProtocolVersion {
                    ours: 5,
                    theirs: old
                }
                .to_string())
            );
        }

        let mut p = membership();
        p.group_id = GroupId("other".into());
        assert!(matches!(check(&p, 1), Err(HandshakeError::GroupId { .. })));

        let mut p = membership();
        p.secret = GroupSecret::new(b"wrong".to_vec());
        assert_eq!(check(&p, 1), Err(HandshakeError::BadSecret));

        let mut p = membership();
        p.epoch = Epoch(2);
        assert_eq!(
            check(&p, 1),
            Err(HandshakeError::StaleEpoch {
                ours: Epoch(3),
                theirs: Epoch(2)
            })
        );

        assert_eq!(
            check(&membership(), 4),
            Err(HandshakeError::RankOutOfRange {
                rank: Rank(4),
                world_size: 4
            })
        );

        let mut p = membership();
        p.fingerprint.head_dim = 64;
        match check(&p, 1) {
            Err(HandshakeError::Fingerprint(m)) => assert_eq!(m.field, "head_dim"),
            other => panic!("expected a fingerprint mismatch, got {other:?}"),
        }
    }

    #[test]
    fn duplicate_and_leader_ranks_are_refused() {
        let m = membership();
        let joined: BTreeSet<Rank> = [Rank(1)].into();
        let dup = Err(HandshakeError::DuplicateRank {
            rank: Rank(1),
            epoch: Epoch(3),
        });
        assert_eq!(
            m.check_hello(&NONCE, &m.hello(&NONCE, Rank(1)), &joined),
            dup
        );
        let leader = Err(HandshakeError::DuplicateRank {
            rank: Rank(0),
            epoch: Epoch(3),
        });
        assert_eq!(
            m.check_hello(&NONCE, &m.hello(&NONCE, Rank(0)), &joined),
            leader
        );
    }

    #[test]
    fn proof_binds_nonce_rank_and_epoch() {
        let m = membership();
        let mut h = m.hello(&NONCE, Rank(1));
        assert_eq!(
            m.check_hello(&[8; 32], &h, &BTreeSet::new()),
            Err(HandshakeError::BadSecret)
        );
        h.rank = Rank(2);
        assert_eq!(
            m.check_hello(&NONCE, &h, &BTreeSet::new()),
            Err(HandshakeError::BadSecret)
        );
    }

    #[test]
    fn secret_is_never_shown() {
        let m = membership();
        assert!(!format!("{m:?}").contains("s3cret"));
        assert_eq!(format!("{:?}", m.secret), "GroupSecret(<redacted>)");
    }

    #[test]
    fn error_messages() {
        let cases: Vec<(HandshakeError, &str)> = vec![
            (
                HandshakeError::ProtocolVersion { ours: 1, theirs: 2 },
                "protocol version differs: leader speaks 1, rank speaks 2",
            ),
            (
                HandshakeError::GroupId { ours: GroupId("a".into()), theirs: GroupId("b".into()) },
                "group id differs: leader is in group 'a', rank claims group 'b'",
            ),
            (
                HandshakeError::Fingerprint(FieldMismatch {
                    field: "tokens_per_block".into(),
                    ours: "512".into(),
                    theirs: "256".into(),
                }),
                "configuration fingerprint differs in field tokens_per_block: leader has 512, rank has 256",
            ),
            (
                HandshakeError::RankOutOfRange { rank: Rank(5), world_size: 4 },
                "rank 5 is out of range for world size 4",
            ),
            (HandshakeError::BadSecret, "bad group secret: the proof does not match"),
            (
                HandshakeError::StaleEpoch { ours: Epoch(3), theirs: Epoch(2) },
                "stale epoch: leader is at epoch 3, rank presented epoch 2",
            ),
            (
                HandshakeError::DuplicateRank { rank: Rank(1), epoch: Epoch(3) },
                "rank 1 has already joined epoch 3",
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
        }
    }
}
