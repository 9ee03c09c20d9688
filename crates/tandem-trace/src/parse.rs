//! Streaming reader for Mooncake trace files (one JSON object per line).
//!
//! Owns the tolerance rules for messy real-world traces:
//! - blank (or whitespace-only) lines are skipped silently and counted;
//! - fields other than the four known ones are accepted and counted;
//! - a missing or null `output_length` is accepted as 0 and counted;
//! - timestamps earlier than the latest one seen so far are accepted and counted (records are
//!   yielded in file order; see [`crate::hit::ArrivalOrder`] for how they are ordered later);
//! - anything else (invalid UTF-8 or JSON, a non-object, a missing `timestamp`,
//!   `input_length` or `hash_ids`, a wrong type, a `hash_ids` length that disagrees with
//!   `input_length`) is a malformed line, a [`LineError`] with its 1-based line number, handled
//!   by the [`MalformedPolicy`].
//!
//! It reads from any [`BufRead`] the caller opens (a [`crate::TraceFile`] for a path, plain or
//! gzip), one line at a time (memory stays bounded by the longest line plus the report), and
//! never opens files, sorts or simulates caches.

use crate::error::{LineError, TraceError};
use crate::record::{TraceRecord, TOKENS_PER_BLOCK};
use serde_json::{Map, Value};
use std::io::BufRead;

/// What a [`TraceReader`] does with a malformed line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MalformedPolicy {
    /// Skip it, record its [`LineError`] in [`ParseReport::malformed`], and go on.
    Skip,
    /// Yield it as [`TraceError::Malformed`] and stop (the reader yields nothing after it).
    #[default]
    Fail,
}

/// Everything a [`TraceReader`] tolerated or skipped so far. Counts are lines, not tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParseReport {
    /// Lines read, of every kind (a last line without a newline counts).
    pub lines: u64,
    /// Records yielded.
    pub records: u64,
    /// Blank or whitespace-only lines skipped.
    pub blank_lines: u64,
    /// Records whose `output_length` was missing or null (taken as 0).
    pub missing_output_length: u64,
    /// Records whose `timestamp` is earlier than the latest timestamp before them.
    pub out_of_order_timestamps: u64,
    /// Records that carried fields besides the four known ones.
    pub extra_field_lines: u64,
    /// Malformed lines, in file order: every skipped one under [`MalformedPolicy::Skip`], the
    /// one that stopped the reader under [`MalformedPolicy::Fail`].
    pub malformed: Vec<LineError>,
}

impl ParseReport {
    /// 1-based line numbers of the malformed lines, in file order.
    pub fn malformed_lines(&self) -> Vec<u64> {
        self.malformed.iter().map(LineError::line).collect()
    }
}

/// A whole trace read into memory with [`read_trace`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// Records in file order.
    pub records: Vec<TraceRecord>,
    /// What the reader tolerated or skipped.
    pub report: ParseReport,
}

/// Streaming trace reader: an iterator of records in file order.
///
/// Yields `Ok(record)` per well-formed line, `Err(TraceError::Malformed)` for the first
/// malformed line under [`MalformedPolicy::Fail`] (then ends), `Err(TraceError::Io)` if the
/// underlying reader fails (then ends), and `Err(TraceError::CorruptGzip)` if it is a gzip
/// [`crate::TraceFile`] whose stream is damaged (then ends). Under [`MalformedPolicy::Skip`] malformed lines are
/// collected in [`TraceReader::report`] instead of being yielded.
#[derive(Debug)]
pub struct TraceReader<R> {
    reader: R,
    policy: MalformedPolicy,
    report: ParseReport,
    line: u64,
    buf: Vec<u8>,
    latest_timestamp: Option<u64>,
    done: bool,
}

impl<R: BufRead> TraceReader<R> {
    /// A reader over `reader` that handles malformed lines by `policy`.
    pub fn new(reader: R, policy: MalformedPolicy) -> Self {
        TraceReader {
            reader,
            policy,
            report: ParseReport::default(),
            line: 0,
            buf: Vec::new(),
            latest_timestamp: None,
            done: false,
        }
    }

    /// The report so far.
    pub fn report(&self) -> &ParseReport {
        &self.report
    }

    /// The report, consuming the reader.
    pub fn into_report(self) -> ParseReport {
        self.report
    }

    /// 1-based number of the last line read (0 before the first).
    pub fn line(&self) -> u64 {
        self.line
    }

    fn accept(&mut self, parsed: ParsedLine) -> TraceRecord {
        let ts = parsed.record.timestamp;
        if let Some(latest) = self.latest_timestamp {
            if ts < latest {
                self.report.out_of_order_timestamps += 1;
            }
        }
        self.latest_timestamp = Some(self.latest_timestamp.map_or(ts, |l| l.max(ts)));
        self.report.records += 1;
        self.report.missing_output_length += u64::from(parsed.missing_output_length);
        self.report.extra_field_lines += u64::from(parsed.extra_fields);
        parsed.record
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceRecord, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.buf.clear();
            match self.reader.read_until(b'\n', &mut self.buf) {
                Ok(0) => self.done = true,
                Ok(_) => {
                    self.line += 1;
                    self.report.lines += 1;
                    match classify(self.line, &self.buf) {
                        Classified::Blank => self.report.blank_lines += 1,
                        Classified::Record(parsed) => return Some(Ok(self.accept(parsed))),
                        Classified::Malformed(error) => {
                            self.report.malformed.push(error.clone());
                            if self.policy == MalformedPolicy::Fail {
                                self.done = true;
                                return Some(Err(TraceError::Malformed(error)));
                            }
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    self.done = true;
                    let line = self.line + 1;
                    return Some(Err(match crate::open::corrupt_gzip_message(&source) {
                        Some(message) => TraceError::CorruptGzip { line, message },
                        None => TraceError::Io { line, source },
                    }));
                }
            }
        }
        None
    }
}

/// Reads a whole trace into memory.
///
/// # Errors
/// [`TraceError::Malformed`] for the first malformed line under [`MalformedPolicy::Fail`];
/// [`TraceError::Io`] if `reader` fails; [`TraceError::CorruptGzip`] if `reader` is a gzip
/// [`crate::TraceFile`] whose stream is damaged.
pub fn read_trace<R: BufRead>(reader: R, policy: MalformedPolicy) -> Result<Trace, TraceError> {
    let mut reader = TraceReader::new(reader, policy);
    let mut records = Vec::new();
    for record in reader.by_ref() {
        records.push(record?);
    }
    Ok(Trace {
        records,
        report: reader.into_report(),
    })
}

enum Classified {
    Blank,
    Record(ParsedLine),
    Malformed(LineError),
}

struct ParsedLine {
    record: TraceRecord,
    missing_output_length: bool,
    extra_fields: bool,
}

const KNOWN_FIELDS: [&str; 4] = ["timestamp", "input_length", "output_length", "hash_ids"];
const NON_NEGATIVE_INTEGER: &str = "a non-negative integer";

fn classify(line: u64, raw: &[u8]) -> Classified {
    let Ok(text) = std::str::from_utf8(raw) else {
        return Classified::Malformed(LineError::InvalidUtf8 { line });
    };
    let text = if line == 1 {
        text.trim_start_matches('\u{feff}')
    } else {
        text
    };
    let text = text.trim();
    if text.is_empty() {
        return Classified::Blank;
    }
    match parse_line(line, text) {
        Ok(parsed) => Classified::Record(parsed),
        Err(error) => Classified::Malformed(error),
    }
}

fn parse_line(line: u64, text: &str) -> Result<ParsedLine, LineError> {
    let value: Value = serde_json::from_str(text).map_err(|e| LineError::InvalidJson {
        line,
        message: e.to_string(),
    })?;
    let Value::Object(object) = value else {
        return Err(LineError::NotAnObject {
            line,
            found: describe(&value),
        });
    };
    let timestamp = required_u64(&object, line, "timestamp")?;
    let input_length = required_u64(&object, line, "input_length")?;
    let output_length = optional_u64(&object, line, "output_length")?;
    let hash_ids = hash_ids(&object, line)?;
    let blocks = hash_ids.len() as u64;
    let expected_blocks = TraceRecord::blocks_for_tokens(input_length);
    if blocks != expected_blocks {
        return Err(LineError::BlockCountMismatch {
            line,
            input_length,
            blocks,
            expected_blocks,
            tokens_per_block: TOKENS_PER_BLOCK,
        });
    }
    let extra_fields = object.keys().any(|k| !KNOWN_FIELDS.contains(&k.as_str()));
    Ok(ParsedLine {
        record: TraceRecord {
            timestamp,
            input_length,
            output_length: output_length.unwrap_or(0),
            hash_ids,
        },
        missing_output_length: output_length.is_none(),
        extra_fields,
    })
}

fn optional_u64(
    object: &Map<String, Value>,
    line: u64,
    field: &'static str,
) -> Result<Option<u64>, LineError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| LineError::WrongType {
                line,
                field,
                expected: NON_NEGATIVE_INTEGER,
                found: describe(value),
            }),
    }
}

fn required_u64(
    object: &Map<String, Value>,
    line: u64,
    field: &'static str,
) -> Result<u64, LineError> {
    optional_u64(object, line, field)?.ok_or(LineError::MissingField { line, field })
}

fn hash_ids(object: &Map<String, Value>, line: u64) -> Result<Vec<u64>, LineError> {
    const FIELD: &str = "hash_ids";
    const EXPECTED: &str = "an array of non-negative integers";
    let items = match object.get(FIELD) {
        None | Some(Value::Null) => return Err(LineError::MissingField { line, field: FIELD }),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(LineError::WrongType {
                line,
                field: FIELD,
                expected: EXPECTED,
                found: describe(other),
            })
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            item.as_u64().ok_or_else(|| LineError::WrongType {
                line,
                field: FIELD,
                expected: EXPECTED,
                found: format!("{} at index {index}", describe(item)),
            })
        })
        .collect()
}

/// A short description of a JSON value for error messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(n) if n.as_i64().is_some_and(|i| i < 0) => format!("a negative number {n}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
