//! The StoreActor's copy workers: the threads that run a task's shard copies
//! (`tandem_store::batch`) side by side, so that the copies of a multi-block task do not wait
//! behind each other.
//!
//! Owns [`CopyWorkers`] (how many threads, `store.copy_workers`) and its
//! [`CopyRunner`] implementation: scoped threads for one batch, the StoreActor's own thread
//! working too, every job taken from one shared queue. It never decides what is copied (the
//! store's batch calls validate and record) and never panics: a worker thread that cannot be
//! started leaves its share to the others.

use std::sync::Mutex;

use tandem_store::batch::{CopyJob, CopyRunner};

/// Batches smaller than this run on the StoreActor's thread alone: starting a thread costs
/// tens of microseconds, more than copying a few hundred KiB.
pub const PARALLEL_MIN_BYTES: usize = 1 << 20;

/// Most workers the automatic choice takes.
const AUTO_MAX: usize = 4;

/// How many threads run a batch's copies (the StoreActor's thread counts as one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyWorkers {
    workers: usize,
}

impl CopyWorkers {
    /// `configured` workers (`store.copy_workers`); 0 picks one per CPU core, at most 4.
    pub fn new(configured: u32) -> Self {
        let workers = match configured {
            0 => std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .clamp(1, AUTO_MAX),
            n => n as usize,
        };
        Self { workers }
    }

    /// Threads per batch, the StoreActor's included.
    pub fn count(&self) -> usize {
        self.workers
    }
}

impl CopyRunner for CopyWorkers {
    fn run_all(&self, jobs: &mut [CopyJob<'_>]) {
        let bytes: usize = jobs.iter().map(CopyJob::bytes).sum();
        let threads = self.workers.min(jobs.len());
        if threads <= 1 || bytes < PARALLEL_MIN_BYTES {
            jobs.iter_mut().for_each(CopyJob::run);
            return;
        }
        let queue = Mutex::new(jobs.iter_mut());
        std::thread::scope(|scope| {
            for i in 1..threads {
                let started = std::thread::Builder::new()
                    .name(format!("copy-worker-{i}"))
                    .spawn_scoped(scope, || drain(&queue));
                if let Err(e) = started {
                    tracing::warn!(error = %e, "a copy worker could not start: the others copy its share");
                }
            }
            drain(&queue);
        });
    }
}

/// Run jobs from `queue` until it is empty.
fn drain<'q, 'j: 'q>(queue: &Mutex<std::slice::IterMut<'q, CopyJob<'j>>>) {
    loop {
        let next = match queue.lock() {
            Ok(mut q) => q.next(),
            Err(poisoned) => poisoned.into_inner().next(),
        };
        match next {
            Some(job) => job.run(),
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch above [`PARALLEL_MIN_BYTES`] through four workers stores and loads every byte.
    #[test]
    fn four_workers_round_trip_a_batch() {
        use tandem_store::buffer::{EngineBuffers, PageId, RegionSpec};
        use tandem_store::shm::ShmFile;
        use tandem_store::store::{Store, StoreConfig};
        use tandem_store::{BlockHash, Tier};
        const SHARD: usize = 256 * 1024;
        const BLOCKS: usize = 8;
        let dir = tempfile::tempdir().unwrap();
        let region = dir.path().join("engine");
        let mut engine = ShmFile::create(&region, (2 * BLOCKS * SHARD) as u64).unwrap();
        for (i, b) in engine.bytes_mut().iter_mut().enumerate() {
            *b = (i % 251) as u8 ^ (i / SHARD) as u8;
        }
        let mut bufs = EngineBuffers::new();
        bufs.register(RegionSpec {
            name: "e".into(),
            size_bytes: (2 * BLOCKS * SHARD) as u64,
            page_size_bytes: SHARD as u64,
        })
        .unwrap();
        bufs.map("e", &region).unwrap();
        let (mut store, _) = Store::open(StoreConfig {
            rank: tandem_proto::ids::Rank(0),
            shard_bytes: SHARD,
            host_capacity_blocks: BLOCKS as u64,
            disk_capacity_blocks: 0,
            host_dir: dir.path().join("host"),
            disk_dir: dir.path().join("disk"),
            disk_io: Default::default(),
            layout: Default::default(),
        })
        .unwrap();
        let workers = CopyWorkers::new(4);
        const { assert!(BLOCKS * SHARD >= PARALLEL_MIN_BYTES) };
        let items: Vec<_> = (0..BLOCKS as u32)
            .map(|i| (BlockHash(u128::from(i) + 1), Tier::Host, PageId(i)))
            .collect();
        for r in store.store_pages_batch(&items, &bufs, "e", &workers) {
            r.unwrap();
        }
        let loads: Vec<_> = (0..BLOCKS as u32)
            .map(|i| (BlockHash(u128::from(i) + 1), PageId(i + BLOCKS as u32)))
            .collect();
        for r in store.load_pages_batch(&loads, &mut bufs, "e", &workers) {
            r.unwrap();
        }
        drop(bufs);
        let bytes = engine.bytes_mut();
        let (stored, loaded) = bytes.split_at(BLOCKS * SHARD);
        assert!(stored == loaded, "every loaded page holds its stored block");
    }

    #[test]
    fn worker_counts() {
        assert_eq!(CopyWorkers::new(3).count(), 3);
        let auto = CopyWorkers::new(0).count();
        assert!((1..=AUTO_MAX).contains(&auto));
    }
}
