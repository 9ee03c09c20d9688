//! Layerwise loads: a load's shards copied into engine pages one layer at a time.
//!
//! Owns [`Store::load_layers`] and its error. The in-page layout is layer-major: a block shard
//! of `L` layers is `L` equal contiguous segments, segment `k` holding layer `k`'s K and V
//! (docs/LAYERWISE.md says how that maps to SGLang's and vLLM's caches). A layerwise load
//! copies segment `order[0]` of every block, then `order[1]`, …, and calls back after each
//! layer so that the caller can signal its engine; each shard's checksum (over the whole
//! shard, as written) is verified before the last layer is signalled, so a load whose bytes do
//! not verify never reports its last layer. It never decides the order or signals anything
//! itself: the order is the leader's plan, the signal the caller's.

use crate::block::BlockHash;
use crate::buffer::{BufferError, EngineBuffers};
use crate::checksum::ShardHasher;
use crate::store::{Store, StoreError};
use crate::tier::TierError;
use tandem_proto::PageId;

/// Why a layerwise load stopped. Nothing is rolled back: the pages hold the layers copied
/// before it stopped, and unspecified bytes in the layer being copied.
#[derive(Debug, thiserror::Error)]
pub enum LayerCopyError {
    /// The shard does not split into `layers` equal segments.
    #[error("a shard of {shard_bytes} bytes does not split into {layers} equal layers")]
    Uneven {
        /// Bytes of one shard.
        shard_bytes: usize,
        /// Layers asked for.
        layers: usize,
    },
    /// Blocks and pages differ in number.
    #[error("{blocks} blocks, {pages} pages")]
    Lists {
        /// Blocks.
        blocks: usize,
        /// Pages.
        pages: usize,
    },
    /// A block, page or tier refused the copy.
    #[error("layer {layer}: {source}")]
    Store {
        /// The layer being copied.
        layer: u32,
        /// The store's error (unknown block, disabled tier, fenced, checksum mismatch).
        source: StoreError,
    },
    /// The caller stopped the copy after `layers_done` layers (a deadline, a fault).
    #[error("stopped after {layers_done} layers: {reason}")]
    Stopped {
        /// Layers copied and signalled.
        layers_done: u32,
        /// The caller's reason.
        reason: String,
    },
}

/// What a layerwise load copies: block `hashes[i]`'s shard into page `pages[i]` of the engine
/// region `region`, layer by layer in `order` (a permutation of `0..order.len()`, checked by
/// the caller).
#[derive(Clone, Copy, Debug)]
pub struct LayerLoad<'a> {
    /// The blocks.
    pub hashes: &'a [BlockHash],
    /// One page per block.
    pub pages: &'a [PageId],
    /// The engine region the pages are in.
    pub region: &'a str,
    /// The layers, in copy order.
    pub order: &'a [u32],
}

impl Store {
    /// Copy `load` into `buffers` layer by layer. Before each layer, `before(i)` may stop the
    /// copy (`Err(reason)`); after each, `after(i + 1)` is told how many layers are in the
    /// pages. Checksums are verified before the last `after`.
    ///
    /// Errors: [`LayerCopyError`]; a checksum mismatch drops the shard from this rank, as a
    /// whole-shard load does.
    pub fn load_layers(
        &mut self,
        load: LayerLoad<'_>,
        buffers: &mut EngineBuffers,
        mut before: impl FnMut(u32) -> Result<(), String>,
        mut after: impl FnMut(u32),
    ) -> Result<(), LayerCopyError> {
        let LayerLoad {
            hashes,
            pages,
            region,
            order,
        } = load;
        let shard_bytes = self.config().shard_bytes;
        let layers = order.len();
        if layers == 0 || shard_bytes % layers != 0 {
            return Err(LayerCopyError::Uneven {
                shard_bytes,
                layers,
            });
        }
        if hashes.len() != pages.len() {
            return Err(LayerCopyError::Lists {
                blocks: hashes.len(),
                pages: pages.len(),
            });
        }
        let seg = shard_bytes / layers;
        let at = |layer: u32, source: StoreError| LayerCopyError::Store { layer, source };
        let first = order.first().copied().unwrap_or(0);
        self.fence()
            .check()
            .map_err(|e| at(first, StoreError::from(e)))?;
        let mut locations = Vec::with_capacity(hashes.len());
        for hash in hashes {
            let loc = self
                .location(*hash)
                .ok_or(StoreError::UnknownBlock { hash: *hash })
                .map_err(|e| at(first, e))?;
            locations.push(loc);
        }
        // Every page is checked before any byte is copied.
        for page in pages {
            buffers
                .pages_mut(region, &[*page], shard_bytes as u64)
                .map_err(|e: BufferError| at(first, e.into()))?;
        }
        // In ascending order the checksum streams with the copy; otherwise each page is
        // hashed once all its layers are in.
        let ascending = order.iter().enumerate().all(|(i, l)| *l as usize == i);
        let mut hashers: Vec<ShardHasher> = hashes.iter().map(|h| ShardHasher::new(*h)).collect();
        for (i, &layer) in order.iter().enumerate() {
            let done = i as u32;
            before(done).map_err(|reason| LayerCopyError::Stopped {
                layers_done: done,
                reason,
            })?;
            let range = layer as usize * seg..(layer as usize + 1) * seg;
            for ((loc, page), hasher) in locations.iter().zip(pages).zip(&mut hashers) {
                let mut dst = buffers
                    .pages_mut(region, &[*page], shard_bytes as u64)
                    .map_err(|e: BufferError| at(layer, e.into()))?;
                let part = &mut dst[0][range.clone()];
                let tier = self
                    .tier_mut(loc.tier)
                    .ok_or(StoreError::TierDisabled { tier: loc.tier })
                    .map_err(|e| at(layer, e))?;
                tier.read_range(loc.slot, range.start, part)
                    .map_err(|e: TierError| at(layer, e.into()))?;
                if ascending {
                    hasher.update(part);
                }
            }
            if i + 1 == layers {
                for (((hash, loc), page), hasher) in hashes
                    .iter()
                    .zip(&locations)
                    .zip(pages)
                    .zip(std::mem::take(&mut hashers))
                {
                    let actual = if ascending {
                        hasher.finish()
                    } else {
                        let dst = buffers
                            .pages_mut(region, &[*page], shard_bytes as u64)
                            .map_err(|e: BufferError| at(layer, e.into()))?;
                        crate::checksum::checksum(*hash, dst[0])
                    };
                    if actual != loc.checksum {
                        self.evict(*hash);
                        return Err(at(
                            layer,
                            StoreError::ChecksumMismatch {
                                hash: *hash,
                                tier: loc.tier,
                                slot: loc.slot,
                                expected: loc.checksum,
                                actual,
                            },
                        ));
                    }
                }
            }
            after(done + 1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::RegionSpec;
    use crate::store::StoreConfig;

    /// A store of 4 host slots and 4 disk slots of 64 bytes (4 layers of 16) and an engine
    /// region of 4 pages.
    fn setup(dir: &std::path::Path) -> (Store, EngineBuffers) {
        let cfg = StoreConfig {
            rank: tandem_proto::Rank(1),
            shard_bytes: 64,
            host_capacity_blocks: 4,
            disk_capacity_blocks: 4,
            host_dir: dir.join("host"),
            disk_dir: dir.join("disk"),
            disk_io: Default::default(),
            layout: Default::default(),
        };
        let (mut store, _) = Store::open(cfg).unwrap();
        store.begin_epoch(1).unwrap();
        let mut buffers = EngineBuffers::new();
        let spec = RegionSpec {
            name: "engine".into(),
            size_bytes: 256,
            page_size_bytes: 64,
        };
        buffers.register(spec).unwrap();
        let path = dir.join("engine.region");
        std::fs::write(&path, vec![0u8; 256]).unwrap();
        buffers.map("engine", &path).unwrap();
        (store, buffers)
    }

    #[test]
    fn layers_arrive_in_order_and_verify() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, mut buffers) = setup(dir.path());
        let data: Vec<Vec<u8>> = (0..2u8)
            .map(|b| (0..64u8).map(|i| i.wrapping_mul(7) ^ b).collect())
            .collect();
        for (b, d) in data.iter().enumerate() {
            store
                .store_shard(BlockHash(b as u128 + 1), tandem_proto::Tier::Host, d)
                .unwrap();
        }
        let hashes = [BlockHash(1), BlockHash(2)];
        let pages = [PageId(3), PageId(0)];
        fn with<'a>(
            hashes: &'a [BlockHash],
            pages: &'a [PageId],
            order: &'a [u32],
        ) -> LayerLoad<'a> {
            LayerLoad {
                hashes,
                pages,
                region: "engine",
                order,
            }
        }
        let load = |order: &'static [u32]| with(&hashes, &pages, order);
        for order in [&[0, 1, 2, 3][..], &[3, 1, 0, 2][..]] {
            let mut seen = Vec::new();
            store
                .load_layers(load(order), &mut buffers, |_| Ok(()), |n| seen.push(n))
                .unwrap();
            assert_eq!(seen, vec![1, 2, 3, 4]);
            for (page, want) in pages.iter().zip(&data) {
                let got = buffers.pages("engine", &[*page], 64).unwrap();
                assert_eq!(got[0], &want[..], "{order:?}");
            }
        }
        // Stopped before layer 2: two layers signalled, the error names them.
        let mut seen = Vec::new();
        let stop = |i| if i == 2 { Err("stall".into()) } else { Ok(()) };
        let err = store
            .load_layers(load(&[0, 1, 2, 3]), &mut buffers, stop, |n| seen.push(n))
            .unwrap_err();
        assert_eq!(seen, vec![1, 2]);
        assert!(
            matches!(err, LayerCopyError::Stopped { layers_done: 2, .. }),
            "{err}"
        );
        // Bytes that do not verify: the last layer is never signalled, the shard is dropped.
        let slab = dir.path().join("host").join(crate::host::HOST_SLAB_FILE);
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&slab).unwrap();
            f.write_all_at(&[0x5a; 128], 0).unwrap();
        }
        let mut seen = Vec::new();
        let err = store
            .load_layers(
                load(&[0, 1, 2, 3]),
                &mut buffers,
                |_| Ok(()),
                |n| seen.push(n),
            )
            .unwrap_err();
        assert_eq!(seen, vec![1, 2, 3]);
        assert!(
            matches!(
                err,
                LayerCopyError::Store {
                    layer: 3,
                    source: StoreError::ChecksumMismatch { .. }
                }
            ),
            "{err}"
        );
        assert!(store.len() < 2, "the shard that did not verify is dropped");
        // A shard that does not split evenly is refused before any copy.
        let err = store
            .load_layers(load(&[0, 1, 2]), &mut buffers, |_| Ok(()), |_| {})
            .unwrap_err();
        assert!(matches!(err, LayerCopyError::Uneven { .. }), "{err}");
    }

    #[test]
    fn a_load_from_the_disk_tier_reads_layer_ranges_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, mut buffers) = setup(dir.path());
        let data: Vec<Vec<u8>> = (0..2u8)
            .map(|b| (0..64u8).map(|i| i.wrapping_mul(13) ^ (b + 1)).collect())
            .collect();
        for (b, d) in data.iter().enumerate() {
            store
                .store_shard(BlockHash(b as u128 + 1), tandem_proto::Tier::Disk, d)
                .unwrap();
        }
        let hashes = [BlockHash(1), BlockHash(2)];
        for h in hashes {
            assert_eq!(store.location(h).unwrap().tier, tandem_proto::Tier::Disk);
        }
        let pages = [PageId(1), PageId(2)];
        for order in [&[0, 1, 2, 3][..], &[2, 0, 3, 1][..]] {
            let load = LayerLoad {
                hashes: &hashes,
                pages: &pages,
                region: "engine",
                order,
            };
            let mut seen = Vec::new();
            store
                .load_layers(load, &mut buffers, |_| Ok(()), |n| seen.push(n))
                .unwrap();
            assert_eq!(seen, vec![1, 2, 3, 4]);
            for (page, want) in pages.iter().zip(&data) {
                let got = buffers.pages("engine", &[*page], 64).unwrap();
                assert_eq!(got[0], &want[..], "{order:?}");
            }
        }
        // One byte of layer 2 of the second shard flipped on disk: the last layer is never
        // signalled, the shard is dropped.
        let slab = dir.path().join("disk").join(crate::disk::DISK_SLAB_FILE);
        let slot = store.location(BlockHash(2)).unwrap().slot;
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&slab).unwrap();
            let at = crate::disk::DiskTier::slot_offset(64, slot) + 2 * 16 + 5;
            f.write_all_at(&[data[1][2 * 16 + 5] ^ 1], at).unwrap();
        }
        let load = LayerLoad {
            hashes: &hashes,
            pages: &pages,
            region: "engine",
            order: &[0, 1, 2, 3],
        };
        let mut seen = Vec::new();
        let err = store
            .load_layers(load, &mut buffers, |_| Ok(()), |n| seen.push(n))
            .unwrap_err();
        assert_eq!(seen, vec![1, 2, 3]);
        assert!(
            matches!(
                err,
                LayerCopyError::Store {
                    layer: 3,
                    source: StoreError::ChecksumMismatch {
                        hash: BlockHash(2),
                        ..
                    }
                }
            ),
            "{err}"
        );
        assert!(
            store.location(BlockHash(2)).is_none(),
            "the shard is dropped"
        );
    }
}
