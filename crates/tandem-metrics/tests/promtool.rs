//! The Prometheus text 0.0.4 of both metric sets passes this crate's format check and, where
//! `promtool` is installed (Debian package `prometheus`), `promtool check metrics`, which
//! also lints names (counters end in `_total`, units, help text).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use tandem_metrics::{
    parse_exposition, AgentMetrics, Direction, GroupState, SupervisorMetrics, TaskKind, TaskResult,
    Tier,
};

fn busy_agent() -> AgentMetrics {
    let m = AgentMetrics::new("promtool", 1);
    m.steps_sealed().add(3);
    m.tasks_started(TaskKind::Store).add(2);
    m.tasks_finished(TaskKind::Store, TaskResult::Failed).inc();
    m.moved_bytes(Tier::Host, Direction::Store)
        .expect("a placed tier")
        .add(65536);
    m.set_tier_occupancy(Tier::Host, 4);
    m.observe_frame_latency(Duration::from_micros(300));
    m.observe_redis_append_latency(Duration::from_micros(90));
    m
}

fn busy_supervisor() -> SupervisorMetrics {
    let m = SupervisorMetrics::new("promtool");
    m.set_group_state(GroupState::Healthy);
    m.set_heartbeat_age(0, Duration::from_millis(120));
    m.set_heartbeat_age(1, Duration::from_millis(80));
    m
}

/// `promtool check metrics` on `text`: `None` when promtool is not installed, else its exit
/// status and output.
fn promtool(text: &str) -> Option<(bool, String)> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    stdin.write_all(text.as_bytes()).ok()?;
    drop(stdin);
    let out = child.wait_with_output().ok()?;
    let mut report = String::from_utf8_lossy(&out.stdout).into_owned();
    report.push_str(&String::from_utf8_lossy(&out.stderr));
    Some((out.status.success(), report))
}

#[test]
fn prometheus_text_passes_the_format_check_and_promtool() {
    for (who, text) in [
        ("agent", busy_agent().encode_prometheus_text()),
        ("supervisor", busy_supervisor().encode_prometheus_text()),
    ] {
        let parsed = match parse_exposition(&text) {
            Ok(p) => p,
            Err(e) => panic!("{who}: {e}\n{text}"),
        };
        assert!(!parsed.samples.is_empty(), "{who}: no samples");
        match promtool(&text) {
            None => eprintln!(
                "{who}: promtool not installed (apt-get install prometheus); format checked by parse_exposition only"
            ),
            Some((ok, report)) => {
                assert!(ok, "{who}: promtool check metrics failed:\n{report}\n{text}");
                assert!(report.trim().is_empty(), "{who}: promtool lint findings:\n{report}");
                eprintln!("{who}: promtool check metrics: ok");
            }
        }
    }
}
