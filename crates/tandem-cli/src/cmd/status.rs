//! `tandem status [--watch]`: the group at a glance in a terminal, for operators on a
//! machine without a browser.
//!
//! Reads the supervisor's `/status`, which carries what the supervisor last read from every
//! rank's `/status` and `/metrics` (at most 2 s old); a rank the supervisor could not read is
//! asked directly at its address. Prints epoch, state, readiness, restarts (with the last
//! causes), the group's rates and tiers, and one line per rank (readiness and reason, epoch,
//! steps and lag, heartbeat age, tier fill), in the units of the status page.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;
use tandem_metrics::units;

/// What to read and how to show it.
pub(crate) struct StatusArgs<'a> {
    /// The configuration (for `supervisor.http_addr`), when given.
    pub config: Option<&'a std::path::Path>,
    /// `host:port` of the supervisor; overrides the configuration.
    pub supervisor: Option<String>,
    /// Redraw every this many seconds until Ctrl-C.
    pub watch: Option<f64>,
    /// Print the document as JSON instead.
    pub json: bool,
}

pub(crate) fn run(args: StatusArgs<'_>) -> anyhow::Result<()> {
    let addr = match (&args.supervisor, args.config) {
        (Some(a), _) => a.clone(),
        (None, Some(path)) => {
            tandem_config::load(Some(path), &tandem_config::Overrides::default())?
                .supervisor
                .http_addr
        }
        (None, None) => tandem_config::SupervisorConfig::default().http_addr,
    };
    let addr = addr.replace("0.0.0.0", "127.0.0.1");
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(2))
        .timeout(Duration::from_secs(3))
        .build();
    let Some(every) = args.watch else {
        let doc = fetch(&agent, &addr)?;
        print_doc(&doc, args.json)?;
        return Ok(());
    };
    let every = Duration::from_secs_f64(every.max(0.2));
    loop {
        let text = match fetch(&agent, &addr) {
            Ok(doc) if args.json => serde_json::to_string(&doc)? + "\n",
            Ok(doc) => render(&doc),
            Err(e) => format!(
                "tandem status: {e:#}\n(retrying every {:.1} s)\n",
                every.as_secs_f64()
            ),
        };
        let mut out = std::io::stdout().lock();
        if !args.json {
            // Home and clear: a dashboard, not a scrolling log.
            write!(out, "\x1b[H\x1b[2J")?;
        }
        write!(out, "{text}")?;
        out.flush()?;
        drop(out);
        std::thread::sleep(every);
    }
}

fn print_doc(doc: &Value, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(doc)?);
    } else {
        print!("{}", render(doc));
    }
    Ok(())
}

/// The supervisor's `/status`, with every rank the supervisor could not read asked directly.
fn fetch(agent: &ureq::Agent, addr: &str) -> anyhow::Result<Value> {
    let mut doc: Value = agent
        .get(&format!("http://{addr}/status"))
        .call()
        .with_context(|| format!("cannot read the supervisor's /status at {addr}"))?
        .into_json()
        .with_context(|| {
            format!("the supervisor at {addr} answered /status with something other than JSON")
        })?;
    if let Some(ranks) = doc.get_mut("ranks").and_then(Value::as_array_mut) {
        for r in ranks.iter_mut().filter(|r| r.get("agent").is_none()) {
            let Some(a) = r
                .get("agent_addr")
                .and_then(Value::as_str)
                .map(str::to_string)
            else {
                continue;
            };
            let direct = match agent.get(&format!("http://{a}/status")).call() {
                Ok(resp) | Err(ureq::Error::Status(_, resp)) => resp.into_json::<Value>().ok(),
                Err(_) => None,
            };
            if let (Some(v), Some(obj)) = (direct, r.as_object_mut()) {
                obj.insert("agent".into(), v);
            }
        }
    }
    Ok(doc)
}

fn u(v: &Value, p: &str) -> Option<u64> {
    v.pointer(p).and_then(Value::as_u64)
}
fn f(v: &Value, p: &str) -> Option<f64> {
    v.pointer(p).and_then(Value::as_f64)
}
fn s<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    v.pointer(p).and_then(Value::as_str)
}
fn or_dash(n: Option<u64>) -> String {
    n.map_or_else(|| "—".into(), |n| n.to_string())
}

/// The terminal text of a supervisor `/status` document.
pub(crate) fn render(doc: &Value) -> String {
    let mut out = String::new();
    let ready = match doc.pointer("/ready").and_then(Value::as_bool) {
        Some(true) => "READY".to_string(),
        Some(false) => format!("NOT READY: {}", s(doc, "/reason").unwrap_or("—")),
        None => "readiness unknown".to_string(),
    };
    out += &format!(
        "group {}  epoch {}  state {}  {}\n",
        s(doc, "/group").unwrap_or("—"),
        or_dash(u(doc, "/epoch")),
        s(doc, "/state").unwrap_or("—"),
        ready
    );
    out += &format!(
        "restarts {} ({} of {} allowed in {} s)  last recovery {}  Redis {}\n",
        or_dash(u(doc, "/restarts_total")),
        or_dash(u(doc, "/restarts_in_window")),
        or_dash(u(doc, "/max_restarts")),
        or_dash(u(doc, "/restart_window_s")),
        f(doc, "/last_recovery_ms").map_or("—".into(), units::millis),
        s(doc, "/redis").unwrap_or("—"),
    );
    let series = doc.pointer("/series").and_then(Value::as_array);
    if let Some(p) = series.and_then(|s| s.last()) {
        let hit = series
            .into_iter()
            .flatten()
            .rev()
            .find_map(|p| f(p, "/hit_ratio"));
        out += &format!(
            "last 2 s: steps {}  host stored {} loaded {}  disk stored {} loaded {}  hit ratio {}  frame p50 {} p99 {}\n",
            units::per_second(f(p, "/steps_per_s").unwrap_or(0.0)),
            units::bytes_per_second(f(p, "/host_store_bytes_per_s").unwrap_or(0.0)),
            units::bytes_per_second(f(p, "/host_load_bytes_per_s").unwrap_or(0.0)),
            units::bytes_per_second(f(p, "/disk_store_bytes_per_s").unwrap_or(0.0)),
            units::bytes_per_second(f(p, "/disk_load_bytes_per_s").unwrap_or(0.0)),
            hit.map_or("—".into(), units::percent),
            f(p, "/frame_latency_p50_ms").map_or("—".into(), units::millis),
            f(p, "/frame_latency_p99_ms").map_or("—".into(), units::millis),
        );
    }
    let mut tiers = Vec::new();
    for t in ["host", "disk"] {
        let Some(v) = doc.pointer(&format!("/tiers/{t}")) else {
            continue;
        };
        tiers.push(format!(
            "{t} {}",
            fill_text(u(v, "/used_bytes"), u(v, "/capacity_bytes"), units::bytes)
        ));
    }
    if !tiers.is_empty() {
        out += &format!("tiers: {}\n", tiers.join("   "));
    }
    out += &format!(
        "\n{:>4}  {:<8}  {:<11}  {:>5}  {:>7}  {:>7}  {:>5}  {:>9}  {}\n",
        "rank", "role", "ready", "epoch", "sealed", "acked", "lag", "heartbeat", "host tier"
    );
    let mut reasons = Vec::new();
    for r in doc
        .pointer("/ranks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let a = r.get("agent");
        let ready = a.and_then(|a| {
            a.pointer("/agent/ready")
                .or_else(|| a.pointer("/ready"))
                .and_then(Value::as_bool)
        });
        let reason = a.and_then(|a| s(a, "/agent/reason").or_else(|| s(a, "/reason")));
        let rank = or_dash(u(r, "/rank"));
        let readiness = match (ready, s(r, "/agent_error")) {
            (Some(true), _) => "ready",
            (Some(false), _) => {
                reasons.push(format!("rank {rank} not ready: {}", reason.unwrap_or("—")));
                "NOT READY"
            }
            (None, Some(e)) => {
                reasons.push(format!("rank {rank} unreachable: {e}"));
                "UNREACHABLE"
            }
            (None, None) => "—",
        };
        let sealed = a.and_then(|a| u(a, "/agent/sealed_step"));
        let acked = a.and_then(|a| u(a, "/agent/acked_step"));
        let lag = match (sealed, acked) {
            (Some(s), Some(k)) => Some(s.saturating_sub(k)),
            (Some(s), None) => Some(s + 1),
            _ => None,
        };
        let host = a.map_or("—".into(), |a| {
            let cap = u(a, "/store/host_capacity_blocks");
            let free = u(a, "/store/host_free_blocks");
            fill_text(cap.zip(free).map(|(c, f)| c.saturating_sub(f)), cap, |b| {
                format!("{b} blocks")
            })
        });
        out += &format!(
            "{:>4}  {:<8}  {:<11}  {:>5}  {:>7}  {:>7}  {:>5}  {:>9}  {}\n",
            rank,
            a.and_then(|a| s(a, "/agent/role")).unwrap_or("—"),
            readiness,
            or_dash(
                a.and_then(|a| u(a, "/agent/epoch"))
                    .or_else(|| u(r, "/epoch"))
            ),
            or_dash(sealed),
            or_dash(acked),
            or_dash(lag),
            u(r, "/heartbeat_age_ms").map_or("—".into(), |ms| units::millis(ms as f64)),
            host,
        );
    }
    for line in &reasons {
        out += &format!("  {line}\n");
    }
    let history = doc.pointer("/restart_history").and_then(Value::as_array);
    if let Some(h) = history.filter(|h| !h.is_empty()) {
        out += "\nlast restarts:\n";
        for r in h.iter().rev().take(5) {
            out += &format!(
                "  {}  epoch {} -> {}  {}\n",
                u(r, "/unix_ms").map_or("—".into(), units::utc),
                or_dash(u(r, "/from_epoch")),
                or_dash(u(r, "/epoch")),
                s(r, "/cause").unwrap_or("—")
            );
        }
    }
    out
}

fn fill_text(used: Option<u64>, cap: Option<u64>, unit: impl Fn(u64) -> String) -> String {
    match (used, cap) {
        (_, Some(0)) => "disabled".into(),
        (Some(u), Some(c)) => format!(
            "{} / {} ({})",
            unit(u),
            unit(c),
            units::percent(u as f64 / c as f64)
        ),
        _ => "—".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_group_at_a_glance() {
        let doc = json!({
            "group": "g", "epoch": 3, "state": "restarting", "ready": false, "reason": "waiting for ranks [1]",
            "restarts_total": 2, "restarts_in_window": 2, "max_restarts": 3, "restart_window_s": 60,
            "last_recovery_ms": 2400, "redis": "ok",
            "tiers": {"host": {"used_bytes": 44040192, "capacity_bytes": 536870912}, "disk": {"used_bytes": 0, "capacity_bytes": 0}},
            "series": [{"steps_per_s": 12.5, "host_store_bytes_per_s": 2e6, "hit_ratio": 0.75, "frame_latency_p99_ms": 3.0}],
            "ranks": [
                {"rank": 0, "heartbeat_age_ms": 93, "agent": {"agent": {"role": "leader", "ready": false, "reason": "waiting for followers: joined [] of 1", "epoch": 3, "sealed_step": 10, "acked_step": 7},
                    "store": {"host_capacity_blocks": 4096, "host_free_blocks": 3760}}},
                {"rank": 1, "agent_error": "Connection Failed: Connect error: connection refused"}
            ],
            "restart_history": [{"unix_ms": 0, "from_epoch": 2, "epoch": 3, "cause": "agent of rank 1 exited (signal: 9 (SIGKILL))"}]
        });
        let text = render(&doc);
        assert!(
            text.starts_with(
                "group g  epoch 3  state restarting  NOT READY: waiting for ranks [1]\n"
            ),
            "{text}"
        );
        assert!(text.contains("restarts 2 (2 of 3 allowed in 60 s)  last recovery 2.4 s  Redis ok"));
        assert!(
            text.contains("steps 12.5/s")
                && text.contains("host stored 2.00 MB/s")
                && text.contains("hit ratio 75.0 %")
        );
        assert!(text.contains("tiers: host 42.0 MiB / 512 MiB (8.2 %)   disk disabled"));
        assert!(
            text.contains("  rank 0 not ready: waiting for followers: joined [] of 1\n"),
            "{text}"
        );
        assert!(text.contains(
            "  rank 1 unreachable: Connection Failed: Connect error: connection refused\n"
        ));
        assert!(text.contains("336 blocks / 4096 blocks (8.2 %)"));
        assert!(
            text.contains("93 ms") && text.contains("    3  "),
            "lag of rank 0"
        );
        assert!(text.contains("UNREACHABLE"));
        assert!(text.contains("1970-01-01 00:00:00 UTC  epoch 2 -> 3  agent of rank 1 exited"));
    }
}
