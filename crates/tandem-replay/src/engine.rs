//! What every simulated engine keeps about its own run, leader or follower: its ledger, the
//! shards it verified, the epochs it worked in and how long each recovery took.
//!
//! The two engine loops live beside it: [`crate::leader`] (rank 0, runs the scheduler and
//! seals steps) and [`crate::follower`] (reads frames under simulated memory pressure). This
//! module owns the accounting they share and the page checks; it never talks to an agent.

use std::collections::BTreeSet;
use std::time::Instant;

use tandem_client::PagePool;
use tandem_proto::ids::{BlockHash, PageId};

use crate::content::{fill_shard, verify_shard};
use crate::ledger::{Ledger, LedgerReport};

/// Verify failures described in full per engine; the rest are only counted.
pub(crate) const MAX_FAILURE_SAMPLES: usize = 8;

/// One engine's accounting, handed to the driver at the end.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct EngineReport {
    /// The rank.
    pub rank: u32,
    /// Frame digests and outcome counters.
    pub ledger: LedgerReport,
    /// Block shards whose bytes were wrong after a load `Ok` (or whose page was missing).
    pub verify_failures: u64,
    /// The first few failures, described.
    pub verify_samples: Vec<String>,
    /// Block shards verified.
    pub blocks_verified: u64,
    /// Milliseconds from each failure to the first frame of the next epoch.
    pub recoveries_ms: Vec<f64>,
    /// Epochs of the frames this engine read.
    pub epochs: BTreeSet<u64>,
}

/// The accounting an engine keeps while it runs.
pub(crate) struct EngineBook {
    pub ledger: Ledger,
    report: EngineReport,
    failed_at: Option<(Instant, u64)>,
}

impl EngineBook {
    pub(crate) fn new(rank: u32) -> Self {
        EngineBook {
            ledger: Ledger::new(),
            report: EngineReport {
                rank,
                ..EngineReport::default()
            },
            failed_at: None,
        }
    }

    /// A call failed while the engine was in `epoch`: the recovery clock starts (unless it
    /// already runs).
    pub(crate) fn failed(&mut self, epoch: u64) {
        self.failed_at.get_or_insert((Instant::now(), epoch));
    }

    /// A frame of `epoch` was read: the first one after a failure in another epoch ends a
    /// recovery; one in the same epoch means the failure passed without a restart.
    pub(crate) fn frame_read(&mut self, epoch: u64) {
        self.report.epochs.insert(epoch);
        if let Some((at, failed_epoch)) = self.failed_at.take() {
            if failed_epoch != epoch {
                self.report
                    .recoveries_ms
                    .push(at.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }

    /// Check every `(hashes[i], pages[i])` shard against the content of `rank`.
    pub(crate) fn verify(
        &mut self,
        pool: &PagePool,
        rank: u32,
        hashes: &[BlockHash],
        pages: &[PageId],
    ) {
        if hashes.len() != pages.len() {
            self.fail(format!(
                "a load of {} blocks named {} pages",
                hashes.len(),
                pages.len()
            ));
        }
        for (hash, page) in hashes.iter().zip(pages) {
            self.report.blocks_verified += 1;
            match pool.page(*page) {
                Ok(bytes) => {
                    if let Err(e) = verify_shard(bytes, hash.0, rank) {
                        self.fail(format!("page {page}: {e}"));
                    }
                }
                Err(e) => self.fail(e.to_string()),
            }
        }
    }

    fn fail(&mut self, what: String) {
        self.report.verify_failures += 1;
        if self.report.verify_samples.len() < MAX_FAILURE_SAMPLES {
            self.report
                .verify_samples
                .push(format!("rank {}: {what}", self.report.rank));
        }
    }

    pub(crate) fn finish(mut self) -> EngineReport {
        self.report.ledger = self.ledger.finish();
        self.report
    }
}

/// Write the content of `(hashes[i], rank)` into `pages[i]`: the engine "computes" them.
///
/// # Errors
/// The pool's error for a page out of range.
pub(crate) fn compute_pages(
    pool: &mut PagePool,
    rank: u32,
    hashes: &[BlockHash],
    pages: &[PageId],
) -> Result<(), tandem_client::PagePoolError> {
    for (hash, page) in hashes.iter().zip(pages) {
        fill_shard(pool.page_mut(*page)?, hash.0, rank);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computed_pages_verify_and_corrupted_ones_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let mut pool = PagePool::create(dir.path().join("pool"), 4, 64).unwrap();
        let hashes = [BlockHash(10), BlockHash(11)];
        let pages = [PageId(2), PageId(0)];
        compute_pages(&mut pool, 1, &hashes, &pages).unwrap();
        let mut book = EngineBook::new(1);
        book.verify(&pool, 1, &hashes, &pages);
        pool.page_mut(PageId(0)).unwrap()[5] ^= 1;
        book.verify(&pool, 1, &hashes, &pages);
        book.verify(&pool, 1, &[BlockHash(1)], &[PageId(9)]);
        let report = book.finish();
        assert_eq!(report.blocks_verified, 5);
        assert_eq!(report.verify_failures, 2);
        assert_eq!(
            report.verify_samples,
            vec![
                "rank 1: page 0: shard of block 000000000000000b on rank 1 differs from its content at byte 5 of 64".to_string(),
                "rank 1: page 9 is out of range: the pool has 4 pages".to_string(),
            ]
        );
        assert!(compute_pages(&mut pool, 1, &hashes, &[PageId(4), PageId(0)]).is_err());
    }

    #[test]
    fn recovery_ends_at_the_first_frame_of_another_epoch() {
        let mut book = EngineBook::new(0);
        book.failed(1);
        book.frame_read(1);
        book.failed(1);
        book.failed(1);
        book.frame_read(2);
        let report = book.finish();
        assert_eq!(
            report.recoveries_ms.len(),
            1,
            "a same-epoch blip is not a recovery"
        );
        assert_eq!(report.epochs, BTreeSet::from([1, 2]));
    }
}
