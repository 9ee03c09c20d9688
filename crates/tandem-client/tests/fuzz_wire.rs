//! Bounded fuzzing of the engine endpoint's framing (docs/RELIABILITY.md, bad input): the 4-byte length
//! header plus postcard payload that engines and agents exchange over the Unix socket.
//!
//! What every case checks:
//! - `read_message` never panics and fails only with a typed [`WireError`]: `TooLarge` exactly
//!   when the header claims more than [`MAX_MESSAGE_BYTES`], `Io` (end of stream) for a
//!   truncated message, `Malformed` for a payload that is not the expected type;
//! - a header over the limit is refused before anything is allocated for it, and no
//!   allocation ever exceeds the limit;
//! - whatever is accepted re-encodes to a message that reads back equal;
//! - messages back to back, delivered a few bytes per read, come out whole and in order;
//! - call ids (issue 19): a message carrying one decodes to its body and exactly that id, a bare
//!   message to its body and none, and a reader that knows nothing of call ids still reads the
//!   body; bytes cut out of a stream of tagged messages at any point come out whole, in order,
//!   each with its own id.
//!
//! Allocations are measured by a global allocator that records the largest single request made
//! by the current thread. Cases per property: `TANDEM_FUZZ_CASES` (default 2,000).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Read;

use proptest::prelude::*;
use tandem_client::api::{AgentError, BindError, BufferSource, CallId, EngineReply, EngineRequest};
use tandem_client::wire::{
    check_len, decode, decode_call, encode, encode_call, read_call, read_message, split_message,
    WireError, MAX_MESSAGE_BYTES,
};
use tandem_proto::frame::{Frame, LookupResult, OutcomeResult, TaskOutcome, TaskStart};
use tandem_proto::ids::{BlockHash, Epoch, PageId, RequestId, Step, TaskId, TaskKind, Tier};

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

fn cases() -> u32 {
    std::env::var("TANDEM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

// ---------------------------------------------------------------------------------------------
// Valid requests and replies.

fn hashes() -> impl Strategy<Value = Vec<BlockHash>> {
    prop::collection::vec(any::<u128>().prop_map(BlockHash), 0..8)
}

fn pages() -> impl Strategy<Value = Vec<PageId>> {
    prop::collection::vec(any::<u32>().prop_map(PageId), 0..8)
}

fn request() -> impl Strategy<Value = EngineRequest> {
    let e = any::<u64>().prop_map(Epoch);
    let s = any::<u64>().prop_map(Step);
    prop_oneof![
        any::<u32>().prop_map(|rank| EngineRequest::Hello { rank }),
        (prop::option::of(".{0,40}"), any::<u64>(), any::<u64>()).prop_map(
            |(path, size_bytes, page_size_bytes)| {
                EngineRequest::RegisterBuffer {
                    source: path.map_or(BufferSource::Descriptor, BufferSource::Path),
                    size_bytes,
                    page_size_bytes,
                }
            }
        ),
        (
            any::<u32>(),
            prop::collection::vec(any::<u8>(), 0..80),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(ordinal, ipc_handle, pages, page_size_bytes)| {
                EngineRequest::RegisterDevice {
                    ordinal,
                    ipc_handle,
                    pages,
                    page_size_bytes,
                }
            }),
        (e.clone(), s.clone(), any::<u64>(), hashes()).prop_map(
            |(epoch, step, r, block_hashes)| EngineRequest::Lookup {
                epoch,
                step,
                request: RequestId(r),
                block_hashes
            }
        ),
        (e.clone(), s.clone(), any::<u64>(), hashes(), pages()).prop_map(
            |(epoch, step, r, block_hashes, page_ids)| EngineRequest::Store {
                epoch,
                step,
                request: RequestId(r),
                block_hashes,
                page_ids
            }
        ),
        (e.clone(), s.clone(), any::<u64>(), hashes(), pages()).prop_map(
            |(epoch, step, r, block_hashes, page_ids)| EngineRequest::Load {
                epoch,
                step,
                request: RequestId(r),
                block_hashes,
                page_ids
            }
        ),
        (e.clone(), s.clone(), any::<u64>()).prop_map(|(epoch, step, deadline_ms)| {
            EngineRequest::EndStep {
                epoch,
                step,
                deadline_ms,
            }
        }),
        (e.clone(), s.clone(), any::<u64>()).prop_map(|(epoch, step, deadline_ms)| {
            EngineRequest::Frame {
                epoch,
                step,
                deadline_ms,
            }
        }),
        (e.clone(), s).prop_map(|(epoch, step)| EngineRequest::Ack { epoch, step }),
        any::<(u32, u16)>().prop_map(|(rank, protocol_version)| EngineRequest::HelloVersioned {
            rank,
            protocol_version
        }),
        (e.clone(), any::<(u64, u64)>(), pages()).prop_map(|(epoch, (te, seq), page_ids)| {
            EngineRequest::Bind {
                epoch,
                task: TaskId { epoch: te, seq },
                page_ids,
            }
        }),
        (e, any::<u64>()).prop_map(|(epoch, r)| EngineRequest::Release {
            epoch,
            request: RequestId(r)
        }),
        Just(EngineRequest::FrameRing),
    ]
}

fn outcome() -> impl Strategy<Value = TaskOutcome> {
    let result = prop_oneof![
        Just(OutcomeResult::Ok),
        Just(OutcomeResult::Aborted),
        ".{0,16}".prop_map(|reason| OutcomeResult::Failed { reason })
    ];
    (any::<(u64, u64, u64)>(), any::<bool>(), result).prop_map(
        |((epoch, seq, r), store, result)| TaskOutcome {
            task: TaskId { epoch, seq },
            kind: if store {
                TaskKind::Store
            } else {
                TaskKind::Load
            },
            request: RequestId(r),
            result,
        },
    )
}

fn task_start() -> impl Strategy<Value = TaskStart> {
    (any::<(u64, u64, u64)>(), hashes(), pages()).prop_map(
        |((epoch, seq, r), block_hashes, page_ids)| TaskStart {
            task: TaskId { epoch, seq },
            request: RequestId(r),
            tiers: block_hashes
                .iter()
                .map(|h| if h.0 % 2 == 0 { Tier::Host } else { Tier::Disk })
                .collect(),
            block_hashes,
            page_ids,
        },
    )
}

fn frame() -> impl Strategy<Value = Frame> {
    (
        any::<(u64, u64)>(),
        prop::collection::vec(task_start(), 0..3),
        prop::collection::vec(task_start(), 0..3),
        prop::collection::vec(outcome(), 0..4),
    )
        .prop_map(|((e, s), stores, loads, finished)| {
            let mut f = Frame::empty(Epoch(e), Step(s));
            f.stores = stores;
            f.loads = loads;
            f.finished = finished;
            f
        })
}

fn agent_error() -> impl Strategy<Value = AgentError> {
    prop_oneof![
        any::<u32>().prop_map(|rank| AgentError::NotLeader { rank }),
        any::<(u64, u64)>().prop_map(|(a, b)| AgentError::StaleEpoch {
            ours: Epoch(a),
            theirs: Epoch(b)
        }),
        (any::<(u32, u64, u64)>(), prop::option::of(any::<u64>())).prop_map(|((rank, e, w), s)| {
            AgentError::LeaderBehind {
                rank,
                epoch: Epoch(e),
                wanted: Step(w),
                sealed: s.map(Step),
            }
        }),
        any::<(u64, u64, u64)>().prop_map(|(e, w, o)| AgentError::FrameExpired {
            epoch: Epoch(e),
            wanted: Step(w),
            oldest: Step(o)
        }),
        ".{0,24}".prop_map(|reason| AgentError::NotReady { reason }),
        ".{0,24}".prop_map(|reason| AgentError::BadRequest { reason }),
        ".{0,24}".prop_map(|reason| AgentError::Buffer { reason }),
        any::<(u64, u64)>().prop_map(|(bytes, limit)| AgentError::FrameTooLarge { bytes, limit }),
        any::<(u16, u16)>()
            .prop_map(|(agent, engine)| AgentError::ProtocolVersion { agent, engine }),
        bind_error().prop_map(AgentError::Bind),
    ]
}

fn bind_error() -> impl Strategy<Value = BindError> {
    let t = any::<(u64, u64)>().prop_map(|(epoch, seq)| TaskId { epoch, seq });
    prop_oneof![
        t.clone().prop_map(|task| BindError::UnknownTask { task }),
        (t.clone(), any::<(u32, u32)>()).prop_map(|(task, (blocks, pages))| {
            BindError::WrongCount {
                task,
                blocks,
                pages,
            }
        }),
        (t.clone(), any::<(u32, u64)>()).prop_map(|(task, (page, pool_pages))| {
            BindError::PageOutOfRange {
                task,
                page,
                pool_pages,
            }
        }),
        t.clone().prop_map(|task| BindError::AlreadyBound { task }),
        (t, any::<u64>()).prop_map(|(task, bind_timeout_ms)| BindError::Expired {
            task,
            bind_timeout_ms
        }),
    ]
}

fn reply() -> impl Strategy<Value = EngineReply> {
    prop_oneof![
        any::<(u64, u32, u32, u64, u64)>().prop_map(|(e, rank, world_size, shard_bytes, n)| {
            EngineReply::Welcome {
                epoch: Epoch(e),
                rank,
                world_size,
                shard_bytes,
                next_step: Step(n),
            }
        }),
        any::<u64>().prop_map(|pages| EngineReply::Registered { pages }),
        (any::<u64>(), hashes(), any::<u32>(), any::<bool>()).prop_map(
            |(r, block_hashes, matched_blocks, pinned)| EngineReply::Lookup(LookupResult {
                request: RequestId(r),
                block_hashes,
                matched_blocks,
                pinned
            })
        ),
        any::<(u64, u64)>().prop_map(|(epoch, seq)| EngineReply::Started {
            task: TaskId { epoch, seq }
        }),
        frame().prop_map(|f| EngineReply::Frame(Box::new(f))),
        Just(EngineReply::Acked),
        agent_error().prop_map(EngineReply::Error),
        any::<(u64, u64)>().prop_map(|(epoch, seq)| EngineReply::Bound {
            task: TaskId { epoch, seq }
        }),
        any::<u32>().prop_map(|blocks| EngineReply::Released { blocks }),
        any::<(u64, u64, u32, u32)>().prop_map(|(epoch, seq, layer, layers_ready)| {
            EngineReply::LayerReady {
                task: TaskId { epoch, seq },
                layer,
                layers_ready,
            }
        }),
        any::<(u32, u32)>()
            .prop_map(|(slots, slot_bytes)| EngineReply::FrameRing { slots, slot_bytes }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Mutations and the check.

#[derive(Clone, Debug)]
enum Mutation {
    Flip(prop::sample::Index, u8),
    Insert(prop::sample::Index, Vec<u8>),
    Remove(prop::sample::Index, usize),
    Truncate(prop::sample::Index),
    /// Rewrite the length header: 0, ±1, the limit, the limit + 1, `u32::MAX` or anything.
    Length(u8, u32),
    /// A maximal varint inside the payload.
    HugeVarint(prop::sample::Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        (
            any::<prop::sample::Index>(),
            prop::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<prop::sample::Index>(), 1usize..16).prop_map(|(i, n)| Mutation::Remove(i, n)),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        (0u8..7, any::<u32>()).prop_map(|(k, v)| Mutation::Length(k, v)),
        any::<prop::sample::Index>().prop_map(Mutation::HugeVarint),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
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
        Mutation::Length(k, any) if len >= 4 => {
            let actual = (len - 4) as u32;
            let max = MAX_MESSAGE_BYTES as u32;
            let v = match k {
                0 => 0,
                1 => actual.saturating_sub(1),
                2 => actual.saturating_add(1),
                3 => max,
                4 => max + 1,
                5 => u32::MAX,
                _ => *any,
            };
            bytes[0..4].copy_from_slice(&v.to_be_bytes());
        }
        Mutation::HugeVarint(i) if len > 4 => {
            let at = 4 + i.index(len - 4);
            let end = (at + 10).min(len);
            for (k, b) in bytes[at..end].iter_mut().enumerate() {
                *b = if at + k + 1 == end { 0x01 } else { 0xff };
            }
        }
        _ => {}
    }
}

/// Read one `T` from `bytes` and check every documented promise; the message if accepted.
fn check<T>(bytes: &[u8]) -> Result<Option<T>, TestCaseError>
where
    T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug,
{
    let (result, largest) = largest_allocation(|| read_message::<T>(&mut &bytes[..]));
    let claimed = (bytes.len() >= 4)
        .then(|| u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize);
    match &result {
        Ok(_) => {
            let c = claimed.ok_or_else(|| TestCaseError::fail("a message without a header"))?;
            prop_assert!(c <= MAX_MESSAGE_BYTES && 4 + c <= bytes.len());
        }
        Err(WireError::TooLarge { claimed: c, limit }) => {
            prop_assert_eq!(*limit, MAX_MESSAGE_BYTES as u64);
            prop_assert_eq!(Some(*c as usize), claimed);
            prop_assert!(*c > *limit);
            prop_assert!(
                largest < 256,
                "a header claiming {} bytes over the limit allocated {} bytes",
                c,
                largest
            );
        }
        Err(WireError::Io(e)) => {
            // Only a truncated message ends in an IO error when reading from memory.
            prop_assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
            if let Some(c) = claimed {
                prop_assert!(bytes.len() < 4 + c);
            }
        }
        Err(WireError::Malformed(why)) => prop_assert!(!why.is_empty()),
    }
    // The payload buffer is the claimed length, which the limit bounds; nothing is larger.
    prop_assert!(
        largest <= MAX_MESSAGE_BYTES,
        "allocated {} bytes at once",
        largest
    );
    // Beyond the payload buffer (the claimed length), decoding allocates in proportion to the
    // bytes actually present (compact varints widen into structs; vectors grow by doubling),
    // except that serde preallocates a vector for the length the payload claims, capped at
    // 1 MiB (serde's `size_hint::cautious`): a claimed length can never cost more than that.
    if let Some(c) = claimed {
        prop_assert!(
            largest <= c.max(4096 + 64 * bytes.len()).max(SERDE_PREALLOC_CAP),
            "claimed {} bytes, {} present, allocated {} at once",
            c,
            bytes.len(),
            largest
        );
    }
    let Ok(msg) = result else { return Ok(None) };
    let again = encode(&msg).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back: T = read_message(&mut &again[..]).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&back, &msg);
    Ok(Some(msg))
}

/// The most serde preallocates for one sequence from a claimed length, bytes.
const SERDE_PREALLOC_CAP: usize = 1024 * 1024;

/// A reader that hands out at most `n` bytes per call, like a socket under load.
struct Trickle<'a> {
    data: &'a [u8],
    n: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let k = self.n.min(buf.len()).min(self.data.len());
        buf[..k].copy_from_slice(&self.data[..k]);
        self.data = &self.data[k..];
        Ok(k)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary bytes as a request (the agent's side) and as a reply (the engine's side).
    #[test]
    fn arbitrary_bytes(body in prop::collection::vec(any::<u8>(), 0..2048),
                       header in prop_oneof![Just(None), (0u32..4096).prop_map(Some), any::<u32>().prop_map(Some)]) {
        let mut bytes = header.map(|h| h.to_be_bytes().to_vec()).unwrap_or_default();
        bytes.extend_from_slice(&body);
        check::<EngineRequest>(&bytes)?;
        check::<EngineReply>(&bytes)?;
    }

    /// Valid requests mutated one to six times.
    #[test]
    fn mutated_requests(req in request(), mutations in prop::collection::vec(mutation(), 1..7)) {
        let mut bytes = encode(&req).expect("a request encodes");
        for m in &mutations {
            apply(&mut bytes, m);
        }
        check::<EngineRequest>(&bytes)?;
    }

    /// Valid replies mutated one to six times.
    #[test]
    fn mutated_replies(rep in reply(), mutations in prop::collection::vec(mutation(), 1..7)) {
        let mut bytes = encode(&rep).expect("a reply encodes");
        for m in &mutations {
            apply(&mut bytes, m);
        }
        check::<EngineReply>(&bytes)?;
    }

    /// Valid messages read back equal; every proper prefix is an end-of-stream error.
    #[test]
    fn valid_messages_and_their_prefixes(req in request(), rep in reply(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&req).expect("encodes");
        prop_assert_eq!(check::<EngineRequest>(&bytes)?, Some(req));
        let cut = cut.index(bytes.len());
        let e = read_message::<EngineRequest>(&mut &bytes[..cut]).expect_err("a prefix is not a message");
        prop_assert!(matches!(&e, WireError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof), "{}", e);
        let bytes = encode(&rep).expect("encodes");
        prop_assert_eq!(check::<EngineReply>(&bytes)?, Some(rep));
    }

    /// Requests back to back, delivered 1 to 7 bytes per read, come out whole and in order.
    #[test]
    fn streams_in_small_reads(reqs in prop::collection::vec(request(), 1..8), n in 1usize..8) {
        let stream: Vec<u8> = reqs.iter().flat_map(|r| encode(r).expect("encodes")).collect();
        let mut reader = Trickle { data: &stream, n };
        for want in &reqs {
            let got: EngineRequest = read_message(&mut reader).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&got, want);
        }
        let end = read_message::<EngineRequest>(&mut reader).expect_err("the stream is over");
        prop_assert!(matches!(end, WireError::Io(_)));
    }

    /// Tagged messages (body and call id) and bare ones: each decodes to its body and exactly
    /// its id (none for a bare one); a reader unaware of ids reads the body; mutations never
    /// panic and fail only with typed errors, and whatever is accepted re-encodes equal.
    #[test]
    fn call_ids_round_trip_and_survive_mutation(req in request(), rep in reply(), id in any::<u64>(),
                                                 mutations in prop::collection::vec(mutation(), 1..7)) {
        let call = CallId(id);
        let bytes = encode_call(&req, call).expect("encodes");
        let (range, used) = split_message(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?
            .ok_or_else(|| TestCaseError::fail("a whole message is not incomplete"))?;
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(decode_call::<EngineRequest>(&bytes[range.clone()]).ok(), Some((req.clone(), Some(call))));
        prop_assert_eq!(decode::<EngineRequest>(&bytes[range]).ok(), Some(req.clone()));
        prop_assert_eq!(read_call::<EngineRequest>(&mut &bytes[..]).ok(), Some((req, Some(call))));
        let bare = encode(&rep).expect("encodes");
        prop_assert_eq!(read_call::<EngineReply>(&mut &bare[..]).ok(), Some((rep.clone(), None)));
        let mut bytes = encode_call(&rep, call).expect("encodes");
        check::<EngineReply>(&bytes)?;
        for m in &mutations {
            apply(&mut bytes, m);
        }
        check::<EngineReply>(&bytes)?;
        match read_call::<EngineReply>(&mut &bytes[..]) {
            Ok((body, id)) => {
                let again = match id {
                    Some(id) => encode_call(&body, id),
                    None => encode(&body),
                }.map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(read_call::<EngineReply>(&mut &again[..]).ok(), Some((body, id)));
            }
            Err(WireError::Malformed(why)) => prop_assert!(!why.is_empty()),
            Err(WireError::TooLarge { claimed, limit }) => prop_assert!(claimed > limit),
            Err(WireError::Io(e)) => prop_assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof),
        }
    }

    /// Replies tagged with their call ids, back to back, cut at arbitrary points (what a
    /// client buffers when a deadline interrupts a read): [`split_message`] yields each whole,
    /// in order, with its own id, and nothing from a partial one.
    #[test]
    fn tagged_stream_cut_anywhere(reps in prop::collection::vec(reply(), 1..6),
                                  cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6)) {
        let ids: Vec<CallId> = (1..=reps.len() as u64).map(CallId).collect();
        let stream: Vec<u8> = reps.iter().zip(&ids)
            .flat_map(|(r, id)| encode_call(r, *id).expect("encodes")).collect();
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        points.push(stream.len());
        points.sort_unstable();
        let (mut inbox, mut got, mut from) = (Vec::new(), Vec::new(), 0);
        for p in points {
            inbox.extend_from_slice(&stream[from..p]);
            from = p;
            while let Some((payload, used)) = split_message(&inbox).map_err(|e| TestCaseError::fail(e.to_string()))? {
                let decoded = decode_call::<EngineReply>(&inbox[payload]).map_err(|e| TestCaseError::fail(e.to_string()))?;
                got.push(decoded);
                inbox.drain(..used);
            }
        }
        prop_assert!(inbox.is_empty());
        let want: Vec<(EngineReply, Option<CallId>)> = reps.into_iter().zip(ids.into_iter().map(Some)).collect();
        prop_assert_eq!(got, want);
    }

    /// The payload decoder alone (what the agent calls after reading a whole payload).
    #[test]
    fn payload_decoder(payload in prop::collection::vec(any::<u8>(), 0..1024)) {
        let (r, largest) = largest_allocation(|| decode::<EngineRequest>(&payload));
        if let Err(e) = &r {
            prop_assert!(matches!(e, WireError::Malformed(_)), "{}", e);
        }
        let (c, largest_call) = largest_allocation(|| decode_call::<EngineRequest>(&payload));
        if let Err(e) = &c {
            prop_assert!(matches!(e, WireError::Malformed(_)), "{}", e);
        }
        if let (Ok(body), Ok((with_call, _))) = (&r, &c) {
            prop_assert_eq!(body, with_call);
        }
        let largest = largest.max(largest_call);
        prop_assert!(largest <= 4096 + payload.len() * 16, "{} payload bytes allocated {} at once", payload.len(), largest);
    }
}

/// The boundary of the length check, exactly.
#[test]
fn length_limit_boundary() {
    let max = MAX_MESSAGE_BYTES as u32;
    assert_eq!(
        check_len(max.to_be_bytes()).expect("the limit itself is allowed"),
        MAX_MESSAGE_BYTES
    );
    for over in [max + 1, max + 4096, u32::MAX] {
        match check_len(over.to_be_bytes()) {
            Err(e @ WireError::TooLarge { .. }) => {
                assert_eq!(e.to_string(), format!("message too large: header claims {over} bytes, limit is {MAX_MESSAGE_BYTES}"));
            }
            other => panic!("{over}: {other:?}"),
        }
    }
}

/// What a truncated message claiming the largest allowed payload costs the reader before the
/// stream ends: printed as a figure for docs/RELIABILITY.md. The allocation is the claimed
/// length (within the limit), made before a single payload byte arrived.
#[test]
fn truncated_message_at_the_limit_figure() {
    let mut bytes = (MAX_MESSAGE_BYTES as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(&[0u8; 16]);
    let (r, largest) = largest_allocation(|| read_message::<EngineRequest>(&mut &bytes[..]));
    println!("\nFIGURE fault=engine_wire_truncated_at_limit message_bytes={} claimed_bytes={MAX_MESSAGE_BYTES} largest_allocation_bytes={largest} result={}", bytes.len(), format!("{r:?}").replace(' ', "_"));
    assert!(
        matches!(&r, Err(WireError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof),
        "{r:?}"
    );
    assert!(largest <= MAX_MESSAGE_BYTES);
}
