//! The supervisor's status page (`/`), from its `/status` document: the group's readiness
//! and state, a grid of every rank (readiness and reason, epoch, sealed and acknowledged
//! step and the lag, heartbeat age, tier fill) with a link to each rank's page, the group's
//! tier totals, charts of the recent figures, and the restart history with causes.
//!
//! The document's shape is the supervisor's `/status`: `{group, epoch, state, reason, ready,
//! redis, restarts_total, restarts_in_window, max_restarts, restart_window_s,
//! heartbeat_timeout_ms, last_recovery_ms, unix_ms, ranks: [{rank, heartbeat_age_ms, epoch,
//! joined, page, agent: <the agent's /status>, agent_error}], tiers: {host|disk: {used_blocks,
//! capacity_blocks, used_bytes, capacity_bytes}}, series: [GroupPoint], restart_history:
//! [{unix_ms, from_epoch, epoch, cause, backoff_ms}]}`. A missing field shows as `—`. Never
//! reads a clock or performs IO.

use std::fmt::Write as _;

use serde_json::Value;

use crate::chart::{svg_chart, Line};
use crate::html::escape;
use crate::page::{at, badge, bool_at, card, f64_at, fill, foot, head, lag, num, str_at, u64_at};
use crate::units;

/// Render the supervisor's `/status` document as a complete HTML page.
pub fn render_supervisor_page(status: &Value) -> String {
    let mut page = String::with_capacity(16 * 1024);
    let group = str_at(status, "/group").unwrap_or("—");
    head(&mut page, &format!("Tandem group {group}"));
    badge(
        &mut page,
        bool_at(status, "/ready"),
        str_at(status, "/reason"),
    );
    cards(&mut page, status);
    ranks_grid(&mut page, status);
    tiers_section(&mut page, status);
    charts(&mut page, status);
    restart_history(&mut page, status);
    foot(&mut page, u64_at(status, "/unix_ms"), None);
    page
}

fn cards(page: &mut String, status: &Value) {
    let ranks = at(status, "/ranks").and_then(Value::as_array);
    let ready_ranks = ranks.map(|r| {
        r.iter()
            .filter(|r| bool_at(r, "/agent/agent/ready") == Some(true))
            .count()
    });
    let total = ranks.map(Vec::len);
    let latest = at(status, "/series")
        .and_then(Value::as_array)
        .and_then(|s| s.last());
    page.push_str("<div class=\"cards\">\n");
    card(
        page,
        "state",
        "state",
        str_at(status, "/state").unwrap_or("—"),
        None,
    );
    card(page, "epoch", "epoch", &num(u64_at(status, "/epoch")), None);
    card(
        page,
        "ranks-ready",
        "ranks ready",
        &match (ready_ranks, total) {
            (Some(r), Some(t)) => format!("{r} / {t}"),
            _ => "—".into(),
        },
        None,
    );
    let limit = match (
        u64_at(status, "/restarts_in_window"),
        u64_at(status, "/max_restarts"),
        u64_at(status, "/restart_window_s"),
    ) {
        (Some(n), Some(m), Some(w)) => Some(format!("{n} of {m} allowed in {w} s")),
        _ => None,
    };
    card(
        page,
        "restarts",
        "restarts",
        &num(u64_at(status, "/restarts_total")),
        limit.as_deref(),
    );
    card(
        page,
        "last-recovery",
        "last recovery",
        &f64_at(status, "/last_recovery_ms").map_or("—".into(), units::millis),
        Some("failure → every rank joined"),
    );
    card(
        page,
        "steps-rate",
        "steps",
        &latest
            .and_then(|p| f64_at(p, "/steps_per_s"))
            .map_or("—".into(), units::per_second),
        None,
    );
    card(
        page,
        "hit-ratio",
        "prefix hit ratio",
        &latest
            .and_then(|p| f64_at(p, "/hit_ratio"))
            .map_or("—".into(), units::percent),
        Some("blocks matched / asked"),
    );
    let redis = str_at(status, "/redis").unwrap_or("—");
    card(
        page,
        "redis",
        "Redis",
        if redis == "ok" { "ok" } else { "unavailable" },
        (redis != "ok").then_some(redis),
    );
    page.push_str("</div>\n");
}

/// One row per rank: what the supervisor knows (heartbeat, joined) next to what the agent's
/// own `/status` says.
fn ranks_grid(page: &mut String, status: &Value) {
    page.push_str("<h2>Ranks</h2>\n");
    let Some(ranks) = at(status, "/ranks")
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty())
    else {
        page.push_str("<p class=\"muted\">— (no rank reported yet)</p>\n");
        return;
    };
    let timeout = u64_at(status, "/heartbeat_timeout_ms");
    page.push_str(
        "<table id=\"ranks\"><tr><th>rank</th><th>role</th><th>ready</th><th>epoch</th>\
         <th>sealed step</th><th>acked step</th><th>lag</th><th>heartbeat age</th>\
         <th>host tier</th><th>disk tier</th><th>page</th></tr>\n",
    );
    for r in ranks {
        let rank = u64_at(r, "/rank");
        let a = at(r, "/agent");
        let ready = a.and_then(|a| bool_at(a, "/agent/ready").or_else(|| bool_at(a, "/ready")));
        let reason = a.and_then(|a| str_at(a, "/agent/reason").or_else(|| str_at(a, "/reason")));
        let readiness = match (ready, reason, str_at(r, "/agent_error")) {
            (Some(true), _, _) => "<span class=\"good\">ready</span>".to_string(),
            (Some(false), reason, _) => format!(
                "<span class=\"bad\">not ready</span>: {}",
                escape(reason.unwrap_or("—"))
            ),
            (None, _, Some(err)) => {
                format!("<span class=\"bad\">unreachable</span>: {}", escape(err))
            }
            (None, _, None) => "—".to_string(),
        };
        let sealed = a.and_then(|a| u64_at(a, "/agent/sealed_step"));
        let acked = a.and_then(|a| u64_at(a, "/agent/acked_step"));
        let age = u64_at(r, "/heartbeat_age_ms");
        let age_class = match (age, timeout) {
            (Some(a), Some(t)) if a > t => " class=\"num bad\"",
            (Some(a), Some(t)) if a * 2 > t => " class=\"num warn\"",
            _ => " class=\"num\"",
        };
        let epoch = a
            .and_then(|a| u64_at(a, "/agent/epoch"))
            .or_else(|| u64_at(r, "/epoch"));
        let tier = |t: &str| {
            let cap = a.and_then(|a| u64_at(a, &format!("/store/{t}_capacity_blocks")));
            let free = a.and_then(|a| u64_at(a, &format!("/store/{t}_free_blocks")));
            fill(cap.zip(free).map(|(c, f)| c.saturating_sub(f)), cap, |b| {
                b.to_string()
            })
        };
        let link = match (str_at(r, "/page"), rank) {
            (Some(href), Some(n)) => format!("<a href=\"{}\">rank {n}</a>", escape(href)),
            _ => "—".to_string(),
        };
        let _ = writeln!(
            page,
            "<tr data-rank=\"{}\"><td class=\"num\">{}</td><td>{}</td><td>{readiness}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td{age_class}>{}</td>\
             <td>{}</td><td>{}</td><td>{link}</td></tr>",
            num(rank),
            num(rank),
            escape(a.and_then(|a| str_at(a, "/agent/role")).unwrap_or("—")),
            num(epoch),
            num(sealed),
            num(acked),
            lag(sealed, acked).map_or("—".into(), |l| l.to_string()),
            age.map_or("—".into(), |a| units::millis(a as f64)),
            tier("host"),
            tier("disk"),
        );
    }
    page.push_str("</table>\n");
    if let Some(t) = timeout {
        let _ = writeln!(
            page,
            "<p class=\"muted\">A rank silent for more than {} (supervisor.heartbeat_timeout_ms) has failed; ages above half of it are marked.</p>",
            escape(&units::millis(t as f64))
        );
    }
}

/// The group's tiers: every rank's blocks and bytes added up.
fn tiers_section(page: &mut String, status: &Value) {
    page.push_str("<h2>Group tiers</h2>\n");
    let Some(tiers) = at(status, "/tiers").filter(|t| t.as_object().is_some_and(|o| !o.is_empty()))
    else {
        page.push_str("<p class=\"muted\">— (no agent answered)</p>\n");
        return;
    };
    page.push_str("<table id=\"group-tiers\"><tr><th>tier</th><th>blocks used / capacity</th><th>bytes used / capacity</th><th>ranks counted</th></tr>\n");
    for name in ["host", "disk"] {
        let Some(t) = at(tiers, &format!("/{name}")) else {
            continue;
        };
        let _ = writeln!(
            page,
            "<tr><td>{name}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            fill(
                u64_at(t, "/used_blocks"),
                u64_at(t, "/capacity_blocks"),
                |b| format!("{b} blocks")
            ),
            fill(
                u64_at(t, "/used_bytes"),
                u64_at(t, "/capacity_bytes"),
                units::bytes
            ),
            num(u64_at(t, "/ranks")),
        );
    }
    page.push_str("</table>\n");
}

fn charts(page: &mut String, status: &Value) {
    page.push_str("<h2>Recent figures</h2>\n");
    let points: &[Value] = at(status, "/series")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let series = |key: &str| -> Vec<Option<f64>> {
        points
            .iter()
            .map(|p| f64_at(p, &format!("/{key}")))
            .collect()
    };
    if let (Some(first), Some(last)) = (
        points.first().and_then(|p| u64_at(p, "/unix_ms")),
        points.last().and_then(|p| u64_at(p, "/unix_ms")),
    ) {
        let _ = writeln!(
            page,
            "<p class=\"muted\">{} samples over the last {}, newest on the right.</p>",
            points.len(),
            escape(&units::millis(last.saturating_sub(first) as f64))
        );
    }
    page.push_str("<div class=\"charts\">\n");
    page.push_str(&svg_chart(
        "steps",
        "Steps per second",
        &[Line {
            name: "steps",
            values: series("steps_per_s"),
        }],
        units::per_second,
    ));
    page.push_str(&svg_chart(
        "host-bytes",
        "Host tier, bytes per second",
        &[
            Line {
                name: "stored",
                values: series("host_store_bytes_per_s"),
            },
            Line {
                name: "loaded",
                values: series("host_load_bytes_per_s"),
            },
        ],
        units::bytes_per_second,
    ));
    page.push_str(&svg_chart(
        "disk-bytes",
        "Disk tier, bytes per second",
        &[
            Line {
                name: "stored",
                values: series("disk_store_bytes_per_s"),
            },
            Line {
                name: "loaded",
                values: series("disk_load_bytes_per_s"),
            },
        ],
        units::bytes_per_second,
    ));
    let hit: Vec<Option<f64>> = series("hit_ratio")
        .into_iter()
        .map(|v| v.map(|r| r * 100.0))
        .collect();
    page.push_str(&svg_chart(
        "hit-ratio",
        "Prefix hit ratio (blocks)",
        &[Line {
            name: "hit",
            values: hit,
        }],
        |v| format!("{v:.1} %"),
    ));
    page.push_str(&svg_chart(
        "frame-latency",
        "Frame latency",
        &[
            Line {
                name: "p50",
                values: series("frame_latency_p50_ms"),
            },
            Line {
                name: "p99",
                values: series("frame_latency_p99_ms"),
            },
        ],
        units::millis,
    ));
    page.push_str("</div>\n");
}

fn restart_history(page: &mut String, status: &Value) {
    page.push_str("<h2>Restart history</h2>\n");
    let items: &[Value] = at(status, "/restart_history")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    if items.is_empty() {
        page.push_str("<p class=\"muted\" id=\"restart-history\">No restart since this supervisor started.</p>\n");
        return;
    }
    let now = u64_at(status, "/unix_ms");
    page.push_str("<table id=\"restart-history\"><tr><th>when</th><th>epoch</th><th>cause</th><th>backoff</th></tr>\n");
    for r in items.iter().rev() {
        let when = match (u64_at(r, "/unix_ms"), now) {
            (Some(t), Some(n)) => format!(
                "{} ({} ago)",
                units::utc(t),
                units::millis(n.saturating_sub(t) as f64)
            ),
            (Some(t), None) => units::utc(t),
            _ => "—".into(),
        };
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td class=\"num\">{} → {}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            escape(&when),
            num(u64_at(r, "/from_epoch")),
            num(u64_at(r, "/epoch")),
            escape(str_at(r, "/cause").unwrap_or("—")),
            f64_at(r, "/backoff_ms").map_or("—".into(), units::millis),
        );
    }
    page.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status() -> Value {
        json!({
            "group": "g1", "epoch": 3, "state": "healthy", "ready": true, "redis": "ok",
            "restarts_total": 2, "restarts_in_window": 1, "max_restarts": 3, "restart_window_s": 60,
            "heartbeat_timeout_ms": 500, "last_recovery_ms": 2400, "unix_ms": 1_709_210_096_000u64,
            "ranks": [
                {"rank": 0, "heartbeat_age_ms": 40, "epoch": 3, "joined": true, "page": "ranks/0",
                 "agent": {"agent": {"rank": 0, "role": "leader", "epoch": 3, "ready": true, "sealed_step": 100, "acked_step": 97},
                           "store": {"host_free_blocks": 1000, "host_capacity_blocks": 1024, "disk_free_blocks": 0, "disk_capacity_blocks": 0}}},
                {"rank": 1, "heartbeat_age_ms": 300, "epoch": 3, "joined": false, "page": "ranks/1",
                 "agent_error": "connection refused"}
            ],
            "tiers": {"host": {"used_blocks": 24, "capacity_blocks": 2048, "used_bytes": 6291456, "capacity_bytes": 536870912, "ranks": 1}},
            "series": [
                {"unix_ms": 1_709_210_094_000u64, "steps_per_s": 10.0, "hit_ratio": 0.5, "host_store_bytes_per_s": 1e6, "frame_latency_p50_ms": 0.4, "frame_latency_p99_ms": 2.0},
                {"unix_ms": 1_709_210_096_000u64, "steps_per_s": 12.5, "hit_ratio": 0.75, "host_store_bytes_per_s": 2e6, "frame_latency_p50_ms": 0.5, "frame_latency_p99_ms": 3.0}
            ],
            "restart_history": [{"unix_ms": 1_709_210_000_000u64, "from_epoch": 2, "epoch": 3, "cause": "rank 1 reported: peer lost", "backoff_ms": 42}]
        })
    }

    #[test]
    fn grid_links_totals_charts_and_history() {
        let page = render_supervisor_page(&status());
        assert!(
            page.contains("<a href=\"ranks/0\">rank 0</a>")
                && page.contains("<a href=\"ranks/1\">rank 1</a>")
        );
        assert!(page.contains("unreachable</span>: connection refused"));
        assert!(page.contains("1 / 2"), "ranks ready");
        assert!(page.contains("2 of 3 allowed in 60 s") || page.contains("1 of 3 allowed in 60 s"));
        assert!(
            page.contains("6.00 MiB / 512 MiB"),
            "group tier totals in MiB"
        );
        assert!(page.contains("data-chart=\"steps\"") && page.contains("12.5/s"));
        assert!(page.contains("2.00 MB/s"));
        assert!(page.contains("75.0 %"));
        assert!(page.contains("rank 1 reported: peer lost") && page.contains("2 → 3"));
        assert!(
            page.contains("class=\"num warn\">300 ms"),
            "heartbeat age above half the timeout"
        );
        assert!(page.contains(">3</td>"), "lag of rank 0");
    }

    #[test]
    fn empty_document_renders() {
        let page = render_supervisor_page(&json!({}));
        assert!(page.contains("no rank reported yet") && page.contains("no agent answered"));
        assert!(page.contains("No restart since"));
    }
}
