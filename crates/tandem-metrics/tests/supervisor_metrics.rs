//! `SupervisorMetrics` through its text: every family, the one-hot group state, per-rank
//! heartbeat ages, counters that grow.

use std::time::Duration;

use tandem_metrics::{parse_exposition, GroupState, ParsedExposition, SupervisorMetrics};

fn parsed(m: &SupervisorMetrics) -> ParsedExposition {
    let text = m.encode_text();
    match parse_exposition(&text) {
        Ok(p) => p,
        Err(e) => panic!("exposition does not parse: {e}\n{text}"),
    }
}

#[test]
fn every_family_appears_with_its_type() {
    let m = SupervisorMetrics::new("grp");
    m.set_heartbeat_age(0, Duration::from_millis(100));
    let p = parsed(&m);
    let expected = [
        (
            "tandem_supervisor_restarts",
            "counter",
            "tandem_supervisor_restarts_total",
        ),
        (
            "tandem_supervisor_group_state",
            "gauge",
            "tandem_supervisor_group_state",
        ),
        (
            "tandem_supervisor_epoch",
            "gauge",
            "tandem_supervisor_epoch",
        ),
        (
            "tandem_supervisor_ranks_alive",
            "gauge",
            "tandem_supervisor_ranks_alive",
        ),
        (
            "tandem_supervisor_ranks_expected",
            "gauge",
            "tandem_supervisor_ranks_expected",
        ),
        (
            "tandem_supervisor_heartbeat_age_seconds",
            "gauge",
            "tandem_supervisor_heartbeat_age_seconds",
        ),
        (
            "tandem_supervisor_restart_backoff_seconds",
            "gauge",
            "tandem_supervisor_restart_backoff_seconds",
        ),
        (
            "tandem_supervisor_restarts_in_window",
            "gauge",
            "tandem_supervisor_restarts_in_window",
        ),
        (
            "tandem_supervisor_max_restarts",
            "gauge",
            "tandem_supervisor_max_restarts",
        ),
        (
            "tandem_supervisor_restart_window_seconds",
            "gauge",
            "tandem_supervisor_restart_window_seconds",
        ),
        (
            "tandem_supervisor_heartbeat_timeout_seconds",
            "gauge",
            "tandem_supervisor_heartbeat_timeout_seconds",
        ),
        (
            "tandem_supervisor_redis_up",
            "gauge",
            "tandem_supervisor_redis_up",
        ),
        (
            "tandem_supervisor_last_recovery_seconds",
            "gauge",
            "tandem_supervisor_last_recovery_seconds",
        ),
    ];
    assert_eq!(
        p.types.len(),
        expected.len(),
        "families: {:?}",
        p.types.keys().collect::<Vec<_>>()
    );
    for (family, kind, sample) in expected {
        assert_eq!(
            p.types.get(family).map(String::as_str),
            Some(kind),
            "{family}"
        );
        assert!(p.samples_named(sample).count() > 0, "no sample {sample}");
        assert!(
            p.samples_named(sample)
                .all(|s| s.label("group") == Some("grp")),
            "{sample}"
        );
    }
    assert_eq!(
        p.units
            .get("tandem_supervisor_heartbeat_age_seconds")
            .map(String::as_str),
        Some("seconds")
    );
}

#[test]
fn group_state_is_one_hot() {
    let m = SupervisorMetrics::new("grp");
    assert_eq!(m.group_state(), Some(GroupState::Starting));
    for state in GroupState::ALL {
        m.set_group_state(state);
        assert_eq!(m.group_state(), Some(state));
        let p = parsed(&m);
        let samples: Vec<_> = p.samples_named("tandem_supervisor_group_state").collect();
        assert_eq!(samples.len(), GroupState::ALL.len());
        for s in samples {
            let want = if s.label("state") == Some(state.as_str()) {
                1.0
            } else {
                0.0
            };
            assert_eq!(s.value, want, "{:?} while {}", s.labels, state.as_str());
        }
    }
}

#[test]
fn heartbeat_ages_per_rank_and_forgetting_a_rank() {
    let m = SupervisorMetrics::new("grp");
    m.set_heartbeat_age(0, Duration::from_millis(250));
    m.set_heartbeat_age(3, Duration::from_secs(4));
    m.set_heartbeat_age(3, Duration::from_secs(5));
    let p = parsed(&m);
    assert_eq!(
        p.value("tandem_supervisor_heartbeat_age_seconds", &[("rank", "0")]),
        Some(0.25)
    );
    assert_eq!(
        p.value("tandem_supervisor_heartbeat_age_seconds", &[("rank", "3")]),
        Some(5.0)
    );
    assert!(m.forget_rank(3));
    assert!(!m.forget_rank(3));
    let p = parsed(&m);
    assert_eq!(
        p.value("tandem_supervisor_heartbeat_age_seconds", &[("rank", "3")]),
        None
    );
    assert_eq!(
        p.samples_named("tandem_supervisor_heartbeat_age_seconds")
            .count(),
        1
    );
}

#[test]
fn counters_and_gauges_update() {
    let m = SupervisorMetrics::new("grp");
    m.restarts().inc();
    m.restarts().add(3);
    m.set_epoch(5);
    m.set_ranks_alive(3);
    m.set_ranks_expected(4);
    m.set_restart_backoff(Duration::from_millis(1500));
    let p = parsed(&m);
    assert_eq!(p.value("tandem_supervisor_restarts_total", &[]), Some(4.0));
    assert_eq!(p.value("tandem_supervisor_epoch", &[]), Some(5.0));
    assert_eq!(p.value("tandem_supervisor_ranks_alive", &[]), Some(3.0));
    assert_eq!(p.value("tandem_supervisor_ranks_expected", &[]), Some(4.0));
    assert_eq!(
        p.value("tandem_supervisor_restart_backoff_seconds", &[]),
        Some(1.5)
    );
}

#[test]
fn configured_limits_are_exported_for_the_alert_rules() {
    let m = SupervisorMetrics::new("grp");
    m.set_limits(3, Duration::from_secs(60), Duration::from_millis(500));
    m.set_restarts_in_window(2);
    m.set_redis_up(false);
    let p = parsed(&m);
    assert_eq!(p.value("tandem_supervisor_max_restarts", &[]), Some(3.0));
    assert_eq!(
        p.value("tandem_supervisor_restart_window_seconds", &[]),
        Some(60.0)
    );
    assert_eq!(
        p.value("tandem_supervisor_heartbeat_timeout_seconds", &[]),
        Some(0.5)
    );
    assert_eq!(
        p.value("tandem_supervisor_restarts_in_window", &[]),
        Some(2.0)
    );
    assert_eq!(p.value("tandem_supervisor_redis_up", &[]), Some(0.0));
}
