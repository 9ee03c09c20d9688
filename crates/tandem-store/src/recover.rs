//! Opening a rank's store: tiers, manifest, and the verification of every entry.
//!
//! Owns [`Store::open`]: it maps or creates the host slab and the disk file, reads the
//! manifest, checks every entry against its slot's bytes, drops the entries that fail, and
//! builds the free lists. This is what lets a restarted agent serve its blocks again, and what
//! keeps a corrupt or stale slot from ever being served. It must never trust an entry it has
//! not read back. Verification reads every held shard once: about one second per 4 GB of
//! shards at the copy speeds in docs/BENCHMARKS.md.

use crate::disk::{DiskTier, DISK_SLAB_FILE};
use crate::fence::Fence;
use crate::host::{HostTier, HOST_SLAB_FILE};
use crate::lock::TierLock;
use crate::manifest::{Manifest, ManifestError, MANIFEST_FILE};
use crate::shm::FileOrigin;
use crate::store::{OpenReport, Store, StoreConfig, StoreError};
use crate::tier::Tier;

impl Store {
    /// Locks this rank's tiers ([`TierLock`], held by the store until it is dropped), opens
    /// them (creating them if needed), reads the manifest and verifies every entry against its
    /// slot's bytes; entries that fail are dropped and the manifest is rewritten.
    ///
    /// Errors: [`StoreError::ZeroShard`]; [`StoreError::Lock`] when another process holds the
    /// tiers (before anything is opened or changed); [`StoreError::Tier`] (files cannot be
    /// created or mapped); [`StoreError::Manifest`] (I/O errors; an undecodable manifest is
    /// discarded and reported in [`OpenReport::discarded_manifest`], not an error).
    pub fn open(config: StoreConfig) -> Result<(Store, OpenReport), StoreError> {
        if config.shard_bytes == 0 {
            return Err(StoreError::ZeroShard);
        }
        let lock = TierLock::acquire(&config, &[])?;
        let fence = lock.fence();
        Store::open_fenced(config, fence, Some(lock))
    }

    /// As [`Store::open`], under a lock the caller took (and keeps) with
    /// [`TierLock::acquire`] for `config`.
    ///
    /// Errors: as [`Store::open`], without [`StoreError::Lock`].
    pub fn open_locked(
        config: StoreConfig,
        lock: &TierLock,
    ) -> Result<(Store, OpenReport), StoreError> {
        Store::open_fenced(config, lock.fence(), None)
    }

    fn open_fenced(
        config: StoreConfig,
        fence: Fence,
        lock: Option<TierLock>,
    ) -> Result<(Store, OpenReport), StoreError> {
        if config.shard_bytes == 0 {
            return Err(StoreError::ZeroShard);
        }
        let mut host_origin = None;
        let host = if config.host_capacity_blocks > 0 {
            let (t, o) = HostTier::open(
                &config.host_dir.join(HOST_SLAB_FILE),
                config.shard_bytes,
                config.host_capacity_blocks,
            )?;
            host_origin = Some(o);
            Some(t)
        } else {
            None
        };
        let mut disk_origin = None;
        let disk = if config.disk_capacity_blocks > 0 {
            let path = config.disk_dir.join(DISK_SLAB_FILE);
            let (t, o) = DiskTier::open(
                &path,
                config.shard_bytes,
                config.disk_capacity_blocks,
                config.disk_io,
            )?;
            disk_origin = Some(o);
            Some(t)
        } else {
            std::fs::create_dir_all(&config.disk_dir).map_err(|source| ManifestError::Io {
                path: config.disk_dir.clone(),
                op: "create",
                source,
            })?;
            None
        };
        let manifest_path = config.disk_dir.join(MANIFEST_FILE);
        let mut report = OpenReport::default();
        let fresh = Manifest::new(config.rank, config.geometry());
        let old = match Manifest::load(&manifest_path) {
            Ok(Some(m)) if m.rank != config.rank => {
                report.discarded_manifest = Some(format!("written by rank {}", m.rank));
                fresh.clone()
            }
            Ok(Some(m)) if m.geometry != config.geometry() => {
                report.discarded_manifest = Some(format!("written for geometry {:?}", m.geometry));
                fresh.clone()
            }
            Ok(Some(m)) => m,
            Ok(None) => fresh.clone(),
            Err(e @ ManifestError::Io { .. }) => return Err(e.into()),
            Err(e) => {
                report.discarded_manifest = Some(e.to_string());
                fresh.clone()
            }
        };
        let mut store = Store {
            free_host: Vec::new(),
            free_disk: Vec::new(),
            scratch: vec![0; config.shard_bytes],
            dirty: report.discarded_manifest.is_some(),
            manifest: fresh,
            manifest_path,
            host,
            disk,
            config,
            fence,
            _lock: lock,
        };
        store.adopt(old, host_origin, disk_origin, &mut report)?;
        store.flush_manifest()?;
        Ok((store, report))
    }

    /// Verifies and takes over the entries of a loaded manifest; builds the free lists.
    fn adopt(
        &mut self,
        old: Manifest,
        host_origin: Option<FileOrigin>,
        disk_origin: Option<FileOrigin>,
        report: &mut OpenReport,
    ) -> Result<(), StoreError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.adopt_entries(old, host_origin, disk_origin, report, &mut scratch);
        self.scratch = scratch;
        result
    }

    fn adopt_entries(
        &mut self,
        old: Manifest,
        host_origin: Option<FileOrigin>,
        disk_origin: Option<FileOrigin>,
        report: &mut OpenReport,
        scratch: &mut [u8],
    ) -> Result<(), StoreError> {
        let mut used_host = vec![false; self.config.host_capacity_blocks as usize];
        let mut used_disk = vec![false; self.config.disk_capacity_blocks as usize];
        for (hash, loc) in old.entries {
            let (used, origin) = match loc.tier {
                Tier::Host => (&mut used_host, host_origin),
                Tier::Disk => (&mut used_disk, disk_origin),
                #[allow(unreachable_patterns)]
                _ => {
                    report.invalid += 1;
                    continue;
                }
            };
            let taken = used.get(loc.slot as usize).copied();
            if origin != Some(FileOrigin::Reused) || taken != Some(false) {
                report.invalid += 1;
                self.dirty = true;
                continue;
            }
            let actual = match self.tier_mut(loc.tier) {
                Some(tier) => tier.read_slot(loc.slot, &mut [&mut *scratch], hash)?,
                None => continue,
            };
            if actual != loc.checksum {
                report.corrupt.push(hash);
                self.dirty = true;
                continue;
            }
            used[loc.slot as usize] = true;
            self.manifest.entries.insert(hash, loc);
            report.verified += 1;
        }
        // Free lists are stacks; push in reverse so that low slots are used first.
        self.free_host = (0..used_host.len() as u64)
            .rev()
            .filter(|&s| !used_host[s as usize])
            .collect();
        self.free_disk = (0..used_disk.len() as u64)
            .rev()
            .filter(|&s| !used_disk[s as usize])
            .collect();
        Ok(())
    }
}
