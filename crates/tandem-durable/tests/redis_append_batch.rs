//! Appends queued together go out as one pipeline (the log's appender): what a real Redis
//! shows about such a batch. Each append keeps its own answer, in call order, when the fence
//! refuses one in the middle; and a batch that gets no answer fails every append in it by the
//! batch's deadline, each with its own typed error, after which the next append succeeds.
//!
//! The appends of a test are polled together (`tokio::join!` in one task of a current-thread
//! runtime), so they are all queued before the appender's task runs: one batch, which
//! [`RedisLog::append_batches`] confirms.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tandem_durable::{
    CompletionStream, ConnTimeouts, DurableConfig, DurableError, EpochStore, RedisLog,
    StreamEntryId,
};
use tandem_proto::{Epoch, OutcomeResult, Rank, RequestId, Step, TaskId, TaskKind, TaskOutcome};
use tandem_tests::procs::signal;
use tandem_tests::redis::RedisServer;

/// Deadline of every call in these tests, ms.
const OP_TIMEOUT_MS: u64 = 300;

fn config(url: String) -> DurableConfig {
    let mut c = DurableConfig::new(url, "batch", 1);
    c.timeouts = ConnTimeouts {
        op_timeout_ms: OP_TIMEOUT_MS,
        connect_timeout_ms: 200,
        max_reconnect_delay_ms: 200,
    };
    c
}

fn ok(epoch: Epoch, seq: u64) -> TaskOutcome {
    TaskOutcome {
        task: TaskId {
            epoch: epoch.0,
            seq,
        },
        kind: TaskKind::Load,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    }
}

/// Five appends in one batch, the second and fourth of an epoch the fence closed: the
/// three others are appended, in call order, and the two refused ones each fail with
/// `StaleEpoch`, nothing appended for them.
#[tokio::test(flavor = "current_thread")]
async fn a_refused_append_in_the_middle_of_a_batch_fails_alone_and_the_rest_keep_their_order() {
    let server = RedisServer::start();
    let log = RedisLog::connect(&config(server.url())).await.unwrap();
    let old = log.next_epoch().await.unwrap();
    let new = log.next_epoch().await.unwrap();
    let o: Vec<[TaskOutcome; 1]> = (0..5)
        .map(|s| [ok(if s % 2 == 0 { new } else { old }, s)])
        .collect();
    let before = log.append_batches();
    let (a, b, c, d, e) = tokio::join!(
        log.append_step(new, Step(0), &[], &o[0]),
        log.append_step(old, Step(1), &[], &o[1]),
        log.append_step(new, Step(2), &[], &o[2]),
        log.append_step(old, Step(3), &[], &o[3]),
        log.append_step(new, Step(4), &[], &o[4]),
    );
    assert_eq!(
        log.append_batches() - before,
        1,
        "the five went as one batch"
    );
    for refused in [b, d] {
        assert_eq!(
            refused,
            Err(DurableError::StaleEpoch {
                epoch: old,
                current: new
            })
        );
    }
    let ids: Vec<StreamEntryId> = [a, c, e].into_iter().map(Result::unwrap).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert!(ids.iter().all(|id| id.ms == new.0), "{ids:?}");
    let read = log.read_new(Rank(0), 10).await.unwrap();
    let got: Vec<(StreamEntryId, Step)> = read.iter().map(|s| (s.id, s.record.step)).collect();
    assert_eq!(
        got,
        vec![(ids[0], Step(0)), (ids[1], Step(2)), (ids[2], Step(4))]
    );
}

/// A stopped server: the batch of three gets no answer, and each append fails with
/// `Timeout` (it may or may not have been applied) well before a hang detector of ten
/// deadlines; once the server runs again, the next append succeeds and lands after them.
#[tokio::test(flavor = "current_thread")]
async fn a_batch_without_an_answer_fails_each_append_by_its_deadline() {
    let server = RedisServer::start();
    let log = RedisLog::connect(&config(server.url())).await.unwrap();
    let epoch = log.next_epoch().await.unwrap();
    let first = log
        .append_step(epoch, Step(0), &[], &[ok(epoch, 0)])
        .await
        .unwrap();
    let o: Vec<[TaskOutcome; 1]> = (1..4).map(|s| [ok(epoch, s)]).collect();
    let before = log.append_batches();
    signal(server.pid(), libc::SIGSTOP);
    let bound = Duration::from_millis(OP_TIMEOUT_MS * 10);
    let batch = async {
        tokio::join!(
            log.append_step(epoch, Step(1), &[], &o[0]),
            log.append_step(epoch, Step(2), &[], &o[1]),
            log.append_step(epoch, Step(3), &[], &o[2]),
        )
    };
    let answers = tokio::time::timeout(bound, batch).await;
    signal(server.pid(), libc::SIGCONT);
    let (a, b, c) = answers.unwrap_or_else(|_| panic!("a batch still waiting after {bound:?}"));
    assert_eq!(
        log.append_batches() - before,
        1,
        "the three went as one batch"
    );
    for r in [a, b, c] {
        assert_eq!(
            r,
            Err(DurableError::Timeout {
                op: "append_step",
                ms: OP_TIMEOUT_MS
            })
        );
    }
    let next = log
        .append_step(epoch, Step(4), &[], &[ok(epoch, 4)])
        .await
        .unwrap();
    assert!(next > first);
}

/// An append in flight and its answer once it came.
type Slot<'a> = (
    Pin<Box<dyn Future<Output = Result<StreamEntryId, DurableError>> + Send + 'a>>,
    Option<Result<StreamEntryId, DurableError>>,
);

/// Polls each of the first `upto` appends not yet answered once, in order; `true` once all
/// of them are answered.
fn poll_window(cx: &mut Context<'_>, window: &mut [Slot<'_>], upto: usize) -> bool {
    for (fut, done) in window.iter_mut().take(upto) {
        if done.is_none() {
            if let Poll::Ready(r) = fut.as_mut().poll(cx) {
                *done = Some(r);
            }
        }
    }
    window.iter().take(upto).all(|(_, done)| done.is_some())
}

/// A window of the default depth (`protocol.max_appends_in_flight`) across an epoch change:
/// the first half is queued, another leader's `next_epoch` lands on its own connection, then
/// the second half is queued. Every append of the old epoch either lands before the barrier
/// or fails with `StaleEpoch` naming the new epoch; the refused ones are a suffix in step
/// order (none lands after one that failed), the second half is all refused, and the stream
/// holds exactly the appends that succeeded, in step order.
#[tokio::test(flavor = "current_thread")]
async fn a_full_window_across_an_epoch_change_fails_a_suffix_each_with_stale_epoch() {
    let server = RedisServer::start();
    let log = RedisLog::connect(&config(server.url())).await.unwrap();
    let other = RedisLog::connect(&config(server.url())).await.unwrap();
    let old = log.next_epoch().await.unwrap();
    let depth = tandem_config::DEFAULT_MAX_APPENDS_IN_FLIGHT as usize;
    let half = depth / 2;
    let o: Vec<[TaskOutcome; 1]> = (0..depth as u64).map(|s| [ok(old, s)]).collect();
    let mut window: Vec<Slot<'_>> = o
        .iter()
        .enumerate()
        .map(|(s, outcomes)| (log.append_step(old, Step(s as u64), &[], outcomes), None))
        .collect();
    std::future::poll_fn(|cx| {
        poll_window(cx, &mut window, half);
        Poll::Ready(())
    })
    .await;
    let new = other.next_epoch().await.unwrap();
    let bound = Duration::from_millis(OP_TIMEOUT_MS * 10);
    let all = std::future::poll_fn(|cx| {
        if poll_window(cx, &mut window, depth) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    tokio::time::timeout(bound, all)
        .await
        .unwrap_or_else(|_| panic!("appends still waiting after {bound:?}"));
    let results: Vec<Result<StreamEntryId, DurableError>> =
        window.into_iter().filter_map(|(_, done)| done).collect();
    assert_eq!(results.len(), depth);
    let landed = results.iter().take_while(|r| r.is_ok()).count();
    assert!(landed <= half, "{landed} landed of {depth}");
    for r in &results[landed..] {
        assert_eq!(
            r,
            &Err(DurableError::StaleEpoch {
                epoch: old,
                current: new
            })
        );
    }
    let ids: Vec<StreamEntryId> = results[..landed]
        .iter()
        .map(|r| *r.as_ref().unwrap())
        .collect();
    let read = log.read_new(Rank(0), 100).await.unwrap();
    let got: Vec<(StreamEntryId, Step)> = read.iter().map(|s| (s.id, s.record.step)).collect();
    let want: Vec<(StreamEntryId, Step)> = ids
        .iter()
        .enumerate()
        .map(|(s, id)| (*id, Step(s as u64)))
        .collect();
    assert_eq!(got, want);
}
