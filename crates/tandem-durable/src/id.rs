//! Stream entry ids (`ms-seq`) as an ordered value type.
//!
//! Owns parsing and printing of stream entry ids. It never invents ids for entries: the
//! append asks Redis for `{epoch}-*` and Redis picks the sequence number; the only derived
//! id is [`StreamEntryId::successor`], used as an exclusive bound.

use crate::error::{DurableError, Result};
use std::fmt;
use std::str::FromStr;

/// The id of one stream entry, `ms-seq`. Ids order the stream: a later append has a larger
/// id. In the completion stream the first part is the epoch (the fenced append writes
/// `{epoch}-*`) and the second counts entries within the epoch, 0 being its barrier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamEntryId {
    /// First part: Redis's `ms` field; the epoch in the completion stream.
    pub ms: u64,
    /// Second part: sequence number within the first part, from 0.
    pub seq: u64,
}

impl StreamEntryId {
    /// `0-0`: lower than every id Redis assigns.
    pub const ZERO: StreamEntryId = StreamEntryId { ms: 0, seq: 0 };

    /// The smallest id greater than this one (`ms-(seq+1)`, or `(ms+1)-0` on overflow).
    pub fn successor(self) -> StreamEntryId {
        match self.seq.checked_add(1) {
            Some(seq) => StreamEntryId { ms: self.ms, seq },
            None => StreamEntryId {
                ms: self.ms.saturating_add(1),
                seq: 0,
            },
        }
    }

    /// Parses `ms-seq` as Redis prints it.
    ///
    /// # Errors
    /// [`DurableError::Corrupt`] naming the text when it is not two decimal numbers joined
    /// by `-`.
    pub fn parse(text: &str) -> Result<StreamEntryId> {
        let corrupt = || DurableError::Corrupt {
            id: text.to_string(),
            reason: "not a stream entry id of the form ms-seq".into(),
        };
        let (ms, seq) = text.split_once('-').ok_or_else(corrupt)?;
        Ok(StreamEntryId {
            ms: ms.parse().map_err(|_| corrupt())?,
            seq: seq.parse().map_err(|_| corrupt())?,
        })
    }
}

impl fmt::Display for StreamEntryId {
    /// `ms-seq`, for example `1718000000000-3`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl FromStr for StreamEntryId {
    type Err = DurableError;

    fn from_str(s: &str) -> Result<StreamEntryId> {
        StreamEntryId::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_orders() {
        let a = StreamEntryId::parse("1718000000000-3").unwrap();
        assert_eq!(
            a,
            StreamEntryId {
                ms: 1718000000000,
                seq: 3
            }
        );
        assert_eq!(a.to_string(), "1718000000000-3");
        assert!(
            a < StreamEntryId {
                ms: 1718000000000,
                seq: 4
            }
        );
        assert!(
            a < StreamEntryId {
                ms: 1718000000001,
                seq: 0
            }
        );
        assert!(StreamEntryId::ZERO < a);
    }

    #[test]
    fn successor_is_next_id() {
        assert_eq!(
            StreamEntryId { ms: 5, seq: 1 }.successor(),
            StreamEntryId { ms: 5, seq: 2 }
        );
        assert_eq!(
            StreamEntryId {
                ms: 5,
                seq: u64::MAX
            }
            .successor(),
            StreamEntryId { ms: 6, seq: 0 }
        );
    }

    #[test]
    fn rejects_malformed_ids() {
        for bad in ["", "12", "a-1", "1-b", "1-2-3", "-1"] {
            let err = StreamEntryId::parse(bad).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("stored value {bad} is corrupt: not a stream entry id of the form ms-seq")
            );
        }
    }
}
