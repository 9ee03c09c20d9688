//! The core's counters copied into the agent's metrics (counters grow by the difference).

use tandem_core::{NotReady, RoleCounters};
use tandem_metrics::{NotReadyReason, RefusalReason, TaskKind as K, TaskResult as R};

use super::ProtocolActor;

impl ProtocolActor {
    /// Copy the counters now.
    pub(super) fn sync_metrics(&mut self) {
        let m = &self.wiring.metrics;
        let c = self.core.counters();
        m.set_epoch(self.core.config().epoch.0);
        m.set_not_ready(c.not_ready.map(|r| match r {
            NotReady::Joining => NotReadyReason::Joining,
            NotReady::RebuildingIndex => NotReadyReason::RebuildingIndex,
            NotReady::CompletionLog => NotReadyReason::CompletionLog,
            NotReady::EpochFailed => NotReadyReason::EpochFailed,
            NotReady::WindowStalled => NotReadyReason::WindowStalled,
        }));
        m.steps_sealed().set_total(c.steps_sealed);
        m.stale_epoch_rejected().set_total(c.stale_epoch_rejected);
        match c.role {
            RoleCounters::Leader {
                frame_limit_refusals,
                peers_joined,
                evictions,
                tasks,
                window_stalls,
                window_stalled_rank,
            } => {
                m.window_stalls().set_total(window_stalls);
                m.set_window_stalled_follower(window_stalled_rank);
                m.frame_limit_refusals().set_total(frame_limit_refusals);
                m.set_peers_joined(peers_joined);
                m.evictions().set_total(evictions);
                m.lookup_blocks(true).set_total(tasks.lookup_blocks[0]);
                m.lookup_blocks(false).set_total(tasks.lookup_blocks[1]);
                for (i, reason) in RefusalReason::ALL.into_iter().enumerate() {
                    m.stores_refused(reason).set_total(tasks.stores_refused[i]);
                }
                for (i, kind) in [K::Store, K::Load].into_iter().enumerate() {
                    m.tasks_started(kind).set_total(tasks.started[i]);
                    for (j, result) in [R::Ok, R::Failed, R::Aborted].into_iter().enumerate() {
                        m.tasks_finished(kind, result)
                            .set_total(tasks.finished[i][j]);
                    }
                }
            }
            RoleCounters::Follower {
                wait_timeouts,
                engine_frames_read,
            } => {
                m.wait_timeouts().set_total(wait_timeouts);
                m.engine_frames_read().set_total(engine_frames_read);
            }
        }
    }
}
