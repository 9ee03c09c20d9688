//! Deadlines on the disk tier: its transfers run on a thread of their own, and the StoreActor
//! waits for each at most `store.disk_op_deadline_ms`.
//!
//! Owns [`DeadlineIo`] (the [`DiskIo`] the agent sets on its store) and [`DiskHealth`] (whether
//! the disk tier is degraded, for `/readyz` and the metrics). The tier hands over a slot's
//! chunks (or, for a task's batch of shards, transfers packing pieces of several slots), two
//! in flight, each with its bytes in a buffer the transfer owns
//! ([`tandem_store::disk`]): the `disk-io` thread moves one chunk while the StoreActor copies the
//! other, and a transfer past its deadline is left to finish on the `disk-io` thread while the StoreActor
//! reports the shard failed ("missed its deadline of N ms") and goes on: host-tier work is not
//! held up, and every disk operation started meanwhile fails at once (the tier is stalled)
//! until the late transfer ends, when the tier takes work again by itself. A frozen disk
//! therefore costs one deadline, never a hung actor.
//!
//! A task's load may take the shards whose bytes the page cache already holds straight into
//! the engine's pages on the StoreActor's side (`preadv2` with `RWF_NOWAIT`, which ends with
//! `EAGAIN` instead of waiting for the device: [`tandem_store::disk::CachedReader`]); only the
//! rest comes through here.
//!
//! It decides nothing about blocks: which shard failed, and what the group does about it, is
//! the StoreActor's report and the leader's rule. It must never run a transfer that may wait
//! for the device on the StoreActor's thread, or let a late transfer touch anything but its
//! own buffer.

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tandem_proto::Tier;
use tandem_store::disk::{DiskIo, DiskOp, DiskTransfer, Submitted};

/// Whether this rank's disk tier is degraded: a transfer missed its deadline and has not
/// ended. Shared by the [`DeadlineIo`], its thread and the HTTP handlers.
#[derive(Clone, Debug)]
pub struct DiskHealth(Arc<HealthInner>);

#[derive(Debug)]
struct HealthInner {
    metrics: Arc<tandem_metrics::AgentMetrics>,
    state: Mutex<HealthState>,
}

#[derive(Debug, Default)]
struct HealthState {
    /// Transfers ended on the I/O thread (numbered from 1, in order).
    ended: u64,
    /// The overdue transfer's number and the reason `/readyz` gives while it runs.
    overdue: Option<(u64, String)>,
}

impl DiskHealth {
    /// Healthy; the gauges in `metrics` follow it.
    pub fn new(metrics: Arc<tandem_metrics::AgentMetrics>) -> Self {
        metrics.set_tier_degraded(Tier::Disk, false);
        Self(Arc::new(HealthInner {
            metrics,
            state: Mutex::new(HealthState::default()),
        }))
    }

    /// Why the disk tier is degraded (names the tier, the transfer and its deadline), `None`
    /// while it is not.
    pub fn degraded(&self) -> Option<String> {
        self.lock().overdue.as_ref().map(|(_, why)| why.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HealthState> {
        // A panic while holding it stops the agent anyway; the state is still meaningful.
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Transfer `seq` missed its deadline: degraded until it ends (unless it just did).
    fn overdue(&self, seq: u64, op: DiskOp, slot: u64, deadline_ms: u64) {
        if let Some(c) = self.0.metrics.tier_deadline_misses(Tier::Disk) {
            c.inc();
        }
        let mut s = self.lock();
        if s.ended >= seq {
            return;
        }
        s.overdue = Some((
            seq,
            format!(
                "disk tier degraded: a {op} of slot {slot} missed its deadline of {deadline_ms} ms and has not ended"
            ),
        ));
        self.0.metrics.set_tier_degraded(Tier::Disk, true);
    }

    /// Transfer `seq` ended (on the I/O thread).
    fn ended(&self, seq: u64) {
        let mut s = self.lock();
        s.ended = seq;
        if s.overdue.as_ref().is_some_and(|(o, _)| *o <= seq) {
            s.overdue = None;
            self.0.metrics.set_tier_degraded(Tier::Disk, false);
            tracing::warn!("the disk tier's overdue transfer ended: the tier takes work again");
        }
    }
}

/// A transfer to run, numbered.
type Job = (u64, DiskTransfer);
/// A transfer that ended, with its result.
type Ended = (DiskTransfer, std::io::Result<()>);

/// Runs the disk tier's transfers on the `disk-io` thread and waits for each at most the
/// deadline (see the module docs).
#[derive(Debug)]
pub struct DeadlineIo {
    jobs: Sender<Job>,
    ended: Receiver<Ended>,
    deadline: Duration,
    /// Number of the last transfer submitted.
    seq: u64,
    /// Transfers submitted and not waited for yet, oldest first (op and slot, for the logs).
    in_flight: VecDeque<(DiskOp, u64)>,
    /// Transfers the `disk-io` thread refused (it is gone), to fail when waited for.
    refused: VecDeque<DiskTransfer>,
    /// Transfers kept after a missed deadline and not handed back yet.
    outstanding: usize,
    health: DiskHealth,
}

impl DeadlineIo {
    /// Starts the `disk-io` thread; each transfer gets `deadline_ms` (≥ 1).
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start(deadline_ms: u64, health: DiskHealth) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (done, ended) = mpsc::channel::<Ended>();
        let thread_health = health.clone();
        let span = tracing::Span::current();
        std::thread::Builder::new()
            .name("disk-io".into())
            .spawn(move || {
                let _span = span.entered();
                while let Ok((seq, mut t)) = queue.recv() {
                    let pages = t.segments() as u64;
                    let result = match crate::fault::disk_transfer(t.op() == DiskOp::Write, pages) {
                        Some(injected) => Err(injected),
                        None => t.perform(),
                    };
                    thread_health.ended(seq);
                    if done.send((t, result)).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Self {
            jobs,
            ended,
            deadline: Duration::from_millis(deadline_ms.max(1)),
            seq: 0,
            in_flight: VecDeque::new(),
            refused: VecDeque::new(),
            outstanding: 0,
            health,
        })
    }

    fn deadline_ms(&self) -> u64 {
        self.deadline.as_millis() as u64
    }
}

impl DiskIo for DeadlineIo {
    fn submit(&mut self, transfer: DiskTransfer) {
        let (op, slot) = (transfer.op(), transfer.slot());
        if !self.refused.is_empty() {
            self.refused.push_back(transfer);
            return;
        }
        self.seq += 1;
        match self.jobs.send((self.seq, transfer)) {
            Ok(()) => self.in_flight.push_back((op, slot)),
            Err(mpsc::SendError((_, t))) => self.refused.push_back(t),
        }
    }

    fn wait(&mut self) -> Submitted {
        let Some((op, slot)) = self.in_flight.pop_front() else {
            return match self.refused.pop_front() {
                Some(t) => {
                    Submitted::Done(t, Err(std::io::Error::other("the disk I/O thread is gone")))
                }
                // The tier never waits with nothing in flight.
                None => Submitted::Overdue {
                    deadline_ms: self.deadline_ms(),
                },
            };
        };
        match self.ended.recv_timeout(self.deadline) {
            Ok((t, result)) => Submitted::Done(t, result),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                // This transfer and every one queued behind it stay with the thread; the tier
                // is degraded until the last of them ends.
                self.outstanding += 1 + self.in_flight.len();
                self.in_flight.clear();
                let deadline_ms = self.deadline_ms();
                self.health.overdue(self.seq, op, slot, deadline_ms);
                tracing::error!(%op, slot, deadline_ms, "a disk transfer missed its deadline: the disk tier refuses work until it ends");
                Submitted::Overdue { deadline_ms }
            }
        }
    }

    fn reclaim(&mut self) -> Option<DiskTransfer> {
        if self.outstanding == 0 {
            return None;
        }
        let (t, late) = self.ended.try_recv().ok()?;
        self.outstanding -= 1;
        tracing::info!(op = %t.op(), slot = t.slot(), ok = late.is_ok(), "an overdue disk transfer ended late; its result was not used");
        Some(t)
    }

    /// A read of bytes the page cache holds never waits for the device (`RWF_NOWAIT`), so it
    /// needs no deadline and may run on the StoreActor's side; not while a disk fault is armed
    /// (a test's faults apply to every read).
    fn cache_reads(&self) -> bool {
        !crate::fault::disk_fault_armed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> DiskHealth {
        DiskHealth::new(Arc::new(tandem_metrics::AgentMetrics::new("g", 1)))
    }

    #[test]
    fn an_overdue_transfer_degrades_the_tier_until_it_ends() {
        let h = health();
        assert_eq!(h.degraded(), None);
        h.ended(1);
        h.overdue(2, DiskOp::Write, 7, 250);
        assert_eq!(
            h.degraded().as_deref(),
            Some("disk tier degraded: a write of slot 7 missed its deadline of 250 ms and has not ended")
        );
        let text = h.0.metrics.encode_text();
        assert!(
            text.contains("tandem_tier_degraded{group=\"g\",rank=\"1\",tier=\"disk\"} 1"),
            "{text}"
        );
        h.ended(2);
        assert_eq!(h.degraded(), None);
        assert!(h
            .0
            .metrics
            .encode_text()
            .contains("tandem_tier_degraded{group=\"g\",rank=\"1\",tier=\"disk\"} 0"));
    }

    #[test]
    fn a_transfer_that_ended_before_it_was_declared_overdue_degrades_nothing() {
        // The I/O thread finished it between the deadline and the StoreActor's bookkeeping.
        let h = health();
        h.ended(3);
        h.overdue(3, DiskOp::Read, 1, 10);
        assert_eq!(h.degraded(), None);
    }

    #[test]
    fn a_multi_chunk_slot_round_trips_through_the_disk_io_thread() {
        use tandem_store::disk::{DiskTier, IoMode};
        use tandem_store::tier::TierSlots;
        use tandem_store::BlockHash;
        let dir = tempfile::tempdir().unwrap();
        let slot = (2 << 20) + 4097; // 4 chunks in flight two at a time, the last one short
        let (mut disk, _) =
            DiskTier::open(&dir.path().join("disk.slab"), slot, 2, IoMode::Buffered).unwrap();
        disk.set_io(Box::new(DeadlineIo::start(60_000, health()).unwrap()));
        let data: Vec<u8> = (0..slot).map(|i| (i * 7 + i / 1000) as u8).collect();
        let sum = disk.write_slot(1, &[&data], BlockHash(5)).unwrap();
        assert_eq!(sum, tandem_store::checksum::checksum(BlockHash(5), &data));
        let mut out = vec![0u8; slot];
        let (a, b) = out.split_at_mut(12_345);
        assert_eq!(disk.read_slot(1, &mut [a, b], BlockHash(5)).unwrap(), sum);
        assert!(out == data, "the bytes came back");
    }
}
