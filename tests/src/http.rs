//! The HTTP side of the processes under test, seen as an operator sees it: a plain GET, its
//! body as JSON, one sample of a Prometheus metric.
//!
//! It never retries and never waits: callers poll with their own deadline.

use std::time::Duration;

/// A minimal HTTP/1.0 GET over TCP: `(status, body)`, or `None` when nothing answers within
/// 500 ms (connect) and 2 s (reply).
pub fn http_get(addr: (&str, u16), path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(
        &format!("{}:{}", addr.0, addr.1).parse().ok()?,
        Duration::from_millis(500),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Some((status, body))
}

/// The body of an answer as JSON (`Null` when there is no answer or it is not JSON).
pub fn json(answer: Option<(u16, String)>) -> serde_json::Value {
    answer
        .and_then(|(_, b)| serde_json::from_str(&b).ok())
        .unwrap_or_default()
}

/// The value of metric `name` in a Prometheus text: its first sample whose labels contain
/// `label` (`""`: the first sample); 0 when there is none.
pub fn metric_in(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.starts_with(name)
                && (l[name.len()..].starts_with(' ') || l[name.len()..].starts_with('{'))
        })
        .filter(|l| l.contains(label))
        .find_map(|l| l.rsplit(' ').next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_found_by_name_and_label() {
        let text =
            "# HELP x_total a\nx_total_other 9\nx_total{rank=\"1\"} 3\nx_total{rank=\"2\"} 4\n";
        assert_eq!(metric_in(text, "x_total", ""), 3.0);
        assert_eq!(metric_in(text, "x_total", "rank=\"2\""), 4.0);
        assert_eq!(metric_in(text, "absent", ""), 0.0);
        assert_eq!(json(Some((200, "{\"a\":1}".into())))["a"], 1);
        assert!(json(None).is_null());
    }
}
