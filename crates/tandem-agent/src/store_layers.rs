//! The StoreActor's layerwise loads: one load's shards copied layer by layer, with this
//! rank's engine told after each layer (through the rank's core, which answers its
//! `wait_layer` calls).
//!
//! Owns [`LayersCopied`] and the copy loop around `tandem_store::Store::load_layers`. The plan
//! (layers, order, per-layer deadline) is the leader's, from the frame; this code never picks a
//! layer. Once two progress reports were further apart than the plan's `layer_timeout_ms`
//! (a stall before a layer, or a slow layer), the copy stops before the next layer: the core
//! has failed the shard by then, and nothing more is written into the engine's pages, which
//! the engine is about to recompute.

use std::time::{Duration, Instant};

use actix::{Message, Recipient};
use tandem_proto::frame::{LayerwiseLoad, TaskStart};
use tandem_proto::ids::{Epoch, TaskId};
use tandem_store::store::StoreError;

use super::{ShardDone, StoreActor, DEVICE_COPIES, ENGINE_REGION};

/// This rank's store has copied `layers_ready` layers of layerwise load `task` (0: it began
/// the copy).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct LayersCopied {
    /// The task.
    pub task: TaskId,
    /// Layers in the engine's pages, in the plan's order.
    pub layers_ready: u32,
}

impl StoreActor {
    /// Copy `t` layer by layer as `plan` says; progress goes to `layers_to` after each layer,
    /// the shard result to `report_to` at the end.
    pub(super) fn copy_layers(
        &mut self,
        epoch: Epoch,
        t: &TaskStart,
        plan: &LayerwiseLoad,
        report_to: &Recipient<ShardDone>,
        layers_to: &Recipient<LayersCopied>,
    ) {
        if !self.current(epoch) {
            return;
        }
        let task = t.task;
        layers_to.do_send(LayersCopied {
            task,
            layers_ready: 0,
        });
        let result = self.copy_layers_inner(t, plan, layers_to);
        match &result {
            Ok(()) => {
                let bytes = self.shard_bytes * t.block_hashes.len() as u64;
                self.stats.bytes_loaded += bytes;
            }
            Err(reason) => {
                self.stats.copy_failures += 1;
                self.metrics.copy_failures().inc();
                tracing::warn!(%task, %reason, "layerwise load shard failed");
            }
        }
        report_to.do_send(ShardDone { task, result });
    }

    fn copy_layers_inner(
        &mut self,
        t: &TaskStart,
        plan: &LayerwiseLoad,
        layers_to: &Recipient<LayersCopied>,
    ) -> Result<(), String> {
        if self.device.registered() {
            return Err(DEVICE_COPIES.into());
        }
        if !self.registered() {
            return Err("no engine buffer registered on this rank".into());
        }
        let task = t.task;
        let timeout = Duration::from_millis(plan.layer_timeout_ms);
        let last = std::cell::Cell::new(Instant::now());
        // The longest gap between two progress reports so far: the core fails the shard once a
        // gap passes the plan's deadline, so from then on nothing more is written.
        let late = std::cell::Cell::new(Duration::ZERO);
        let before = |i: u32| {
            let layer = plan.order.get(i as usize).copied().unwrap_or(0);
            crate::fault_layer::before_layer(layer);
            let waited = late.get().max(last.get().elapsed());
            if waited > timeout {
                return Err(format!(
                    "layer {layer} of task {task}: {} ms without progress, over layer_timeout_ms = {} ms",
                    waited.as_millis(),
                    plan.layer_timeout_ms
                ));
            }
            Ok(())
        };
        let after = |layers_ready: u32| {
            layers_to.do_send(LayersCopied { task, layers_ready });
            late.set(late.get().max(last.get().elapsed()));
            last.set(Instant::now());
        };
        self.store
            .load_layers(
                tandem_store::layers::LayerLoad {
                    hashes: &t.block_hashes,
                    pages: &t.page_ids,
                    region: ENGINE_REGION,
                    order: &plan.order,
                },
                &mut self.buffers,
                before,
                after,
            )
            .map_err(|e| {
                if let tandem_store::layers::LayerCopyError::Store { source, .. } = &e {
                    if matches!(source, StoreError::ChecksumMismatch { .. }) {
                        self.manifest_changed = true;
                        self.stats.checksum_failures += 1;
                        self.metrics.checksum_failures().inc();
                    }
                    self.fenced(source);
                }
                format!("task {task}: {e}")
            })
    }
}
