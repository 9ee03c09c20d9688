//! The HTML status page served at `/` by agents and the supervisor.
//!
//! Owns the page's layout: a big ready / not-ready badge with the reason, headline cards
//! (group, state, epoch, current step, tasks in flight, restarts; rank and role when the
//! document has them), a table of ranks, a table of tiers, and every other field of the
//! status document. It reads any JSON: each headline looks for a few known key names
//! anywhere in the top levels of the document
//! ([`crate::html::find`]) and shows [`MISSING`] when none is there. Every string from the
//! document, keys included, and the title, is escaped. The page is self-contained (inline
//! CSS, no scripts, no external assets) and reloads itself every 2 s. It never reads a
//! clock or performs IO.

use std::fmt::Write as _;

use serde_json::Value;

use crate::html::{cell, escape, find, find_keyed, flatten, text_of, MISSING};

/// Seconds between automatic reloads of the page.
pub const REFRESH_SECONDS: u32 = 2;

/// Key names each headline is read from, earliest first.
const READY: &[&str] = &["ready"];
const REASON: &[&str] = &["reason", "not_ready_reason"];
const GROUP: &[&str] = &["group", "group_id"];
const STATE: &[&str] = &["state", "group_state"];
const EPOCH: &[&str] = &["epoch", "current_epoch"];
const STEP: &[&str] = &["step", "current_step", "sealed_step"];
const IN_FLIGHT: &[&str] = &["tasks_in_flight", "in_flight"];
const RESTARTS: &[&str] = &["restarts", "restarts_total", "restart_count"];
const RANK: &[&str] = &["rank"];
const ROLE: &[&str] = &["role"];
const RANKS: &[&str] = &["ranks", "members", "peers", "joined"];
const TIERS: &[&str] = &["tiers", "tier_occupancy", "store"];

const CSS: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5rem;color:#1d232a;background:#f6f7f9}\
h1{font-size:1.4rem;margin:0 0 1rem}h2{font-size:1.1rem;margin:1.5rem 0 .5rem}\
.badge{display:inline-block;font-size:2rem;font-weight:700;padding:.6rem 1.4rem;border-radius:.5rem;color:#fff}\
.ready{background:#1f8a3b}.notready{background:#c0392b}.unknown{background:#6c757d}\
.reason{font-size:1.1rem;margin:.6rem 0 0}\
.cards{display:flex;flex-wrap:wrap;gap:.75rem;margin-top:1rem}\
.card{background:#fff;border:1px solid #d8dde3;border-radius:.5rem;padding:.5rem .9rem;min-width:7rem}\
.card .k{font-size:.8rem;color:#5b6570;text-transform:uppercase;letter-spacing:.04em}\
.card .v{font-size:1.5rem;font-weight:600}\
table{border-collapse:collapse;background:#fff}th,td{border:1px solid #d8dde3;padding:.3rem .6rem;text-align:left}\
th{background:#eef1f4}td.good{color:#1f8a3b;font-weight:600}td.bad{color:#c0392b;font-weight:600}\
.muted{color:#5b6570}footer{margin-top:1.5rem;font-size:.8rem;color:#5b6570}";

/// Render `status` (any JSON; usually the `/status` document) as a complete HTML page
/// titled `title`. Never fails: absent keys show as `—`, unexpected shapes as text.
pub fn render_status_html(title: &str, status: &Value) -> String {
    let mut page = String::with_capacity(8 * 1024);
    let title = escape(title);
    // Writing into a String cannot fail; the results are ignored on purpose.
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{title}</title><style>{CSS}</style></head><body>\n<h1>{title}</h1>\n"
    );
    badge(&mut page, status);
    cards(&mut page, status);
    let ranks = find_keyed(status, RANKS);
    let tiers = find_keyed(status, TIERS);
    section(&mut page, "Ranks", ranks, |_| "rank");
    // An agent reports its store's counters, not per-tier rows: their keys are fields.
    section(&mut page, "Tiers", tiers, |key| {
        if key == "store" {
            "field"
        } else {
            "tier"
        }
    });
    let shown: Vec<&str> = ranks.into_iter().chain(tiers).map(|(k, _)| k).collect();
    other_fields(&mut page, status, &shown);
    let _ = write!(
        page,
        "<footer>Reloads every {REFRESH_SECONDS} s.</footer>\n</body></html>\n"
    );
    page
}

fn badge(page: &mut String, status: &Value) {
    let (class, label) = match find(status, READY) {
        Some(Value::Bool(true)) => ("ready", "READY"),
        Some(Value::Bool(false)) => ("notready", "NOT READY"),
        _ => ("unknown", "READY: UNKNOWN"),
    };
    let _ = writeln!(page, "<div class=\"badge {class}\">{label}</div>");
    let reason = find(status, REASON).map(text_of);
    let _ = writeln!(
        page,
        "<p class=\"reason\">{}</p>",
        escape(reason.as_deref().unwrap_or(MISSING))
    );
}

/// A heading, with the key the rows came from when it is not the heading's own word, and
/// the table of those rows.
fn section(
    page: &mut String,
    heading: &str,
    found: Option<(&str, &Value)>,
    key_column: impl Fn(&str) -> &'static str,
) {
    let _ = write!(page, "<h2>{heading}");
    if let Some((key, _)) = found.filter(|(key, _)| !key.eq_ignore_ascii_case(heading)) {
        let _ = write!(page, " <span class=\"muted\">({})</span>", escape(key));
    }
    page.push_str("</h2>\n");
    let column = found.map(|(key, _)| key_column(key)).unwrap_or("value");
    table_or_note(page, found.map(|(_, v)| v), column);
}

/// The headline cards: always group, state, epoch, step, tasks in flight and restarts
/// ([`MISSING`] when absent); rank and role only when the document has them (an agent's).
fn cards(page: &mut String, status: &Value) {
    let always: [(&str, &[&str]); 6] = [
        ("group", GROUP),
        ("state", STATE),
        ("epoch", EPOCH),
        ("step", STEP),
        ("tasks in flight", IN_FLIGHT),
        ("restarts", RESTARTS),
    ];
    let when_present: [(&str, &[&str]); 2] = [("rank", RANK), ("role", ROLE)];
    let present = when_present
        .into_iter()
        .filter(|(_, keys)| find(status, keys).is_some());
    page.push_str("<div class=\"cards\">\n");
    for (label, keys) in always.into_iter().chain(present) {
        let value = cell(find(status, keys));
        let _ =
            writeln!(page, "<div class=\"card\"><div class=\"k\">{label}</div><div class=\"v\">{value}</div></div>");
    }
    page.push_str("</div>\n");
}

/// A table of `value`: an array of objects (one row each), an object of objects or
/// scalars (one row per key, the key in column `key_column`, a scalar in column `value`), or
/// an array of scalars (one column, named `key_column`). Anything else, or nothing, is a
/// one-line note.
fn table_or_note(page: &mut String, value: Option<&Value>, key_column: &str) {
    let rows: Vec<(Option<String>, &Value)> = match value {
        Some(Value::Array(items)) if !items.is_empty() => items.iter().map(|v| (None, v)).collect(),
        Some(Value::Object(map)) if !map.is_empty() => {
            map.iter().map(|(k, v)| (Some(k.clone()), v)).collect()
        }
        Some(other @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => {
            let _ = writeln!(page, "<p>{}</p>", escape(&text_of(other)));
            return;
        }
        _ => {
            let _ = writeln!(page, "<p class=\"muted\">{MISSING} (none reported)</p>");
            return;
        }
    };
    let keyed = rows.iter().any(|(k, _)| k.is_some());
    let scalar_column = if keyed { "value" } else { key_column };
    let mut columns: Vec<String> = Vec::new();
    if keyed {
        columns.push(key_column.to_string());
    }
    for (_, row) in &rows {
        match row {
            Value::Object(map) => {
                for k in map.keys() {
                    if !columns.contains(k) {
                        columns.push(k.clone());
                    }
                }
            }
            _ if !columns.iter().any(|c| c == scalar_column) => {
                columns.push(scalar_column.to_string())
            }
            _ => {}
        }
    }
    // The identifying column first (a rank number or a tier name), when the rows carry one.
    if let Some(pos) = columns.iter().position(|c| c == key_column) {
        let id = columns.remove(pos);
        columns.insert(0, id);
    }
    page.push_str("<table><tr>");
    for c in &columns {
        let _ = write!(page, "<th>{}</th>", escape(c));
    }
    page.push_str("</tr>\n");
    for (key, row) in &rows {
        page.push_str("<tr>");
        for c in &columns {
            let value: Option<Value> = match row {
                _ if keyed && c == key_column && key.is_some() => key.clone().map(Value::String),
                Value::Object(map) => map.get(c).cloned(),
                scalar if c == scalar_column => Some((*scalar).clone()),
                _ => None,
            };
            let text = cell(value.as_ref());
            let _ = write!(page, "<td{}>{text}</td>", state_class(value.as_ref()));
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</table>\n");
}

/// A colour for cells that read as a state: green for good words, red for bad ones.
fn state_class(value: Option<&Value>) -> &'static str {
    let Some(Value::String(s)) = value else {
        return "";
    };
    match s.to_ascii_lowercase().as_str() {
        "ready" | "healthy" | "alive" | "joined" | "ok" | "up" => " class=\"good\"",
        "failed" | "dead" | "down" | "lost" | "not ready" | "timed out" => " class=\"bad\"",
        _ => "",
    }
}

/// Every field of the document except the members already shown as the ranks and tiers
/// tables.
fn other_fields(page: &mut String, status: &Value, shown: &[&str]) {
    page.push_str("<h2>Other fields</h2>\n<table><tr><th>field</th><th>value</th></tr>\n");
    for (path, text) in flatten(status, shown) {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td></tr>",
            escape(&path),
            escape(&text)
        );
    }
    page.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_of_scalars_has_one_value_column() {
        let mut page = String::new();
        table_or_note(&mut page, Some(&json!([1, 2])), "rank");
        assert!(page.contains("<th>rank</th>"));
        assert!(page.contains("<td>1</td>") && page.contains("<td>2</td>"));
    }

    #[test]
    fn keyed_table_puts_the_key_first() {
        let mut page = String::new();
        table_or_note(
            &mut page,
            Some(&json!({"host": {"used": 3, "free": 5}, "disk": 7})),
            "tier",
        );
        assert!(page.starts_with("<table><tr><th>tier</th>"));
        assert!(
            page.contains("<td>host</td>")
                && page.contains("<td>3</td>")
                && page.contains("<td>7</td>")
        );
    }

    #[test]
    fn missing_table_is_a_note() {
        let mut page = String::new();
        table_or_note(&mut page, None, "rank");
        assert!(page.contains("none reported"));
    }

    #[test]
    fn state_words_are_coloured() {
        assert_eq!(state_class(Some(&json!("healthy"))), " class=\"good\"");
        assert_eq!(state_class(Some(&json!("FAILED"))), " class=\"bad\"");
        assert_eq!(state_class(Some(&json!("restarting"))), "");
        assert_eq!(state_class(Some(&json!(1))), "");
    }
}
