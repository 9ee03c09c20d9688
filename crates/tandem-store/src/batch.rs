//! Batched copies between engine pages and the host tier: every shard copy of a task (or of a
//! step's tasks) prepared at once and handed to a [`CopyRunner`], so that the copies do not
//! wait behind each other when the caller runs them on several threads.
//!
//! Owns [`CopyJob`], [`CopyRunner`], [`InlineRunner`] and [`Store::store_pages_batch`] /
//! [`Store::load_pages_batch`]. The checks, slot choice, checksums and manifest records are
//! exactly those of [`Store::store_pages`] and [`Store::load_pages`], made in item order before
//! any copy (validation) and after every copy (records); only the copies themselves (engine
//! page ↔ host slot, checksum in the same pass) are the runner's. Items of the disk tier go to
//! the disk tier as one batch: stores straight from the engine's pages
//! ([`crate::disk::DiskTier::write_slots_kept`]: several shards per `pwritev` on the tier's
//! I/O, checksummed on the caller's thread meanwhile), loads of shards the page cache holds
//! straight into the engine's pages on the runner ([`crate::disk::CachedReader`], a
//! `preadv2(RWF_NOWAIT)` per piece, checksummed as it lands), the other loads through the
//! tier's staging pipeline ([`crate::disk::DiskTier::read_slots`]). It never spawns a thread
//! (the runner is the caller's) and never decides placement.

use std::collections::HashSet;

use crate::block::{BlockHash, Location, SlotId};
use crate::buffer::{EngineBuffers, PageId};
use crate::checksum::{copy_parts, Checksum, ShardHasher};
use crate::disk::{CachedReader, SlotRead, SlotWrite};
use crate::store::{Store, StoreError};
use crate::tier::{Tier, TierError};

/// One shard copy of a batch: `src` into `dst` (engine page ↔ host slot), or a disk slot
/// whose bytes the page cache holds straight into an engine page, the shard's checksum
/// computed in the same pass. Every field borrows either the engine's pages, a host slot or
/// the disk tier's file, disjoint from every other job's, so jobs may run on any threads in
/// any order.
#[derive(Debug)]
pub struct CopyJob<'a> {
    work: Work<'a>,
    seed: BlockHash,
    checksum: Option<Checksum>,
}

/// What a [`CopyJob`] moves.
#[derive(Debug)]
enum Work<'a> {
    /// A copy between two mappings (engine page, host slot).
    Copy { dst: &'a mut [u8], src: &'a [u8] },
    /// A disk slot read with `RWF_NOWAIT` ([`CachedReader`]): no checksum when some of its
    /// bytes are not cached (the item then reads through the disk tier's I/O).
    Cached {
        dst: &'a mut [u8],
        reader: &'a CachedReader<'a>,
        slot: SlotId,
    },
}

impl<'a> CopyJob<'a> {
    fn copy(dst: &'a mut [u8], src: &'a [u8], seed: BlockHash) -> Self {
        CopyJob {
            work: Work::Copy { dst, src },
            seed,
            checksum: None,
        }
    }

    /// Bytes this job copies.
    pub fn bytes(&self) -> usize {
        match &self.work {
            Work::Copy { src, .. } => src.len(),
            Work::Cached { dst, .. } => dst.len(),
        }
    }

    /// Copy and checksum (a second call does it again, with the same result).
    pub fn run(&mut self) {
        self.checksum = match &mut self.work {
            Work::Copy { dst, src } => {
                let mut hasher = ShardHasher::new(self.seed);
                copy_parts(&mut [&mut **dst], &[*src], &mut hasher);
                Some(hasher.finish())
            }
            Work::Cached { dst, reader, slot } => reader.read(*slot, dst, self.seed),
        };
    }
}

/// Who runs a batch's copies: [`CopyRunner::run_all`] must call [`CopyJob::run`] on every job
/// once (on any threads) and return when all are done. A job left unrun fails its item (as a
/// tier error), it never counts as copied.
pub trait CopyRunner {
    /// Run every job of `jobs`.
    fn run_all(&self, jobs: &mut [CopyJob<'_>]);
}

/// Runs the jobs one after the other on the calling thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct InlineRunner;

impl CopyRunner for InlineRunner {
    fn run_all(&self, jobs: &mut [CopyJob<'_>]) {
        jobs.iter_mut().for_each(CopyJob::run);
    }
}

/// A job the runner left unrun: its item fails with this.
fn not_run(tier: Tier) -> StoreError {
    StoreError::Tier(crate::tier::TierError::Io {
        tier,
        op: "copy",
        path: "(batch)".into(),
        source: std::io::Error::other("the copy runner did not run this shard's copy"),
    })
}

/// Disjoint views of `slots` (distinct) of a slab of `slot_bytes` slots, in the order asked;
/// `None` when a slot repeats or lies outside.
fn slot_views<'a>(
    slab: &'a mut [u8],
    slot_bytes: usize,
    slots: &[SlotId],
) -> Option<Vec<&'a mut [u8]>> {
    let mut order: Vec<usize> = (0..slots.len()).collect();
    order.sort_unstable_by_key(|&i| slots[i]);
    let mut views: Vec<Option<&'a mut [u8]>> = (0..slots.len()).map(|_| None).collect();
    let mut chunks = slab.chunks_exact_mut(slot_bytes);
    let mut next: u64 = 0;
    for i in order {
        let want = slots[i];
        if want < next {
            return None;
        }
        views[i] = Some(chunks.nth((want - next) as usize)?);
        next = want + 1;
    }
    views.into_iter().collect()
}

impl Store {
    /// Stores `items` (block, tier, engine page holding the whole shard) from region `region`,
    /// one result per item in order, each what [`Store::store_pages`] would return for it; the
    /// host-tier copies run together on `runner`.
    ///
    /// Validation (fence, page, duplicate block, free slot) is made for every item before any
    /// copy; the records after every copy, once the fence still holds (else every copied item
    /// is [`StoreError::Fenced`] and its slot is free again).
    pub fn store_pages_batch(
        &mut self,
        items: &[(BlockHash, Tier, PageId)],
        buffers: &EngineBuffers,
        region: &str,
        runner: &dyn CopyRunner,
    ) -> Vec<Result<Location, StoreError>> {
        let mut out: Vec<Option<Result<Location, StoreError>>> =
            items.iter().map(|_| None).collect();
        let mut seen = HashSet::with_capacity(items.len());
        let planned = self.plan_stores(Tier::Host, items, &mut out, &mut seen, buffers, region);
        let disk_planned =
            self.plan_stores(Tier::Disk, items, &mut out, &mut seen, buffers, region);
        let checksums = self.run_store_jobs(items, &planned, buffers, region, runner);
        let fenced = self.fence.check().is_err();
        for (&(i, slot), sum) in planned.iter().zip(checksums) {
            let hash = items[i].0;
            out[i] = Some(match sum {
                Some(checksum) if !fenced => Ok(self.record(
                    hash,
                    Location {
                        tier: Tier::Host,
                        slot,
                        checksum,
                    },
                )),
                Some(_) => {
                    self.give_slot(Tier::Host, slot);
                    Err(self
                        .fence
                        .check()
                        .err()
                        .map_or_else(|| not_run(Tier::Host), StoreError::from))
                }
                None => {
                    self.give_slot(Tier::Host, slot);
                    Err(not_run(Tier::Host))
                }
            });
        }
        self.run_disk_stores(items, &disk_planned, &mut out, buffers, region);
        // Everything not planned goes through the single-shard call (its errors, its tier).
        items
            .iter()
            .zip(out)
            .map(|(&(hash, tier, page), r)| match r {
                Some(r) => r,
                None => self.store_pages(hash, tier, buffers, region, &[page]),
            })
            .collect()
    }

    /// Validates the items of a store batch bound for `tier` (fence, duplicate block, page,
    /// free slot) and takes their slots, in item order; a refused item gets its result in
    /// `out`. Nothing is planned when the fence is lost or the tier is absent.
    fn plan_stores(
        &mut self,
        tier_of_batch: Tier,
        items: &[(BlockHash, Tier, PageId)],
        out: &mut [Option<Result<Location, StoreError>>],
        seen: &mut HashSet<BlockHash>,
        buffers: &EngineBuffers,
        region: &str,
    ) -> Vec<(usize, SlotId)> {
        let shard = self.config.shard_bytes;
        let mut planned = Vec::new();
        let present = match tier_of_batch {
            Tier::Host => self.host.is_some(),
            Tier::Disk => self.disk.is_some(),
            // Other tiers go through the single-shard call.
            #[allow(unreachable_patterns)]
            _ => false,
        };
        if self.fence.check().is_err() || !present {
            return planned;
        }
        for (i, &(hash, tier, page)) in items.iter().enumerate() {
            if tier != tier_of_batch {
                continue;
            }
            if let Some(loc) = self.location(hash) {
                out[i] = Some(Err(StoreError::AlreadyStored {
                    hash,
                    tier: loc.tier,
                }));
                continue;
            }
            if !seen.insert(hash) {
                out[i] = Some(Err(StoreError::AlreadyStored { hash, tier }));
                continue;
            }
            if let Err(e) = buffers.pages(region, &[page], shard as u64) {
                out[i] = Some(Err(e.into()));
                continue;
            }
            match self.take_slot(tier) {
                Ok(slot) => planned.push((i, slot)),
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        planned
    }

    /// Writes the planned disk-tier items as one batch straight from the engine's pages
    /// ([`DiskTier::write_slots_kept`]: several shards per `pwritev`, checksummed while the
    /// I/O writes them; through the staging buffers in direct mode) and records them once the
    /// fence still holds; a failed item's slot is free again.
    fn run_disk_stores(
        &mut self,
        items: &[(BlockHash, Tier, PageId)],
        planned: &[(usize, SlotId)],
        out: &mut [Option<Result<Location, StoreError>>],
        buffers: &EngineBuffers,
        region: &str,
    ) {
        if planned.is_empty() {
            return;
        }
        let shard = self.config.shard_bytes;
        let mut parts = Vec::with_capacity(planned.len());
        for &(i, _) in planned {
            // Checked in planning; `buffers` is borrowed, so the region cannot have changed.
            parts.push(buffers.pages(region, &[items[i].2], shard as u64).ok());
        }
        let mut jobs: Vec<SlotWrite<'_>> = Vec::with_capacity(planned.len());
        let mut jobbed = Vec::with_capacity(planned.len());
        for (k, (&(i, slot), p)) in planned.iter().zip(&parts).enumerate() {
            if let Some(p) = p {
                jobs.push(SlotWrite {
                    slot,
                    src: p,
                    seed: items[i].0,
                    result: None,
                });
                jobbed.push(k);
            }
        }
        let kept = buffers.kept(region);
        match (self.disk.as_mut(), kept) {
            (Some(disk), Some(kept)) => disk.write_slots_kept(&mut jobs, &kept),
            (Some(disk), None) => disk.write_slots(&mut jobs),
            (None, _) => {}
        }
        let mut results: Vec<Option<Result<Checksum, TierError>>> =
            planned.iter().map(|_| None).collect();
        for (k, job) in jobbed.into_iter().zip(jobs) {
            results[k] = job.result;
        }
        let fenced = self.fence.check().is_err();
        for (&(i, slot), result) in planned.iter().zip(results) {
            let hash = items[i].0;
            out[i] = Some(match result {
                Some(Ok(checksum)) if !fenced => Ok(self.record(
                    hash,
                    Location {
                        tier: Tier::Disk,
                        slot,
                        checksum,
                    },
                )),
                Some(Ok(_)) => {
                    self.give_slot(Tier::Disk, slot);
                    Err(self
                        .fence
                        .check()
                        .err()
                        .map_or_else(|| not_run(Tier::Disk), StoreError::from))
                }
                Some(Err(e)) => {
                    self.give_slot(Tier::Disk, slot);
                    Err(e.into())
                }
                None => {
                    self.give_slot(Tier::Disk, slot);
                    Err(not_run(Tier::Disk))
                }
            });
        }
    }

    /// Reads the disk-tier items of a load batch and verifies each: the shards whose bytes the
    /// page cache holds go straight into the engine's pages on `runner` (a `preadv2` with
    /// `RWF_NOWAIT` per piece, checksummed right after it lands: no staging copy, no hand-off
    /// to the I/O thread, and never a wait for the device), the others as one batch through
    /// the tier's I/O ([`DiskTier::read_slots`], deadlines and errors as ever). `None` when
    /// the batch cannot be made (a page named twice or out of range: item by item then).
    fn run_disk_loads(
        &mut self,
        items: &[(BlockHash, PageId)],
        planned: &[(usize, Location)],
        buffers: &mut EngineBuffers,
        region: &str,
        runner: &dyn CopyRunner,
    ) -> Option<Vec<Result<Location, StoreError>>> {
        if planned.is_empty() {
            return None;
        }
        let shard = self.config.shard_bytes;
        let pages: Vec<PageId> = planned.iter().map(|&(i, _)| items[i].1).collect();
        let mut dsts = buffers
            .pages_mut(region, &pages, (shard * pages.len()) as u64)
            .ok()?;
        let disk = self.disk.as_mut()?;
        let mut sums: Vec<Option<Result<Checksum, TierError>>> =
            planned.iter().map(|_| None).collect();
        if let Some(reader) = disk.cached_reader() {
            let mut jobs: Vec<CopyJob<'_>> = planned
                .iter()
                .zip(dsts.iter_mut())
                .map(|(&(i, loc), dst)| CopyJob {
                    work: Work::Cached {
                        dst,
                        reader: &reader,
                        slot: loc.slot,
                    },
                    seed: items[i].0,
                    checksum: None,
                })
                .collect();
            runner.run_all(&mut jobs);
            for (sum, job) in sums.iter_mut().zip(&jobs) {
                *sum = job.checksum.map(Ok);
            }
        }
        let mut rest = Vec::new();
        let mut jobs: Vec<SlotRead<'_>> = Vec::new();
        for (k, ((&(i, loc), dst), sum)) in planned.iter().zip(dsts).zip(&sums).enumerate() {
            if sum.is_none() {
                rest.push(k);
                jobs.push(SlotRead {
                    slot: loc.slot,
                    dst: vec![dst],
                    seed: items[i].0,
                    result: None,
                });
            }
        }
        if !jobs.is_empty() {
            disk.read_slots(&mut jobs);
        }
        for (k, job) in rest.into_iter().zip(jobs) {
            sums[k] = job.result;
        }
        Some(
            planned
                .iter()
                .zip(sums)
                .map(|(&(i, loc), sum)| match sum {
                    Some(Ok(actual)) => self.verify(items[i].0, loc, actual).map(|()| loc),
                    Some(Err(e)) => Err(e.into()),
                    None => Err(not_run(Tier::Disk)),
                })
                .collect(),
        )
    }

    /// The copies of planned store items; `None` for a job not run.
    fn run_store_jobs(
        &mut self,
        items: &[(BlockHash, Tier, PageId)],
        planned: &[(usize, SlotId)],
        buffers: &EngineBuffers,
        region: &str,
        runner: &dyn CopyRunner,
    ) -> Vec<Option<Checksum>> {
        if planned.is_empty() {
            return Vec::new();
        }
        let shard = self.config.shard_bytes;
        let Some(host) = self.host.as_mut() else {
            return vec![None; planned.len()];
        };
        let slots: Vec<SlotId> = planned.iter().map(|&(_, s)| s).collect();
        let Some(views) = slot_views(host.slab_mut(), shard, &slots) else {
            return vec![None; planned.len()];
        };
        let mut jobs = Vec::with_capacity(planned.len());
        for (&(i, _), dst) in planned.iter().zip(views) {
            let (hash, _, page) = items[i];
            // Checked in validation; a region changed since cannot happen (`buffers` is borrowed).
            let Ok(src) = buffers.pages(region, &[page], shard as u64) else {
                return vec![None; planned.len()];
            };
            jobs.push(CopyJob::copy(dst, src[0], hash));
        }
        runner.run_all(&mut jobs);
        jobs.into_iter().map(|j| j.checksum).collect()
    }

    /// Loads `items` (block, engine page that receives the whole shard) into region `region`,
    /// one result per item in order, each what [`Store::load_pages`] would return for it
    /// (checksum verified; a mismatch drops the shard); the host-tier copies run together on
    /// `runner`. A batch that names one page twice, or a fence that no longer holds, runs item
    /// by item.
    pub fn load_pages_batch(
        &mut self,
        items: &[(BlockHash, PageId)],
        buffers: &mut EngineBuffers,
        region: &str,
        runner: &dyn CopyRunner,
    ) -> Vec<Result<Location, StoreError>> {
        let mut out: Vec<Option<Result<Location, StoreError>>> =
            items.iter().map(|_| None).collect();
        let planned: Vec<(usize, Location)> = if self.fence.check().is_ok() {
            items
                .iter()
                .enumerate()
                .filter_map(|(i, &(hash, _))| {
                    self.location(hash)
                        .filter(|l| l.tier == Tier::Host)
                        .map(|l| (i, l))
                })
                .collect()
        } else {
            Vec::new()
        };
        if let Some(sums) = self.run_load_jobs(items, &planned, buffers, region, runner) {
            for (&(i, loc), sum) in planned.iter().zip(sums) {
                let hash = items[i].0;
                out[i] = Some(match sum {
                    Some(actual) => self.verify(hash, loc, actual).map(|()| loc),
                    None => Err(not_run(Tier::Host)),
                });
            }
        }
        let disk_planned: Vec<(usize, Location)> =
            if self.fence.check().is_ok() && self.disk.is_some() {
                items
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &(hash, _))| {
                        self.location(hash)
                            .filter(|l| l.tier == Tier::Disk)
                            .map(|l| (i, l))
                    })
                    .collect()
            } else {
                Vec::new()
            };
        if let Some(results) = self.run_disk_loads(items, &disk_planned, buffers, region, runner) {
            for (&(i, _), r) in disk_planned.iter().zip(results) {
                out[i] = Some(r);
            }
        }
        items
            .iter()
            .zip(out)
            .map(|(&(hash, page), r)| match r {
                Some(r) => r,
                None => self.load_pages(hash, buffers, region, &[page]),
            })
            .collect()
    }

    /// The copies of planned load items: per item its checksum (`None`: not run); `None`
    /// when the batch cannot be made (a page named twice or out of range: item by item then).
    fn run_load_jobs(
        &mut self,
        items: &[(BlockHash, PageId)],
        planned: &[(usize, Location)],
        buffers: &mut EngineBuffers,
        region: &str,
        runner: &dyn CopyRunner,
    ) -> Option<Vec<Option<Checksum>>> {
        if planned.is_empty() {
            return None;
        }
        let shard = self.config.shard_bytes;
        let pages: Vec<PageId> = planned.iter().map(|&(i, _)| items[i].1).collect();
        let dsts = buffers
            .pages_mut(region, &pages, (shard * pages.len()) as u64)
            .ok()?;
        let slab = self.host.as_ref()?.slab();
        let mut jobs = Vec::with_capacity(planned.len());
        for (&(i, loc), dst) in planned.iter().zip(dsts) {
            let start = (loc.slot as usize).checked_mul(shard)?;
            let src = slab.get(start..start.checked_add(shard)?)?;
            jobs.push(CopyJob::copy(dst, src, items[i].0));
        }
        runner.run_all(&mut jobs);
        Some(jobs.into_iter().map(|j| j.checksum).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_views_are_disjoint_and_in_order() {
        let mut slab: Vec<u8> = (0..40u8).collect();
        let views = slot_views(&mut slab, 10, &[3, 0, 2]).unwrap();
        assert_eq!(
            views.iter().map(|v| v[0]).collect::<Vec<_>>(),
            vec![30, 0, 20]
        );
        assert!(slot_views(&mut slab, 10, &[1, 1]).is_none());
        assert!(slot_views(&mut slab, 10, &[4]).is_none());
        assert!(slot_views(&mut slab, 10, &[]).unwrap().is_empty());
    }

    #[test]
    fn a_job_copies_and_checksums() {
        let src: Vec<u8> = (0..100u8).collect();
        let mut dst = vec![0u8; 100];
        let mut job = CopyJob::copy(&mut dst, &src, BlockHash(7));
        assert_eq!(job.bytes(), 100);
        job.run();
        assert_eq!(
            job.checksum,
            Some(crate::checksum::checksum(BlockHash(7), &src))
        );
        assert_eq!(dst, src);
    }
}
