//! The StoreActor: this rank's tiers, its engine's page buffers, and every shard copy.
//!
//! Owns the per-rank `Store` (host and disk tiers, checksums, manifest), the engine's
//! registered page region and its device region, if any ([`crate::device`]; while one is
//! registered, stores and loads fail: device copies are not wired yet). It carries out the commands of the rank's core
//! (`tandem_core::StoreCommand`): it applies the leader's tier operations in frame order, copies
//! shards between engine pages and tiers for the tasks it is given, and reports each task's
//! shard result to whoever asked (the `ProtocolActor` of that epoch); a task's copies run side
//! by side on the copy workers ([`crate::copy_workers`]). It never decides placement, eviction or whether a task
//! finished: those are the leader's, and it only carries them out. It runs on its own arbiter
//! (thread) so that copies never delay the protocol. Every write it makes is fenced by this
//! process's incarnation and the current epoch (`tandem_store::fence`): once another process
//! owns the rank's tiers, the first refused write stops the agent ([`AgentRunError::Fenced`]).
//!
//! Disk transfers run on the `disk-io` thread with a deadline ([`crate::disk_io`]): a shard
//! whose transfer missed it fails with the typed message ("disk tier: write of slot 3 missed
//! its deadline of 5000 ms"), and the actor goes on. A store task that wrote a shard to the
//! disk tier reports done only once a manifest listing it has been written (and synced) by
//! the writer thread, within the same deadline; otherwise it fails. So a store finished on
//! the disk tier survives the death of every agent of the group (docs/RELIABILITY.md,
//! "What finished promises").

use actix::{Actor, AsyncContext, Context, Handler, Message, Recipient};
use tandem_client::api::AgentError;
use tandem_core::StoreCommand;
use tandem_proto::frame::{TaskStart, TierOp};
use tandem_proto::ids::{Epoch, TaskId};
use tandem_proto::RankBlocks;
use tandem_store::buffer::{EngineBuffers, RegionSpec};
use tandem_store::fence::Fence;
use tandem_store::store::{Store, StoreError};
use tokio::sync::mpsc::UnboundedSender;

use crate::copy_workers::CopyWorkers;
use crate::device::EngineDevice;
use crate::AgentRunError;

#[path = "store_layers.rs"]
mod layers;
pub use layers::LayersCopied;

/// Why a store or load of a rank holding a device region fails.
const DEVICE_COPIES: &str = "the engine registered a device region on this rank: copies between device pages and the tiers are not wired yet (register a host pool)";

/// The name under which the engine's page pool is registered.
const ENGINE_REGION: &str = "engine";

/// Pages of the engine's registered pool (0: none), shared with the protocol actors, which
/// tell their core (binds are checked against it). Written only by the StoreActor.
#[derive(Clone, Debug, Default)]
pub struct PoolSize(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl PoolSize {
    /// Pages of the registered pool, `None` when none is registered.
    pub fn get(&self) -> Option<u64> {
        let pages = self.0.load(std::sync::atomic::Ordering::Acquire);
        (pages > 0).then_some(pages)
    }

    fn set(&self, pages: u64) {
        self.0.store(pages, std::sync::atomic::Ordering::Release);
    }
}

/// A task's shard on this rank is done (`Ok`) or failed (`Err(reason)`).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ShardDone {
    /// The task.
    pub task: TaskId,
    /// The shard result; the reason names the block and what went wrong.
    pub result: Result<(), String>,
}

/// Register (or re-register after an engine reconnect) the engine's page pool.
#[derive(Message)]
#[rtype(result = "Result<u64, AgentError>")]
pub struct RegisterBuffer {
    /// The region: its file, or the descriptor the engine passed.
    pub source: PoolSource,
    /// Bytes of the region.
    pub size_bytes: u64,
    /// Bytes of one page; must equal the shard size.
    pub page_size_bytes: u64,
}

/// Register the engine's KV cache in GPU memory (see [`crate::device`]); refusals are
/// [`AgentError::Buffer`] naming the cause.
#[derive(Message)]
#[rtype(result = "Result<u64, AgentError>")]
pub struct RegisterDevice {
    /// The GPU holding the allocation.
    pub ordinal: u32,
    /// The CUDA IPC memory handle (64 bytes).
    pub ipc_handle: Vec<u8>,
    /// Pages in the region.
    pub pages: u64,
    /// Bytes of one page; must equal the shard size.
    pub page_size_bytes: u64,
}

/// Where an engine's page pool is.
#[derive(Debug)]
pub enum PoolSource {
    /// The region's file.
    Path(String),
    /// The region's descriptor, received with the request (`SCM_RIGHTS`).
    Descriptor(std::os::fd::OwnedFd),
}

/// Carry out one command of this rank's core; shard results of the copies it starts go to
/// `report_to` (the core of the command's epoch).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Carry {
    /// The command.
    pub command: StoreCommand,
    /// Where the copies' shard results go.
    pub report_to: Recipient<ShardDone>,
    /// Where a layerwise load's progress goes (after each layer).
    pub layers_to: Recipient<LayersCopied>,
}

/// The blocks this rank holds (for the rebuild of the group index at a new epoch).
#[derive(Message)]
#[rtype(result = "RankBlocks")]
pub struct ListBlocks;

/// Tier occupancy of this rank, for `/status` and metrics.
#[derive(Message)]
#[rtype(result = "StoreStats")]
pub struct GetStoreStats;

/// Counters and occupancy of this rank's store. Sizes in blocks and bytes.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StoreStats {
    /// Shards held.
    pub blocks: u64,
    /// Free host slots.
    pub host_free_blocks: u64,
    /// Free disk slots.
    pub disk_free_blocks: u64,
    /// Host tier slots (`store.host_capacity_blocks`).
    pub host_capacity_blocks: u64,
    /// Disk tier slots (`store.disk_capacity_blocks`).
    pub disk_capacity_blocks: u64,
    /// Bytes of one block shard (one slot).
    pub shard_bytes: u64,
    /// Bytes copied from engine pages into the tiers.
    pub bytes_stored: u64,
    /// Bytes copied from the tiers into engine pages.
    pub bytes_loaded: u64,
    /// Shard copies that failed (either direction).
    pub copy_failures: u64,
    /// Tier operations that failed on this rank (a divergence from the group index).
    pub tier_op_failures: u64,
    /// Shards dropped because their checksum did not match.
    pub checksum_failures: u64,
    /// Work from an older epoch rejected (never applied).
    pub stale_epoch_rejected: u64,
}

/// The manifest writer saved the snapshot of `generation` (or failed to: `error`).
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct ManifestSaved {
    generation: u64,
    error: Option<String>,
}

/// A snapshot of the manifest for the writer thread: its generation, the manifest, its file
/// (the store's handle on its two copies: saves through it take turns).
type Snapshot = (
    u64,
    tandem_store::manifest::Manifest,
    tandem_store::manifest::ManifestFile,
);

/// A store task's result held until a manifest listing its disk-tier shards is written.
struct Held {
    /// The snapshot generation that lists them.
    generation: u64,
    /// Its first block, for the failure message.
    block: tandem_proto::ids::BlockHash,
    done: ShardDone,
    report_to: Recipient<ShardDone>,
    /// When the wait ends in failure.
    deadline: std::time::Instant,
}

/// The actor. See the module docs.
pub struct StoreActor {
    metrics: std::sync::Arc<tandem_metrics::AgentMetrics>,
    /// Set by every change of the shards held; cleared when a snapshot goes to the writer.
    manifest_changed: bool,
    writer: std::sync::mpsc::Sender<Snapshot>,
    /// The writer's end of the channel, until `started` spawns the writer thread.
    snapshots: Option<std::sync::mpsc::Receiver<Snapshot>>,
    /// Generation of the last snapshot sent to the writer.
    generation: u64,
    /// Store results waiting for a saved manifest (disk-tier shards), oldest first.
    held: Vec<Held>,
    /// How long a disk-tier store waits for its manifest (`store.disk_op_deadline_ms`).
    disk_deadline: std::time::Duration,
    /// Set by a copy that wrote a shard to the disk tier.
    wrote_disk: bool,
    epoch: Epoch,
    store: Store,
    buffers: EngineBuffers,
    shard_bytes: u64,
    stats: StoreStats,
    /// Where a fenced write stops the agent.
    fatal: UnboundedSender<AgentRunError>,
    /// Set once a write was fenced: nothing more is attempted.
    fenced: bool,
    /// Pages of the registered pool, for the protocol actors.
    pool: PoolSize,
    /// The engine's device region, when it registered one (`RegisterDevice`).
    device: EngineDevice,
    /// Threads that run a task's shard copies side by side (`store.copy_workers`).
    copy_workers: CopyWorkers,
}

impl StoreActor {
    /// Wrap an opened store; `shard_bytes` is the page size engines must register; a write
    /// refused by the fence is sent to `fatal`; `pool` is kept at the registered pool's size;
    /// a disk-tier store waits at most `disk_deadline_ms` for the manifest listing it.
    pub fn new(
        store: Store,
        shard_bytes: u64,
        metrics: std::sync::Arc<tandem_metrics::AgentMetrics>,
        fatal: UnboundedSender<AgentRunError>,
        pool: PoolSize,
        disk_deadline_ms: u64,
    ) -> Self {
        let (writer, snapshots) = std::sync::mpsc::channel::<Snapshot>();
        Self {
            metrics,
            manifest_changed: false,
            writer,
            snapshots: Some(snapshots),
            generation: 0,
            held: Vec::new(),
            disk_deadline: std::time::Duration::from_millis(disk_deadline_ms),
            wrote_disk: false,
            epoch: Epoch(0),
            store,
            buffers: EngineBuffers::new(),
            shard_bytes,
            stats: StoreStats::default(),
            fatal,
            fenced: false,
            pool,
            device: EngineDevice::new(),
            copy_workers: CopyWorkers::new(1),
        }
    }

    /// Starts the manifest writer thread: it saves the newest snapshot it has (skipping the
    /// ones queued behind it) and tells `saved` which generation it saved.
    fn start_writer(&mut self, saved: Recipient<ManifestSaved>) {
        let Some(snapshots) = self.snapshots.take() else {
            return;
        };
        let fence: Fence = self.store.fence().clone();
        let writer_fatal = self.fatal.clone();
        let span = tracing::Span::current();
        std::thread::Builder::new()
            .name("manifest-writer".into())
            .spawn(move || {
                let _span = span.entered();
                while let Ok(mut latest) = snapshots.recv() {
                    while let Ok(newer) = snapshots.try_recv() {
                        latest = newer;
                    }
                    let error = match latest.2.save_fenced(&latest.1, &fence) {
                        Ok(()) => None,
                        Err(e @ tandem_store::manifest::ManifestError::Fenced { .. }) => {
                            tracing::error!(error = %e, "the shard manifest is not written: another process owns this rank's tiers");
                            let _ = writer_fatal.send(AgentRunError::Fenced(e.to_string()));
                            return;
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "cannot write the shard manifest");
                            Some(e.to_string())
                        }
                    };
                    saved.do_send(ManifestSaved {
                        generation: latest.0,
                        error,
                    });
                }
            })
            .ok();
    }

    /// Run each task's shard copies on `workers` (see [`crate::copy_workers`]).
    pub fn with_copy_workers(mut self, workers: CopyWorkers) -> Self {
        self.copy_workers = workers;
        self
    }

    /// A write was refused by the fence: stop writing and stop the agent. True when `e` is
    /// such a refusal.
    fn fenced(&mut self, e: &StoreError) -> bool {
        let fenced = matches!(
            e,
            StoreError::Fenced(_)
                | StoreError::Manifest(tandem_store::manifest::ManifestError::Fenced { .. })
        );
        if fenced && !self.fenced {
            self.fenced = true;
            tracing::error!(error = %e, "this agent lost the rank's tiers to another process: stopping");
            let _ = self.fatal.send(AgentRunError::Fenced(e.to_string()));
        }
        fenced
    }

    /// Fence work by epoch: only the current epoch's is applied, and nothing once this
    /// process lost the rank's tiers.
    fn current(&mut self, epoch: Epoch) -> bool {
        if self.fenced {
            return false;
        }
        if epoch != self.epoch {
            self.stats.stale_epoch_rejected += 1;
            tracing::debug!(
                ours = self.epoch.0,
                theirs = epoch.0,
                "stale-epoch store work rejected"
            );
            return false;
        }
        true
    }

    fn registered(&self) -> bool {
        self.buffers.spec(ENGINE_REGION).is_some()
    }

    fn copy_store(&mut self, t: &TaskStart) -> Result<(), String> {
        if t.block_hashes.len() != t.page_ids.len() || t.block_hashes.len() != t.tiers.len() {
            return Err(format!(
                "task {}: {} blocks, {} pages, {} tiers",
                t.task,
                t.block_hashes.len(),
                t.page_ids.len(),
                t.tiers.len()
            ));
        }
        if self.device.registered() {
            return Err(DEVICE_COPIES.into());
        }
        if !self.registered() {
            return Err("no engine buffer registered on this rank".into());
        }
        let items: Vec<_> = (t.block_hashes.iter().zip(&t.page_ids).zip(&t.tiers))
            .map(|((h, p), tier)| (*h, *tier, *p))
            .collect();
        let results =
            self.store
                .store_pages_batch(&items, &self.buffers, ENGINE_REGION, &self.copy_workers);
        let mut failed = None;
        for ((hash, _, page), result) in items.iter().zip(results) {
            match result {
                Ok(loc) => {
                    self.manifest_changed = true;
                    self.wrote_disk |= loc.tier == tandem_proto::Tier::Disk;
                    self.stats.bytes_stored += self.shard_bytes;
                    self.moved(loc.tier, tandem_metrics::Direction::Store);
                }
                // A retried copy of the same block: the shard is already here.
                Err(StoreError::AlreadyStored { .. }) => {}
                Err(e) => {
                    self.fenced(&e);
                    failed.get_or_insert(format!("block {hash} from page {page}: {e}"));
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    fn copy_load(&mut self, t: &TaskStart) -> Result<(), String> {
        if t.block_hashes.len() != t.page_ids.len() {
            return Err(format!(
                "task {}: {} blocks, {} pages",
                t.task,
                t.block_hashes.len(),
                t.page_ids.len()
            ));
        }
        if self.device.registered() {
            return Err(DEVICE_COPIES.into());
        }
        if !self.registered() {
            return Err("no engine buffer registered on this rank".into());
        }
        let items: Vec<_> = (t.block_hashes.iter().zip(&t.page_ids))
            .map(|(h, p)| (*h, *p))
            .collect();
        let results = self.store.load_pages_batch(
            &items,
            &mut self.buffers,
            ENGINE_REGION,
            &self.copy_workers,
        );
        let mut failed = None;
        for ((hash, page), result) in items.iter().zip(results) {
            match result {
                Ok(loc) => {
                    self.stats.bytes_loaded += self.shard_bytes;
                    self.moved(loc.tier, tandem_metrics::Direction::Load);
                }
                Err(e) => {
                    if matches!(e, StoreError::ChecksumMismatch { .. }) {
                        self.manifest_changed = true;
                        self.stats.checksum_failures += 1;
                        self.metrics.checksum_failures().inc();
                    }
                    self.fenced(&e);
                    failed.get_or_insert(format!("block {hash} into page {page}: {e}"));
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    fn moved(&self, tier: tandem_proto::Tier, direction: tandem_metrics::Direction) {
        if let Some(bytes) = self.metrics.moved_bytes(tier, direction) {
            bytes.add(self.shard_bytes);
        }
    }

    /// Occupancy gauges, from the store's free slots.
    fn publish_occupancy(&self) {
        use tandem_proto::Tier;
        let cfg = self.store.config();
        for (tier, capacity) in [
            (Tier::Host, cfg.host_capacity_blocks),
            (Tier::Disk, cfg.disk_capacity_blocks),
        ] {
            self.metrics.set_tier_capacity(tier, capacity);
            self.metrics
                .set_tier_occupancy(tier, capacity.saturating_sub(self.store.free_slots(tier)));
        }
    }

    /// Hand a snapshot of the manifest to the writer thread when it changed: the write syncs
    /// the file and its directory, which can take hundreds of milliseconds on a busy disk, and
    /// copies must not wait for it.
    fn flush(&mut self) {
        if !self.manifest_changed {
            return;
        }
        self.manifest_changed = false;
        self.generation += 1;
        let snapshot = (
            self.generation,
            self.store.manifest().clone(),
            self.store.manifest_file().clone(),
        );
        if self.writer.send(snapshot).is_err() {
            tracing::error!("the manifest writer thread is gone");
        }
    }
}

/// How often the manifest is written when it changed. A crash loses at most this much of the
/// manifest; the shards it then lists wrongly fail their checksum at the next open and are
/// dropped, so a stale manifest never serves wrong bytes.
const MANIFEST_FLUSH: std::time::Duration = std::time::Duration::from_millis(200);

impl Actor for StoreActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.start_writer(ctx.address().recipient());
        ctx.run_interval(MANIFEST_FLUSH, |actor, _| {
            actor.flush();
            actor.publish_occupancy();
        });
    }

    fn stopping(&mut self, _: &mut Self::Context) -> actix::Running {
        // On the way out, write the manifest and wait for it (nothing waits for copies any
        // more), but no longer than the disk deadline: a frozen disk must not hold the stop.
        if !self.fenced {
            let manifest = self.store.manifest().clone();
            let file = self.store.manifest_file().clone();
            let fence = self.store.fence().clone();
            let (tx, rx) = std::sync::mpsc::channel();
            let saving = std::thread::Builder::new()
                .name("manifest-final".into())
                .spawn(move || {
                    let _ = tx.send(file.save_fenced(&manifest, &fence));
                });
            match saving.map(|_| rx.recv_timeout(self.disk_deadline)) {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::error!(error = %e, "cannot write the shard manifest"),
                Ok(Err(_)) => tracing::error!(
                    deadline_ms = self.disk_deadline.as_millis() as u64,
                    "the last manifest write missed its deadline: stopping without it (the shards it would list since the last save are dropped at the next start)"
                ),
                Err(e) => tracing::error!(error = %e, "cannot start the last manifest write"),
            }
        }
        actix::Running::Stop
    }
}

impl Handler<RegisterBuffer> for StoreActor {
    type Result = Result<u64, AgentError>;
    /// Map the engine's page pool (by path or descriptor); the page size must be the shard size
    /// and the size a positive whole number of pages.
    fn handle(&mut self, msg: RegisterBuffer, _: &mut Self::Context) -> Self::Result {
        if msg.page_size_bytes != self.shard_bytes {
            return Err(AgentError::Buffer {
                reason: format!(
                    "page size {} bytes differs from the block shard size {} bytes",
                    msg.page_size_bytes, self.shard_bytes
                ),
            });
        }
        let spec = RegionSpec {
            name: ENGINE_REGION.into(),
            size_bytes: msg.size_bytes,
            page_size_bytes: msg.page_size_bytes,
        };
        let pages = spec.pages();
        let refused = |e: tandem_store::buffer::BufferError| AgentError::Buffer {
            reason: e.to_string(),
        };
        // Map the new pool beside the old one and swap only when it maps, so that a refused
        // registration leaves the engine's current pool in place.
        let mut fresh = EngineBuffers::new();
        fresh.register(spec).map_err(refused)?;
        match msg.source {
            PoolSource::Path(path) => fresh.map(ENGINE_REGION, std::path::Path::new(&path)),
            PoolSource::Descriptor(fd) => fresh.map_fd(ENGINE_REGION, fd),
        }
        .map_err(refused)?;
        self.buffers = fresh;
        // The engine now hands host pages: a device region it registered before is dropped.
        self.device.clear();
        self.pool.set(pages);
        Ok(pages)
    }
}

impl Handler<RegisterDevice> for StoreActor {
    type Result = Result<u64, AgentError>;
    /// Open the engine's device region; a refused registration leaves what was registered.
    fn handle(&mut self, msg: RegisterDevice, _: &mut Self::Context) -> Self::Result {
        let pages = self.device.register(
            msg.ordinal,
            &msg.ipc_handle,
            msg.pages,
            msg.page_size_bytes,
            self.shard_bytes,
        )?;
        self.pool.set(pages);
        Ok(pages)
    }
}

impl Handler<Carry> for StoreActor {
    type Result = ();
    /// Carry out one command of the core.
    fn handle(&mut self, msg: Carry, ctx: &mut Self::Context) {
        crate::fault::message(crate::fault::Actor::Store);
        match msg.command {
            StoreCommand::BeginEpoch { epoch, wipe } => self.begin_epoch(epoch, wipe),
            StoreCommand::ApplyTierOps { epoch, ops } => self.apply_tier_ops(epoch, ops),
            StoreCommand::CopyStores { epoch, tasks } => {
                self.copy(epoch, &tasks, &msg.report_to, Self::copy_store, "store");
                if self
                    .held
                    .last()
                    .is_some_and(|h| h.generation > self.generation)
                {
                    // The disk-tier shards just written go to the writer now, not at the
                    // next tick; their results wait for it (or for the deadline).
                    self.flush();
                    ctx.run_later(self.disk_deadline, |actor, _| actor.expire_held());
                }
            }
            StoreCommand::CopyLoads { epoch, tasks } => {
                self.copy(epoch, &tasks, &msg.report_to, Self::copy_load, "load")
            }
            StoreCommand::CopyLayers { epoch, task, plan } => {
                self.copy_layers(epoch, &task, &plan, &msg.report_to, &msg.layers_to)
            }
        }
    }
}

impl StoreActor {
    /// A new epoch: the fence moves to it; with `wipe`, every shard is dropped first.
    fn begin_epoch(&mut self, epoch: Epoch, wipe: bool) {
        self.epoch = epoch;
        // The fence moves to the new epoch: from now on the rank's tiers take writes of this
        // process in this epoch only.
        if let Err(e) = self.store.begin_epoch(epoch.0) {
            self.fenced(&e);
            return;
        }
        if wipe {
            let blocks: Vec<_> = self
                .store
                .rank_blocks()
                .blocks
                .iter()
                .map(|(h, _)| *h)
                .collect();
            for h in &blocks {
                self.store.evict(*h);
            }
            self.manifest_changed = true;
            self.flush();
            tracing::info!(
                epoch = epoch.0,
                dropped = blocks.len(),
                "store wiped for the new epoch"
            );
        }
    }

    /// Apply the leader's tier operations in order.
    fn apply_tier_ops(&mut self, epoch: Epoch, ops: Vec<TierOp>) {
        if !self.current(epoch) {
            return;
        }
        self.manifest_changed = true;
        for op in ops {
            if let Err(e) = self.store.apply(op) {
                if self.fenced(&e) {
                    return;
                }
                self.stats.tier_op_failures += 1;
                tracing::error!(?op, error = %e, "tier operation failed: this rank diverged from the group index");
            }
        }
    }

    /// Copy each task's shards with `copy` and report each result to `report_to`.
    fn copy(
        &mut self,
        epoch: Epoch,
        tasks: &[TaskStart],
        report_to: &Recipient<ShardDone>,
        copy: fn(&mut Self, &TaskStart) -> Result<(), String>,
        what: &'static str,
    ) {
        if !self.current(epoch) {
            return;
        }
        for t in tasks {
            self.wrote_disk = false;
            let result = copy(self, t);
            if let Err(reason) = &result {
                self.copy_failed(t.task, reason, what);
            }
            let done = ShardDone {
                task: t.task,
                result,
            };
            match t.block_hashes.first() {
                // Done only once a saved manifest lists the shards (the next snapshot's
                // generation): see the module docs.
                Some(&block) if self.wrote_disk && done.result.is_ok() => self.held.push(Held {
                    generation: self.generation + 1,
                    block,
                    done,
                    report_to: report_to.clone(),
                    deadline: std::time::Instant::now() + self.disk_deadline,
                }),
                _ => report_to.do_send(done),
            }
        }
    }

    fn copy_failed(&mut self, task: TaskId, reason: &str, what: &str) {
        self.stats.copy_failures += 1;
        self.metrics.copy_failures().inc();
        tracing::warn!(task = %task, %reason, "{what} shard failed");
    }

    /// The writer saved (or failed to save) the snapshot of `generation`: the results it
    /// lists go out, done or failed.
    fn release_held(&mut self, generation: u64, error: Option<&str>) {
        let (ready, waiting): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.generation <= generation);
        self.held = waiting;
        for mut h in ready {
            if let Some(e) = error {
                let reason = format!(
                    "block {}: stored on the disk tier, but the manifest listing it could not be written: {e}",
                    h.block
                );
                self.copy_failed(h.done.task, &reason, "store");
                h.done.result = Err(reason);
            }
            h.report_to.do_send(h.done);
        }
    }

    /// Results still waiting past their deadline fail (the manifest writer is stuck).
    fn expire_held(&mut self) {
        let now = std::time::Instant::now();
        let deadline_ms = self.disk_deadline.as_millis();
        let (late, waiting): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.deadline <= now);
        self.held = waiting;
        for mut h in late {
            let reason = format!(
                "block {}: disk tier: the manifest write listing it missed its deadline of {deadline_ms} ms",
                h.block
            );
            self.copy_failed(h.done.task, &reason, "store");
            h.done.result = Err(reason);
            h.report_to.do_send(h.done);
        }
    }
}

impl Handler<ManifestSaved> for StoreActor {
    type Result = ();
    /// Release the store results the saved snapshot lists.
    fn handle(&mut self, msg: ManifestSaved, _: &mut Self::Context) {
        self.release_held(msg.generation, msg.error.as_deref());
    }
}

impl Handler<ListBlocks> for StoreActor {
    type Result = actix::MessageResult<ListBlocks>;
    /// The blocks this rank holds.
    fn handle(&mut self, _: ListBlocks, _: &mut Self::Context) -> Self::Result {
        actix::MessageResult(self.store.rank_blocks())
    }
}

impl Handler<GetStoreStats> for StoreActor {
    type Result = actix::MessageResult<GetStoreStats>;
    /// Occupancy and counters.
    fn handle(&mut self, _: GetStoreStats, _: &mut Self::Context) -> Self::Result {
        let mut s = self.stats.clone();
        s.blocks = self.store.len() as u64;
        s.host_free_blocks = self.store.free_slots(tandem_proto::Tier::Host);
        s.disk_free_blocks = self.store.free_slots(tandem_proto::Tier::Disk);
        s.host_capacity_blocks = self.store.config().host_capacity_blocks;
        s.disk_capacity_blocks = self.store.config().disk_capacity_blocks;
        s.shard_bytes = self.shard_bytes;
        actix::MessageResult(s)
    }
}
