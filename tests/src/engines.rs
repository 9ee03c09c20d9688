//! Pieces shared by the simulated engines of the process tests: deterministic shard content,
//! a seeded random source, frame digests, connecting an engine to its agent, stepping a
//! leader and a follower engine together, and reading the agent's typed refusals.
//!
//! It owns no test logic: which steps store, load or read frames is each test's business. It
//! never sleeps and never decides for the group.

use std::time::Duration;

use tandem_client::{AgentError, ClientError, EngineClient, PagePool};
use tandem_proto::frame::Frame;
use tandem_proto::ids::{RequestId, Step};

/// Write the deterministic content of block `hash`'s shard on `rank` into `buf` (every byte
/// depends on both, so a page holding another block's or another rank's shard is caught).
pub fn fill(buf: &mut [u8], hash: u128, rank: u32) {
    let folded = (hash as u64) ^ ((hash >> 64) as u64).rotate_left(29);
    let mut x = folded ^ (u64::from(rank) << 56) ^ 0x9e37_79b9_7f4a_7c15;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// True when `page` holds exactly block `hash`'s shard for `rank`.
pub fn holds(page: &[u8], hash: u128, rank: u32) -> bool {
    let mut want = vec![0u8; page.len()];
    fill(&mut want, hash, rank);
    want == page
}

/// A small seeded random source (SplitMix64): the same seed gives the same sequence, so a
/// failing run can be replayed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi` (`lo` when `hi <= lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `p` (0.0 to 1.0).
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// A 64-bit FNV-1a digest of the frame's wire encoding: equal frames give equal digests, and
/// any differing field changes the bytes it is taken over.
///
/// # Panics
/// When the frame cannot be encoded (it came from the agent, so that is a bug).
pub fn frame_digest(frame: &Frame) -> u64 {
    let bytes = tandem_client::wire::encode(frame).expect("a frame from the agent encodes");
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Connect `rank`'s engine to the agent at `socket` and register a pool of `pages` pages at
/// `pool_path` (one shard per page).
///
/// # Panics
/// When the agent does not answer within 20 s or refuses the pool.
pub fn connect_engine(
    socket: &std::path::Path,
    pool_path: &std::path::Path,
    rank: u32,
    pages: u64,
) -> (EngineClient, PagePool) {
    let mut c = EngineClient::connect(socket, rank, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("rank {rank} engine connects: {e}"));
    let shard = c.welcome().shard_bytes;
    let pool = PagePool::create(pool_path, pages, shard)
        .unwrap_or_else(|e| panic!("rank {rank} page pool: {e}"));
    c.register_buffer(&pool)
        .unwrap_or_else(|e| panic!("rank {rank} registers its pool: {e}"));
    (c, pool)
}

/// Steps the leader and a follower engine through step `s`: the leader seals it, the follower
/// reads the same frame, both acknowledge; the frame.
///
/// # Panics
/// When a call fails or the follower reads another frame than the leader sealed.
pub fn step_both(leader: &mut EngineClient, follower: &mut EngineClient, s: Step) -> Frame {
    let f = leader
        .end_step(s, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("end_step {s:?}: {e}"));
    leader.ack(s).expect("leader ack");
    let g = follower
        .frame(s, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("frame {s:?}: {e}"));
    assert_eq!(g, f, "the follower reads the leader's frame");
    follower.ack(s).expect("follower ack");
    f
}

/// True when the frame mentions `request` anywhere (lookups, starts, outcomes).
pub fn frame_mentions(f: &Frame, request: RequestId) -> bool {
    f.lookups.iter().any(|l| l.request == request)
        || f.stores
            .iter()
            .chain(&f.loads)
            .any(|t| t.request == request)
        || f.outcomes().any(|o| o.request == request)
}

/// A short name for each kind of typed refusal of an agent (`stale`, `leader_behind`, ...).
pub fn agent_error_kind(e: &AgentError) -> &'static str {
    match e {
        AgentError::NotLeader { .. } => "not_leader",
        AgentError::StaleEpoch { .. } => "stale",
        AgentError::LeaderBehind { .. } => "leader_behind",
        AgentError::FrameExpired { .. } => "frame_expired",
        AgentError::WindowFull { .. } => "window_full",
        AgentError::WrongStep { .. } => "wrong_step",
        AgentError::NotReady { .. } => "not_ready",
        AgentError::Buffer { .. } => "buffer",
        AgentError::BadRequest { .. } => "bad_request",
        AgentError::FrameTooLarge { .. } => "frame_too_large",
        AgentError::ProtocolVersion { .. } => "protocol_version",
        AgentError::Bind(_) => "bind",
        AgentError::Layer(_) => "layer",
    }
}

/// Record the kind of reply `r` to a request of epoch `old` made after the group moved to
/// epoch `new` (as `what=kind` in `seen`); true when it is the typed stale-epoch refusal.
///
/// # Panics
/// When a stale-epoch refusal names another request epoch than `old`, or an agent epoch
/// older than `new`.
pub fn stale_reply(
    r: &Result<(), ClientError>,
    old: u64,
    new: u64,
    seen: &mut Vec<String>,
    what: &str,
) -> bool {
    let kind = match r {
        Ok(()) => "ok".to_string(),
        Err(ClientError::Agent(AgentError::StaleEpoch { ours, theirs })) => {
            assert_eq!(theirs.0, old, "{what}: {r:?}");
            assert!(
                ours.0 >= new,
                "{what}: refused as stale by an agent in epoch {}: {r:?}",
                ours.0
            );
            seen.push(format!("{what}=stale"));
            return true;
        }
        Err(ClientError::Agent(e)) => agent_error_kind(e).to_string(),
        Err(e) => format!("error({e})"),
    };
    // A request in the old epoch may only succeed before the rank noticed; it must then be
    // fenced by the durable log (checked by the frames of the new epoch).
    seen.push(format!("{what}={kind}"));
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_seeded_and_bounded() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            let x = a.range(3, 9);
            assert_eq!(x, b.range(3, 9));
            assert!((3..=9).contains(&x));
        }
        assert_eq!(a.range(5, 5), 5);
    }

    #[test]
    fn content_depends_on_block_and_rank() {
        let mut p = vec![0u8; 64];
        fill(&mut p, 11, 2);
        assert!(holds(&p, 11, 2));
        assert!(!holds(&p, 11, 3));
        assert!(!holds(&p, 12, 2));
    }
}
