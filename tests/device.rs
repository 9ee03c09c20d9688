//! The device path's registration against a real agent built without the `cuda` feature (as
//! every agent here is: no GPU): `RegisterDevice` is refused with a typed `Buffer` refusal
//! naming the cause, the agent stays ready, and a later host-pool registration, store and load
//! work and the loaded bytes verify.

use std::time::Duration;

use tandem_client::{AgentError, ClientError, EngineClient, PagePool};
use tandem_proto::frame::{OutcomeResult, TaskOutcome};
use tandem_proto::ids::{BlockHash, PageId, RequestId, Step, TaskId};
use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::engines::{fill, holds};
use tandem_tests::ChildGuard;

const DEADLINE: Duration = Duration::from_secs(10);

fn until_outcome(c: &mut EngineClient, step: &mut u64, task: TaskId) -> TaskOutcome {
    for _ in 0..2_000 {
        let f = c.end_step(Step(*step), DEADLINE).expect("end_step");
        c.ack(Step(*step)).expect("ack");
        *step += 1;
        let found = f.outcomes().find(|o| o.task == task).cloned();
        if let Some(o) = found {
            return o;
        }
    }
    panic!("no outcome for {task}");
}

/// The refusal's reason; panics on anything but a `Buffer` refusal.
fn refusal(got: Result<u64, ClientError>) -> String {
    match got {
        Err(ClientError::Agent(AgentError::Buffer { reason })) => reason,
        other => panic!("expected a buffer refusal, got {other:?}"),
    }
}

/// The cause an agent of this build names: without `cuda` the feature; with it (a binary
/// built with `--features cuda`, on a machine without a GPU) the missing driver library.
fn names_cause(reason: &str) -> bool {
    reason.contains("built without the cuda feature") || reason.contains("libcuda")
}

#[test]
fn register_device_is_refused_by_name_and_host_pages_still_work() {
    let _serial = tandem_tests::serial();
    let mut g = Group::configure(&GroupSpec::new(1, 1));
    g.use_small_shards();
    let child = g.agent_command(0).spawn().expect("spawn agent");
    g.agents.push(Some(ChildGuard(child)));
    g.wait_ready(Duration::from_secs(30));

    let mut c = EngineClient::connect(g.socket(0), 0, Duration::from_secs(20)).expect("connect");
    let shard = c.welcome().shard_bytes;
    let reason = refusal(c.register_device(0, &[7u8; 64], 4, shard));
    assert!(names_cause(&reason), "{reason}");
    // A short handle: the feature is checked first; with it, the length is named.
    let reason = refusal(c.register_device(0, &[7u8; 3], 4, shard));
    assert!(
        reason.contains("built without the cuda feature") || reason.contains("64 bytes, got 3"),
        "{reason}"
    );
    let answer = g.http_get(0, "/healthz");
    assert!(matches!(answer, Some((200, _))), "{answer:?}\n{}", g.log(0));

    let mut pool = PagePool::create(g.path().join("pool"), 8, shard).expect("pool");
    assert_eq!(c.register_buffer(&pool).expect("host pool"), 8);
    let hashes: Vec<BlockHash> = (0..3u128).map(|i| BlockHash(0xde71_ce00 + i)).collect();
    let src: Vec<PageId> = (0..3).map(PageId).collect();
    let dst: Vec<PageId> = (4..7).map(PageId).collect();
    for (h, p) in hashes.iter().zip(&src) {
        fill(pool.page_mut(*p).expect("page"), h.0, 0);
    }
    let mut step = c.welcome().next_step.0;
    let store = c
        .store(Step(step), RequestId(1), hashes.clone(), src)
        .expect("store");
    let o = until_outcome(&mut c, &mut step, store);
    assert_eq!(o.result, OutcomeResult::Ok, "store: {o:?}");
    let l = c
        .lookup(Step(step), RequestId(2), hashes.clone())
        .expect("lookup");
    assert_eq!(l.matched_blocks, 3);
    let load = c
        .load(Step(step), RequestId(2), hashes.clone(), dst.clone())
        .expect("load");
    let o = until_outcome(&mut c, &mut step, load);
    assert_eq!(o.result, OutcomeResult::Ok, "load: {o:?}");
    for (h, p) in hashes.iter().zip(&dst) {
        assert!(holds(pool.page(*p).expect("page"), h.0, 0), "page {p}");
    }
}
