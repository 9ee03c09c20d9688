//! Pieces the agent's and the supervisor's status pages share: the document head with its
//! stylesheet, the readiness badge, headline cards, fill bars, and reading typed fields out
//! of a status JSON document.
//!
//! Owns the pages' look (one inline stylesheet, no scripts, no external assets) and the rule
//! that a missing field shows as [`MISSING`]. Never reads a clock or performs IO.

use std::fmt::Write as _;

use serde_json::Value;

use crate::html::{escape, MISSING};
use crate::status_page::REFRESH_SECONDS;
use crate::units;

const CSS: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5rem;color:#1d232a;background:#f6f7f9}\
h1{font-size:1.4rem;margin:0 0 1rem}h2{font-size:1.1rem;margin:1.6rem 0 .5rem}\
a{color:#1f6feb}\
.badge{display:inline-block;font-size:1.8rem;font-weight:700;padding:.5rem 1.3rem;border-radius:.5rem;color:#fff}\
.ready{background:#1f8a3b}.notready{background:#c0392b}.unknown{background:#6c757d}\
.reason{font-size:1.05rem;margin:.6rem 0 0}\
.cards{display:flex;flex-wrap:wrap;gap:.75rem;margin-top:1rem}\
.card{background:#fff;border:1px solid #d8dde3;border-radius:.5rem;padding:.5rem .9rem;min-width:7rem}\
.card .k{font-size:.75rem;color:#5b6570;text-transform:uppercase;letter-spacing:.04em}\
.card .v{font-size:1.4rem;font-weight:600}.card .s{font-size:.8rem;color:#5b6570}\
table{border-collapse:collapse;background:#fff}th,td{border:1px solid #d8dde3;padding:.3rem .6rem;text-align:left;vertical-align:top}\
th{background:#eef1f4;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}\
.good{color:#1f8a3b;font-weight:600}.bad{color:#c0392b;font-weight:600}.warn{color:#b35900;font-weight:600}\
.bar{display:inline-block;width:6rem;height:.6rem;background:#e6e9ed;border-radius:.3rem;vertical-align:middle;margin-right:.4rem}\
.bar i{display:block;height:100%;border-radius:.3rem;background:#1f6feb}.bar i.full{background:#c0392b}\
.charts{display:flex;flex-wrap:wrap;gap:1rem}\
figure.chart{margin:0;background:#fff;border:1px solid #d8dde3;border-radius:.5rem;padding:.5rem .7rem}\
figcaption{font-size:.85rem;font-weight:600;margin-bottom:.3rem}\
text.axis{font-size:10px;fill:#5b6570}.legend{font-size:.8rem;margin-top:.2rem}\
.legend span{margin-right:.8rem}.legend i{display:inline-block;width:.7rem;height:.7rem;margin-right:.25rem;border-radius:.15rem}\
.muted{color:#5b6570}footer{margin-top:1.5rem;font-size:.8rem;color:#5b6570}";

/// The document's start: doctype, head (title, refresh, stylesheet), `<body>` and `<h1>`.
pub(crate) fn head(page: &mut String, title: &str) {
    let title = escape(title);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{title}</title><style>{CSS}</style></head><body>\n<h1>{title}</h1>\n"
    );
}

/// The document's end, with a note of when the data was taken (`unix_ms`, when known). With
/// `read_from` (a page the supervisor serves from its reading of an agent), the note names
/// that agent's address instead of linking endpoints of the server that sent the page.
pub(crate) fn foot(page: &mut String, unix_ms: Option<u64>, read_from: Option<&str>) {
    let taken = unix_ms
        .map(|t| format!("Data of {}. ", units::utc(t)))
        .unwrap_or_default();
    let _ = write!(page, "<footer>{taken}Reloads every {REFRESH_SECONDS} s. ");
    match read_from {
        Some(addr) => {
            let _ = write!(
                page,
                "Read by the supervisor from the agent at {0} (its own endpoints: {0}/status, {0}/metrics).",
                escape(addr)
            );
        }
        None => page.push_str(
            "Machine-readable: <a href=\"status\">/status</a> (JSON), <a href=\"metrics\">/metrics</a> (Prometheus).",
        ),
    }
    page.push_str("</footer>\n</body></html>\n");
}

/// The READY / NOT READY badge and the reason line.
pub(crate) fn badge(page: &mut String, ready: Option<bool>, reason: Option<&str>) {
    let (class, label) = match ready {
        Some(true) => ("ready", "READY"),
        Some(false) => ("notready", "NOT READY"),
        None => ("unknown", "READY: UNKNOWN"),
    };
    let _ = writeln!(
        page,
        "<div class=\"badge {class}\" id=\"readiness\">{label}</div>"
    );
    let reason = match (ready, reason) {
        (_, Some(r)) => r.to_string(),
        (Some(true), None) => "serving".to_string(),
        _ => MISSING.to_string(),
    };
    let _ = writeln!(page, "<p class=\"reason\">{}</p>", escape(&reason));
}

/// One headline card: a label, a value and an optional small line under it. `id` lets tests
/// and scripts find the value.
pub(crate) fn card(page: &mut String, id: &str, label: &str, value: &str, sub: Option<&str>) {
    let _ = write!(
        page,
        "<div class=\"card\"><div class=\"k\">{}</div><div class=\"v\" id=\"{}\">{}</div>",
        escape(label),
        escape(id),
        escape(value)
    );
    if let Some(s) = sub {
        let _ = write!(page, "<div class=\"s\">{}</div>", escape(s));
    }
    page.push_str("</div>\n");
}

/// A fill bar and the figure `used / capacity (p %)`; [`MISSING`] without a capacity.
pub(crate) fn fill(
    used: Option<u64>,
    capacity: Option<u64>,
    unit: impl Fn(u64) -> String,
) -> String {
    match (used, capacity) {
        (Some(u), Some(c)) if c > 0 => {
            let ratio = u as f64 / c as f64;
            let class = if ratio >= 0.95 { " class=\"full\"" } else { "" };
            format!(
                "<span class=\"bar\"><i{class} style=\"width:{:.1}%\"></i></span>{} / {} ({})",
                (ratio * 100.0).min(100.0),
                escape(&unit(u)),
                escape(&unit(c)),
                escape(&units::percent(ratio))
            )
        }
        (_, Some(0)) => "disabled (capacity 0)".to_string(),
        (Some(u), _) => format!("{} (capacity unknown)", escape(&unit(u))),
        _ => MISSING.to_string(),
    }
}

/// The value at a JSON pointer (`/agent/epoch`), if present and not null.
pub(crate) fn at<'a>(v: &'a Value, pointer: &str) -> Option<&'a Value> {
    v.pointer(pointer).filter(|x| !x.is_null())
}

/// An unsigned number at `pointer`.
pub(crate) fn u64_at(v: &Value, pointer: &str) -> Option<u64> {
    at(v, pointer).and_then(Value::as_u64)
}

/// A number at `pointer`.
pub(crate) fn f64_at(v: &Value, pointer: &str) -> Option<f64> {
    at(v, pointer).and_then(Value::as_f64)
}

/// A string at `pointer`.
pub(crate) fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    at(v, pointer).and_then(Value::as_str)
}

/// A boolean at `pointer`.
pub(crate) fn bool_at(v: &Value, pointer: &str) -> Option<bool> {
    at(v, pointer).and_then(Value::as_bool)
}

/// `n` as text, or [`MISSING`].
pub(crate) fn num(n: Option<u64>) -> String {
    n.map_or_else(|| MISSING.to_string(), |n| n.to_string())
}

/// Steps sealed but not yet acknowledged: sealed − acknowledged, or every step up to the
/// sealed one (steps count from 0) when none was acknowledged; `None` before any seal.
pub(crate) fn lag(sealed: Option<u64>, acked: Option<u64>) -> Option<u64> {
    match (sealed?, acked) {
        (s, Some(a)) => Some(s.saturating_sub(a)),
        (s, None) => Some(s.saturating_add(1)),
    }
}
