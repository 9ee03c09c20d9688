//! The step record: what one stream entry holds, and its versioned encoding.
//!
//! Owns the shape of a completion-stream entry and the bytes it is stored as. It never
//! talks to Redis; [`crate::CompletionLog`] moves the bytes.
//!
//! An entry has two fields: `v`, the record format version as decimal text, and `rec`, the
//! [`StepRecord`] encoded with postcard. A reader refuses a version it does not know instead
//! of guessing (a mixed-version group must not misread a completion).

use crate::error::{DurableError, Result};
use crate::id::StreamEntryId;
use serde::{Deserialize, Serialize};
use tandem_proto::{Epoch, Step, TaskKind, TaskOutcome, TaskStart};

/// The record format version this build writes and the only one it reads.
pub const RECORD_VERSION: u32 = 1;

/// Name of the entry field holding [`RECORD_VERSION`].
pub(crate) const FIELD_VERSION: &str = "v";
/// Name of the entry field holding the postcard bytes.
pub(crate) const FIELD_RECORD: &str = "rec";

/// A task the leader started, with its kind (a [`TaskStart`] alone does not say whether it
/// is a store or a load).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StartedTask {
    /// Store or load.
    pub kind: TaskKind,
    /// The start as the frame carries it.
    pub start: TaskStart,
}

/// Everything the leader wrote ahead for one step: the tasks it started and the outcomes it
/// is about to reveal. One record is one stream entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StepRecord {
    /// The epoch of the frame that reveals this record.
    pub epoch: Epoch,
    /// The step of that frame.
    pub step: Step,
    /// Tasks started in this step.
    pub started: Vec<StartedTask>,
    /// Outcomes revealed in this step. In the first record of an epoch this also holds the
    /// previous epoch's in-flight tasks, each with result `Aborted`.
    pub finished: Vec<TaskOutcome>,
}

/// Borrowed twin of [`StepRecord`] so that an append encodes without cloning; serde writes
/// slices and vectors alike, so the bytes decode as a [`StepRecord`].
#[derive(Serialize)]
pub(crate) struct StepRecordRef<'a> {
    pub epoch: Epoch,
    pub step: Step,
    pub started: &'a [StartedTask],
    pub finished: &'a [TaskOutcome],
}

/// One entry read back from the stream: its id and its decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedStep {
    /// The entry's id.
    pub id: StreamEntryId,
    /// The decoded record.
    pub record: StepRecord,
}

/// Encodes a record for the `rec` field.
///
/// # Errors
/// [`DurableError::Corrupt`] if serialization fails (it does not for these types; the
/// variant keeps the call panic-free).
pub(crate) fn encode(record: &StepRecordRef<'_>) -> Result<Vec<u8>> {
    postcard::to_allocvec(record).map_err(|e| DurableError::Corrupt {
        id: format!("epoch {} step {}", record.epoch, record.step),
        reason: format!("cannot encode step record: {e}"),
    })
}

/// Decodes the fields of entry `id`: `version` is the `v` field's text (if present), `bytes`
/// the `rec` field (if present).
///
/// # Errors
/// [`DurableError::Corrupt`] naming `id` when a field is missing, the version is not
/// [`RECORD_VERSION`], or the bytes do not decode.
pub(crate) fn decode(
    id: StreamEntryId,
    version: Option<&[u8]>,
    bytes: Option<&[u8]>,
) -> Result<StepRecord> {
    let corrupt = |reason: String| DurableError::Corrupt {
        id: id.to_string(),
        reason,
    };
    let version = version.ok_or_else(|| corrupt(format!("missing field {FIELD_VERSION}")))?;
    let version_text = String::from_utf8_lossy(version);
    if version_text != RECORD_VERSION.to_string() {
        return Err(corrupt(format!(
            "unknown record version {version_text} (this build reads {RECORD_VERSION})"
        )));
    }
    let bytes = bytes.ok_or_else(|| corrupt(format!("missing field {FIELD_RECORD}")))?;
    postcard::from_bytes(bytes).map_err(|e| corrupt(format!("undecodable step record: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::{BlockHash, OutcomeResult, PageId, RequestId, TaskId};

    fn sample() -> (Vec<StartedTask>, Vec<TaskOutcome>) {
        let started = vec![StartedTask {
            kind: TaskKind::Load,
            start: TaskStart {
                task: TaskId::new(Epoch(2), 7),
                request: RequestId(40),
                block_hashes: vec![BlockHash(1), BlockHash(2)],
                page_ids: vec![PageId(10), PageId(11)],
                tiers: vec![],
            },
        }];
        let finished = vec![TaskOutcome {
            task: TaskId::new(Epoch(2), 3),
            kind: TaskKind::Store,
            request: RequestId(39),
            result: OutcomeResult::Failed {
                reason: "disk full".into(),
            },
        }];
        (started, finished)
    }

    #[test]
    fn borrowed_encoding_decodes_as_owned() {
        let (started, finished) = sample();
        let bytes = encode(&StepRecordRef {
            epoch: Epoch(2),
            step: Step(9),
            started: &started,
            finished: &finished,
        })
        .unwrap();
        let id = StreamEntryId { ms: 1, seq: 0 };
        let rec = decode(id, Some(b"1"), Some(&bytes)).unwrap();
        assert_eq!(
            rec,
            StepRecord {
                epoch: Epoch(2),
                step: Step(9),
                started,
                finished
            }
        );
    }

    #[test]
    fn refuses_unknown_versions_and_garbage() {
        let id = StreamEntryId { ms: 17, seq: 0 };
        let msg = |r: Result<StepRecord>| r.unwrap_err().to_string();
        assert_eq!(
            msg(decode(id, Some(b"9"), Some(b""))),
            "stored value 17-0 is corrupt: unknown record version 9 (this build reads 1)"
        );
        assert_eq!(
            msg(decode(id, None, Some(b""))),
            "stored value 17-0 is corrupt: missing field v"
        );
        assert_eq!(
            msg(decode(id, Some(b"1"), None)),
            "stored value 17-0 is corrupt: missing field rec"
        );
        assert!(msg(decode(id, Some(b"1"), Some(&[0xff; 3])))
            .starts_with("stored value 17-0 is corrupt: undecodable step record"));
    }
}
