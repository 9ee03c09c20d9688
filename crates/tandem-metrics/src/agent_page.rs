//! The agent's status page (`/` of rank r, and `/ranks/r` through the supervisor), from its
//! `/status` document: readiness with the reason, the epoch and steps, the store's tiers in
//! blocks and MiB with fill bars, bytes moved and failure counters in human units.
//!
//! The document's shape is the agent's `/status`: `{agent: {group, rank, role, epoch, ready,
//! reason, sealed_step, acked_step, tasks_in_flight, steps_sealed, stale_epoch_rejected,
//! ...}, store: {blocks, host_free_blocks, host_capacity_blocks, disk_free_blocks,
//! disk_capacity_blocks, shard_bytes, bytes_stored, bytes_loaded, copy_failures,
//! checksum_failures, ...}, state, restarts}`, or `{ready: false, reason}` between epochs. A
//! missing field shows as `—`. A `read_by_supervisor_from` field (the agent's address, set by
//! the supervisor when it serves the page) replaces the footer's links. Never reads a clock or
//! performs IO.

use std::fmt::Write as _;

use serde_json::Value;

use crate::html::escape;
use crate::page::{at, badge, bool_at, card, fill, foot, head, lag, num, str_at, u64_at};
use crate::units;

/// Render an agent's `/status` document as a complete HTML page.
pub fn render_agent_page(status: &Value) -> String {
    let mut page = String::with_capacity(8 * 1024);
    let rank = u64_at(status, "/agent/rank");
    let role = str_at(status, "/agent/role");
    let title = match (rank, role) {
        (Some(r), Some(role)) => format!("Tandem agent: rank {r} ({role})"),
        (Some(r), None) => format!("Tandem agent: rank {r}"),
        _ => "Tandem agent".to_string(),
    };
    head(&mut page, &title);
    let ready = bool_at(status, "/agent/ready").or_else(|| bool_at(status, "/ready"));
    let reason = str_at(status, "/agent/reason").or_else(|| str_at(status, "/reason"));
    badge(&mut page, ready, reason);

    let sealed = u64_at(status, "/agent/sealed_step");
    let acked = u64_at(status, "/agent/acked_step");
    page.push_str("<div class=\"cards\">\n");
    card(
        &mut page,
        "group",
        "group",
        str_at(status, "/agent/group").unwrap_or("—"),
        None,
    );
    card(
        &mut page,
        "state",
        "state",
        str_at(status, "/state").unwrap_or("—"),
        None,
    );
    card(
        &mut page,
        "epoch",
        "epoch",
        &num(u64_at(status, "/agent/epoch")),
        None,
    );
    card(
        &mut page,
        "sealed-step",
        "sealed step",
        &num(sealed),
        Some("last frame this rank knows"),
    );
    card(
        &mut page,
        "acked-step",
        "acknowledged step",
        &num(acked),
        Some(if role == Some("leader") {
            "slowest follower"
        } else {
            "this rank's engine"
        }),
    );
    card(
        &mut page,
        "lag",
        "lag",
        &lag(sealed, acked).map_or("—".into(), |l| format!("{l} steps")),
        None,
    );
    card(
        &mut page,
        "in-flight",
        "tasks in flight",
        &num(u64_at(status, "/agent/tasks_in_flight")),
        None,
    );
    card(
        &mut page,
        "restarts",
        "restarts",
        &num(u64_at(status, "/restarts")),
        Some("group restarts this agent took part in"),
    );
    page.push_str("</div>\n");

    store_section(&mut page, status);
    counters_section(&mut page, status);
    foot(
        &mut page,
        u64_at(status, "/unix_ms"),
        str_at(status, "/read_by_supervisor_from"),
    );
    page
}

/// The tiers of this rank: used and capacity in blocks and bytes, with fill bars.
fn store_section(page: &mut String, status: &Value) {
    page.push_str("<h2>Tiers</h2>\n");
    let Some(store) = at(status, "/store") else {
        page.push_str("<p class=\"muted\">— (the store did not answer)</p>\n");
        return;
    };
    let shard = u64_at(store, "/shard_bytes");
    page.push_str(
        "<table id=\"tiers\"><tr><th>tier</th><th>blocks used / capacity</th><th>bytes used / capacity</th></tr>\n",
    );
    for tier in ["host", "disk"] {
        let capacity = u64_at(store, &format!("/{tier}_capacity_blocks"));
        let free = u64_at(store, &format!("/{tier}_free_blocks"));
        let used = capacity.zip(free).map(|(c, f)| c.saturating_sub(f));
        let bytes_fill = match shard {
            Some(s) => fill(
                used.map(|u| u.saturating_mul(s)),
                capacity.map(|c| c.saturating_mul(s)),
                units::bytes,
            ),
            None => "—".into(),
        };
        let _ = writeln!(
            page,
            "<tr><td>{tier}</td><td>{}</td><td>{bytes_fill}</td></tr>",
            fill(used, capacity, |b| format!("{b} blocks"))
        );
    }
    page.push_str("</table>\n");
    if let Some(s) = shard {
        let _ = writeln!(
            page,
            "<p class=\"muted\">One block shard is {} ({s} bytes).</p>",
            escape(&units::bytes(s))
        );
    }
}

/// Bytes moved and the counters an operator acts on, in human units.
fn counters_section(page: &mut String, status: &Value) {
    page.push_str("<h2>Since this agent started</h2>\n<table id=\"counters\">\n");
    let bytes_row = |p: &str| u64_at(status, p).map_or("—".to_string(), units::bytes);
    let rows: [(&str, String, &str); 8] = [
        ("stored into tiers", bytes_row("/store/bytes_stored"), ""),
        (
            "loaded into engine pages",
            bytes_row("/store/bytes_loaded"),
            "",
        ),
        (
            "steps sealed (leader) or received",
            num(u64_at(status, "/agent/steps_sealed")),
            "",
        ),
        (
            "tasks ok / failed (leader)",
            format!(
                "{} / {}",
                num(u64_at(status, "/agent/tasks_ok")),
                num(u64_at(status, "/agent/tasks_failed"))
            ),
            "",
        ),
        (
            "blocks in the group index (leader)",
            num(u64_at(status, "/agent/index_blocks")),
            "",
        ),
        (
            "copy failures",
            num(u64_at(status, "/store/copy_failures")),
            "bad",
        ),
        (
            "checksum failures (shards dropped)",
            num(u64_at(status, "/store/checksum_failures")),
            "bad",
        ),
        (
            "stale-epoch messages rejected",
            num(u64_at(status, "/agent/stale_epoch_rejected")),
            "warn",
        ),
    ];
    for (label, value, alarm) in rows {
        let class = if !alarm.is_empty() && value != "0" && value != "—" {
            format!(" class=\"num {alarm}\"")
        } else {
            " class=\"num\"".to_string()
        };
        let _ = writeln!(
            page,
            "<tr><th>{}</th><td{class}>{}</td></tr>",
            escape(label),
            escape(&value)
        );
    }
    page.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn human_units_and_no_raw_counters() {
        let page = render_agent_page(&json!({
            "agent": {"group": "g", "rank": 1, "role": "follower", "epoch": 4, "ready": true,
                      "sealed_step": 812, "acked_step": 790, "tasks_in_flight": 2},
            "store": {"host_free_blocks": 24, "host_capacity_blocks": 1024, "disk_free_blocks": 0,
                      "disk_capacity_blocks": 0, "shard_bytes": 262144, "bytes_stored": 754450432,
                      "checksum_failures": 1},
            "state": "ready", "restarts": 3
        }));
        assert!(page.contains("rank 1 (follower)"));
        assert!(page.contains("720 MiB"), "bytes in MiB");
        assert!(!page.contains("754450432"), "no raw byte counter");
        assert!(page.contains("22 steps"), "lag");
        assert!(page.contains("1000 blocks / 1024 blocks (97.7 %)"));
        assert!(page.contains("250 MiB / 256 MiB"));
        assert!(
            page.contains("class=\"num bad\">1<"),
            "a checksum failure is red"
        );
        assert!(page.contains(">3</div>"), "restarts shown");
    }

    #[test]
    fn between_epochs_shows_the_reason() {
        let page = render_agent_page(&json!({"ready": false, "reason": "between epochs"}));
        assert!(page.contains("NOT READY") && page.contains("between epochs"));
        assert!(page.contains("the store did not answer"));
    }
}
