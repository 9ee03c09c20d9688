//! Property tests of the codec: round trip of arbitrary messages, arbitrary bytes never
//! panic and never yield a length above the limit, truncated input is incomplete or an error.

use proptest::prelude::*;
use tandem_proto::wire::{HEADER_LEN, MAGIC, WIRE_VERSION};
use tandem_proto::*;

fn hashes() -> impl Strategy<Value = Vec<BlockHash>> {
    prop::collection::vec(any::<u128>().prop_map(BlockHash), 0..6)
}

fn task_id() -> impl Strategy<Value = TaskId> {
    (any::<u64>(), any::<u64>()).prop_map(|(epoch, seq)| TaskId { epoch, seq })
}

fn outcome() -> impl Strategy<Value = TaskOutcome> {
    let result = prop_oneof![
        Just(OutcomeResult::Ok),
        Just(OutcomeResult::Aborted),
        ".{0,12}".prop_map(|reason| OutcomeResult::Failed { reason }),
    ];
    let kind = prop_oneof![Just(TaskKind::Store), Just(TaskKind::Load)];
    (task_id(), kind, any::<u64>(), result).prop_map(|(task, kind, r, result)| TaskOutcome {
        task,
        kind,
        request: RequestId(r),
        result,
    })
}

fn task_start() -> impl Strategy<Value = TaskStart> {
    (
        task_id(),
        any::<u64>(),
        hashes(),
        prop::collection::vec(any::<u32>(), 0..6),
        prop::collection::vec(any::<bool>(), 0..6),
    )
        .prop_map(|(task, r, block_hashes, pages, on_disk)| TaskStart {
            task,
            request: RequestId(r),
            block_hashes,
            page_ids: pages.into_iter().map(PageId).collect(),
            tiers: on_disk
                .into_iter()
                .map(|d| if d { Tier::Disk } else { Tier::Host })
                .collect(),
        })
}

fn tier_op() -> impl Strategy<Value = TierOp> {
    (0u8..3, any::<u128>()).prop_map(|(k, h)| match k {
        0 => TierOp::Evict(BlockHash(h)),
        1 => TierOp::Demote(BlockHash(h)),
        _ => TierOp::Promote(BlockHash(h)),
    })
}

fn frame() -> impl Strategy<Value = Frame> {
    let lookup = (any::<u64>(), hashes(), any::<u32>(), any::<bool>()).prop_map(
        |(r, block_hashes, matched_blocks, pinned)| LookupResult {
            request: RequestId(r),
            block_hashes,
            matched_blocks,
            pinned,
        },
    );
    let rec = (
        prop::collection::vec(outcome(), 0..3),
        prop::collection::vec(outcome(), 0..3),
    )
        .prop_map(|(redelivered, aborted)| Reconciliation {
            redelivered,
            aborted,
        });
    (
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec(lookup, 0..3),
        prop::collection::vec(task_start(), 0..3),
        prop::collection::vec(task_start(), 0..3),
        prop::collection::vec(outcome(), 0..3),
        prop::collection::vec(tier_op(), 0..4),
        prop::option::of(rec),
    )
        .prop_map(
            |(e, s, lookups, stores, loads, finished, tier_ops, reconciliation)| Frame {
                epoch: Epoch(e),
                step: Step(s),
                lookups,
                stores,
                // The first load, if any, started layerwise.
                layerwise: loads
                    .iter()
                    .take(1)
                    .map(|t| tandem_proto::LayerwiseLoad::ascending(t.task, 16, s % 1000))
                    .collect(),
                loads,
                finished,
                tier_ops,
                reconciliation,
            },
        )
}

fn fingerprint() -> impl Strategy<Value = ConfigFingerprint> {
    (any::<[u32; 8]>(), any::<u64>()).prop_map(|(f, shard_bytes)| ConfigFingerprint {
        world_size: f[0],
        pp_size: f[1],
        tp_size: f[2],
        tokens_per_block: f[3],
        num_layers: f[4],
        num_kv_heads: f[5],
        head_dim: f[6],
        dtype_bytes: f[7],
        shard_bytes,
        host_capacity_blocks: u64::from(f[1]),
        disk_capacity_blocks: u64::from(f[2]),
        max_frame_bytes: f[3],
        window_steps: u64::from(f[4]),
        frame_retention_steps: u64::from(f[5]),
        heartbeat_interval_ms: u64::from(f[6]),
        heartbeat_timeout_ms: u64::from(f[7]),
    })
}

fn handshake_error() -> impl Strategy<Value = HandshakeError> {
    prop_oneof![
        (any::<u16>(), any::<u16>())
            .prop_map(|(ours, theirs)| HandshakeError::ProtocolVersion { ours, theirs }),
        (".{0,8}", ".{0,8}").prop_map(|(a, b)| HandshakeError::GroupId {
            ours: GroupId(a),
            theirs: GroupId(b)
        }),
        ("[a-z_]{1,12}", ".{0,8}", ".{0,8}").prop_map(|(field, ours, theirs)| {
            HandshakeError::Fingerprint(FieldMismatch {
                field,
                ours,
                theirs,
            })
        }),
        (any::<u32>(), any::<u32>()).prop_map(|(r, w)| HandshakeError::RankOutOfRange {
            rank: Rank(r),
            world_size: w
        }),
        Just(HandshakeError::BadSecret),
        (any::<u64>(), any::<u64>()).prop_map(|(a, b)| HandshakeError::StaleEpoch {
            ours: Epoch(a),
            theirs: Epoch(b)
        }),
        (any::<u32>(), any::<u64>()).prop_map(|(r, e)| HandshakeError::DuplicateRank {
            rank: Rank(r),
            epoch: Epoch(e)
        }),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    let report_result = prop_oneof![Just(Ok(())), ".{0,12}".prop_map(Err)];
    prop_oneof![
        any::<[u8; 32]>().prop_map(|nonce| Message::Challenge { nonce }),
        (
            any::<u16>(),
            ".{0,10}",
            any::<u32>(),
            any::<u64>(),
            fingerprint(),
            any::<[u8; 32]>()
        )
            .prop_map(|(v, g, r, e, fingerprint, proof)| Message::Hello(Hello {
                protocol_version: v,
                group_id: GroupId(g),
                rank: Rank(r),
                epoch: Epoch(e),
                fingerprint,
                proof,
            })),
        (any::<u64>(), prop::option::of(any::<u64>())).prop_map(|(e, s)| Message::Welcome {
            epoch: Epoch(e),
            sealed_step: s.map(Step)
        }),
        handshake_error().prop_map(|reason| Message::Refused { reason }),
        frame().prop_map(Message::Frame),
        (any::<u64>(), task_id(), any::<u32>(), report_result).prop_map(|(e, task, r, result)| {
            Message::ShardReport(ShardReport {
                epoch: Epoch(e),
                task,
                rank: Rank(r),
                result,
            })
        }),
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(e, r, s)| Message::Ack(Ack {
            epoch: Epoch(e),
            rank: Rank(r),
            step: Step(s)
        })),
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(e, r, now_ms)| {
            Message::Heartbeat(Heartbeat {
                epoch: Epoch(e),
                rank: Rank(r),
                now_ms,
            })
        }),
    ]
}

const LIMIT: usize = 64 * 1024;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn round_trip(msg in message()) {
        let bytes = encode(&msg);
        let (back, used) = decode(&bytes, LIMIT).unwrap().unwrap();
        prop_assert_eq!(back, msg);
        prop_assert_eq!(used, bytes.len());
    }

    #[test]
    fn truncated_input_is_incomplete(msg in message(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&msg);
        let cut = cut.index(bytes.len());
        prop_assert_eq!(decode(&bytes[..cut], LIMIT), Ok(None));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256),
                                   limit in 0usize..512) {
        check_decode(&bytes, limit)?;
    }

    #[test]
    fn arbitrary_payloads_behind_a_valid_header_never_panic(
        payload in prop::collection::vec(any::<u8>(), 0..256),
        claimed in prop_oneof![Just(None), any::<u32>().prop_map(Some)],
        limit in 0usize..512,
    ) {
        let mut bytes = Vec::from(MAGIC);
        bytes.extend_from_slice(&WIRE_VERSION.to_be_bytes());
        let len = claimed.unwrap_or(payload.len() as u32);
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend_from_slice(&payload);
        check_decode(&bytes, limit)?;
    }

    #[test]
    fn corrupted_messages_never_panic(msg in message(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        let mut bytes = encode(&msg);
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= b;
        }
        check_decode(&bytes, LIMIT)?;
    }
}

/// Decoding returns a value, "incomplete" or a typed error; a value never claims more than
/// the limit plus the header, and an incomplete answer never comes for a header that claims
/// more than the limit.
fn check_decode(bytes: &[u8], limit: usize) -> Result<(), TestCaseError> {
    match decode(bytes, limit) {
        Ok(Some((_, used))) => {
            prop_assert!(used <= bytes.len());
            prop_assert!(used <= HEADER_LEN + limit);
        }
        Ok(None) => {
            if bytes.len() >= HEADER_LEN {
                let claimed = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
                prop_assert!(claimed as usize <= limit);
                prop_assert!(bytes.len() < HEADER_LEN + claimed as usize);
            }
        }
        Err(CodecError::TooLarge { claimed, limit: l }) => {
            prop_assert_eq!(l, limit as u64);
            prop_assert!(claimed > l);
        }
        Err(_) => {}
    }
    Ok(())
}
