//! What every rank's agent says about itself, for the supervisor's status page and
//! `tandem status`: a thread reads each rank's `/status` (JSON) and `/metrics` every
//! [`INTERVAL`], keeps the newest answer (or the error) per rank, and feeds the counters into
//! a [`History`] of group figures for the charts.
//!
//! Owns the agents' HTTP addresses ([`agent_addrs`]) and the reading loop. It never takes
//! part in the supervisor's decisions: restarts are judged from Redis (heartbeats, failure
//! reports) only, so a slow or unreachable agent endpoint changes what the page shows and
//! nothing else. Reads are sequential with short timeouts ([`TIMEOUT`]).

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tandem_config::TandemConfig;
use tandem_metrics::{parse_exposition, History, RankCounters};

/// Time between two readings of every rank.
pub const INTERVAL: Duration = Duration::from_secs(2);
/// Connect and read timeout of one request.
pub const TIMEOUT: Duration = Duration::from_millis(800);
/// Points the history keeps: 10 minutes at [`INTERVAL`].
pub const HISTORY_POINTS: usize = 300;

/// The newest reading of one rank.
#[derive(Clone, Debug, Default)]
pub struct RankReading {
    /// `host:port` of the rank's HTTP endpoints.
    pub addr: String,
    /// Its `/status` document, when the last reading got one.
    pub status: Option<Value>,
    /// Why the last reading failed.
    pub error: Option<String>,
}

/// Everything the collector gathered.
#[derive(Debug)]
pub struct Collected {
    /// One reading per rank, by rank.
    pub ranks: Vec<RankReading>,
    /// The group's recent figures.
    pub history: History,
}

/// Shared between the collector thread and the HTTP handlers.
pub type SharedCollected = Arc<Mutex<Collected>>;

/// `host:port` of every rank's HTTP endpoints, from `supervisor.agent_http_addr` (with
/// `{rank}` and `{port}` substituted) or, when it is empty, `network.http_host` (loopback for
/// an unspecified address) and `network.http_base_port + rank`.
pub fn agent_addrs(config: &TandemConfig) -> Vec<String> {
    let template = &config.supervisor.agent_http_addr;
    let host = match config.network.http_host.as_str() {
        "0.0.0.0" | "" => "127.0.0.1",
        "::" | "[::]" => "[::1]",
        h => h,
    };
    (0..config.group.world_size())
        .map(|r| {
            let port = u32::from(config.network.http_base_port) + r;
            if template.is_empty() {
                format!("{host}:{port}")
            } else {
                template
                    .replace("{rank}", &r.to_string())
                    .replace("{port}", &port.to_string())
            }
        })
        .collect()
}

/// Start the reading thread for `addrs`; it stops once every [`SharedCollected`] handle is
/// dropped.
///
/// # Errors
/// The thread could not be spawned.
pub fn start(addrs: Vec<String>) -> std::io::Result<SharedCollected> {
    let shared = Arc::new(Mutex::new(Collected {
        ranks: addrs
            .iter()
            .map(|a| RankReading {
                addr: a.clone(),
                ..Default::default()
            })
            .collect(),
        history: History::new(HISTORY_POINTS),
    }));
    let weak = Arc::downgrade(&shared);
    std::thread::Builder::new()
        .name("status-collector".into())
        .spawn(move || run(addrs, weak))?;
    Ok(shared)
}

fn run(addrs: Vec<String>, shared: Weak<Mutex<Collected>>) {
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(TIMEOUT)
        .timeout(TIMEOUT)
        .build();
    loop {
        let mut readings = Vec::with_capacity(addrs.len());
        let mut counters = Vec::with_capacity(addrs.len());
        for addr in &addrs {
            let (reading, c) = read_rank(&agent, addr);
            readings.push(reading);
            counters.push(c);
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if let Ok(mut c) = shared.lock() {
            c.ranks = readings;
            c.history.record(now, counters);
        }
        drop(shared);
        std::thread::sleep(INTERVAL);
    }
}

fn read_rank(agent: &ureq::Agent, addr: &str) -> (RankReading, Option<RankCounters>) {
    let mut reading = RankReading {
        addr: addr.to_string(),
        ..Default::default()
    };
    // An agent between epochs answers /status with 503 and a JSON reason: keep it.
    match agent.get(&format!("http://{addr}/status")).call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => match r.into_json::<Value>() {
            Ok(v) => reading.status = Some(v),
            Err(e) => reading.error = Some(format!("/status: unreadable answer: {e}")),
        },
        Err(e) => reading.error = Some(short_error(&e)),
    }
    let counters = agent
        .get(&format!("http://{addr}/metrics"))
        .set("Accept", "text/plain")
        .call()
        .ok()
        .and_then(|r| r.into_string().ok())
        .and_then(|text| parse_exposition(&text).ok())
        .map(|p| RankCounters::from_exposition(&p));
    (reading, counters)
}

/// The transport error without ureq's URL prefix noise.
fn short_error(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Transport(t) => match t.message() {
            Some(m) => format!("{}: {m}", t.kind()),
            None => t.kind().to_string(),
        },
        other => other.to_string(),
    }
}

/// The supervisor's `/status` document: `view` (the supervisor's own snapshot) with each
/// rank's agent reading (`ranks[r].agent`, `ranks[r].agent_error`, `ranks[r].agent_addr`,
/// `ranks[r].page`), the group's tier totals (`tiers`) and the recent figures (`series`).
pub fn status_document(mut view: Value, collected: &Collected) -> Value {
    let mut totals = [[0u64; 4]; 2]; // [tier][used blocks, capacity blocks, used bytes, capacity bytes]
    let mut counted = [0u64; 2];
    if let Some(ranks) = view.get_mut("ranks").and_then(Value::as_array_mut) {
        for entry in ranks.iter_mut() {
            let Some(rank) = entry.get("rank").and_then(Value::as_u64) else {
                continue;
            };
            let Some(obj) = entry.as_object_mut() else {
                continue;
            };
            obj.insert("page".into(), json!(format!("ranks/{rank}")));
            let Some(reading) = collected.ranks.get(rank as usize) else {
                continue;
            };
            obj.insert("agent_addr".into(), json!(reading.addr));
            if let Some(e) = &reading.error {
                obj.insert("agent_error".into(), json!(e));
            }
            let Some(status) = &reading.status else {
                continue;
            };
            obj.insert("agent".into(), status.clone());
            let store = status.get("store");
            let get = |k: &str| store.and_then(|s| s.get(k)).and_then(Value::as_u64);
            let shard = get("shard_bytes").unwrap_or(0);
            for (i, tier) in ["host", "disk"].into_iter().enumerate() {
                let (Some(cap), Some(free)) = (
                    get(&format!("{tier}_capacity_blocks")),
                    get(&format!("{tier}_free_blocks")),
                ) else {
                    continue;
                };
                let used = cap.saturating_sub(free);
                totals[i][0] += used;
                totals[i][1] += cap;
                totals[i][2] += used.saturating_mul(shard);
                totals[i][3] += cap.saturating_mul(shard);
                counted[i] += 1;
            }
        }
    }
    let mut tiers = serde_json::Map::new();
    for (i, tier) in ["host", "disk"].into_iter().enumerate() {
        if counted[i] > 0 {
            tiers.insert(
                tier.into(),
                json!({
                    "used_blocks": totals[i][0], "capacity_blocks": totals[i][1],
                    "used_bytes": totals[i][2], "capacity_bytes": totals[i][3],
                    "ranks": counted[i],
                }),
            );
        }
    }
    if let Some(obj) = view.as_object_mut() {
        obj.insert("tiers".into(), Value::Object(tiers));
        obj.insert(
            "series".into(),
            serde_json::to_value(collected.history.points().collect::<Vec<_>>())
                .unwrap_or_default(),
        );
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_from_the_template_or_the_bind_host() {
        let mut c = TandemConfig::default();
        c.group.pp_size = 1;
        c.group.tp_size = 2;
        c.network.http_host = "0.0.0.0".into();
        assert_eq!(agent_addrs(&c), ["127.0.0.1:7500", "127.0.0.1:7501"]);
        c.supervisor.agent_http_addr = "agent-{rank}:{port}".into();
        assert_eq!(agent_addrs(&c), ["agent-0:7500", "agent-1:7501"]);
    }

    #[test]
    fn document_adds_agents_totals_and_links() {
        let collected = Collected {
            ranks: vec![
                RankReading {
                    addr: "a:1".into(),
                    status: Some(
                        json!({"store": {"host_capacity_blocks": 10, "host_free_blocks": 4, "shard_bytes": 1024, "disk_capacity_blocks": 0, "disk_free_blocks": 0}}),
                    ),
                    error: None,
                },
                RankReading {
                    addr: "b:2".into(),
                    status: None,
                    error: Some("connection refused".into()),
                },
            ],
            history: History::new(4),
        };
        let doc = status_document(json!({"ranks": [{"rank": 0}, {"rank": 1}]}), &collected);
        assert_eq!(doc["ranks"][0]["page"], "ranks/0");
        assert_eq!(doc["ranks"][1]["agent_error"], "connection refused");
        assert_eq!(doc["tiers"]["host"]["used_blocks"], 6);
        assert_eq!(doc["tiers"]["host"]["used_bytes"], 6144);
        assert_eq!(doc["tiers"]["disk"]["capacity_blocks"], 0);
        assert!(doc["series"].as_array().unwrap().is_empty());
    }
}
