//! Unit tests of opening trace files: plain and gzip read the same records, gzip is told by its
//! magic bytes, and every kind of damaged gzip is a [`TraceError::CorruptGzip`] naming the line.

use super::*;
use crate::{SynthWorkload, TraceRecord};
use flate2::write::GzEncoder;
use std::io::Write;

/// A seeded workload long enough that its gzip spans many deflate blocks.
fn records() -> Vec<TraceRecord> {
    SynthWorkload::new(2_000, 7).collect()
}

fn jsonl(records: &[TraceRecord]) -> String {
    records.iter().map(|r| r.to_json_line() + "\n").collect()
}

fn gzip(text: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(text).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("write test file");
    path
}

/// Reads `path` to its end: the records read and the error that ended it, if any.
fn read_all(path: &Path) -> (Vec<TraceRecord>, Option<TraceError>) {
    read_all_with(path, MalformedPolicy::Fail)
}

fn read_all_with(path: &Path, policy: MalformedPolicy) -> (Vec<TraceRecord>, Option<TraceError>) {
    let mut reader = match open_trace(path, policy) {
        Ok(reader) => reader,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut out = Vec::new();
    for record in reader.by_ref() {
        match record {
            Ok(r) => out.push(r),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

fn corrupt_line_and_message(error: Option<TraceError>) -> (u64, String) {
    match error {
        Some(TraceError::CorruptGzip { line, message }) => (line, message),
        other => panic!("expected CorruptGzip, got {other:?}"),
    }
}

#[test]
fn plain_and_gzip_read_the_same_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let expected = records();
    let text = jsonl(&expected);
    let plain = write(&dir, "t.jsonl", text.as_bytes());
    let gz = write(&dir, "t.jsonl.gz", &gzip(text.as_bytes()));

    assert_eq!(
        TraceFile::open(&plain).expect("open").compression(),
        Compression::Plain
    );
    assert_eq!(
        TraceFile::open(&gz).expect("open").compression(),
        Compression::Gzip
    );
    let from_plain = read_trace_file(&plain, MalformedPolicy::Fail).expect("plain");
    let from_gz = read_trace_file(&gz, MalformedPolicy::Fail).expect("gzip");
    assert_eq!(from_plain.records, expected);
    assert_eq!(from_gz, from_plain);
}

#[test]
fn gzip_is_told_by_its_magic_bytes_not_its_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let expected = records();
    let path = write(
        &dir,
        "named-plain.jsonl",
        &gzip(jsonl(&expected).as_bytes()),
    );
    let file = TraceFile::open(&path).expect("open");
    assert_eq!(file.compression(), Compression::Gzip);
    let trace = read_trace(file, MalformedPolicy::Fail).expect("gzip under a plain name");
    assert_eq!(trace.records, expected);
}

#[test]
fn concatenated_gzip_members_read_as_one_trace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let expected = records();
    let (first, second) = expected.split_at(700);
    let mut bytes = gzip(jsonl(first).as_bytes());
    bytes.extend(gzip(jsonl(second).as_bytes()));
    let path = write(&dir, "two.jsonl.gz", &bytes);
    let trace = read_trace_file(&path, MalformedPolicy::Fail).expect("two members");
    assert_eq!(trace.records, expected);
}

#[test]
fn a_gz_name_without_the_magic_bytes_is_a_corrupt_gzip() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, bytes) in [
        ("plain.jsonl.gz", jsonl(&records()).into_bytes()),
        ("empty.jsonl.gz", Vec::new()),
        ("one-byte.gz", vec![0x1f]),
    ] {
        let path = write(&dir, name, &bytes);
        let (read, error) = read_all(&path);
        assert!(read.is_empty(), "{name}");
        let (line, message) = corrupt_line_and_message(error);
        assert_eq!(line, 1, "{name}");
        assert!(
            message.contains("gzip magic bytes 1f 8b"),
            "{name}: {message}"
        );
    }
}

#[test]
fn damaged_deflate_data_never_reads_as_a_complete_trace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let expected = records();
    let mut bytes = gzip(jsonl(&expected).as_bytes());
    // Overwrite a stretch in the middle of the deflate data. What comes before still decodes;
    // the damage may decode into garbage before the decoder notices, at the latest at the
    // member's CRC-32.
    let middle = bytes.len() / 2;
    bytes[middle..middle + 64].fill(0xff);
    let path = write(&dir, "damaged.jsonl.gz", &bytes);

    // Skipping malformed lines, the reader still ends in CorruptGzip, never in a short trace.
    let (read, error) = read_all_with(&path, MalformedPolicy::Skip);
    let (line, message) = corrupt_line_and_message(error);
    assert!(
        !read.is_empty() && read.len() < expected.len(),
        "{}",
        read.len()
    );
    assert!(line > read.len() as u64, "{line}: {message}");

    // Failing on malformed lines, it stops at the first garbage line or at the gzip error,
    // whichever comes first, after a prefix of the good records.
    let (read_fail, error) = read_all(&path);
    assert!(
        matches!(
            error,
            Some(TraceError::CorruptGzip { .. } | TraceError::Malformed(_))
        ),
        "{error:?}"
    );
    assert!(!read_fail.is_empty() && read_fail.len() < expected.len());
    assert_eq!(read_fail[..], expected[..read_fail.len()]);
}

#[test]
fn a_truncated_gzip_is_a_corrupt_gzip_not_a_short_trace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let expected = records();
    let bytes = gzip(jsonl(&expected).as_bytes());
    let path = write(&dir, "cut.jsonl.gz", &bytes[..bytes.len() * 2 / 3]);
    let (read, error) = read_all(&path);
    let (line, message) = corrupt_line_and_message(error);
    assert!(read.len() < expected.len());
    assert_eq!(line, read.len() as u64 + 1);
    assert!(message.contains("ends early"), "{message}");
}

#[test]
fn a_checksum_mismatch_is_a_corrupt_gzip() {
    let dir = tempfile::tempdir().expect("temp dir");
    let expected = records();
    let mut bytes = gzip(jsonl(&expected).as_bytes());
    // The trailer is CRC-32 then ISIZE, 4 bytes each (RFC 1952, section 2.3.1).
    let crc = bytes.len() - 8;
    bytes[crc] ^= 0x01;
    let path = write(&dir, "crc.jsonl.gz", &bytes);
    let (read, error) = read_all(&path);
    let (line, message) = corrupt_line_and_message(error);
    // Every line decoded before the trailer was checked.
    assert_eq!(read, expected);
    assert_eq!(line, expected.len() as u64 + 1, "{message}");
}

#[test]
fn a_missing_file_is_an_open_error_naming_the_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("absent.jsonl.gz");
    match TraceFile::open(&path) {
        Err(TraceError::Open {
            path: named,
            source,
        }) => {
            assert_eq!(named, path);
            assert_eq!(source.kind(), io::ErrorKind::NotFound);
        }
        other => panic!("expected Open, got {other:?}"),
    }
}
