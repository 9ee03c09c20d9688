//! Block hashes and page ids from Python.
//!
//! A block hash is accepted as an `int` in `0 .. 2**128` (the hash itself), as `bytes` of any
//! non-zero length (an engine's digest, mapped by [`BlockHash::from_digest`]: a SHA-256 digest
//! keeps its first 16 bytes), or as a hex `str` of an even, non-zero number of digits (the
//! digest's hex form, decoded and mapped the same way, so `block_hash(d.hex()) ==
//! block_hash(d)`; 32 hex digits are the hash itself). Anything else is a `TypeError` naming
//! the position and the type; a value out of range is a `ValueError`. Owns only conversion.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};
use tandem_proto::ids::{BlockHash, PageId};

/// The 128-bit block hash Tandem uses for `key` (int, bytes or hex str; see the module docs).
///
/// Raises `TypeError` for another type, `ValueError` for an int outside `0 .. 2**128`, empty
/// bytes, or a str that is not an even number of hex digits.
#[pyfunction]
pub(crate) fn block_hash(key: &Bound<'_, PyAny>) -> PyResult<u128> {
    one_hash(key, None).map(|h| h.0)
}

/// The block hashes of a sequence of keys (list, tuple or any iterable but a str or bytes).
pub(crate) fn block_hashes(keys: &Bound<'_, PyAny>) -> PyResult<Vec<BlockHash>> {
    sequence_check(keys, "block_hashes")?;
    keys.try_iter()?
        .enumerate()
        .map(|(i, item)| one_hash(&item?, Some(i)))
        .collect()
}

/// Page ids (ints in `0 .. 2**32`) of a sequence.
pub(crate) fn page_ids(pages: &Bound<'_, PyAny>) -> PyResult<Vec<PageId>> {
    sequence_check(pages, "page_ids")?;
    pages
        .try_iter()?
        .enumerate()
        .map(|(i, item)| {
            let item = item?;
            if item.is_instance_of::<PyBool>() || !item.is_instance_of::<PyInt>() {
                return Err(PyTypeError::new_err(format!(
                    "page_ids[{i}] must be an int, not {}",
                    type_name(&item)
                )));
            }
            let v: i128 = item.extract().map_err(|_| out_of_range_page(i, &item))?;
            u32::try_from(v)
                .map(PageId)
                .map_err(|_| out_of_range_page(i, &item))
        })
        .collect()
}

fn out_of_range_page(i: usize, item: &Bound<'_, PyAny>) -> PyErr {
    PyValueError::new_err(format!(
        "page_ids[{i}] = {item} is out of range: page ids are 0 .. 2**32"
    ))
}

/// A str or bytes is iterable but is no sequence of keys.
fn sequence_check(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a sequence (list or tuple), not a single {}",
            type_name(obj)
        )));
    }
    Ok(())
}

fn one_hash(key: &Bound<'_, PyAny>, at: Option<usize>) -> PyResult<BlockHash> {
    let name = match at {
        Some(i) => format!("block_hashes[{i}]"),
        None => "key".to_string(),
    };
    if key.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, bytes or hex str, not bool"
        )));
    }
    if key.is_instance_of::<PyInt>() {
        return key.extract::<u128>().map(BlockHash).map_err(|_| {
            PyValueError::new_err(format!(
                "{name} = {key} is out of range: an int block hash is 0 .. 2**128"
            ))
        });
    }
    if let Ok(b) = key.cast::<PyBytes>() {
        let digest = b.as_bytes();
        if digest.is_empty() {
            return Err(PyValueError::new_err(format!("{name} is an empty digest")));
        }
        return Ok(BlockHash::from_digest(digest));
    }
    if let Ok(s) = key.cast::<PyString>() {
        let text = s.to_str()?;
        let digest = from_hex(text).ok_or_else(|| {
            PyValueError::new_err(format!(
                "{name} = {text:?} is not a hex digest (an even, non-zero number of hex digits)"
            ))
        })?;
        return Ok(BlockHash::from_digest(&digest));
    }
    Err(PyTypeError::new_err(format!(
        "{name} must be an int, bytes or hex str, not {}",
        type_name(key)
    )))
}

/// The bytes of an even, non-empty run of hex digits.
fn from_hex(text: &str) -> Option<Vec<u8>> {
    let b = text.as_bytes();
    if b.is_empty() || b.len() % 2 != 0 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    b.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// The Python type's name, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}
