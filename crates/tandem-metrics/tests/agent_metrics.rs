//! `AgentMetrics` through its text: every family with its name, type and labels, counters
//! that grow, the constant labels, escaping of the group id, and the format check.

use std::time::Duration;

use tandem_metrics::{
    parse_exposition, AgentMetrics, Direction, ParsedExposition, TaskKind, TaskResult, TextFormat,
    Tier, LATENCY_BUCKETS_SECONDS, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_TEXT_CONTENT_TYPE,
};

fn parsed(m: &AgentMetrics) -> ParsedExposition {
    let text = m.encode_text();
    match parse_exposition(&text) {
        Ok(p) => p,
        Err(e) => panic!("exposition does not parse: {e}\n{text}"),
    }
}

/// (OpenMetrics family name, type, the label keys every sample has besides group and rank).
const FAMILIES: [(&str, &str, &[&str]); 31] = [
    ("tandem_steps_sealed", "counter", &[]),
    ("tandem_frame_latency_seconds", "histogram", &[]),
    ("tandem_tasks_started", "counter", &["kind"]),
    ("tandem_tasks_finished", "counter", &["kind", "result"]),
    ("tandem_tier_moved_bytes", "counter", &["tier", "direction"]),
    ("tandem_tier_occupancy_blocks", "gauge", &["tier"]),
    ("tandem_tier_capacity_blocks", "gauge", &["tier"]),
    ("tandem_evictions", "counter", &[]),
    ("tandem_stale_epoch_rejected", "counter", &[]),
    ("tandem_restarts", "counter", &[]),
    ("tandem_epoch", "gauge", &[]),
    ("tandem_ready", "gauge", &[]),
    ("tandem_redis_append_latency_seconds", "histogram", &[]),
    ("tandem_engine_frames_read", "counter", &[]),
    ("tandem_wait_timeouts", "counter", &[]),
    ("tandem_peers_joined", "gauge", &[]),
    ("tandem_stream_trimmed_entries", "counter", &[]),
    ("tandem_stream_length_entries", "gauge", &[]),
    ("tandem_not_ready", "gauge", &["reason"]),
    ("tandem_redis_up", "gauge", &[]),
    ("tandem_stream_max_length_entries", "gauge", &[]),
    ("tandem_stores_refused", "counter", &["reason"]),
    ("tandem_checksum_failures", "counter", &[]),
    ("tandem_copy_failures", "counter", &[]),
    ("tandem_lookup_blocks", "counter", &["result"]),
    ("tandem_frame_limit_refusals", "counter", &[]),
    ("tandem_stream_entries_rejected", "counter", &[]),
    ("tandem_window_stalls", "counter", &[]),
    ("tandem_window_stalled_follower", "gauge", &[]),
    ("tandem_tier_degraded", "gauge", &["tier"]),
    ("tandem_tier_deadline_misses", "counter", &["tier"]),
];

fn sample_names(family: &str, kind: &str) -> Vec<String> {
    match kind {
        "counter" => vec![format!("{family}_total")],
        "histogram" => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|s| format!("{family}{s}"))
            .collect(),
        _ => vec![family.to_string()],
    }
}

#[test]
fn every_family_appears_with_its_type_and_labels() {
    let m = AgentMetrics::new("g1", 2);
    let p = parsed(&m);
    assert!(p.eof, "OpenMetrics text ends with # EOF");
    assert_eq!(
        p.types.len(),
        FAMILIES.len(),
        "families: {:?}",
        p.types.keys().collect::<Vec<_>>()
    );
    for (family, kind, keys) in FAMILIES {
        assert_eq!(
            p.types.get(family).map(String::as_str),
            Some(kind),
            "type of {family}"
        );
        assert!(
            p.helps.get(family).is_some_and(|h| !h.is_empty()),
            "help of {family}"
        );
        for name in sample_names(family, kind) {
            let samples: Vec<_> = p.samples_named(&name).collect();
            assert!(!samples.is_empty(), "no sample {name}");
            for s in samples {
                assert_eq!(s.label("group"), Some("g1"), "{name}");
                assert_eq!(s.label("rank"), Some("2"), "{name}");
                for key in keys {
                    assert!(s.label(key).is_some(), "{name} lacks label {key}");
                }
            }
        }
    }
    for (family, unit) in [
        ("tandem_frame_latency_seconds", "seconds"),
        ("tandem_redis_append_latency_seconds", "seconds"),
        ("tandem_tier_moved_bytes", "bytes"),
        ("tandem_tier_occupancy_blocks", "blocks"),
    ] {
        assert_eq!(
            p.units.get(family).map(String::as_str),
            Some(unit),
            "unit of {family}"
        );
    }
}

#[test]
fn every_labelled_series_exists_from_the_start_at_zero() {
    let p = parsed(&AgentMetrics::new("g", 0));
    for k in TaskKind::ALL {
        assert_eq!(
            p.value("tandem_tasks_started_total", &[("kind", k.as_str())]),
            Some(0.0)
        );
        for r in TaskResult::ALL {
            let labels = [("kind", k.as_str()), ("result", r.as_str())];
            assert_eq!(
                p.value("tandem_tasks_finished_total", &labels),
                Some(0.0),
                "{labels:?}"
            );
        }
    }
    for t in Tier::PLACED {
        assert_eq!(
            p.value("tandem_tier_occupancy_blocks", &[("tier", t.name())]),
            Some(0.0)
        );
        for d in Direction::ALL {
            let labels = [("tier", t.name()), ("direction", d.as_str())];
            assert_eq!(
                p.value("tandem_tier_moved_bytes_total", &labels),
                Some(0.0),
                "{labels:?}"
            );
        }
    }
    assert_eq!(p.samples_named("tandem_tasks_finished_total").count(), 6);
    assert_eq!(p.samples_named("tandem_tier_moved_bytes_total").count(), 4);
}

#[test]
fn counters_increase_by_increments_and_by_totals() {
    let m = AgentMetrics::new("g", 1);
    m.steps_sealed().set_total(10);
    m.steps_sealed().set_total(25);
    m.tasks_started(TaskKind::Load).inc();
    m.tasks_started(TaskKind::Load).add(2);
    m.tasks_finished(TaskKind::Store, TaskResult::Aborted)
        .add(4);
    m.moved_bytes(Tier::Disk, Direction::Load)
        .expect("a placed tier")
        .add(4096);
    m.moved_bytes(Tier::Disk, Direction::Load)
        .expect("a placed tier")
        .add(4096);
    m.evictions().add(7);
    m.stale_epoch_rejected().set_total(3);
    m.restarts().inc();
    m.engine_frames_read().set_total(5);
    m.wait_timeouts().inc();
    let before = parsed(&m);
    assert_eq!(before.value("tandem_steps_sealed_total", &[]), Some(25.0));
    assert_eq!(
        before.value("tandem_tasks_started_total", &[("kind", "load")]),
        Some(3.0)
    );
    assert_eq!(
        before.value("tandem_tasks_started_total", &[("kind", "store")]),
        Some(0.0)
    );
    assert_eq!(
        before.value(
            "tandem_tasks_finished_total",
            &[("kind", "store"), ("result", "aborted")]
        ),
        Some(4.0)
    );
    assert_eq!(
        before.value(
            "tandem_tier_moved_bytes_total",
            &[("tier", "disk"), ("direction", "load")]
        ),
        Some(8192.0)
    );
    assert_eq!(before.value("tandem_evictions_total", &[]), Some(7.0));
    assert_eq!(
        before.value("tandem_stale_epoch_rejected_total", &[]),
        Some(3.0)
    );
    assert_eq!(before.value("tandem_restarts_total", &[]), Some(1.0));
    assert_eq!(
        before.value("tandem_engine_frames_read_total", &[]),
        Some(5.0)
    );
    assert_eq!(before.value("tandem_wait_timeouts_total", &[]), Some(1.0));

    // A restarted state machine reports small totals again: the counters still only grow.
    m.steps_sealed().set_total(2);
    m.stale_epoch_rejected().set_total(1);
    let after = parsed(&m);
    assert_eq!(after.value("tandem_steps_sealed_total", &[]), Some(27.0));
    assert_eq!(
        after.value("tandem_stale_epoch_rejected_total", &[]),
        Some(4.0)
    );
    for s in &before.samples {
        if s.name.ends_with("_total") {
            let now = after.value(
                &s.name,
                &s.labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect::<Vec<_>>(),
            );
            assert!(now.is_some_and(|v| v >= s.value), "{} went down", s.name);
        }
    }
}

#[test]
fn gauges_take_absolute_values() {
    let m = AgentMetrics::new("g", 1);
    m.set_epoch(9);
    m.set_ready(true);
    m.set_peers_joined(3);
    m.set_tier_occupancy(Tier::Host, 120);
    m.set_tier_capacity(Tier::Host, 1024);
    m.set_tier_occupancy(Tier::Disk, 5);
    m.set_epoch(u64::MAX);
    let p = parsed(&m);
    assert_eq!(p.value("tandem_epoch", &[]), Some(i64::MAX as f64));
    assert_eq!(p.value("tandem_ready", &[]), Some(1.0));
    assert_eq!(p.value("tandem_peers_joined", &[]), Some(3.0));
    assert_eq!(
        p.value("tandem_tier_occupancy_blocks", &[("tier", "host")]),
        Some(120.0)
    );
    assert_eq!(
        p.value("tandem_tier_capacity_blocks", &[("tier", "host")]),
        Some(1024.0)
    );
    assert_eq!(
        p.value("tandem_tier_occupancy_blocks", &[("tier", "disk")]),
        Some(5.0)
    );
    m.set_ready(false);
    assert_eq!(parsed(&m).value("tandem_ready", &[]), Some(0.0));
}

#[test]
fn histograms_use_the_latency_buckets() {
    let m = AgentMetrics::new("g", 1);
    m.observe_frame_latency(Duration::from_micros(30));
    m.observe_frame_latency(Duration::from_millis(3));
    m.observe_frame_latency(Duration::from_secs(9));
    m.observe_redis_append_latency(Duration::from_micros(700));
    let p = parsed(&m);
    let bounds: Vec<String> = p
        .samples_named("tandem_frame_latency_seconds_bucket")
        .filter_map(|s| s.label("le").map(str::to_string))
        .collect();
    assert_eq!(bounds.len(), LATENCY_BUCKETS_SECONDS.len() + 1);
    assert_eq!(bounds.first().map(String::as_str), Some("0.00005"));
    assert_eq!(bounds.last().map(String::as_str), Some("+Inf"));
    assert_eq!(
        p.value("tandem_frame_latency_seconds_count", &[]),
        Some(3.0)
    );
    assert_eq!(
        p.value("tandem_frame_latency_seconds_bucket", &[("le", "0.00005")]),
        Some(1.0)
    );
    assert_eq!(
        p.value("tandem_frame_latency_seconds_bucket", &[("le", "0.005")]),
        Some(2.0)
    );
    assert_eq!(
        p.value("tandem_frame_latency_seconds_bucket", &[("le", "5.0")]),
        Some(2.0)
    );
    assert_eq!(
        p.value("tandem_frame_latency_seconds_bucket", &[("le", "+Inf")]),
        Some(3.0)
    );
    let sum = p
        .value("tandem_frame_latency_seconds_sum", &[])
        .unwrap_or(f64::NAN);
    assert!((sum - 9.00303).abs() < 1e-9, "sum {sum}");
    assert_eq!(
        p.value(
            "tandem_redis_append_latency_seconds_bucket",
            &[("le", "0.0005")]
        ),
        Some(0.0)
    );
    assert_eq!(
        p.value(
            "tandem_redis_append_latency_seconds_bucket",
            &[("le", "0.001")]
        ),
        Some(1.0)
    );
}

#[test]
fn a_hostile_group_id_is_escaped_in_labels() {
    let group = "a\"b\\c\nd} x 1";
    let p = parsed(&AgentMetrics::new(group, 0));
    assert!(p.samples.iter().all(|s| s.label("group") == Some(group)));
}

#[test]
fn the_content_type_follows_the_accept_header() {
    let m = AgentMetrics::new("g", 0);
    let scrape = m.exposition(Some(
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    ));
    assert_eq!(scrape.content_type, OPENMETRICS_CONTENT_TYPE);
    assert!(scrape.body.ends_with("# EOF\n"));
    let curl = m.exposition(None);
    assert_eq!(curl.content_type, PROMETHEUS_TEXT_CONTENT_TYPE);
    assert!(!curl.body.contains("# EOF"));
    // In Prometheus text 0.0.4 a counter family is named with its _total suffix.
    let p = match parse_exposition(&curl.body) {
        Ok(p) => p,
        Err(e) => panic!("0.0.4 text does not parse: {e}"),
    };
    assert_eq!(
        p.types.get("tandem_steps_sealed_total").map(String::as_str),
        Some("counter")
    );
    assert_eq!(p.types.len(), FAMILIES.len());
    assert_eq!(
        m.try_encode(TextFormat::OpenMetrics).ok(),
        Some(m.encode_text())
    );
    assert_eq!(
        m.try_encode(TextFormat::Prometheus).ok(),
        Some(m.encode_prometheus_text())
    );
}

#[test]
fn metrics_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<AgentMetrics>();
    let m = std::sync::Arc::new(AgentMetrics::new("g", 0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    m.evictions().inc();
                }
            })
        })
        .collect();
    for w in workers {
        assert!(w.join().is_ok());
    }
    assert_eq!(m.evictions().get(), 4000);
}

#[test]
fn not_ready_names_one_reason_and_ready_clears_them() {
    use tandem_metrics::NotReadyReason;
    let m = AgentMetrics::new("g1", 0);
    m.set_not_ready(Some(NotReadyReason::CompletionLog));
    let p = parsed(&m);
    for r in NotReadyReason::ALL {
        let want = if r == NotReadyReason::CompletionLog {
            1.0
        } else {
            0.0
        };
        assert_eq!(
            p.value("tandem_not_ready", &[("reason", r.as_str())]),
            Some(want),
            "{r:?}"
        );
    }
    assert_eq!(p.value("tandem_ready", &[]), Some(0.0));
    assert_eq!(m.not_ready(), Some(NotReadyReason::CompletionLog));
    m.set_not_ready(None);
    let p = parsed(&m);
    assert!(p.samples_named("tandem_not_ready").all(|s| s.value == 0.0));
    assert_eq!(p.value("tandem_ready", &[]), Some(1.0));
    assert_eq!(m.not_ready(), None);
}

#[test]
fn a_window_stall_names_the_follower_until_it_clears() {
    use tandem_metrics::NotReadyReason;
    let m = AgentMetrics::new("g1", 0);
    m.set_not_ready(Some(NotReadyReason::WindowStalled));
    m.set_window_stalled_follower(Some(3));
    m.window_stalls().set_total(1);
    let p = parsed(&m);
    assert_eq!(
        p.value("tandem_not_ready", &[("reason", "window_stalled")]),
        Some(1.0)
    );
    assert_eq!(p.value("tandem_window_stalled_follower", &[]), Some(3.0));
    assert_eq!(p.value("tandem_window_stalls_total", &[]), Some(1.0));
    m.set_not_ready(None);
    m.set_window_stalled_follower(None);
    let p = parsed(&m);
    assert_eq!(p.value("tandem_window_stalled_follower", &[]), Some(0.0));
    assert_eq!(p.value("tandem_window_stalls_total", &[]), Some(1.0));
}

#[test]
fn a_degraded_disk_tier_shows_until_it_clears_and_misses_are_counted() {
    use tandem_metrics::Tier;
    let m = AgentMetrics::new("g1", 1);
    let p = parsed(&m);
    assert_eq!(
        p.value("tandem_tier_degraded", &[("tier", "disk")]),
        Some(0.0)
    );
    m.set_tier_degraded(Tier::Disk, true);
    m.tier_deadline_misses(Tier::Disk)
        .expect("disk series")
        .inc();
    let p = parsed(&m);
    assert_eq!(
        p.value("tandem_tier_degraded", &[("tier", "disk")]),
        Some(1.0)
    );
    assert_eq!(
        p.value("tandem_tier_degraded", &[("tier", "host")]),
        Some(0.0)
    );
    assert_eq!(
        p.value("tandem_tier_deadline_misses_total", &[("tier", "disk")]),
        Some(1.0)
    );
    m.set_tier_degraded(Tier::Disk, false);
    let p = parsed(&m);
    assert_eq!(
        p.value("tandem_tier_degraded", &[("tier", "disk")]),
        Some(0.0)
    );
    assert!(m.tier_deadline_misses(Tier::Device).is_none());
}
