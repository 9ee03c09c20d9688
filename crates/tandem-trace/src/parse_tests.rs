//! Unit tests of the streaming reader: every messy-line kind with its exact line number, and
//! both malformed-line policies.

use super::*;
use std::io::{BufReader, Read};

/// Sixteen lines covering every tolerated and every malformed kind (line number: kind).
const MESSY: &str = concat!(
    /* 1 good      */ "{\"timestamp\": 10, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n",
    /* 2 blank     */ "\n",
    /* 3 spaces    */ "   \t \n",
    /* 4 extra     */ "{\"timestamp\": 20, \"input_length\": 512, \"output_length\": 3, \"hash_ids\": [1], \"session\": \"abc\"}\n",
    /* 5 no output */ "{\"timestamp\": 30, \"input_length\": 100, \"hash_ids\": [7]}\n",
    /* 6 early ts  */ "{\"timestamp\": 15, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [8]}\n",
    /* 7 bad JSON  */ "{\"timestamp\": 40, \"input_length\": \n",
    /* 8 no hashes */ "{\"timestamp\": 40, \"input_length\": 10, \"output_length\": 1}\n",
    /* 9 no input  */ "{\"timestamp\": 40, \"output_length\": 1, \"hash_ids\": [1]}\n",
    /* 10 str len  */ "{\"timestamp\": 40, \"input_length\": \"600\", \"output_length\": 1, \"hash_ids\": [1, 2]}\n",
    /* 11 bad id   */ "{\"timestamp\": 40, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1, \"x\"]}\n",
    /* 12 array    */ "[1, 2, 3]\n",
    /* 13 mismatch */ "{\"timestamp\": 40, \"input_length\": 1300, \"output_length\": 1, \"hash_ids\": [1, 2]}\n",
    /* 14 CRLF     */ "{\"timestamp\": 50, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [9]}\r\n",
    /* 15 neg ts   */ "{\"timestamp\": -5, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [9]}\n",
    /* 16 no \n    */ "{\"timestamp\": 50, \"input_length\": 0, \"output_length\": null, \"hash_ids\": []}",
);

fn rec(timestamp: u64, input_length: u64, output_length: u64, hash_ids: &[u64]) -> TraceRecord {
    TraceRecord {
        timestamp,
        input_length,
        output_length,
        hash_ids: hash_ids.to_vec(),
    }
}

fn one_line_error(line_text: &str) -> LineError {
    // Two blank lines first, so the error must name line 3.
    let text = format!("\n\n{line_text}\n");
    let mut reader = TraceReader::new(text.as_bytes(), MalformedPolicy::Fail);
    match reader.next() {
        Some(Err(TraceError::Malformed(e))) => e,
        other => panic!("expected a malformed-line error, got {other:?}"),
    }
}

#[test]
fn skip_policy_yields_good_records_and_reports_every_line_kind() {
    let trace = read_trace(MESSY.as_bytes(), MalformedPolicy::Skip).expect("skip never fails");
    assert_eq!(
        trace.records,
        vec![
            rec(10, 600, 5, &[1, 2]),
            rec(20, 512, 3, &[1]),
            rec(30, 100, 0, &[7]),
            rec(15, 1, 1, &[8]),
            rec(50, 2, 1, &[9]),
            rec(50, 0, 0, &[]),
        ]
    );
    let report = &trace.report;
    assert_eq!(report.lines, 16);
    assert_eq!(report.records, 6);
    assert_eq!(report.blank_lines, 2);
    assert_eq!(
        report.missing_output_length, 2,
        "line 5 missing, line 16 null"
    );
    assert_eq!(report.out_of_order_timestamps, 1, "line 6 (15 after 30)");
    assert_eq!(report.extra_field_lines, 1);
    assert_eq!(report.malformed_lines(), vec![7, 8, 9, 10, 11, 12, 13, 15]);
    let fields: Vec<Option<&str>> = report.malformed.iter().map(LineError::field).collect();
    assert_eq!(
        fields,
        vec![
            None,
            Some("hash_ids"),
            Some("input_length"),
            Some("input_length"),
            Some("hash_ids"),
            None,
            Some("hash_ids"),
            Some("timestamp"),
        ]
    );
}

#[test]
fn fail_policy_stops_at_the_first_malformed_line() {
    let mut reader = TraceReader::new(MESSY.as_bytes(), MalformedPolicy::Fail);
    let mut records = 0;
    let error = loop {
        match reader.next() {
            Some(Ok(_)) => records += 1,
            Some(Err(e)) => break e,
            None => panic!("the fail policy must yield the malformed line"),
        }
    };
    assert_eq!(records, 4);
    assert_eq!(error.line(), 7);
    assert!(matches!(
        error,
        TraceError::Malformed(LineError::InvalidJson { line: 7, .. })
    ));
    assert!(reader.next().is_none(), "nothing after the failure");
    assert_eq!(reader.line(), 7);
    assert_eq!(reader.report().malformed_lines(), vec![7]);

    let whole = read_trace(MESSY.as_bytes(), MalformedPolicy::Fail);
    assert_eq!(whole.map_err(|e| e.line()).err(), Some(7));
}

#[test]
fn missing_required_fields_name_the_field() {
    assert_eq!(
        one_line_error("{\"timestamp\": 1, \"input_length\": 10}"),
        LineError::MissingField {
            line: 3,
            field: "hash_ids"
        }
    );
    assert_eq!(
        one_line_error("{\"timestamp\": 1, \"hash_ids\": [1]}"),
        LineError::MissingField {
            line: 3,
            field: "input_length"
        }
    );
    assert_eq!(
        one_line_error("{\"input_length\": 1, \"hash_ids\": [1]}"),
        LineError::MissingField {
            line: 3,
            field: "timestamp"
        }
    );
    assert_eq!(
        one_line_error("{\"timestamp\": 1, \"input_length\": 1, \"hash_ids\": null}"),
        LineError::MissingField {
            line: 3,
            field: "hash_ids"
        }
    );
}

#[test]
fn wrong_types_name_the_field_and_what_was_found() {
    let cases = [
        (
            "{\"timestamp\": 1.5, \"input_length\": 1, \"hash_ids\": [1]}",
            "line 3: field `timestamp` must be a non-negative integer, found the number 1.5",
        ),
        (
            "{\"timestamp\": -5, \"input_length\": 1, \"hash_ids\": [1]}",
            "line 3: field `timestamp` must be a non-negative integer, found a negative number -5",
        ),
        (
            "{\"timestamp\": 1, \"input_length\": \"600\", \"hash_ids\": [1, 2]}",
            "line 3: field `input_length` must be a non-negative integer, found a string",
        ),
        (
            "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": true, \"hash_ids\": [1]}",
            "line 3: field `output_length` must be a non-negative integer, found a boolean",
        ),
        (
            "{\"timestamp\": 1, \"input_length\": 1, \"hash_ids\": {\"a\": 1}}",
            "line 3: field `hash_ids` must be an array of non-negative integers, found an object",
        ),
        (
            "{\"timestamp\": 1, \"input_length\": 600, \"hash_ids\": [1, \"x\"]}",
            "line 3: field `hash_ids` must be an array of non-negative integers, found a string at index 1",
        ),
        (
            "{\"timestamp\": 1, \"input_length\": 600, \"hash_ids\": [1, -2]}",
            "line 3: field `hash_ids` must be an array of non-negative integers, found a negative number -2 at index 1",
        ),
    ];
    for (line, message) in cases {
        assert_eq!(one_line_error(line).to_string(), message, "for {line}");
    }
}

#[test]
fn whole_line_errors() {
    assert!(matches!(
        one_line_error("{\"timestamp\": 1,"),
        LineError::InvalidJson { line: 3, .. }
    ));
    assert!(matches!(
        one_line_error("not json"),
        LineError::InvalidJson { line: 3, .. }
    ));
    assert_eq!(
        one_line_error("[1, 2]"),
        LineError::NotAnObject {
            line: 3,
            found: "an array".into()
        }
    );
    assert_eq!(
        one_line_error("42").to_string(),
        "line 3: expected a JSON object, found the number 42"
    );
    assert_eq!(
        one_line_error("{\"timestamp\": 1, \"input_length\": 1300, \"hash_ids\": [1, 2]}"),
        LineError::BlockCountMismatch {
            line: 3,
            input_length: 1300,
            blocks: 2,
            expected_blocks: 3,
            tokens_per_block: 512,
        }
    );
}

#[test]
fn invalid_utf8_is_a_malformed_line_not_a_read_failure() {
    let mut bytes = b"{\"timestamp\": 1, \"input_length\": 1, \"hash_ids\": [1]}\n".to_vec();
    bytes.extend_from_slice(b"{\"timestamp\": \xff}\n");
    bytes.extend_from_slice(b"{\"timestamp\": 2, \"input_length\": 1, \"hash_ids\": [2]}\n");
    let trace = read_trace(bytes.as_slice(), MalformedPolicy::Skip).expect("skip never fails");
    assert_eq!(trace.records.len(), 2);
    assert_eq!(
        trace.report.malformed,
        vec![LineError::InvalidUtf8 { line: 2 }]
    );
}

#[test]
fn byte_order_mark_on_the_first_line_is_ignored() {
    let text = "\u{feff}{\"timestamp\": 1, \"input_length\": 1, \"hash_ids\": [1]}\n";
    let trace = read_trace(text.as_bytes(), MalformedPolicy::Fail).expect("parses");
    assert_eq!(trace.records, vec![rec(1, 1, 0, &[1])]);
}

#[test]
fn equal_timestamps_are_in_order_and_the_latest_is_the_reference() {
    let text = concat!(
        "{\"timestamp\": 5, \"input_length\": 1, \"hash_ids\": [1]}\n",
        "{\"timestamp\": 5, \"input_length\": 1, \"hash_ids\": [1]}\n",
        "{\"timestamp\": 9, \"input_length\": 1, \"hash_ids\": [1]}\n",
        "{\"timestamp\": 7, \"input_length\": 1, \"hash_ids\": [1]}\n",
        "{\"timestamp\": 8, \"input_length\": 1, \"hash_ids\": [1]}\n",
    );
    let trace = read_trace(text.as_bytes(), MalformedPolicy::Fail).expect("parses");
    assert_eq!(
        trace.report.out_of_order_timestamps, 2,
        "7 and 8 both arrive after 9"
    );
}

/// Yields one good line, then fails.
struct FailingReader {
    served: bool,
}

impl Read for FailingReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.served {
            return Err(std::io::Error::other("device unplugged"));
        }
        self.served = true;
        let line = b"{\"timestamp\": 1, \"input_length\": 1, \"hash_ids\": [1]}\n";
        buf[..line.len()].copy_from_slice(line);
        Ok(line.len())
    }
}

#[test]
fn read_failure_names_the_line_being_read_and_ends_the_stream() {
    let mut reader = TraceReader::new(
        BufReader::new(FailingReader { served: false }),
        MalformedPolicy::Skip,
    );
    assert!(matches!(reader.next(), Some(Ok(_))));
    let error = match reader.next() {
        Some(Err(e)) => e,
        other => panic!("expected a read failure, got {other:?}"),
    };
    assert_eq!(
        error.to_string(),
        "reading trace line 2 failed: device unplugged"
    );
    assert!(reader.next().is_none());
}

#[test]
fn empty_input_yields_nothing() {
    let trace = read_trace(&b""[..], MalformedPolicy::Fail).expect("empty is fine");
    assert!(trace.records.is_empty());
    assert_eq!(trace.report, ParseReport::default());
}
