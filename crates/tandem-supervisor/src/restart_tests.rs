//! The restart state machine on a virtual clock: every phase change, from plain inputs.

use super::*;

const T0: u64 = 1_700_000_000_000;
const TIMEOUT: u64 = 500;
const GRACE: u64 = 5_000;

fn config(max_restarts: u32) -> MachineConfig {
    MachineConfig {
        policy: RestartPolicy {
            max_restarts,
            window_ms: 60_000,
            backoff_initial_ms: 100,
            backoff_max_ms: 1_000,
        },
        world_size: 2,
        heartbeat_timeout_ms: TIMEOUT,
        startup_grace_ms: GRACE,
    }
}

fn healthy(epoch: u64) -> SupervisorState {
    fresh_state(Epoch(epoch))
}

fn beat(epoch: u64, unix_ms: u64) -> Option<Heartbeat> {
    Some(Heartbeat {
        epoch: Epoch(epoch),
        unix_ms,
        incarnation: 1,
    })
}

/// Both ranks joined `epoch` and beat at `now`.
fn all_well(epoch: u64, now: u64) -> Observation {
    Observation {
        beats: vec![beat(epoch, now), beat(epoch, now)],
        members: vec![Rank(0), Rank(1)],
        ..Observation::default()
    }
}

fn report(epoch: u64, rank: u32, reason: &str) -> FailureReport {
    FailureReport {
        epoch: Epoch(epoch),
        rank: Rank(rank),
        reason: reason.into(),
    }
}

#[test]
fn resume_continues_adopts_or_starts() {
    let stored = SupervisorState {
        epoch: Epoch(4),
        restarts_ms: vec![T0],
        state: GroupState::Healthy,
    };
    assert_eq!(
        resume(Some(stored.clone()), Epoch(4)),
        Resume::Continue(stored.clone())
    );
    assert_eq!(
        resume(Some(stored.clone()), Epoch(6)),
        Resume::Adopt {
            state: SupervisorState {
                epoch: Epoch(6),
                ..stored
            },
            stored_epoch: Epoch(4)
        }
    );
    assert_eq!(resume(None, Epoch(0)), Resume::FirstEpoch);
    assert_eq!(resume(None, Epoch(3)), Resume::Fresh(Epoch(3)));
}

#[test]
fn a_healthy_group_needs_nothing() {
    let mut m = RestartMachine::new(config(3), healthy(1), T0);
    for t in [T0, T0 + 100, T0 + 10_000] {
        assert!(m.handle_observation(&all_well(1, t), t, 0.5).is_empty());
    }
    assert_eq!(m.poll_timeout(), None);
    assert_eq!(m.shown_state(), GroupState::Healthy);
}

#[test]
fn any_rank_failing_restarts_the_whole_group_after_the_backoff() {
    let mut m = RestartMachine::new(config(3), healthy(1), T0);
    let mut seen = all_well(1, T0 + 1_000);
    seen.reports = vec![report(1, 1, "leader connection lost")];
    let out = m.handle_observation(&seen, T0 + 1_000, 1.0);
    assert_eq!(
        out,
        vec![
            Effect::Failure("rank 1 reported: leader connection lost".into()),
            Effect::RestartScheduled {
                delay_ms: 100,
                reason: "rank 1 reported: leader connection lost".into()
            }
        ]
    );
    assert_eq!(m.poll_timeout(), Some(T0 + 1_100));
    assert_eq!(m.shown_state().name(), "restarting");
    assert_eq!(m.state().state, GroupState::Healthy, "nothing saved yet");

    // Failures of the failing epoch during the backoff change nothing.
    let mut more = all_well(1, T0 + 1_050);
    more.exited = vec!["agent of rank 1 exited (signal: 9)".into()];
    assert!(m.handle_observation(&more, T0 + 1_050, 0.5).is_empty());
    assert!(m.handle_timeout(T0 + 1_099).is_empty());
    assert_eq!(m.handle_timeout(T0 + 1_100), vec![Effect::MoveEpoch]);
    assert!(m.handle_timeout(T0 + 1_200).is_empty(), "issued once");

    let restarting = SupervisorState {
        epoch: Epoch(2),
        restarts_ms: vec![T0 + 1_120],
        state: GroupState::Restarting {
            reason: "rank 1 reported: leader connection lost".into(),
        },
    };
    assert_eq!(
        m.handle_epoch_moved(Epoch(2), T0 + 1_120),
        vec![
            Effect::Save(restarting.clone()),
            Effect::Restarted {
                epoch: Epoch(2),
                backoff_ms: 100,
                reason: "rank 1 reported: leader connection lost".into()
            },
            Effect::RelaunchAgents
        ]
    );
    assert_eq!(m.state(), &restarting);
    assert_eq!(m.epoch(), Epoch(2));
    assert_eq!(m.restarts_total(), 1);

    // Rank 1 has not joined yet: still restarting, no failure (it is within its grace).
    let mut half = all_well(2, T0 + 1_300);
    half.members = vec![Rank(0)];
    half.beats[1] = beat(1, T0 + 900);
    assert!(m.handle_observation(&half, T0 + 1_300, 0.5).is_empty());
    // Everyone joined: healthy again, recovery measured from the first failure.
    let out = m.handle_observation(&all_well(2, T0 + 1_600), T0 + 1_600, 0.5);
    assert_eq!(
        out,
        vec![
            Effect::Recovered {
                epoch: Epoch(2),
                recovery_ms: Some(600)
            },
            Effect::Save(SupervisorState {
                state: GroupState::Healthy,
                ..restarting
            })
        ]
    );
    assert_eq!(m.last_recovery_ms(), Some(600));
}

#[test]
fn reports_of_other_epochs_are_not_failures() {
    let mut m = RestartMachine::new(config(3), healthy(3), T0);
    let mut seen = all_well(3, T0);
    seen.reports = vec![report(2, 0, "old news"), report(4, 1, "not yet")];
    assert!(m.handle_observation(&seen, T0, 0.5).is_empty());
}

#[test]
fn past_the_limit_the_group_is_marked_failed_once() {
    let state = SupervisorState {
        epoch: Epoch(5),
        restarts_ms: vec![T0 - 3_000, T0 - 2_000],
        state: GroupState::Healthy,
    };
    let mut m = RestartMachine::new(config(2), state, T0);
    let mut seen = all_well(5, T0);
    seen.exited = vec!["agent of rank 0 exited (exit status: 1)".into()];
    let out = m.handle_observation(&seen, T0, 0.5);
    let reason = "2 restarts within 60 s reached the limit of 2 (last failure: agent of rank 0 exited (exit status: 1))";
    assert_eq!(
        out,
        vec![
            Effect::Failure("agent of rank 0 exited (exit status: 1)".into()),
            Effect::Save(SupervisorState {
                epoch: Epoch(5),
                restarts_ms: vec![T0 - 3_000, T0 - 2_000],
                state: GroupState::Failed {
                    reason: reason.into()
                }
            }),
            Effect::GiveUp {
                reason: reason.into()
            }
        ]
    );
    assert!(m.gave_up());
    assert!(m.handle_observation(&seen, T0 + 1, 0.5).is_empty());
    assert_eq!(m.poll_timeout(), None);

    let again = RestartMachine::new(config(2), m.state().clone(), T0 + 10);
    assert!(again.gave_up(), "a failed state stays failed");
}

#[test]
fn a_failed_move_is_retried_without_counting_twice() {
    let mut m = RestartMachine::new(config(3), healthy(1), T0);
    let mut seen = all_well(1, T0);
    seen.exited = vec!["agent of rank 1 exited".into()];
    m.handle_observation(&seen, T0, 0.0);
    assert_eq!(m.handle_timeout(T0 + 50), vec![Effect::MoveEpoch]);
    m.handle_move_failed(T0 + 60);
    assert_eq!(m.poll_timeout(), Some(T0 + 60), "due at once");
    assert!(
        m.handle_observation(&seen, T0 + 70, 0.0).is_empty(),
        "no second decision"
    );
    assert_eq!(m.handle_timeout(T0 + 70), vec![Effect::MoveEpoch]);
    let out = m.handle_epoch_moved(Epoch(2), T0 + 80);
    assert!(matches!(&out[1], Effect::Restarted { backoff_ms: 50, .. }));
    assert_eq!(m.state().restarts_ms, vec![T0 + 80]);
    assert!(
        m.handle_epoch_moved(Epoch(3), T0 + 90).is_empty(),
        "a stray answer changes nothing"
    );
}

#[test]
fn a_new_failure_while_restarting_restarts_again_with_a_longer_backoff() {
    let mut m = RestartMachine::new(config(3), healthy(1), T0);
    let mut seen = all_well(1, T0);
    seen.exited = vec!["agent of rank 1 exited".into()];
    m.handle_observation(&seen, T0, 1.0);
    m.handle_timeout(T0 + 100);
    m.handle_epoch_moved(Epoch(2), T0 + 100);
    let mut again = all_well(2, T0 + 200);
    again.reports = vec![report(2, 0, "rank 1 refused the handshake")];
    let out = m.handle_observation(&again, T0 + 200, 1.0);
    assert_eq!(
        out.last(),
        Some(&Effect::RestartScheduled {
            delay_ms: 200,
            reason: "rank 0 reported: rank 1 refused the handshake".into()
        })
    );
}

#[test]
fn a_restart_that_reached_a_healthy_group_resets_the_backoff() {
    let mut m = RestartMachine::new(config(100), healthy(1), T0);
    let mut now = T0;
    let mut delays = Vec::new();
    // Four failures, each landing while the group is still restarting: the backoff grows.
    for epoch in 1..=4 {
        let mut seen = all_well(epoch, now);
        seen.members = vec![Rank(0)];
        seen.exited = vec!["agent of rank 1 exited (signal: 9)".into()];
        let out = m.handle_observation(&seen, now, 1.0);
        match out
            .iter()
            .find(|e| matches!(e, Effect::RestartScheduled { .. }))
        {
            Some(Effect::RestartScheduled { delay_ms, .. }) => delays.push(*delay_ms),
            other => panic!("no restart scheduled: {other:?}"),
        }
        now += delays.last().copied().unwrap_or(0);
        m.handle_timeout(now);
        m.handle_epoch_moved(Epoch(epoch + 1), now);
        now += 10;
    }
    assert_eq!(delays, vec![100, 200, 400, 800]);
    // Every rank joins epoch 5: healthy again.
    let out = m.handle_observation(&all_well(5, now), now, 1.0);
    assert!(
        matches!(
            out[0],
            Effect::Recovered {
                epoch: Epoch(5),
                ..
            }
        ),
        "{out:?}"
    );
    // The next failure backs off from the start; the history still holds every restart.
    now += 1_500;
    let mut seen = all_well(5, now);
    seen.exited = vec!["agent of rank 0 exited (signal: 9)".into()];
    let out = m.handle_observation(&seen, now, 1.0);
    assert!(
        out.contains(&Effect::RestartScheduled {
            delay_ms: 100,
            reason: "agent of rank 0 exited (signal: 9)".into()
        }),
        "{out:?}"
    );
    assert_eq!(m.state().restarts_ms.len(), 4);
}

#[test]
fn silence_is_judged_by_the_timeout_and_afresh_after_the_log_was_unreadable() {
    let mut m = RestartMachine::new(config(3), healthy(1), T0);
    let stale = Observation {
        beats: vec![beat(1, T0 + 1_000), beat(1, T0 + 400)],
        members: vec![Rank(0), Rank(1)],
        ..Observation::default()
    };
    assert!(m.handle_observation(&stale, T0 + 900, 0.5).is_empty());
    // Redis was unreachable: the ranks could not beat. Judged afresh from its return.
    m.handle_blind(T0 + 5_000);
    let quiet = Observation {
        beats: vec![beat(1, T0 + 1_000), beat(1, T0 + 400)],
        ..stale.clone()
    };
    assert!(m.handle_observation(&quiet, T0 + 5_100, 0.5).is_empty());
    let out = m.handle_observation(&quiet, T0 + 5_000 + GRACE + 1, 0.5);
    assert_eq!(
        out[0],
        Effect::Failure(format!(
            "rank 0 silent for {} ms (heartbeat timeout 500 ms)",
            GRACE + 4_001
        ))
    );
}

#[test]
fn a_zero_backoff_moves_the_epoch_in_the_same_round() {
    let mut cfg = config(3);
    cfg.policy.backoff_initial_ms = 0;
    let mut m = RestartMachine::new(cfg, healthy(1), T0);
    let mut seen = all_well(1, T0);
    seen.exited = vec!["agent of rank 0 exited".into()];
    let out = m.handle_observation(&seen, T0, 0.5);
    assert_eq!(out.last(), Some(&Effect::MoveEpoch));
}

#[test]
fn a_rank_restarted_faster_than_a_heartbeat_moves_the_group() {
    let mut m = RestartMachine::new(config(3), healthy(1), T0);
    assert!(m.handle_observation(&all_well(1, T0), T0, 0.5).is_empty());
    // Rank 1's agent was killed and started again between two rounds: it is still a member
    // and its heartbeat is fresh, but names another incarnation.
    let mut seen = all_well(1, T0 + 100);
    seen.beats[1] = Some(Heartbeat {
        incarnation: 2,
        ..beat(1, T0 + 100).unwrap()
    });
    let why = "rank 1 restarted inside epoch 1 (heartbeat incarnation 1 -> 2)";
    assert_eq!(
        m.handle_observation(&seen, T0 + 100, 1.0),
        vec![
            Effect::Failure(why.into()),
            Effect::RestartScheduled {
                delay_ms: 100,
                reason: why.into()
            }
        ]
    );
    assert_eq!(m.handle_timeout(T0 + 200), vec![Effect::MoveEpoch]);
    m.handle_epoch_moved(Epoch(2), T0 + 200);
    // In the new epoch the new incarnation is the one seen first: the group recovers.
    let mut next = all_well(2, T0 + 300);
    next.beats[1] = seen.beats[1].map(|b| Heartbeat {
        epoch: Epoch(2),
        ..b
    });
    let out = m.handle_observation(&next, T0 + 300, 0.5);
    assert!(
        matches!(out.first(), Some(Effect::Recovered { epoch, .. }) if *epoch == Epoch(2)),
        "{out:?}"
    );
}
