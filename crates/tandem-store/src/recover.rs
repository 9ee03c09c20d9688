//! Opening a rank's store: tiers, manifest, and which entries to take over.
//!
//! Owns [`Store::open`] and [`Store::scrub`]. Open maps or creates the host slab and the disk
//! file, reads the manifest, drops it whole when it was written by another rank, under another
//! model layout ([`tandem_proto::LayoutFingerprint`]) or for another tier geometry, and takes
//! over every entry whose place is plausible (its tier
//! file was reused, its slot inside the tier and listed once), without reading any shard:
//! the manifest carries each shard's checksum, and every read of a shard (a load, a
//! demotion, a promotion) verifies it and drops a shard that fails, which the leader then
//! drops from the group like any corrupt block (README invariants 2 and 3). So a restart
//! costs the manifest's size, not the tier's: reading every shard back took about one second
//! per 4 GB at the copy speeds in docs/BENCHMARKS.md, minutes for a large disk tier.
//! [`Store::scrub`] still reads everything, for an operator who wants the check up front.
//! It must never serve a shard it has not verified since it was written or opened.

use crate::disk::{DiskTier, DISK_SLAB_FILE};
use crate::fence::Fence;
use crate::host::{HostTier, HOST_SLAB_FILE};
use crate::lock::TierLock;
use crate::manifest::{Manifest, ManifestError, ManifestFile, MANIFEST_FILE};
use crate::shm::FileOrigin;
use crate::store::{LayoutChange, OpenReport, ScrubReport, Store, StoreConfig, StoreError};
use crate::tier::Tier;

impl Store {
    /// Locks this rank's tiers ([`TierLock`], held by the store until it is dropped), opens
    /// them (creating them if needed), reads the manifest and takes over every entry whose
    /// place is plausible, without reading shards (each is verified when it is read);
    /// entries that cannot be are dropped and the manifest is rewritten.
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
        let manifest_file = ManifestFile::new(&config.disk_dir.join(MANIFEST_FILE));
        let mut report = OpenReport::default();
        let fresh = Manifest::new(config.rank, config.geometry(), config.layout.clone());
        let old = match manifest_file.load() {
            Ok(Some(m)) if m.rank != config.rank => {
                report.discarded_manifest = Some(format!("written by rank {}", m.rank));
                fresh.clone()
            }
            // Checked before the geometry: a shard size that changed is a layout change too.
            Ok(Some(m)) if m.layout != config.layout => {
                report.discarded_manifest = Some(format!(
                    "written under model layout [{}], opened under [{}]",
                    m.layout, config.layout
                ));
                report.layout_changed = Some(LayoutChange {
                    dropped: m.entries.len(),
                    written_under: m.layout,
                    opened_under: config.layout.clone(),
                });
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
            manifest_file,
            host,
            disk,
            config,
            fence,
            _lock: lock,
        };
        store.adopt(old, host_origin, disk_origin, &mut report);
        store.flush_manifest()?;
        Ok((store, report))
    }

    /// Reads every shard this rank holds and checks it against the manifest's checksum;
    /// a shard that fails is dropped (as a failed load drops it) and listed. Open does not
    /// do this (it trusts the manifest, each load verifies); a scrub checks everything up
    /// front, at the tier's read speed.
    ///
    /// Errors: [`StoreError::Tier`] when a slot cannot be read (the shards checked so far
    /// stay checked).
    pub fn scrub(&mut self) -> Result<ScrubReport, StoreError> {
        let mut report = ScrubReport::default();
        let mut scratch = std::mem::take(&mut self.scratch);
        let entries: Vec<_> = self
            .manifest
            .entries
            .iter()
            .map(|(&h, &l)| (h, l))
            .collect();
        let mut result = Ok(());
        for (hash, loc) in entries {
            let actual = match self.tier_mut(loc.tier) {
                Some(tier) => tier.read_slot(loc.slot, &mut [&mut scratch[..]], hash),
                None => continue,
            };
            match actual {
                Ok(actual) if actual == loc.checksum => report.verified += 1,
                Ok(_) => {
                    self.evict(hash);
                    report.corrupt.push(hash);
                }
                Err(e) => {
                    result = Err(e.into());
                    break;
                }
            }
        }
        self.scratch = scratch;
        report.corrupt.sort_unstable();
        result.map(|()| report)
    }

    /// Takes over the entries of a loaded manifest whose places are plausible (without
    /// reading their shards); builds the free lists. The manifest's map is kept as it is
    /// and only the implausible entries are removed from it: a restart with a large tier
    /// pays one pass over the entries, not a second map.
    fn adopt(
        &mut self,
        mut old: Manifest,
        host_origin: Option<FileOrigin>,
        disk_origin: Option<FileOrigin>,
        report: &mut OpenReport,
    ) {
        let mut used_host = vec![false; self.config.host_capacity_blocks as usize];
        let mut used_disk = vec![false; self.config.disk_capacity_blocks as usize];
        let mut invalid = Vec::new();
        for (&hash, loc) in &old.entries {
            let (used, origin) = match loc.tier {
                Tier::Host => (&mut used_host, host_origin),
                Tier::Disk => (&mut used_disk, disk_origin),
                #[allow(unreachable_patterns)]
                _ => {
                    invalid.push(hash);
                    continue;
                }
            };
            let taken = used.get(loc.slot as usize).copied();
            if origin != Some(FileOrigin::Reused) || taken != Some(false) {
                invalid.push(hash);
                continue;
            }
            used[loc.slot as usize] = true;
        }
        for hash in &invalid {
            old.entries.remove(hash);
        }
        report.invalid = invalid.len();
        report.adopted = old.entries.len();
        self.dirty |= !invalid.is_empty();
        self.manifest.entries = old.entries;
        // Free lists are stacks; push in reverse so that low slots are used first.
        self.free_host = (0..used_host.len() as u64)
            .rev()
            .filter(|&s| !used_host[s as usize])
            .collect();
        self.free_disk = (0..used_disk.len() as u64)
            .rev()
            .filter(|&s| !used_disk[s as usize])
            .collect();
    }
}
