//! The leader's request source: the trace iterator, one record of lookahead, request ids, and
//! timestamp pacing. Time is an input (`now`), so pacing is tested without sleeping.

use std::time::{Duration, Instant};

use tandem_proto::ids::RequestId;
use tandem_trace::TraceRecord;

use crate::params::Speed;

/// The next request, if any, and whether it is due.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Head<'a> {
    /// The trace is over.
    Exhausted,
    /// The next request arrives in this long.
    NotDue(Duration),
    /// The next request has arrived.
    Due(&'a TraceRecord),
}

/// Requests in trace order, numbered from 0, paced by their timestamps.
pub(crate) struct RequestSource<I> {
    iter: I,
    head: Option<TraceRecord>,
    exhausted: bool,
    speed: Speed,
    started: Instant,
    first_ts: Option<u64>,
    next_id: u64,
}

impl<I: Iterator<Item = TraceRecord>> RequestSource<I> {
    /// A source whose clock starts at `started`.
    pub(crate) fn new(iter: I, speed: Speed, started: Instant) -> Self {
        RequestSource {
            iter,
            head: None,
            exhausted: false,
            speed,
            started,
            first_ts: None,
            next_id: 0,
        }
    }

    /// The next request as of `now`.
    pub(crate) fn head(&mut self, now: Instant) -> Head<'_> {
        if self.head.is_none() && !self.exhausted {
            self.head = self.iter.next();
            self.exhausted = self.head.is_none();
        }
        let Some(record) = self.head.as_ref() else {
            return Head::Exhausted;
        };
        let first = *self.first_ts.get_or_insert(record.timestamp);
        let due = match self.speed {
            Speed::MaxRate => Duration::ZERO,
            Speed::Factor(f) => {
                Duration::from_secs_f64(record.timestamp.saturating_sub(first) as f64 / 1000.0 / f)
            }
        };
        let elapsed = now.saturating_duration_since(self.started);
        if elapsed >= due {
            Head::Due(record)
        } else {
            Head::NotDue(due - elapsed)
        }
    }

    /// Take the head (whether due or not) with its request id.
    pub(crate) fn pop(&mut self) -> Option<(RequestId, TraceRecord)> {
        let record = self.head.take()?;
        let id = RequestId(self.next_id);
        self.next_id += 1;
        Some((id, record))
    }

    /// The id the next request will get (its 0-based position in the trace).
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Whether every request has been taken.
    pub(crate) fn is_exhausted(&mut self, now: Instant) -> bool {
        matches!(self.head(now), Head::Exhausted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(timestamp: u64) -> TraceRecord {
        TraceRecord {
            timestamp,
            input_length: 512,
            output_length: 1,
            hash_ids: vec![timestamp],
        }
    }

    #[test]
    fn max_rate_is_always_due_and_ids_count_from_zero() {
        let t0 = Instant::now();
        let mut s = RequestSource::new(vec![rec(5000), rec(9000)].into_iter(), Speed::MaxRate, t0);
        assert_eq!(s.head(t0), Head::Due(&rec(5000)));
        assert_eq!(s.pop(), Some((RequestId(0), rec(5000))));
        assert_eq!(s.head(t0), Head::Due(&rec(9000)));
        assert_eq!(s.next_id(), 1);
        s.pop();
        assert!(s.is_exhausted(t0));
        assert_eq!(s.pop(), None);
    }

    #[test]
    fn factor_paces_relative_to_the_first_timestamp() {
        let t0 = Instant::now();
        let mut s = RequestSource::new(
            vec![rec(1000), rec(3000), rec(500)].into_iter(),
            Speed::Factor(2.0),
            t0,
        );
        assert_eq!(
            s.head(t0),
            Head::Due(&rec(1000)),
            "the first request is due at once"
        );
        s.pop();
        assert_eq!(s.head(t0), Head::NotDue(Duration::from_millis(1000)));
        assert_eq!(
            s.head(t0 + Duration::from_millis(1000)),
            Head::Due(&rec(3000))
        );
        s.pop();
        assert_eq!(
            s.head(t0),
            Head::Due(&rec(500)),
            "an earlier timestamp is due at once"
        );
    }
}
