//! A strict reader of the text exposition (OpenMetrics 1.0 text or Prometheus text 0.0.4),
//! for tests: this crate's own, and the process tests that scrape `/metrics`.
//!
//! Owns the line grammar: `# HELP`, `# TYPE`, `# UNIT`, `# EOF`, other comments, and sample
//! lines `name{label="value",...} value [timestamp]`. Every sample must belong to a family
//! declared with `# TYPE` (directly, or through a suffix `_total`, `_bucket`, `_sum`,
//! `_count`, `_created`, `_info`), a histogram bucket must carry `le`, and nothing may follow
//! `# EOF`. It is a format check, not a full OpenMetrics validator (no ordering or
//! monotonicity rules). It never panics on any input: every rejection is an
//! [`ExpositionError`] naming the line.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The sample name, for example `tandem_tasks_finished_total`.
    pub name: String,
    /// Labels in the order written, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// What [`parse_exposition`] read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedExposition {
    /// Family name → type (`counter`, `gauge`, `histogram`, ...), as written in `# TYPE`.
    pub types: BTreeMap<String, String>,
    /// Family name → help text.
    pub helps: BTreeMap<String, String>,
    /// Family name → unit, from `# UNIT` (OpenMetrics only).
    pub units: BTreeMap<String, String>,
    /// Every sample, in order.
    pub samples: Vec<Sample>,
    /// Whether the text ended with `# EOF` (OpenMetrics).
    pub eof: bool,
}

impl ParsedExposition {
    /// The samples named exactly `name`.
    pub fn samples_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// The value of the first sample named `name` that carries every label in `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples_named(name)
            .find(|s| labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
            .map(|s| s.value)
    }
}

/// A line the reader refused. Lines are numbered from 1.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExpositionError {
    /// A `# HELP`, `# TYPE` or `# UNIT` line without a family name or value.
    #[error("line {line}: incomplete descriptor {text:?}")]
    BadDescriptor {
        /// Line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// `# TYPE` with a type that is not one of the known ones.
    #[error("line {line}: unknown metric type {kind:?}")]
    UnknownType {
        /// Line number.
        line: usize,
        /// The type written.
        kind: String,
    },
    /// The same family declared twice with `# TYPE`.
    #[error("line {line}: family {family} declared twice")]
    DuplicateFamily {
        /// Line number.
        line: usize,
        /// The family.
        family: String,
    },
    /// A metric or label name outside `[a-zA-Z_:][a-zA-Z0-9_:]*`.
    #[error("line {line}: bad name {name:?}")]
    BadName {
        /// Line number.
        line: usize,
        /// The name.
        name: String,
    },
    /// The `{...}` part of a sample does not parse.
    #[error("line {line}: bad labels: {reason}")]
    BadLabels {
        /// Line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The value (or timestamp) is not a number.
    #[error("line {line}: bad value {value:?}")]
    BadValue {
        /// Line number.
        line: usize,
        /// The text found.
        value: String,
    },
    /// A sample whose family has no `# TYPE` line before it.
    #[error("line {line}: sample {name} has no # TYPE before it")]
    UndeclaredSample {
        /// Line number.
        line: usize,
        /// The sample name.
        name: String,
    },
    /// A histogram `_bucket` sample without an `le` label.
    #[error("line {line}: histogram bucket {name} has no le label")]
    BucketWithoutLe {
        /// Line number.
        line: usize,
        /// The sample name.
        name: String,
    },
    /// Something after `# EOF`.
    #[error("line {line}: content after # EOF")]
    AfterEof {
        /// Line number.
        line: usize,
    },
}

const TYPES: [&str; 8] = [
    "counter",
    "gauge",
    "histogram",
    "gaugehistogram",
    "summary",
    "info",
    "stateset",
    "unknown",
];
const SUFFIXES: [&str; 6] = ["_total", "_bucket", "_sum", "_count", "_created", "_info"];

/// Read `text` line by line; see the module docs for what is checked.
///
/// # Errors
/// The first [`ExpositionError`] met, with its line number.
pub fn parse_exposition(text: &str) -> Result<ParsedExposition, ExpositionError> {
    let mut out = ParsedExposition::default();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if out.eof {
            return Err(ExpositionError::AfterEof { line });
        }
        if raw.trim().is_empty() {
            continue;
        }
        if let Some(comment) = raw.strip_prefix('#') {
            read_comment(&mut out, line, raw, comment.trim_start())?;
        } else {
            let sample = read_sample(line, raw)?;
            check_family(&out, line, &sample)?;
            out.samples.push(sample);
        }
    }
    Ok(out)
}

fn read_comment(
    out: &mut ParsedExposition,
    line: usize,
    raw: &str,
    comment: &str,
) -> Result<(), ExpositionError> {
    if comment == "EOF" {
        out.eof = true;
        return Ok(());
    }
    let mut parts = comment.splitn(3, ' ');
    let keyword = parts.next().unwrap_or("");
    if !matches!(keyword, "HELP" | "TYPE" | "UNIT") {
        return Ok(()); // a plain comment
    }
    let bad = || ExpositionError::BadDescriptor {
        line,
        text: raw.to_string(),
    };
    let family = parts.next().filter(|f| !f.is_empty()).ok_or_else(bad)?;
    if !valid_metric_name(family) {
        return Err(ExpositionError::BadName {
            line,
            name: family.to_string(),
        });
    }
    let rest = parts.next().unwrap_or("");
    match keyword {
        "HELP" => {
            out.helps.insert(family.to_string(), rest.to_string());
        }
        "UNIT" => {
            out.units.insert(family.to_string(), rest.to_string());
        }
        _ => {
            if rest.is_empty() {
                return Err(bad());
            }
            let kind = if rest == "untyped" { "unknown" } else { rest };
            if !TYPES.contains(&kind) {
                return Err(ExpositionError::UnknownType {
                    line,
                    kind: rest.to_string(),
                });
            }
            if out
                .types
                .insert(family.to_string(), rest.to_string())
                .is_some()
            {
                return Err(ExpositionError::DuplicateFamily {
                    line,
                    family: family.to_string(),
                });
            }
        }
    }
    Ok(())
}

fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(name: &str) -> bool {
    !name.contains(':') && valid_metric_name(name)
}

fn read_sample(line: usize, raw: &str) -> Result<Sample, ExpositionError> {
    let name_end = raw.find(['{', ' ']).unwrap_or(raw.len());
    let name = &raw[..name_end];
    if !valid_metric_name(name) {
        return Err(ExpositionError::BadName {
            line,
            name: name.to_string(),
        });
    }
    let mut rest = &raw[name_end..];
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, after) = read_labels(line, after_brace)?;
        labels = parsed;
        rest = after;
    }
    let rest = rest
        .strip_prefix(' ')
        .ok_or_else(|| ExpositionError::BadValue {
            line,
            value: rest.to_string(),
        })?;
    let mut fields = rest.split(' ');
    let value_text = fields.next().unwrap_or("");
    let value = parse_number(value_text).ok_or_else(|| ExpositionError::BadValue {
        line,
        value: value_text.to_string(),
    })?;
    if let Some(timestamp) = fields.next() {
        parse_number(timestamp).ok_or_else(|| ExpositionError::BadValue {
            line,
            value: timestamp.to_string(),
        })?;
    }
    if let Some(extra) = fields.next() {
        return Err(ExpositionError::BadValue {
            line,
            value: extra.to_string(),
        });
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parse `key="value",...}` and return the labels and the text after `}`.
type Labels = Vec<(String, String)>;

fn read_labels(line: usize, mut s: &str) -> Result<(Labels, &str), ExpositionError> {
    let bad = |reason: &str| ExpositionError::BadLabels {
        line,
        reason: reason.to_string(),
    };
    let mut labels = Vec::new();
    loop {
        if let Some(after) = s.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = s.find('=').ok_or_else(|| bad("label without '='"))?;
        let key = &s[..eq];
        if !valid_label_name(key) {
            return Err(ExpositionError::BadName {
                line,
                name: key.to_string(),
            });
        }
        s = s[eq + 1..]
            .strip_prefix('"')
            .ok_or_else(|| bad("label value not quoted"))?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(bad("unterminated label value")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    _ => return Err(bad("bad escape in label value")),
                },
                Some((_, '\n')) => return Err(bad("raw newline in label value")),
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        s = &s[end + 1..];
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return Err(bad("expected ',' or '}' after a label"));
        }
    }
}

fn parse_number(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ if text
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')) =>
        {
            text.parse().ok()
        }
        _ => None,
    }
}

fn check_family(
    out: &ParsedExposition,
    line: usize,
    sample: &Sample,
) -> Result<(), ExpositionError> {
    let name = sample.name.as_str();
    let family = if out.types.contains_key(name) {
        Some(name)
    } else {
        SUFFIXES
            .iter()
            .filter_map(|s| name.strip_suffix(s))
            .find(|f| out.types.contains_key(*f))
    };
    let Some(family) = family else {
        return Err(ExpositionError::UndeclaredSample {
            line,
            name: name.to_string(),
        });
    };
    let kind = out.types.get(family).map(String::as_str);
    if matches!(kind, Some("histogram" | "gaugehistogram"))
        && name.ends_with("_bucket")
        && sample.label("le").is_none()
    {
        return Err(ExpositionError::BucketWithoutLe {
            line,
            name: name.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "# HELP a_requests Requests.\n# TYPE a_requests counter\n\
        a_requests_total{path=\"/x\",q=\"a\\\"b\\\\c\\nd\"} 3\n\
        # TYPE lat_seconds histogram\n# UNIT lat_seconds seconds\n\
        lat_seconds_bucket{le=\"0.1\"} 1\nlat_seconds_bucket{le=\"+Inf\"} 2\n\
        lat_seconds_sum 0.3\nlat_seconds_count 2\n# EOF\n";

    #[test]
    fn reads_a_good_exposition() {
        let p = parse_exposition(GOOD).expect("good text parses");
        assert!(p.eof);
        assert_eq!(
            p.types.get("a_requests").map(String::as_str),
            Some("counter")
        );
        assert_eq!(
            p.units.get("lat_seconds").map(String::as_str),
            Some("seconds")
        );
        assert_eq!(
            p.helps.get("a_requests").map(String::as_str),
            Some("Requests.")
        );
        assert_eq!(p.value("a_requests_total", &[("path", "/x")]), Some(3.0));
        assert_eq!(p.samples[0].label("q"), Some("a\"b\\c\nd"));
        assert_eq!(p.value("lat_seconds_bucket", &[("le", "+Inf")]), Some(2.0));
        assert_eq!(p.samples_named("lat_seconds_bucket").count(), 2);
    }

    fn err(text: &str) -> ExpositionError {
        match parse_exposition(text) {
            Ok(p) => panic!("expected a rejection, parsed {p:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn each_rejection_and_its_message() {
        let cases: [(&str, &str); 11] = [
            ("# TYPE\n", "line 1: incomplete descriptor \"# TYPE\""),
            ("# TYPE x\n", "line 1: incomplete descriptor \"# TYPE x\""),
            (
                "# TYPE x countr\n",
                "line 1: unknown metric type \"countr\"",
            ),
            (
                "# TYPE x gauge\n# TYPE x gauge\n",
                "line 2: family x declared twice",
            ),
            ("# TYPE x gauge\n9x 1\n", "line 2: bad name \"9x\""),
            (
                "# TYPE x gauge\nx{a=b} 1\n",
                "line 2: bad labels: label value not quoted",
            ),
            (
                "# TYPE x gauge\nx{a=\"b\" 1\n",
                "line 2: bad labels: expected ',' or '}' after a label",
            ),
            ("# TYPE x gauge\nx one\n", "line 2: bad value \"one\""),
            ("y 1\n", "line 1: sample y has no # TYPE before it"),
            (
                "# TYPE h histogram\nh_bucket 1\n",
                "line 2: histogram bucket h_bucket has no le label",
            ),
            ("# EOF\n# TYPE x gauge\n", "line 2: content after # EOF"),
        ];
        for (text, message) in cases {
            assert_eq!(err(text).to_string(), message, "for {text:?}");
        }
    }

    #[test]
    fn odd_input_is_rejected_not_panicked() {
        for text in [
            "{",
            "x{",
            "x{\"",
            "x{a=\"\\",
            "# TYPE x gauge\nx{a=\"\\q\"} 1",
            "\u{0}",
            "x 1 2 3",
            "# HELP",
        ] {
            assert!(
                parse_exposition(text).is_err(),
                "{text:?} should be rejected"
            );
        }
    }

    #[test]
    fn special_values_and_timestamps_parse() {
        let p = parse_exposition("# TYPE g gauge\ng NaN\ng{a=\"1\"} -Inf 1700000000\n")
            .expect("parses");
        assert!(p.samples[0].value.is_nan());
        assert_eq!(p.samples[1].value, f64::NEG_INFINITY);
        assert!(!p.eof);
    }
}
