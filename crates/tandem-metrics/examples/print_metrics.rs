//! Print both expositions of a sample agent and supervisor (`cargo run -p tandem-metrics
//! --example print_metrics -- openmetrics|prometheus`), for a human or `promtool check
//! metrics`.

use std::time::Duration;

use tandem_metrics::{
    AgentMetrics, Direction, GroupState, SupervisorMetrics, TaskKind, TaskResult, TextFormat, Tier,
};

fn main() {
    let format = match std::env::args().nth(1).as_deref() {
        Some("openmetrics") => TextFormat::OpenMetrics,
        _ => TextFormat::Prometheus,
    };
    let agent = AgentMetrics::new("demo", 1);
    agent.steps_sealed().set_total(42);
    agent.tasks_started(TaskKind::Store).add(3);
    agent.tasks_finished(TaskKind::Store, TaskResult::Ok).add(2);
    agent
        .moved_bytes(Tier::Host, Direction::Store)
        .expect("a placed tier")
        .add(1 << 20);
    agent.set_tier_occupancy(Tier::Host, 17);
    agent.set_epoch(3);
    agent.set_ready(true);
    agent.observe_frame_latency(Duration::from_micros(420));
    agent.observe_redis_append_latency(Duration::from_micros(180));
    let supervisor = SupervisorMetrics::new("demo");
    supervisor.set_group_state(GroupState::Healthy);
    supervisor.set_heartbeat_age(0, Duration::from_millis(250));
    supervisor.set_ranks_expected(4);
    for (name, text) in [
        ("agent", agent.try_encode(format)),
        ("supervisor", supervisor.try_encode(format)),
    ] {
        match text {
            Ok(text) => print!("{text}"),
            Err(e) => eprintln!("{name}: {e}"),
        }
    }
}
