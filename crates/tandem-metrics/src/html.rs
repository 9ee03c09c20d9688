//! Small HTML helpers for the status page: escaping, showing JSON values as text, finding
//! a key in a status document, and flattening a document into rows.
//!
//! Owns the rule that every string reaching the page goes through [`escape`], and the
//! placeholder [`MISSING`] for absent values. It never builds a whole page.

use serde_json::Value;

/// What the page shows for a key that is absent or null.
pub const MISSING: &str = "—";

/// Rows the "all fields" table shows at most; the rest are counted in one last row.
pub const MAX_FLAT_ROWS: usize = 400;

/// Escape `s` for HTML text and attribute values (`&`, `<`, `>`, `"`, `'`).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// `v` as plain (unescaped) text: null → [`MISSING`], strings as they are, arrays of
/// scalars joined with `, ` (`none` when empty), objects and nested arrays as compact JSON.
pub fn text_of(v: &Value) -> String {
    match v {
        Value::Null => MISSING.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => "none".to_string(),
        Value::Array(items) if items.iter().all(|i| !i.is_array() && !i.is_object()) => {
            items.iter().map(text_of).collect::<Vec<_>>().join(", ")
        }
        other => other.to_string(),
    }
}

/// As [`text_of`] on an optional value, escaped for HTML.
pub fn cell(v: Option<&Value>) -> String {
    escape(&v.map(text_of).unwrap_or_else(|| MISSING.to_string()))
}

/// Keys whose objects hold per-rank or per-tier rows; [`find`] does not look inside them
/// for headline fields (a rank's `state` is not the group's).
const TABLE_KEYS: [&str; 5] = ["ranks", "members", "tiers", "tier_occupancy", "peers"];

/// The first non-null value under one of `keys` (earlier keys win), searched breadth
/// first: the top-level object, then objects nested in it, at most three levels down. It
/// never looks inside arrays or inside the rows of `ranks`, `members`, `tiers`,
/// `tier_occupancy` or `peers`.
pub fn find<'a>(root: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    find_keyed(root, keys).map(|(_, v)| v)
}

/// As [`find`], with the key that matched.
pub fn find_keyed<'a, 'k>(root: &'a Value, keys: &[&'k str]) -> Option<(&'k str, &'a Value)> {
    keys.iter()
        .find_map(|key| find_one(root, key).map(|v| (*key, v)))
}

fn find_one<'a>(root: &'a Value, key: &str) -> Option<&'a Value> {
    let mut level: Vec<&'a Value> = vec![root];
    for _depth in 0..3 {
        let mut next = Vec::new();
        for value in level {
            let Value::Object(map) = value else { continue };
            if let Some(found) = map.get(key).filter(|v| !v.is_null()) {
                return Some(found);
            }
            for (k, child) in map {
                if child.is_object() && !TABLE_KEYS.contains(&k.as_str()) {
                    next.push(child);
                }
            }
        }
        level = next;
    }
    None
}

/// Every leaf of `v` as `(dotted.path, text)` rows (`ranks[0].state`), at most
/// [`MAX_FLAT_ROWS`] of them, plus a `(… , N more)` row when cut, leaving out every object
/// member named in `skip` (at any depth). Text is not escaped.
pub fn flatten(v: &Value, skip: &[&str]) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut more = 0usize;
    walk(v, String::new(), skip, &mut rows, &mut more);
    if more > 0 {
        rows.push(("…".to_string(), format!("{more} more fields")));
    }
    rows
}

fn walk(
    v: &Value,
    path: String,
    skip: &[&str],
    rows: &mut Vec<(String, String)>,
    more: &mut usize,
) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, child) in map.iter().filter(|(k, _)| !skip.contains(&k.as_str())) {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(child, p, skip, rows, more);
            }
        }
        Value::Array(items) if items.iter().any(|i| i.is_object() || i.is_array()) => {
            for (i, child) in items.iter().enumerate() {
                walk(child, format!("{path}[{i}]"), skip, rows, more);
            }
        }
        leaf => {
            if rows.len() < MAX_FLAT_ROWS {
                let p = if path.is_empty() {
                    "(value)".to_string()
                } else {
                    path
                };
                rows.push((p, text_of(leaf)));
            } else {
                *more += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn text_of_each_shape() {
        assert_eq!(text_of(&Value::Null), MISSING);
        assert_eq!(text_of(&json!(true)), "true");
        assert_eq!(text_of(&json!(12)), "12");
        assert_eq!(text_of(&json!("x")), "x");
        assert_eq!(text_of(&json!([])), "none");
        assert_eq!(text_of(&json!([1, 2])), "1, 2");
        assert_eq!(text_of(&json!({"a": 1})), "{\"a\":1}");
        assert_eq!(cell(None), MISSING);
        assert_eq!(cell(Some(&json!("<b>"))), "&lt;b&gt;");
    }

    #[test]
    fn find_prefers_earlier_keys_and_shallower_levels() {
        let v = json!({"agent": {"epoch": 3, "sealed_step": 9, "deeper": {"step": 1}}, "epoch": 4,
                       "ranks": {"0": {"state": "failed"}}});
        assert_eq!(find(&v, &["epoch"]), Some(&json!(4)));
        assert_eq!(find(&v, &["step", "sealed_step"]), Some(&json!(1)));
        assert_eq!(find(&v, &["state"]), None);
        assert_eq!(
            find(
                &json!({"step": null, "sealed_step": 2}),
                &["step", "sealed_step"]
            ),
            Some(&json!(2))
        );
        assert_eq!(
            find_keyed(&v, &["nothing", "sealed_step"]),
            Some(("sealed_step", &json!(9)))
        );
    }

    #[test]
    fn flatten_paths_and_cap() {
        // Sorted: serde_json may keep document order when another crate enables preserve_order.
        let mut rows = flatten(
            &json!({"a": {"b": 1}, "r": [{"s": "ok"}], "l": [1, 2], "x": {"y": 1}}),
            &["x"],
        );
        rows.sort();
        assert_eq!(
            rows,
            vec![
                ("a.b".to_string(), "1".to_string()),
                ("l".to_string(), "1, 2".to_string()),
                ("r[0].s".to_string(), "ok".to_string())
            ]
        );
        let big = Value::Array((0..MAX_FLAT_ROWS + 5).map(|i| json!({ "i": i })).collect());
        let rows = flatten(&big, &[]);
        assert_eq!(rows.len(), MAX_FLAT_ROWS + 1);
        assert_eq!(rows.last().map(|r| r.1.as_str()), Some("5 more fields"));
    }
}
