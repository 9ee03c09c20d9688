//! What every simulated engine keeps about its own run, leader or follower: its ledger, the
//! shards it verified, the epochs it worked in and how long each recovery took.
//!
//! The two engine loops live beside it: [`crate::leader`] (rank 0, runs the scheduler and
//! seals steps) and [`crate::follower`] (reads frames under simulated memory pressure). This
//! module owns the accounting they share and the page checks; it never talks to an agent.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use tandem_client::{PagePool, StartedTask, TaskTally};
use tandem_proto::ids::{BlockHash, PageId, TaskId, TaskKind};

use crate::content::{fill_shard, verify_shard};
use crate::ledger::{Ledger, LedgerReport};
use crate::view::StartView;

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

    /// A call failed while the engine was in `epoch`, `waited_ms` ago: the recovery clock
    /// starts then (unless it already runs).
    pub(crate) fn failed(&mut self, epoch: u64, waited_ms: u64) {
        let at = Instant::now()
            .checked_sub(std::time::Duration::from_millis(waited_ms))
            .unwrap_or_else(Instant::now);
        self.failed_at.get_or_insert((at, epoch));
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
    /// `previous[i]`, when known, is the block page `i` held before the load: a failure
    /// then says whether the page still holds it (the load's copy never reached the page).
    pub(crate) fn verify(
        &mut self,
        pool: &PagePool,
        rank: u32,
        hashes: &[BlockHash],
        pages: &[PageId],
        previous: &[Option<BlockHash>],
    ) {
        if hashes.len() != pages.len() {
            self.fail(format!(
                "a load of {} blocks named {} pages",
                hashes.len(),
                pages.len()
            ));
        }
        for (i, (hash, page)) in hashes.iter().zip(pages).enumerate() {
            self.report.blocks_verified += 1;
            match pool.page(*page) {
                Ok(bytes) => {
                    if let Err(e) = verify_shard(bytes, hash.0, rank) {
                        let before = previous.get(i).copied().flatten();
                        self.fail(format!(
                            "page {page}: {e} ({})",
                            what_page_holds(bytes, rank, before)
                        ));
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

    /// End the accounting with the session's final task counters and its open (lost) tasks.
    pub(crate) fn finish(mut self, tally: TaskTally, open: &[StartedTask]) -> EngineReport {
        self.report.ledger = self.ledger.finish(tally, open);
        self.report
    }
}

/// Which block each page should hold, as of the frames an engine applied, so that a failed
/// check can say what the page held before the load.
#[derive(Clone, Debug, Default)]
pub(crate) struct PageHistory {
    block: HashMap<PageId, BlockHash>,
    before_load: HashMap<TaskId, Vec<Option<BlockHash>>>,
}

impl PageHistory {
    /// A task started: its pages will hold its blocks.
    pub(crate) fn started(&mut self, start: &StartView) {
        if start.kind == TaskKind::Load {
            let before = start
                .pages
                .iter()
                .map(|p| self.block.get(p).copied())
                .collect();
            self.before_load.insert(start.task, before);
        }
        for (page, hash) in start.pages.iter().zip(&start.hashes) {
            self.block.insert(*page, *hash);
        }
    }

    /// What the pages of load `task` held before it (empty when unknown); forgets the task.
    pub(crate) fn take_before(&mut self, task: TaskId) -> Vec<Option<BlockHash>> {
        self.before_load.remove(&task).unwrap_or_default()
    }
}

/// A hint for a page that failed verification: zeros, its previous block, or other data.
fn what_page_holds(bytes: &[u8], rank: u32, previous: Option<BlockHash>) -> String {
    if bytes.iter().all(|&b| b == 0) {
        return "the page holds zeros".into();
    }
    match previous {
        Some(h) if verify_shard(bytes, h.0, rank).is_ok() => {
            format!("the page still holds block {h}, its content before the load")
        }
        Some(h) => format!("the page holds neither this block nor its previous block {h}"),
        None => "the page holds other data".into(),
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
        book.verify(&pool, 1, &hashes, &pages, &[]);
        pool.page_mut(PageId(0)).unwrap()[5] ^= 1;
        book.verify(&pool, 1, &hashes, &pages, &[]);
        book.verify(&pool, 1, &[BlockHash(1)], &[PageId(9)], &[]);
        // A load whose copy never reached its pages: one still holds its previous block,
        // one holds zeros.
        book.verify(
            &pool,
            1,
            &[BlockHash(7), BlockHash(8)],
            &[PageId(2), PageId(1)],
            &[Some(BlockHash(10)), None],
        );
        book.verify(
            &pool,
            1,
            &[BlockHash(7)],
            &[PageId(2)],
            &[Some(BlockHash(3))],
        );
        let report = book.finish(TaskTally::default(), &[]);
        assert_eq!(report.blocks_verified, 8);
        assert_eq!(report.verify_failures, 5);
        assert_eq!(
            report.verify_samples,
            vec![
                "rank 1: page 0: shard of block 0000000000000000000000000000000b on rank 1 differs from its content at byte 5 of 64 (the page holds other data)".to_string(),
                "rank 1: page 9 is out of range: the pool has 4 pages".to_string(),
                "rank 1: page 2: shard of block 00000000000000000000000000000007 on rank 1 differs from its content at byte 0 of 64 (the page still holds block 0000000000000000000000000000000a, its content before the load)".to_string(),
                "rank 1: page 1: shard of block 00000000000000000000000000000008 on rank 1 differs from its content at byte 0 of 64 (the page holds zeros)".to_string(),
                "rank 1: page 2: shard of block 00000000000000000000000000000007 on rank 1 differs from its content at byte 0 of 64 (the page holds neither this block nor its previous block 00000000000000000000000000000003)".to_string(),
            ]
        );
        assert!(compute_pages(&mut pool, 1, &hashes, &[PageId(4), PageId(0)]).is_err());
    }

    #[test]
    fn page_history_remembers_what_a_load_replaced() {
        let start = |seq, kind, hashes: &[u64], pages: &[u32]| StartView {
            task: TaskId { epoch: 1, seq },
            kind,
            request: tandem_proto::ids::RequestId(0),
            hashes: hashes.iter().map(|&h| BlockHash::from(h)).collect(),
            pages: pages.iter().map(|&p| PageId(p)).collect(),
        };
        let mut h = PageHistory::default();
        h.started(&start(0, TaskKind::Store, &[5, 6], &[0, 1]));
        h.started(&start(1, TaskKind::Load, &[7, 8], &[1, 2]));
        assert_eq!(
            h.take_before(TaskId { epoch: 1, seq: 1 }),
            vec![Some(BlockHash(6)), None]
        );
        assert!(
            h.take_before(TaskId { epoch: 1, seq: 1 }).is_empty(),
            "forgotten once taken"
        );
    }

    #[test]
    fn recovery_ends_at_the_first_frame_of_another_epoch() {
        let mut book = EngineBook::new(0);
        book.failed(1, 0);
        book.frame_read(1);
        book.failed(1, 30);
        book.failed(1, 0);
        book.frame_read(2);
        let report = book.finish(TaskTally::default(), &[]);
        assert_eq!(
            report.recoveries_ms.len(),
            1,
            "a same-epoch blip is not a recovery"
        );
        assert!(
            report.recoveries_ms[0] >= 30.0,
            "the clock starts at the failure"
        );
        assert_eq!(report.epochs, BTreeSet::from([1, 2]));
    }
}
