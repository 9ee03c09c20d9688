//! Opening a trace file by path: plain JSONL, or JSONL compressed with gzip (`.jsonl.gz`, the
//! form the traces of `data/traces/` ship in).
//!
//! Owns telling the two apart and turning what the gzip decoder reports into
//! [`TraceError::CorruptGzip`]. A file is read as gzip when it starts with the gzip magic bytes
//! `1f 8b` (RFC 1952, section 2.3.1), whatever its name; a file whose name ends in `.gz` but
//! does not start with them is a corrupt gzip, not a plain trace. Concatenated gzip members
//! (what `cat a.gz b.gz` makes) are read as one stream. Decoding is streaming: memory stays
//! bounded by the buffers, never by the file. Damaged deflate data can decode into garbage
//! before the decoder notices (at the latest at the member's CRC-32): a
//! [`crate::TraceReader`] then reports garbage lines as malformed, and under
//! [`MalformedPolicy::Skip`] it still ends in [`TraceError::CorruptGzip`], so a damaged file
//! never reads as a complete, shorter trace. It never parses lines (that is
//! [`crate::parse`]) and never writes.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek};
use std::path::Path;

use flate2::bufread::MultiGzDecoder;

use crate::error::TraceError;
use crate::parse::{read_trace, MalformedPolicy, Trace, TraceReader};

/// The first two bytes of every gzip member (RFC 1952, section 2.3.1).
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// How a [`TraceFile`] is stored on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain JSONL text.
    Plain,
    /// JSONL compressed with gzip (one or more members).
    Gzip,
}

/// A trace file opened for reading: the decompressed JSONL bytes of a plain or gzip file, as a
/// [`BufRead`] to hand to [`TraceReader`].
///
/// Read errors of the file itself come out unchanged; a damaged gzip stream comes out as an
/// [`io::Error`] of kind [`io::ErrorKind::InvalidData`] that [`TraceReader`] reports as
/// [`TraceError::CorruptGzip`] with the line it was reading.
pub struct TraceFile {
    inner: Inner,
    compression: Compression,
}

enum Inner {
    Plain(BufReader<File>),
    Gzip(BufReader<GzipStream>),
}

impl fmt::Debug for TraceFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceFile")
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

impl TraceFile {
    /// Opens `path` and tells plain from gzip by its first two bytes (and its name, see the
    /// module docs).
    ///
    /// # Errors
    /// [`TraceError::Open`] when the file cannot be opened or its first bytes cannot be read;
    /// [`TraceError::CorruptGzip`] (line 1) when the name ends in `.gz` but the file does not
    /// start with the gzip magic bytes.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let open_error = |source| TraceError::Open {
            path: path.to_path_buf(),
            source,
        };
        let mut file = File::open(path).map_err(open_error)?;
        let gzip = starts_with_magic(&mut file).map_err(open_error)?;
        if !gzip && has_gz_extension(path) {
            return Err(TraceError::CorruptGzip {
                line: 1,
                message: format!(
                    "the name ends in .gz but the file does not start with the gzip magic bytes \
                     {:02x} {:02x}",
                    GZIP_MAGIC[0], GZIP_MAGIC[1]
                ),
            });
        }
        let (inner, compression) = if gzip {
            let decoder = MultiGzDecoder::new(BufReader::new(Marked(file)));
            (
                Inner::Gzip(BufReader::new(GzipStream(decoder))),
                Compression::Gzip,
            )
        } else {
            (Inner::Plain(BufReader::new(file)), Compression::Plain)
        };
        Ok(TraceFile { inner, compression })
    }

    /// How the file is stored.
    pub fn compression(&self) -> Compression {
        self.compression
    }
}

impl Read for TraceFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.inner {
            Inner::Plain(r) => r.read(buf),
            Inner::Gzip(r) => r.read(buf),
        }
    }
}

impl BufRead for TraceFile {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match &mut self.inner {
            Inner::Plain(r) => r.fill_buf(),
            Inner::Gzip(r) => r.fill_buf(),
        }
    }

    fn consume(&mut self, amount: usize) {
        match &mut self.inner {
            Inner::Plain(r) => r.consume(amount),
            Inner::Gzip(r) => r.consume(amount),
        }
    }
}

/// Opens `path` (plain or gzip) as a streaming [`TraceReader`].
///
/// # Errors
/// As [`TraceFile::open`].
pub fn open_trace(
    path: &Path,
    policy: MalformedPolicy,
) -> Result<TraceReader<TraceFile>, TraceError> {
    Ok(TraceReader::new(TraceFile::open(path)?, policy))
}

/// Reads the whole trace at `path` (plain or gzip) into memory.
///
/// # Errors
/// As [`TraceFile::open`], then as [`read_trace`] ([`TraceError::Malformed`],
/// [`TraceError::Io`]), and [`TraceError::CorruptGzip`] with the line being read when the gzip
/// stream is damaged or truncated.
pub fn read_trace_file(path: &Path, policy: MalformedPolicy) -> Result<Trace, TraceError> {
    read_trace(TraceFile::open(path)?, policy)
}

/// If `error` is a damaged gzip stream reported by a [`TraceFile`], the decoder's message.
pub(crate) fn corrupt_gzip_message(error: &io::Error) -> Option<String> {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<CorruptGzip>())
        .map(|c| c.0.clone())
}

fn has_gz_extension(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// Whether the file starts with [`GZIP_MAGIC`]; leaves it at its start.
fn starts_with_magic(file: &mut File) -> io::Result<bool> {
    let mut head = Vec::with_capacity(GZIP_MAGIC.len());
    file.by_ref()
        .take(GZIP_MAGIC.len() as u64)
        .read_to_end(&mut head)?;
    file.rewind()?;
    Ok(head == GZIP_MAGIC)
}

/// The file under the decoder. Its read errors are wrapped in [`FileError`] so that what comes
/// out of the decoder can be told apart: a wrapped error is the file's, anything else is the
/// decoder's verdict on the bytes.
struct Marked(File);

impl Read for Marked {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0
            .read(buf)
            .map_err(|e| io::Error::new(e.kind(), FileError(e)))
    }
}

/// A read error of the file under the decoder (see [`Marked`]).
#[derive(Debug)]
struct FileError(io::Error);

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for FileError {}

/// The decoder's message for a damaged or truncated gzip stream.
#[derive(Debug)]
struct CorruptGzip(String);

impl fmt::Display for CorruptGzip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CorruptGzip {}

/// The file's error back out of its [`FileError`] wrapping; other errors unchanged.
fn unmark(error: io::Error) -> io::Error {
    if !error.get_ref().is_some_and(|inner| inner.is::<FileError>()) {
        return error;
    }
    let kind = error.kind();
    match error
        .into_inner()
        .map(|inner| inner.downcast::<FileError>())
    {
        Some(Ok(file_error)) => file_error.0,
        Some(Err(other)) => io::Error::new(kind, other),
        None => io::Error::from(kind),
    }
}

/// The gzip decoder, with its errors sorted: the file's pass through, the decoder's become
/// [`CorruptGzip`].
struct GzipStream(MultiGzDecoder<BufReader<Marked>>);

impl Read for GzipStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).map_err(|e| {
            if e.get_ref().is_some_and(|inner| inner.is::<FileError>()) {
                unmark(e)
            } else if e.kind() == io::ErrorKind::Interrupted {
                e
            } else {
                let message = match e.kind() {
                    io::ErrorKind::UnexpectedEof => {
                        format!("the gzip stream ends early (truncated file): {e}")
                    }
                    _ => e.to_string(),
                };
                io::Error::new(io::ErrorKind::InvalidData, CorruptGzip(message))
            }
        })
    }
}

#[cfg(test)]
#[path = "open_tests.rs"]
mod tests;
