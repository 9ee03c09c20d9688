//! The step record: what one stream entry holds, and its versioned encoding.
//!
//! Owns the shape of a completion-stream entry and the bytes it is stored as. It never
//! talks to Redis; [`crate::RedisLog`] moves the bytes.
//!
//! A step entry has two fields: `v`, the record format version as decimal text, and `rec`,
//! the [`StepRecord`] encoded with postcard. An epoch barrier (written by
//! `EpochStore::next_epoch`, id `{epoch}-0`) has `v` and `barrier` (the epoch) instead.
//! A reader refuses a version it does not know instead of guessing (a mixed-version group
//! must not misread a completion).

use crate::error::{DurableError, Result};
use crate::id::StreamEntryId;
use serde::{Deserialize, Serialize};
use tandem_proto::{Epoch, Step, TaskOutcome};

/// The record format version this build writes and the only one it reads.
/// Version 2: 128-bit block hashes. An entry written by version 1 is refused as
/// [`DurableError::Corrupt`] naming both versions, never misread.
pub const RECORD_VERSION: u32 = 2;

/// Name of the entry field holding [`RECORD_VERSION`].
pub(crate) const FIELD_VERSION: &str = "v";
/// Name of the entry field holding the postcard bytes.
pub(crate) const FIELD_RECORD: &str = "rec";
/// Name of the field that marks an epoch barrier and holds its epoch.
pub(crate) const FIELD_BARRIER: &str = "barrier";

/// A task the leader started, with its kind: the protocol core's type, logged as it is.
pub use tandem_proto::StartedTask;

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

/// One stream entry as read back: a step written ahead, or the barrier that opened an epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEntry {
    /// A step record.
    Step(LoggedStep),
    /// The first entry of an epoch; it carries nothing an engine needs.
    Barrier {
        /// The entry's id (`{epoch}-0`).
        id: StreamEntryId,
        /// The epoch it opened.
        epoch: Epoch,
    },
}

impl StreamEntry {
    /// The entry's id.
    pub fn id(&self) -> StreamEntryId {
        match self {
            StreamEntry::Step(s) => s.id,
            StreamEntry::Barrier { id, .. } => *id,
        }
    }
}

/// Bytes of the stack buffer [`encode_with`] encodes into: a step record of a few dozen
/// outcomes. Small, because it is zeroed on every append (4 KiB measured 4,100 instructions
/// per append under callgrind, more than the whole encoding).
const STACK_RECORD_BYTES: usize = 512;

/// About the bytes of a step record, to size its command at once and to choose where
/// [`encode_with`] encodes it: postcard takes 1 to 10 bytes per integer, a few per outcome
/// and more per start (its block hashes and pages); an outcome that succeeded with small ids
/// takes 6 to 8. A short guess costs a reallocation or a second encoding, nothing else.
pub(crate) fn record_bytes_hint(record: &StepRecordRef<'_>) -> usize {
    24 + record.finished.len() * 16
        + record
            .started
            .iter()
            .map(|s| 48 + 10 * (s.start.block_hashes.len() + s.start.page_ids.len()))
            .sum::<usize>()
}

/// Encodes a record for the `rec` field and hands its bytes to `write` (which copies them
/// into the command being built): postcard, the same bytes as the owned [`StepRecord`]. A
/// record that [`record_bytes_hint`] says fits [`STACK_RECORD_BYTES`] is encoded on the
/// stack, so the usual append allocates no buffer for its record; a larger one (or one that
/// turns out not to fit) in a `Vec` of the hinted capacity.
///
/// # Errors
/// [`DurableError::Corrupt`] if serialization fails (it does not for these types; the
/// variant keeps the call panic-free).
pub(crate) fn encode_with<R>(
    record: &StepRecordRef<'_>,
    write: impl FnOnce(&[u8]) -> R,
) -> Result<R> {
    if record_bytes_hint(record) <= STACK_RECORD_BYTES {
        let mut stack = [0u8; STACK_RECORD_BYTES];
        match postcard::to_slice(record, &mut stack) {
            Ok(bytes) => return Ok(write(bytes)),
            Err(postcard::Error::SerializeBufferFull) => {}
            Err(e) => return Err(encode_error(record, &e)),
        }
    }
    postcard::to_extend(record, Vec::with_capacity(record_bytes_hint(record)))
        .map(|bytes| write(&bytes))
        .map_err(|e| encode_error(record, &e))
}

fn encode_error(record: &StepRecordRef<'_>, e: &postcard::Error) -> DurableError {
    DurableError::Corrupt {
        id: format!("epoch {} step {}", record.epoch, record.step),
        reason: format!("cannot encode step record: {e}"),
    }
}

/// The fields of one entry, as read: `v`, `rec` and `barrier` where present.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RawFields<'a> {
    pub version: Option<&'a [u8]>,
    pub record: Option<&'a [u8]>,
    pub barrier: Option<&'a [u8]>,
}

/// Decodes entry `id` from its fields.
///
/// # Errors
/// [`DurableError::Corrupt`] naming `id` when a field is missing, the version is not
/// [`RECORD_VERSION`], or the bytes do not decode.
pub(crate) fn decode(id: StreamEntryId, fields: RawFields<'_>) -> Result<StreamEntry> {
    let corrupt = |reason: String| DurableError::Corrupt {
        id: id.to_string(),
        reason,
    };
    let version = fields
        .version
        .ok_or_else(|| corrupt(format!("missing field {FIELD_VERSION}")))?;
    let version_text = String::from_utf8_lossy(version);
    if version_text != RECORD_VERSION.to_string() {
        return Err(corrupt(format!(
            "unknown record version {version_text} (this build reads {RECORD_VERSION})"
        )));
    }
    if let Some(epoch) = fields.barrier {
        let epoch = String::from_utf8_lossy(epoch)
            .parse()
            .map_err(|_| corrupt("barrier epoch is not a number".into()))?;
        return Ok(StreamEntry::Barrier {
            id,
            epoch: Epoch(epoch),
        });
    }
    let bytes = fields
        .record
        .ok_or_else(|| corrupt(format!("missing field {FIELD_RECORD}")))?;
    let record = postcard::from_bytes(bytes)
        .map_err(|e| corrupt(format!("undecodable step record: {e}")))?;
    Ok(StreamEntry::Step(LoggedStep { id, record }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::{BlockHash, OutcomeResult, PageId, RequestId, TaskId, TaskKind, TaskStart};

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
        let bytes = encode_with(
            &StepRecordRef {
                epoch: Epoch(2),
                step: Step(9),
                started: &started,
                finished: &finished,
            },
            <[u8]>::to_vec,
        )
        .unwrap();
        let id = StreamEntryId { ms: 1, seq: 0 };
        let fields = RawFields {
            version: Some(b"2"),
            record: Some(&bytes),
            barrier: None,
        };
        let record = StepRecord {
            epoch: Epoch(2),
            step: Step(9),
            started,
            finished,
        };
        assert_eq!(bytes, postcard::to_allocvec(&record).unwrap());
        assert_eq!(
            decode(id, fields).unwrap(),
            StreamEntry::Step(LoggedStep { id, record })
        );
        let barrier = RawFields {
            version: Some(b"2"),
            record: None,
            barrier: Some(b"4"),
        };
        let entry = decode(id, barrier).unwrap();
        assert_eq!(
            entry,
            StreamEntry::Barrier {
                id,
                epoch: Epoch(4)
            }
        );
        assert_eq!(entry.id(), id);
    }

    #[test]
    fn a_record_larger_than_the_stack_buffer_encodes_the_same_bytes() {
        let (started, one) = sample();
        let finished: Vec<TaskOutcome> = (0..64).map(|_| one[0].clone()).collect();
        let record = StepRecord {
            epoch: Epoch(2),
            step: Step(9),
            started,
            finished,
        };
        let owned = postcard::to_allocvec(&record).unwrap();
        assert!(owned.len() > STACK_RECORD_BYTES, "{}", owned.len());
        let borrowed = encode_with(
            &StepRecordRef {
                epoch: record.epoch,
                step: record.step,
                started: &record.started,
                finished: &record.finished,
            },
            <[u8]>::to_vec,
        )
        .unwrap();
        assert_eq!(borrowed, owned);
    }

    #[test]
    fn refuses_unknown_versions_and_garbage() {
        let id = StreamEntryId { ms: 17, seq: 0 };
        let msg = |version: Option<&[u8]>, record: Option<&[u8]>, barrier: Option<&[u8]>| {
            let fields = RawFields {
                version,
                record,
                barrier,
            };
            decode(id, fields).unwrap_err().to_string()
        };
        let p = "stored value 17-0 is corrupt:";
        assert_eq!(
            msg(Some(b"9"), Some(b""), None),
            format!("{p} unknown record version 9 (this build reads 2)")
        );
        assert_eq!(
            msg(Some(b"1"), Some(b""), None),
            format!("{p} unknown record version 1 (this build reads 2)")
        );
        assert_eq!(msg(None, Some(b""), None), format!("{p} missing field v"));
        assert_eq!(
            msg(Some(b"2"), None, None),
            format!("{p} missing field rec")
        );
        assert_eq!(
            msg(Some(b"2"), None, Some(b"x")),
            format!("{p} barrier epoch is not a number")
        );
        assert!(msg(Some(b"2"), Some(&[0xff; 3]), None)
            .starts_with("stored value 17-0 is corrupt: undecodable step record"));
    }
}
