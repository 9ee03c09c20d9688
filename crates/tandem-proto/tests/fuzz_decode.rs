//! Bounded fuzzing of the wire decoder (docs/RELIABILITY.md, bad input): arbitrary bytes, valid encodings
//! mutated in many ways, streams split at arbitrary points, and headers or inner lengths that
//! claim far more than is there.
//!
//! What every case checks:
//! - `decode` never panics and answers a message, "incomplete" or a typed [`CodecError`];
//! - "incomplete" only for a true prefix whose header claims no more than the limit, and
//!   `TooLarge` exactly when the header claims more than the limit;
//! - a message it accepts re-encodes to bytes that decode to the same message;
//! - no single allocation made while decoding exceeds the limit (plus serde's fixed cap on
//!   preallocation for a claimed sequence length, see [`SERDE_PREALLOC_CAP`]); a header that
//!   claims more than the limit allocates nothing at all.
//!
//! Allocations are measured by a global allocator that records the largest single request made
//! by the current thread.
//!
//! Cases per property: `TANDEM_FUZZ_CASES` (default 2,000; `scripts/fault-suite.sh` runs
//! 50,000).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use tandem_proto::wire::{HEADER_LEN, MAGIC, WIRE_VERSION};
use tandem_proto::*;

// ---------------------------------------------------------------------------------------------
// The largest single allocation made by this thread.

struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(bytes: usize) {
    let _ = LARGEST.try_with(|c| {
        if bytes > c.get() {
            c.set(bytes);
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; `note` only touches a
// const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// Run `f` and return its result with the largest single allocation (bytes) it made.
fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LARGEST.with(|c| c.set(0));
    let r = f();
    (r, LARGEST.with(|c| c.get()))
}

/// serde caps the capacity it preallocates for a sequence at 1 MiB whatever length the input
/// claims (`serde::__private::size_hint::cautious`); postcard passes the claimed length as the
/// hint. A sequence then grows only as its elements actually decode.
const SERDE_PREALLOC_CAP: usize = 1024 * 1024;

/// Limits the properties run under: the configuration's minimum (4 KiB), 64 KiB and the default
/// `protocol.max_frame_bytes` (16 MiB).
const LIMITS: [usize; 3] = [4096, 64 * 1024, 16 * 1024 * 1024];

fn cases() -> u32 {
    std::env::var("TANDEM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

// ---------------------------------------------------------------------------------------------
// Valid messages.

fn hashes() -> impl Strategy<Value = Vec<BlockHash>> {
    prop::collection::vec(any::<u128>().prop_map(BlockHash), 0..8)
}

fn task_id() -> impl Strategy<Value = TaskId> {
    (any::<u64>(), any::<u64>()).prop_map(|(epoch, seq)| TaskId { epoch, seq })
}

fn outcome() -> impl Strategy<Value = TaskOutcome> {
    let result = prop_oneof![
        Just(OutcomeResult::Ok),
        Just(OutcomeResult::Aborted),
        ".{0,16}".prop_map(|reason| OutcomeResult::Failed { reason }),
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
        prop::collection::vec(any::<u32>(), 0..8),
        prop::collection::vec(any::<bool>(), 0..8),
    )
        .prop_map(|(task, r, block_hashes, pages, disk)| TaskStart {
            task,
            request: RequestId(r),
            block_hashes,
            page_ids: pages.into_iter().map(PageId).collect(),
            tiers: disk
                .into_iter()
                .map(|d| if d { Tier::Disk } else { Tier::Host })
                .collect(),
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
    let tier_op = (0u8..3, any::<u128>()).prop_map(|(k, h)| match k {
        0 => TierOp::Evict(BlockHash(h)),
        1 => TierOp::Demote(BlockHash(h)),
        _ => TierOp::Promote(BlockHash(h)),
    });
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
        prop::collection::vec(lookup, 0..4),
        prop::collection::vec(task_start(), 0..4),
        prop::collection::vec(task_start(), 0..4),
        prop::collection::vec(outcome(), 0..4),
        prop::collection::vec(tier_op, 0..4),
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

fn message() -> impl Strategy<Value = Message> {
    let fingerprint = any::<[u32; 8]>().prop_map(|f| ConfigFingerprint {
        world_size: f[0],
        pp_size: f[1],
        tp_size: f[2],
        tokens_per_block: f[3],
        num_layers: f[4],
        num_kv_heads: f[5],
        head_dim: f[6],
        dtype_bytes: f[7],
        shard_bytes: u64::from(f[0]) << 7,
        host_capacity_blocks: u64::from(f[1]),
        disk_capacity_blocks: u64::from(f[2]),
        max_frame_bytes: f[3],
        window_steps: u64::from(f[4]),
        frame_retention_steps: u64::from(f[5]),
        heartbeat_interval_ms: u64::from(f[6]),
        heartbeat_timeout_ms: u64::from(f[7]),
    });
    let refusal = prop_oneof![
        Just(HandshakeError::BadSecret),
        (any::<u64>(), any::<u64>()).prop_map(|(a, b)| HandshakeError::StaleEpoch {
            ours: Epoch(a),
            theirs: Epoch(b)
        }),
        ("[a-z_]{1,12}", ".{0,8}", ".{0,8}").prop_map(|(field, ours, theirs)| {
            HandshakeError::Fingerprint(FieldMismatch {
                field,
                ours,
                theirs,
            })
        }),
    ];
    prop_oneof![
        any::<[u8; 32]>().prop_map(|nonce| Message::Challenge { nonce }),
        (
            any::<u16>(),
            ".{0,12}",
            any::<u32>(),
            any::<u64>(),
            fingerprint,
            any::<[u8; 32]>()
        )
            .prop_map(|(v, g, r, e, fingerprint, proof)| {
                Message::Hello(Hello {
                    protocol_version: v,
                    group_id: GroupId(g),
                    rank: Rank(r),
                    epoch: Epoch(e),
                    fingerprint,
                    proof,
                })
            }),
        (any::<u64>(), prop::option::of(any::<u64>())).prop_map(|(e, s)| Message::Welcome {
            epoch: Epoch(e),
            sealed_step: s.map(Step)
        }),
        refusal.prop_map(|reason| Message::Refused { reason }),
        frame().prop_map(Message::Frame),
        (
            any::<u64>(),
            task_id(),
            any::<u32>(),
            prop_oneof![Just(Ok(())), ".{0,12}".prop_map(Err)]
        )
            .prop_map(|(e, task, r, result)| Message::ShardReport(ShardReport {
                epoch: Epoch(e),
                task,
                rank: Rank(r),
                result
            })),
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(e, r, s)| Message::Ack(Ack {
            epoch: Epoch(e),
            rank: Rank(r),
            step: Step(s)
        })),
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(e, r, now_ms)| Message::Heartbeat(
            Heartbeat {
                epoch: Epoch(e),
                rank: Rank(r),
                now_ms
            }
        )),
    ]
}

// ---------------------------------------------------------------------------------------------
// Mutations of a valid encoding.

#[derive(Clone, Debug)]
enum Mutation {
    /// XOR one byte.
    Flip(prop::sample::Index, u8),
    /// Insert bytes.
    Insert(prop::sample::Index, Vec<u8>),
    /// Remove up to `n` bytes.
    Remove(prop::sample::Index, usize),
    /// Keep only a prefix.
    Truncate(prop::sample::Index),
    /// Copy a range somewhere else (duplicated fields, repeated varints).
    Duplicate(prop::sample::Index, usize, prop::sample::Index),
    /// Rewrite the header's length field.
    Length(LengthLie),
    /// Write a maximal varint (claims up to 2^64 − 1 elements or bytes) inside the payload.
    HugeVarint(prop::sample::Index),
}

#[derive(Clone, Debug)]
enum LengthLie {
    Zero,
    MinusOne,
    PlusOne,
    Limit,
    LimitPlusOne,
    Max,
    Any(u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let lie = prop_oneof![
        Just(LengthLie::Zero),
        Just(LengthLie::MinusOne),
        Just(LengthLie::PlusOne),
        Just(LengthLie::Limit),
        Just(LengthLie::LimitPlusOne),
        Just(LengthLie::Max),
        any::<u32>().prop_map(LengthLie::Any),
    ];
    prop_oneof![
        (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        (
            any::<prop::sample::Index>(),
            prop::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<prop::sample::Index>(), 1usize..16).prop_map(|(i, n)| Mutation::Remove(i, n)),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        (
            any::<prop::sample::Index>(),
            1usize..32,
            any::<prop::sample::Index>()
        )
            .prop_map(|(a, n, b)| Mutation::Duplicate(a, n, b)),
        lie.prop_map(Mutation::Length),
        any::<prop::sample::Index>().prop_map(Mutation::HugeVarint),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation, limit: usize) {
    let len = bytes.len();
    match m {
        Mutation::Flip(i, x) if len > 0 => bytes[i.index(len)] ^= x,
        Mutation::Insert(i, b) => {
            let at = i.index(len + 1);
            bytes.splice(at..at, b.iter().copied());
        }
        Mutation::Remove(i, n) if len > 0 => {
            let at = i.index(len);
            bytes.drain(at..(at + n).min(len));
        }
        Mutation::Truncate(i) => bytes.truncate(i.index(len + 1)),
        Mutation::Duplicate(a, n, b) if len > 0 => {
            let from = a.index(len);
            let chunk: Vec<u8> = bytes[from..(from + n).min(len)].to_vec();
            let at = b.index(len + 1);
            bytes.splice(at..at, chunk);
        }
        Mutation::Length(lie) if len >= HEADER_LEN => {
            let actual = (len - HEADER_LEN) as u32;
            let v = match lie {
                LengthLie::Zero => 0,
                LengthLie::MinusOne => actual.saturating_sub(1),
                LengthLie::PlusOne => actual.saturating_add(1),
                LengthLie::Limit => limit as u32,
                LengthLie::LimitPlusOne => (limit as u32).saturating_add(1),
                LengthLie::Max => u32::MAX,
                LengthLie::Any(x) => *x,
            };
            bytes[4..8].copy_from_slice(&v.to_be_bytes());
        }
        Mutation::HugeVarint(i) if len > HEADER_LEN => {
            let at = HEADER_LEN + i.index(len - HEADER_LEN);
            let end = (at + 10).min(len);
            for (k, b) in bytes[at..end].iter_mut().enumerate() {
                *b = if at + k + 1 == end { 0x01 } else { 0xff };
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// The check every case goes through.

/// Decode `bytes` under `limit` and check every documented promise; returns the message if one
/// was accepted.
fn check(bytes: &[u8], limit: usize) -> Result<Option<Message>, TestCaseError> {
    let (result, largest) = largest_allocation(|| decode(bytes, limit));
    let claimed = (bytes.len() >= HEADER_LEN)
        .then(|| u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize);
    let header_ok =
        bytes.len() >= 4 && bytes[0..2] == MAGIC && bytes[2..4] == WIRE_VERSION.to_be_bytes();
    match &result {
        Ok(Some((_, used))) => {
            prop_assert!(header_ok);
            prop_assert_eq!(Some(*used - HEADER_LEN), claimed);
            prop_assert!(
                *used <= bytes.len() && *used <= HEADER_LEN + limit,
                "consumed {} of {} (limit {})",
                used,
                bytes.len(),
                limit
            );
        }
        Ok(None) => {
            // Only a true prefix: too short for the magic/version/length, or a payload that is
            // not all there yet and that the limit allows.
            if let Some(c) = claimed {
                prop_assert!(header_ok);
                prop_assert!(
                    c <= limit,
                    "incomplete answered for a header claiming {} > limit {}",
                    c,
                    limit
                );
                prop_assert!(bytes.len() < HEADER_LEN + c);
            }
        }
        Err(CodecError::TooLarge {
            claimed: c,
            limit: l,
        }) => {
            prop_assert_eq!(*l, limit as u64);
            prop_assert_eq!(Some(*c as usize), claimed);
            prop_assert!(*c > *l);
            prop_assert_eq!(
                largest,
                0,
                "a header claiming {} bytes over the limit allocated {} bytes",
                c,
                largest
            );
        }
        Err(CodecError::BadMagic { found, .. }) => prop_assert_eq!(&found[..], &bytes[0..2]),
        Err(CodecError::UnsupportedVersion { theirs, .. }) => {
            prop_assert_eq!(*theirs, u16::from_be_bytes([bytes[2], bytes[3]]))
        }
        Err(CodecError::Malformed(why)) => prop_assert!(!why.is_empty()),
    }
    // The message's own shape bounds every allocation: the payload (at most the limit) or
    // serde's preallocation cap for a claimed sequence length, never the length claimed.
    prop_assert!(
        largest <= limit.max(SERDE_PREALLOC_CAP),
        "decoding {} bytes under limit {} allocated {} bytes at once",
        bytes.len(),
        limit,
        largest
    );
    let msg = match result {
        Ok(Some((m, _))) => m,
        _ => return Ok(None),
    };
    // Whatever was accepted is a well-formed message: it re-encodes and decodes to itself.
    let again = encode(&msg);
    let (back, used) = decode(&again, usize::MAX >> 1)
        .map_err(|e| TestCaseError::fail(e.to_string()))?
        .ok_or_else(|| TestCaseError::fail("re-encoding is incomplete"))?;
    prop_assert_eq!(used, again.len());
    prop_assert_eq!(&back, &msg);
    Ok(Some(msg))
}

/// A decoding loop like the agent's `MessageReader`: bytes arrive in `chunks`; every whole
/// message is taken out in order; stops at the first error.
fn stream_decode(chunks: &[&[u8]], limit: usize) -> (Vec<Message>, Option<CodecError>, usize) {
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match decode(&buf, limit) {
                Ok(Some((m, used))) => {
                    buf.drain(..used);
                    out.push(m);
                }
                Ok(None) => break,
                Err(e) => return (out, Some(e), buf.len()),
            }
        }
    }
    let left = buf.len();
    (out, None, left)
}

fn header(claimed: u32) -> Vec<u8> {
    let mut h = Vec::from(MAGIC);
    h.extend_from_slice(&WIRE_VERSION.to_be_bytes());
    h.extend_from_slice(&claimed.to_be_bytes());
    h
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary bytes, half of them behind a valid magic and version so that the payload
    /// parser is reached.
    #[test]
    fn arbitrary_bytes(body in prop::collection::vec(any::<u8>(), 0..2048), valid_header in any::<bool>(),
                       claimed in prop_oneof![Just(None), any::<u32>().prop_map(Some), (0u32..2048).prop_map(Some)],
                       limit in prop::sample::select(&LIMITS[..])) {
        let bytes = if valid_header {
            let mut b = header(claimed.unwrap_or(body.len() as u32));
            b.extend_from_slice(&body);
            b
        } else {
            body
        };
        check(&bytes, limit)?;
    }

    /// A valid message mutated one to six times.
    #[test]
    fn mutated_valid_messages(msg in message(), mutations in prop::collection::vec(mutation(), 1..7),
                              limit in prop::sample::select(&LIMITS[..])) {
        let mut bytes = encode(&msg);
        for m in &mutations {
            apply(&mut bytes, m, limit);
        }
        check(&bytes, limit)?;
    }

    /// Every valid message is accepted whole and every proper prefix of it is "incomplete".
    #[test]
    fn valid_messages_and_their_prefixes(msg in message(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&msg);
        let limit = LIMITS[2];
        prop_assert_eq!(check(&bytes, limit)?, Some(msg));
        let cut = cut.index(bytes.len());
        prop_assert_eq!(decode(&bytes[..cut], limit), Ok(None));
    }

    /// Messages back to back, split into arbitrary chunks, come out whole and in order; garbage
    /// after them ends the stream with a typed error, never with a message that was not sent.
    #[test]
    fn streams_in_arbitrary_chunks(msgs in prop::collection::vec(message(), 1..8),
                                   cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
                                   garbage in prop::collection::vec(any::<u8>(), 0..32)) {
        let mut stream: Vec<u8> = msgs.iter().flat_map(encode).collect();
        let sent = stream.len();
        let garbage_first = garbage.first().copied();
        stream.extend_from_slice(&garbage);
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        points.push(0);
        points.push(stream.len());
        points.sort_unstable();
        let chunks: Vec<&[u8]> = points.windows(2).map(|w| &stream[w[0]..w[1]]).collect();
        let (out, err, left) = stream_decode(&chunks, LIMITS[1]);
        prop_assert_eq!(&out, &msgs);
        match (garbage_first, err) {
            (None, e) => {
                prop_assert!(e.is_none());
                prop_assert_eq!(left, 0);
            }
            // Garbage that happens to open with the magic may be an incomplete prefix.
            (Some(_), None) => prop_assert!(left == stream.len() - sent && left < HEADER_LEN + LIMITS[1]),
            (Some(_), Some(_)) => {}
        }
    }

    /// A header claiming more than the limit is refused from the header alone, whatever follows,
    /// and nothing is allocated.
    #[test]
    fn huge_claims_are_refused_from_the_header(limit in prop::sample::select(&LIMITS[..]), over in any::<u32>(),
                                               tail in prop::collection::vec(any::<u8>(), 0..64)) {
        let claimed = (limit as u64 + 1 + u64::from(over) % (u64::from(u32::MAX) - limit as u64)) as u32;
        let mut bytes = header(claimed);
        bytes.extend_from_slice(&tail);
        let (r, largest) = largest_allocation(|| decode(&bytes, limit));
        prop_assert_eq!(r, Err(CodecError::TooLarge { claimed: claimed.into(), limit: limit as u64 }));
        prop_assert_eq!(largest, 0);
    }
}

/// Inside a payload the limit allows, a sequence length claiming 2^32 − 1 elements (or a
/// string claiming 2^64 − 1 bytes) is refused as malformed and allocates at most serde's
/// preallocation cap, not the claimed size. Prints the largest allocation measured.
#[test]
fn inner_lengths_beyond_the_payload_are_malformed_and_bounded() {
    // Postcard: variant 4 is `Message::Frame`; epoch 1, step 0, then the `lookups` length.
    let varint_u32_max = [0xff, 0xff, 0xff, 0xff, 0x0f];
    let mut frame = vec![4u8, 1, 0];
    frame.extend_from_slice(&varint_u32_max);
    // Variant 1 is `Message::Hello`: protocol version 1, then the group id's byte length.
    let mut hello = vec![1u8, 1];
    hello.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    // Frame with one task start whose `block_hashes` claims 2^32 − 1 hashes.
    let mut nested = vec![4u8, 1, 0, 0, 1];
    nested.extend_from_slice(&[1, 1, 7]); // task {epoch 1, seq 1}, request 7
    nested.extend_from_slice(&varint_u32_max);
    for (name, payload) in [
        ("frame.lookups", frame),
        ("hello.group_id", hello),
        ("frame.stores[0].block_hashes", nested),
    ] {
        let mut bytes = header(payload.len() as u32);
        bytes.extend_from_slice(&payload);
        for limit in LIMITS {
            let (r, largest) = largest_allocation(|| decode(&bytes, limit));
            println!("\n{name}: claims 2^32-1 or more, {} payload bytes, limit {limit}: {r:?}, largest allocation {largest} bytes", payload.len());
            assert!(matches!(r, Err(CodecError::Malformed(_))), "{name}: {r:?}");
            assert!(
                largest <= SERDE_PREALLOC_CAP,
                "{name}: allocated {largest} bytes for a {}-byte payload",
                payload.len()
            );
        }
    }
}

/// The largest single allocation over many mutated messages, as a figure for
/// docs/RELIABILITY.md: how much memory a message can make the decoder reserve at once,
/// absolutely and relative to the message's own length.
#[test]
fn amplification_figure() {
    use proptest::test_runner::{Config, TestRunner};
    let worst = std::cell::Cell::new((0usize, 0usize, 0f64));
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &(message(), prop::collection::vec(mutation(), 1..7)),
            |(msg, mutations)| {
                let mut bytes = encode(&msg);
                for m in &mutations {
                    apply(&mut bytes, m, 4096);
                }
                let (_, largest) = largest_allocation(|| decode(&bytes, 4096));
                let ratio = largest as f64 / bytes.len().max(1) as f64;
                let (w, wl, wr) = worst.get();
                worst.set((
                    w.max(largest),
                    if largest > w { bytes.len() } else { wl },
                    wr.max(ratio),
                ));
                prop_assert!(largest <= SERDE_PREALLOC_CAP);
                Ok(())
            },
        )
        .expect("every mutated message decodes within the allocation bound");
    let (w, wl, wr) = worst.get();
    println!("\nFIGURE fault=fuzz_decode_allocation cases={} largest_allocation_bytes={w} from_message_bytes={wl} worst_ratio_allocation_to_message={wr:.1}", cases());
}
