//! Errors at the trace-reading boundary.
//!
//! [`LineError`] is one rejected line: it names the 1-based line number and, where one field is
//! at fault, the field. It is plain data (`Clone`, `Eq`) so a [`crate::ParseReport`] can keep
//! the skipped lines. [`TraceError`] is what a [`crate::TraceReader`] yields: a malformed line
//! under [`crate::MalformedPolicy::Fail`], a read failure from the underlying reader, or a
//! damaged gzip stream; and what opening a trace file returns. This module never reads or
//! decides anything itself.

use thiserror::Error;

/// One malformed trace line, with its 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LineError {
    /// The line is not valid UTF-8.
    #[error("line {line}: not valid UTF-8")]
    InvalidUtf8 {
        /// 1-based line number.
        line: u64,
    },
    /// The line is not valid JSON.
    #[error("line {line}: invalid JSON: {message}")]
    InvalidJson {
        /// 1-based line number.
        line: u64,
        /// The JSON parser's message.
        message: String,
    },
    /// The line is JSON but not an object.
    #[error("line {line}: expected a JSON object, found {found}")]
    NotAnObject {
        /// 1-based line number.
        line: u64,
        /// What the line holds instead (for example `an array`).
        found: String,
    },
    /// A required field (`timestamp`, `input_length`, `hash_ids`) is absent or null.
    #[error("line {line}: missing field `{field}`")]
    MissingField {
        /// 1-based line number.
        line: u64,
        /// The missing field's name.
        field: &'static str,
    },
    /// A field has the wrong JSON type or an out-of-range value.
    #[error("line {line}: field `{field}` must be {expected}, found {found}")]
    WrongType {
        /// 1-based line number.
        line: u64,
        /// The offending field's name.
        field: &'static str,
        /// What the field must hold (for example `a non-negative integer`).
        expected: &'static str,
        /// What it holds instead (for example `a string`, or `a negative number at index 2`).
        found: String,
    },
    /// `hash_ids` does not have `ceil(input_length / 512)` entries.
    #[error(
        "line {line}: field `hash_ids` has {blocks} blocks, but input_length {input_length} \
         needs {expected_blocks} blocks of {tokens_per_block} tokens"
    )]
    BlockCountMismatch {
        /// 1-based line number.
        line: u64,
        /// The line's `input_length` (tokens).
        input_length: u64,
        /// Entries in the line's `hash_ids`.
        blocks: u64,
        /// `ceil(input_length / tokens_per_block)`.
        expected_blocks: u64,
        /// Tokens per block (512 in the Mooncake format).
        tokens_per_block: u64,
    },
}

impl LineError {
    /// The 1-based line number this error refers to.
    pub fn line(&self) -> u64 {
        match self {
            LineError::InvalidUtf8 { line }
            | LineError::InvalidJson { line, .. }
            | LineError::NotAnObject { line, .. }
            | LineError::MissingField { line, .. }
            | LineError::WrongType { line, .. }
            | LineError::BlockCountMismatch { line, .. } => *line,
        }
    }

    /// The field at fault, where one field is (`None` for whole-line errors).
    pub fn field(&self) -> Option<&'static str> {
        match self {
            LineError::MissingField { field, .. } | LineError::WrongType { field, .. } => {
                Some(field)
            }
            LineError::BlockCountMismatch { .. } => Some("hash_ids"),
            LineError::InvalidUtf8 { .. }
            | LineError::InvalidJson { .. }
            | LineError::NotAnObject { .. } => None,
        }
    }
}

/// What a [`crate::TraceReader`] yields instead of a record, or what opening a trace file
/// ([`crate::TraceFile::open`]) returns.
#[derive(Debug, Error)]
pub enum TraceError {
    /// The trace file could not be opened, or its first bytes could not be read.
    #[error("cannot open trace {}: {source}", path.display())]
    Open {
        /// The path given.
        path: std::path::PathBuf,
        /// The file system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is gzip (or named `.gz`) but its compressed stream is damaged or truncated;
    /// records before `line` were read.
    #[error("corrupt gzip trace at line {line}: {message}")]
    CorruptGzip {
        /// 1-based number of the line being read.
        line: u64,
        /// What the gzip decoder found (for example `corrupt deflate stream`).
        message: String,
    },
    /// A malformed line under [`crate::MalformedPolicy::Fail`].
    #[error("malformed trace {0}")]
    Malformed(#[from] LineError),
    /// The underlying reader failed while reading the given 1-based line.
    #[error("reading trace line {line} failed: {source}")]
    Io {
        /// 1-based number of the line being read.
        line: u64,
        /// The reader's error.
        #[source]
        source: std::io::Error,
    },
}

impl TraceError {
    /// The 1-based line number this error refers to (0 for [`TraceError::Open`]: no line was
    /// read).
    pub fn line(&self) -> u64 {
        match self {
            TraceError::Open { .. } => 0,
            TraceError::Malformed(e) => e.line(),
            TraceError::Io { line, .. } | TraceError::CorruptGzip { line, .. } => *line,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_error_message_names_the_line_and_field() {
        let cases: Vec<(LineError, &str)> = vec![
            (LineError::InvalidUtf8 { line: 3 }, "line 3: not valid UTF-8"),
            (
                LineError::InvalidJson { line: 4, message: "EOF while parsing".into() },
                "line 4: invalid JSON: EOF while parsing",
            ),
            (
                LineError::NotAnObject { line: 5, found: "an array".into() },
                "line 5: expected a JSON object, found an array",
            ),
            (
                LineError::MissingField { line: 6, field: "hash_ids" },
                "line 6: missing field `hash_ids`",
            ),
            (
                LineError::WrongType {
                    line: 7,
                    field: "input_length",
                    expected: "a non-negative integer",
                    found: "a string".into(),
                },
                "line 7: field `input_length` must be a non-negative integer, found a string",
            ),
            (
                LineError::BlockCountMismatch {
                    line: 8,
                    input_length: 1300,
                    blocks: 2,
                    expected_blocks: 3,
                    tokens_per_block: 512,
                },
                "line 8: field `hash_ids` has 2 blocks, but input_length 1300 needs 3 blocks of 512 tokens",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn line_and_field_accessors() {
        let e = LineError::MissingField {
            line: 6,
            field: "input_length",
        };
        assert_eq!(e.line(), 6);
        assert_eq!(e.field(), Some("input_length"));
        assert_eq!(LineError::InvalidUtf8 { line: 2 }.field(), None);
    }

    #[test]
    fn trace_error_messages() {
        let malformed = TraceError::from(LineError::MissingField {
            line: 9,
            field: "timestamp",
        });
        assert_eq!(
            malformed.to_string(),
            "malformed trace line 9: missing field `timestamp`"
        );
        assert_eq!(malformed.line(), 9);
        let io = TraceError::Io {
            line: 12,
            source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "disk gone"),
        };
        assert_eq!(io.to_string(), "reading trace line 12 failed: disk gone");
        assert_eq!(io.line(), 12);
        let gzip = TraceError::CorruptGzip {
            line: 40,
            message: "corrupt deflate stream".into(),
        };
        assert_eq!(
            gzip.to_string(),
            "corrupt gzip trace at line 40: corrupt deflate stream"
        );
        assert_eq!(gzip.line(), 40);
        let open = TraceError::Open {
            path: "/no/such.jsonl.gz".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "not found"),
        };
        assert_eq!(
            open.to_string(),
            "cannot open trace /no/such.jsonl.gz: not found"
        );
        assert_eq!(open.line(), 0);
    }
}
