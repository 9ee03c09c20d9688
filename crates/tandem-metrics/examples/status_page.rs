//! Print the status page for a JSON document (`cargo run -p tandem-metrics --example
//! status_page -- FILE.json`), or for a built-in supervisor-like sample without an
//! argument: to look at the page in a browser.

use serde_json::{json, Value};

fn sample() -> Value {
    json!({
        "group": "prod-a", "state": "healthy", "epoch": 8, "ready": false,
        "reason": "rank 3 has not joined epoch 8 (last heartbeat 6.2 s ago)",
        "restarts": 3, "step": 1742, "tasks_in_flight": 12,
        "ranks": [
            {"rank": 0, "role": "leader", "state": "ready", "heartbeat_age_s": 0.21, "sealed_step": 1742},
            {"rank": 1, "role": "follower", "state": "ready", "heartbeat_age_s": 0.19, "sealed_step": 1742},
            {"rank": 2, "role": "follower", "state": "ready", "heartbeat_age_s": 0.33, "sealed_step": 1741},
            {"rank": 3, "role": "follower", "state": "failed", "heartbeat_age_s": 6.2}
        ],
        "tiers": {"host": {"used_blocks": 812, "capacity_blocks": 1024}, "disk": {"used_blocks": 2048, "capacity_blocks": 4096}}
    })
}

fn main() {
    let status = match std::env::args().nth(1) {
        None => sample(),
        Some(path) => {
            match std::fs::read_to_string(&path).map(|t| serde_json::from_str::<Value>(&t)) {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => {
                    eprintln!("{path}: not JSON: {e}");
                    std::process::exit(1);
                }
                Err(e) => {
                    eprintln!("{path}: {e}");
                    std::process::exit(1);
                }
            }
        }
    };
    print!(
        "{}",
        tandem_metrics::render_status_html("Tandem supervisor · prod-a", &status)
    );
}
