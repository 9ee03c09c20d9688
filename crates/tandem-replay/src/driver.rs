//! [`run_replay`]: start one engine thread per rank, watch them, stop them, and turn their
//! reports into a [`ReplaySummary`].
//!
//! The leader thread ends the run: once every request has completed and every follower has
//! applied the leader's last frame, it returns, and the driver stops the followers. The
//! first engine that fails stops the run; the driver then reports that engine's error with
//! every rank's position. A watchdog ends the run when the leader made no progress for
//! [`crate::Deadlines::stall`].

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tandem_trace::TraceRecord;

use crate::engine::EngineReport;
use crate::error::{EngineError, ReplayError};
use crate::follower::run_follower;
use crate::leader::{run_leader, LeaderReport};
use crate::params::ReplayParams;
use crate::progress::TerminalProgress;
use crate::shared::{ReplayProgress, Shared};
use crate::summary::ReplaySummary;

/// How often the driver reports progress and checks the watchdog.
const TICK: Duration = Duration::from_millis(100);

/// Replay `requests` (in order) through the group whose engine sockets are
/// `params.sockets`, one simulated engine thread per rank, and return the summary.
///
/// `progress`, when given, is called from the calling thread about ten times a second and
/// once at the end. With `params.progress_bar` an indicatif bar is drawn on stderr when it
/// is a terminal. Page pool files are created under `params.pool_dir` and removed when the
/// engines end.
///
/// # Errors
/// [`ReplayError::Params`] before anything starts; [`ReplayError::Engine`] with the first
/// failing engine's error and every rank's position; [`ReplayError::Stalled`];
/// [`ReplayError::Cancelled`]; [`ReplayError::Spawn`]; [`ReplayError::Panicked`].
pub fn run_replay<I>(
    params: &ReplayParams,
    requests: I,
    progress: Option<&dyn Fn(&ReplayProgress)>,
) -> Result<ReplaySummary, ReplayError>
where
    I: IntoIterator<Item = TraceRecord>,
    I::IntoIter: Send,
{
    params.validate()?;
    let requests = requests.into_iter();
    let total = match requests.size_hint() {
        (lo, Some(hi)) if lo == hi => Some(lo as u64),
        _ => None,
    };
    let shared = Shared::new(params.world_size(), total);
    let run_id = run_id();
    let bar = if params.progress_bar {
        TerminalProgress::new(total)
    } else {
        None
    };
    let report = |p: &ReplayProgress| {
        if let Some(cb) = progress {
            cb(p);
        }
        if let Some(bar) = &bar {
            bar.update(p);
        }
    };
    let started = Instant::now();
    let outcome = thread::scope(|scope| {
        let (shared, run_id) = (&shared, run_id.as_str());
        let leader = thread::Builder::new()
            .name("replay-rank0".into())
            .spawn_scoped(scope, move || {
                guard(0, shared, run_leader(params, requests, shared, run_id))
            })
            .map_err(|source| ReplayError::Spawn { rank: 0, source })?;
        let mut followers = Vec::new();
        for rank in 1..params.world_size() {
            let spawned = thread::Builder::new()
                .name(format!("replay-rank{rank}"))
                .spawn_scoped(scope, move || {
                    guard(rank, shared, run_follower(rank, params, shared, run_id))
                });
            match spawned {
                Ok(handle) => followers.push((rank, handle)),
                Err(source) => {
                    shared.stop();
                    return Err(ReplayError::Spawn { rank, source });
                }
            }
        }
        let mut stalled = None;
        while !leader.is_finished() {
            thread::sleep(TICK);
            report(&shared.progress());
            let idle = shared.since_leader_progress();
            if stalled.is_none() && idle > params.deadlines.stall {
                stalled = Some(ReplayError::Stalled {
                    waited_ms: idle.as_millis() as u64,
                    positions: shared.positions(),
                });
                shared.stop();
            }
            let cancelled = params
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(Ordering::SeqCst));
            if stalled.is_none() && cancelled {
                stalled = Some(ReplayError::Cancelled {
                    positions: shared.positions(),
                });
                shared.stop();
            }
        }
        let leader = join(0, leader);
        shared.stop();
        let followers: Vec<Result<EngineReport, ReplayError>> = followers
            .into_iter()
            .map(|(rank, h)| join(rank, h))
            .collect();
        if let Some(stalled) = stalled {
            return Err(stalled);
        }
        collect(leader, followers, shared)
    });
    report(&shared.progress());
    if let Some(bar) = &bar {
        bar.finish();
    }
    let (leader, followers) = outcome?;
    Ok(ReplaySummary::build(
        &leader,
        &followers,
        params.expected_capacity,
        started.elapsed().as_secs_f64(),
    ))
}

/// Stop the run when an engine fails for its own reason.
fn guard<T>(rank: u32, shared: &Shared, result: Result<T, EngineError>) -> Result<T, EngineError> {
    if let Err(e) = &result {
        if !matches!(e, EngineError::Stopped { .. }) {
            shared.set_doing(rank, format!("failed: {e}"));
            shared.stop();
        }
    }
    result
}

fn join<T>(
    rank: u32,
    handle: thread::ScopedJoinHandle<'_, Result<T, EngineError>>,
) -> Result<T, ReplayError> {
    match handle.join() {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(source)) => Err(ReplayError::Engine {
            source,
            positions: Default::default(),
        }),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            Err(ReplayError::Panicked { rank, message })
        }
    }
}

/// The reports, or the most telling error: a panic, else an engine's own failure, else a
/// "stopped" one.
fn collect(
    leader: Result<LeaderReport, ReplayError>,
    followers: Vec<Result<EngineReport, ReplayError>>,
    shared: &Shared,
) -> Result<(LeaderReport, Vec<EngineReport>), ReplayError> {
    let mut errors: Vec<ReplayError> = Vec::new();
    let leader = leader.map_err(|e| errors.push(e)).ok();
    let followers: Vec<EngineReport> = followers
        .into_iter()
        .filter_map(|r| r.map_err(|e| errors.push(e)).ok())
        .collect();
    let rank_of = |e: &ReplayError| match e {
        ReplayError::Panicked { .. } => 0,
        ReplayError::Engine {
            source: EngineError::Stopped { .. },
            ..
        } => 2,
        _ => 1,
    };
    errors.sort_by_key(rank_of);
    match (errors.into_iter().next(), leader) {
        (Some(ReplayError::Engine { source, .. }), _) => Err(ReplayError::Engine {
            source,
            positions: shared.positions(),
        }),
        (Some(e), _) => Err(e),
        (None, Some(leader)) => Ok((leader, followers)),
        (None, None) => Err(ReplayError::Params(
            "the leader engine returned no report".into(),
        )),
    }
}

fn run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Deadlines;
    use std::path::PathBuf;

    fn params(sockets: Vec<PathBuf>) -> ReplayParams {
        let mut p = ReplayParams::new(sockets);
        p.deadlines = Deadlines {
            connect: Duration::from_millis(300),
            ..Deadlines::default()
        };
        p.pool_dir = std::env::temp_dir().join("tandem-replay-test");
        p
    }

    #[test]
    fn bad_parameters_fail_before_anything_starts() {
        let err = run_replay(&params(vec![]), Vec::new(), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad replay parameters: sockets: at least one engine socket (rank 0) is needed"
        );
    }

    #[test]
    fn a_missing_agent_ends_in_a_join_error_naming_every_rank() {
        let dir = tempfile::tempdir().unwrap();
        let sockets = vec![dir.path().join("rank0.sock"), dir.path().join("rank1.sock")];
        let calls = std::cell::Cell::new(0);
        let count = |_: &ReplayProgress| calls.set(calls.get() + 1);
        let err = run_replay(&params(sockets), Vec::new(), Some(&count)).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(
                err,
                ReplayError::Engine {
                    source: EngineError::Join { .. },
                    ..
                }
            ),
            "{text}"
        );
        assert!(text.contains("cannot join the group within"), "{text}");
        assert!(
            text.contains("where each rank stood:\n  rank 0 (leader): not joined"),
            "{text}"
        );
        assert!(text.contains("  rank 1 (follower): not joined"), "{text}");
        assert!(calls.get() >= 1, "progress is reported at least at the end");
    }
}
