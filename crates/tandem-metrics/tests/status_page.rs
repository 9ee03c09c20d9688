//! The HTML status page: values shown, missing keys as "—", every string escaped,
//! self-contained, reloading every 2 s, and any JSON accepted.

use serde_json::{json, Value};
use tandem_metrics::render_status_html;

/// The shape `/status` of an agent has today: `{agent: AgentStatus, store: StoreStats}`.
fn agent_status() -> Value {
    json!({
        "agent": {
            "group": "prod-a", "rank": 0, "role": "leader", "epoch": 7, "ready": false,
            "reason": "waiting for ranks 2, 3 to join", "joined": [1], "sealed_step": 812,
            "acked_step": 790, "tasks_in_flight": 5, "steps_sealed": 812, "stale_epoch_rejected": 2,
            "tasks_ok": 40, "tasks_failed": 1, "index_blocks": 300
        },
        "store": { "blocks": 120, "host_free_blocks": 904, "disk_free_blocks": 4096, "bytes_stored": 1048576 }
    })
}

/// A supervisor-like document with a ranks table and tiers.
fn supervisor_status() -> Value {
    json!({
        "group": "prod-a", "state": "restarting", "epoch": 8, "ready": true, "restarts": 3,
        "step": 17,
        "ranks": [
            {"rank": 0, "state": "healthy", "heartbeat_age_s": 0.2},
            {"rank": 1, "state": "failed", "heartbeat_age_s": 12.5, "exit_code": 1}
        ],
        "tiers": {"host": {"used_blocks": 10, "capacity_blocks": 1024}, "disk": {"used_blocks": 0}}
    })
}

fn between<'a>(page: &'a str, start: &str, end: &str) -> &'a str {
    let from = page
        .find(start)
        .map(|i| i + start.len())
        .unwrap_or(page.len());
    let to = page[from..]
        .find(end)
        .map(|i| from + i)
        .unwrap_or(page.len());
    &page[from..to]
}

#[test]
fn agent_status_values_are_on_the_page() {
    let page = render_status_html("Tandem agent 0", &agent_status());
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("<title>Tandem agent 0</title>"));
    assert!(page.contains("NOT READY"));
    assert!(page.contains("waiting for ranks 2, 3 to join"));
    for card in ["prod-a", "7", "812", "5", "leader"] {
        assert!(
            page.contains(&format!("<div class=\"v\">{card}</div>")),
            "card {card}"
        );
    }
    // No restarts and no group state in an agent's document: shown as missing.
    assert!(page.contains("<div class=\"k\">restarts</div><div class=\"v\">—</div>"));
    assert!(page.contains("<div class=\"k\">state</div><div class=\"v\">—</div>"));
    // The followers admitted stand in for the ranks table; the store for the tiers.
    let ranks = between(&page, "<h2>Ranks", "<h2>Tiers");
    assert!(
        ranks.starts_with(" <span class=\"muted\">(joined)</span></h2>"),
        "{ranks}"
    );
    assert!(
        ranks.contains("<tr><th>rank</th></tr>") && ranks.contains("<td>1</td>"),
        "{ranks}"
    );
    let tiers = between(&page, "<h2>Tiers", "<h2>Other fields</h2>");
    assert!(
        tiers.contains("(store)") && tiers.contains("<tr><th>field</th><th>value</th></tr>"),
        "{tiers}"
    );
    assert!(
        tiers.contains("<td>host_free_blocks</td><td>904</td>"),
        "{tiers}"
    );
    // Every other field is listed; the store's are in the tiers table only.
    let others = between(&page, "<h2>Other fields</h2>", "</table>");
    assert!(others.contains("<td>agent.acked_step</td><td>790</td>"));
    assert!(others.contains("<td>agent.tasks_failed</td><td>1</td>"));
    assert!(!others.contains("store."), "{others}");
}

#[test]
fn supervisor_status_renders_ranks_and_tiers_tables() {
    let page = render_status_html("Tandem supervisor", &supervisor_status());
    assert!(page.contains("class=\"badge ready\">READY<"));
    for card in ["restarting", "8", "3", "17"] {
        assert!(
            page.contains(&format!("<div class=\"v\">{card}</div>")),
            "card {card}"
        );
    }
    let ranks = between(&page, "<h2>Ranks</h2>", "<h2>Tiers</h2>");
    assert!(ranks.contains("<tr><th>rank</th>"), "{ranks}");
    assert!(ranks.contains("<td class=\"good\">healthy</td>"));
    assert!(ranks.contains("<td class=\"bad\">failed</td>"));
    assert!(ranks.contains("<td>12.5</td>"));
    // Rank 0 has no exit_code: its cell is the placeholder.
    assert!(ranks.contains("<td>—</td>"));
    let tiers = between(&page, "<h2>Tiers</h2>", "<h2>Other fields</h2>");
    assert!(tiers.contains("<tr><th>tier</th>"));
    // A supervisor's document has no rank or role of its own: no cards for them.
    assert!(
        !page.contains("<div class=\"k\">rank</div>")
            && !page.contains("<div class=\"k\">role</div>")
    );
    assert!(tiers.contains("<td>host</td>") && tiers.contains("<td>1024</td>"));
}

#[test]
fn missing_keys_show_a_dash() {
    let page = render_status_html("empty", &json!({}));
    assert!(page.contains("READY: UNKNOWN"));
    for label in [
        "group",
        "state",
        "epoch",
        "step",
        "tasks in flight",
        "restarts",
    ] {
        assert!(
            page.contains(&format!(
                "<div class=\"k\">{label}</div><div class=\"v\">—</div>"
            )),
            "{label}"
        );
    }
    assert!(page.contains("— (none reported)"));
}

#[test]
fn every_string_is_escaped() {
    let evil = "<script>alert('x')</script>";
    let status = json!({
        "group": evil, "ready": false, "reason": evil, "epoch": evil,
        "ranks": [{"rank": evil, "state": evil, evil: 1}],
        "tiers": {evil: evil},
        "extra": {evil: [evil, "\"quoted\" & more"]}
    });
    let page = render_status_html(evil, &status);
    assert!(!page.contains("<script"), "raw script tag on the page");
    assert!(!page.contains("alert('x')"), "unescaped quote");
    assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    assert!(page.contains("&quot;quoted&quot; &amp; more"));
    assert!(page.contains("<title>&lt;script&gt;"));
}

#[test]
fn the_page_is_self_contained_and_reloads() {
    let page = render_status_html("t", &supervisor_status());
    assert!(page.contains("<meta http-equiv=\"refresh\" content=\"2\">"));
    assert!(page.contains("<style>"));
    for external in [
        "http://", "https://", "<script", "<link", "src=", "@import", "url(",
    ] {
        assert!(!page.contains(external), "page refers to {external}");
    }
}

#[test]
fn any_json_renders() {
    for v in [
        json!(null),
        json!(3),
        json!("plain"),
        json!([1, {"a": [2, {"b": null}]}]),
        json!({"ready": "yes"}),
    ] {
        let page = render_status_html("x", &v);
        assert!(page.ends_with("</html>\n"), "{v}");
        assert!(page.contains("READY: UNKNOWN"), "{v}");
    }
    let page = render_status_html("x", &json!("plain"));
    assert!(page.contains("<td>(value)</td><td>plain</td>"));
}
