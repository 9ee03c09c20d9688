use super::*;
use tandem_proto::ids::TaskKind;

fn record(hash_ids: &[u64]) -> TraceRecord {
    TraceRecord {
        timestamp: 0,
        input_length: hash_ids.len() as u64 * 512,
        output_length: 1,
        hash_ids: hash_ids.to_vec(),
    }
}

fn outcome(task: TaskId, kind: TaskKind, request: RequestId, result: OutcomeResult) -> TaskOutcome {
    TaskOutcome {
        task,
        kind,
        request,
        result,
    }
}

fn task(seq: u64) -> TaskId {
    TaskId { epoch: 1, seq }
}

/// Issue every queued part, numbering tasks from `next_seq`; returns the issues.
fn issue_all(s: &mut Scheduler, next_seq: &mut u64) -> Vec<(Issue, TaskId)> {
    let mut out = Vec::new();
    while let Some(issue) = s.next_issue() {
        let t = task(*next_seq);
        *next_seq += 1;
        s.on_started(issue.request, issue.role, t).unwrap();
        out.push((issue, t));
    }
    out
}

#[test]
fn store_then_load_runs_requests_to_completion_and_frees_every_page() {
    let mut s = Scheduler::new(8, 4);
    let mut seq = 0;
    let r0 = RequestId(0);
    s.admit(r0, record(&[1, 2, 3])).unwrap();
    assert_eq!(s.free_pages(), 5);
    assert_eq!(s.awaiting_lookup(), vec![r0]);
    assert_eq!(
        s.lookup_hashes(r0).unwrap(),
        vec![BlockHash(1), BlockHash(2), BlockHash(3)]
    );
    s.on_lookup(r0, 0).unwrap();
    let issued = issue_all(&mut s, &mut seq);
    assert_eq!(issued.len(), 1);
    assert_eq!(issued[0].0.role, Role::Store);
    // A request sharing block 1 waits while request 0 stores it.
    assert_eq!(
        s.check_admission(&record(&[1, 9])),
        Admission::WaitPrefix {
            block: BlockHash(1)
        }
    );
    let effect = s
        .on_outcome(
            &outcome(issued[0].1, TaskKind::Store, r0, OutcomeResult::Ok),
            &mut |_, _| panic!("no verify for a store"),
        )
        .unwrap();
    assert_eq!(effect, OutcomeEffect::Stored { ok: true });
    assert_eq!(s.take_completed().len(), 1);
    assert_eq!(s.free_pages(), 8);

    let r1 = RequestId(1);
    assert_eq!(s.check_admission(&record(&[1, 9])), Admission::Ready);
    s.admit(r1, record(&[1, 9])).unwrap();
    s.on_lookup(r1, 1).unwrap();
    let issued = issue_all(&mut s, &mut seq);
    assert_eq!(
        issued.iter().map(|(i, _)| i.role).collect::<Vec<_>>(),
        vec![Role::Load, Role::Store]
    );
    let mut verified = Vec::new();
    let load = &issued[0];
    s.on_outcome(
        &outcome(load.1, TaskKind::Load, r1, OutcomeResult::Ok),
        &mut |h, p| verified.push((h.to_vec(), p.to_vec())),
    )
    .unwrap();
    assert_eq!(verified, vec![(vec![BlockHash(1)], load.0.pages.clone())]);
    assert!(s.take_completed().is_empty(), "store still running");
    s.on_outcome(
        &outcome(
            issued[1].1,
            TaskKind::Store,
            r1,
            OutcomeResult::Failed {
                reason: "disk".into(),
            },
        ),
        &mut |_, _| {},
    )
    .unwrap();
    let done = s.take_completed();
    assert_eq!(done.len(), 1);
    assert_eq!(
        (
            done[0].hits.hit_blocks,
            done[0].hits.blocks,
            done[0].hits.hit_tokens
        ),
        (1, 2, 512)
    );
    assert_eq!(s.free_pages(), 8);
    let stats = s.stats();
    assert_eq!(
        (
            stats.blocks_stored,
            stats.blocks_loaded,
            stats.stores_failed
        ),
        (3, 1, 1)
    );
    assert_eq!(s.in_flight(), 0);
}

#[test]
fn failed_load_is_recomputed_into_the_same_pages() {
    let mut s = Scheduler::new(4, 4);
    let mut seq = 0;
    let r = RequestId(5);
    s.admit(r, record(&[1, 2])).unwrap();
    s.on_lookup(r, 2).unwrap();
    let issued = issue_all(&mut s, &mut seq);
    assert_eq!(issued.len(), 1);
    let (load, t) = issued[0].clone();
    let effect = s
        .on_outcome(
            &outcome(t, TaskKind::Load, r, OutcomeResult::Aborted),
            &mut |_, _| panic!("no verify of a failed load"),
        )
        .unwrap();
    assert_eq!(effect, OutcomeEffect::Recompute);
    let again = issue_all(&mut s, &mut seq);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].0.role, Role::Recompute);
    assert_eq!(again[0].0.pages, load.pages);
    assert_eq!(again[0].0.hashes, load.hashes);
    s.on_outcome(
        &outcome(again[0].1, TaskKind::Store, r, OutcomeResult::Ok),
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(s.take_completed().len(), 1);
    assert_eq!(s.stats().loads_failed, 1);
    assert_eq!(s.stats().recomputes, 1);
    assert_eq!(s.free_pages(), 4);
}

#[test]
fn admission_waits_for_capacity_and_refuses_oversized_requests() {
    let mut s = Scheduler::new(4, 1);
    assert_eq!(
        s.check_admission(&record(&[1, 2, 3, 4, 5])),
        Admission::TooLarge {
            blocks: 5,
            pages: 4
        }
    );
    s.admit(RequestId(0), record(&[1, 2, 3])).unwrap();
    assert_eq!(s.check_admission(&record(&[7])), Admission::InFlightFull);
    let mut s = Scheduler::new(4, 4);
    s.admit(RequestId(0), record(&[1, 2, 3])).unwrap();
    assert_eq!(
        s.check_admission(&record(&[7, 8])),
        Admission::WaitPages { need: 2, free: 1 }
    );
    let err = s.admit(RequestId(1), record(&[7, 8])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "request 1 cannot be admitted now: WaitPages { need: 2, free: 1 }"
    );
    let err = s.admit(RequestId(0), record(&[9])).unwrap_err();
    assert_eq!(err, SchedError::DuplicateRequest { request: 0 });
}

#[test]
fn a_new_epoch_turns_unstarted_loads_into_recomputes_and_keeps_started_tasks() {
    let mut s = Scheduler::new(8, 4);
    let mut seq = 0;
    s.admit(RequestId(0), record(&[1, 2])).unwrap();
    s.on_lookup(RequestId(0), 0).unwrap();
    let stored = issue_all(&mut s, &mut seq);
    s.admit(RequestId(1), record(&[3, 4])).unwrap();
    s.on_lookup(RequestId(1), 1).unwrap();
    // The load call failed before the agent answered: it is requeued, then the epoch changes.
    let load = s.next_issue().unwrap();
    assert_eq!(load.role, Role::Load);
    s.requeue(load);
    s.on_new_epoch().unwrap();
    let issued = issue_all(&mut s, &mut seq);
    let roles: Vec<Role> = issued.iter().map(|(i, _)| i.role).collect();
    assert_eq!(roles, vec![Role::Recompute, Role::Store]);
    // The old store's outcome arrives in the reconciliation as aborted.
    s.on_outcome(
        &outcome(
            stored[0].1,
            TaskKind::Store,
            RequestId(0),
            OutcomeResult::Aborted,
        ),
        &mut |_, _| {},
    )
    .unwrap();
    for (issue, t) in issued {
        s.on_outcome(
            &outcome(t, TaskKind::Store, issue.request, OutcomeResult::Ok),
            &mut |_, _| {},
        )
        .unwrap();
    }
    assert_eq!(s.take_completed().len(), 2);
    assert_eq!(s.free_pages(), 8);
    assert_eq!(s.queued(), 0);
}

#[test]
fn lost_and_unknown_tasks() {
    let mut s = Scheduler::new(4, 4);
    let mut seq = 0;
    s.admit(RequestId(0), record(&[1])).unwrap();
    s.on_lookup(RequestId(0), 0).unwrap();
    let issued = issue_all(&mut s, &mut seq);
    assert_eq!(
        s.on_lost(issued[0].1).unwrap(),
        OutcomeEffect::Stored { ok: false }
    );
    assert_eq!(s.take_completed().len(), 1);
    assert_eq!(s.on_lost(issued[0].1).unwrap(), OutcomeEffect::Unknown);
    let stray = outcome(task(99), TaskKind::Store, RequestId(0), OutcomeResult::Ok);
    assert_eq!(
        s.on_outcome(&stray, &mut |_, _| {}).unwrap(),
        OutcomeEffect::Unknown
    );
    assert_eq!(s.stats().unknown_outcomes, 1);
}

#[test]
fn an_outcome_of_the_wrong_kind_is_refused() {
    let mut s = Scheduler::new(4, 4);
    s.admit(RequestId(0), record(&[1])).unwrap();
    s.on_lookup(RequestId(0), 0).unwrap();
    let issue = s.next_issue().unwrap();
    s.on_started(issue.request, issue.role, task(0)).unwrap();
    let err = s
        .on_outcome(
            &outcome(task(0), TaskKind::Load, RequestId(0), OutcomeResult::Ok),
            &mut |_, _| {},
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "task 1.0: the engine started a store, the outcome is for a load"
    );
}

#[test]
fn a_fully_matched_request_only_loads_and_an_empty_one_completes_at_once() {
    let mut s = Scheduler::new(4, 4);
    s.admit(RequestId(0), record(&[])).unwrap();
    s.on_lookup(RequestId(0), 0).unwrap();
    assert_eq!(s.take_completed().len(), 1);
    s.admit(RequestId(1), record(&[1, 2])).unwrap();
    s.on_lookup(RequestId(1), 2).unwrap();
    let issue = s.next_issue().unwrap();
    assert_eq!(issue.role, Role::Load);
    assert!(s.next_issue().is_none());
}
