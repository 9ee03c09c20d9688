//! The `SupervisorActor` and its restart state machine against the in-memory twin of the log
//! (`MemoryLog`) on a `ManualClock`: each round is one `Observe`, so every step is
//! deterministic and nothing sleeps. The same actor runs against Redis with real agent
//! processes in the workspace's process tests (`tests/restart.rs`, `tests/faults.rs`).

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr};
use tandem_config::TandemConfig;
use tandem_durable::{
    EpochStore, FailureReport, GroupState, Heartbeat, LivenessStore, ManualClock, MemoryLog,
    SupervisorState, WallClock,
};
use tandem_proto::{Epoch, Rank};
use tandem_supervisor::cadence::{machine_config, policy, Cadence};
use tandem_supervisor::runner::start_state;
use tandem_supervisor::view::Published;
use tandem_supervisor::{
    Backends, Exit, Observe, RestartMachine, Supervisor, SupervisorActor, SupervisorError,
    SupervisorView, SupervisorWiring,
};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

const T0: u64 = 1_700_000_000_000;
const WORLD: u32 = 2;

/// One supervisor on an in-memory group, driven round by round.
struct Rig {
    log: MemoryLog,
    clock: ManualClock,
    config: TandemConfig,
    addr: Addr<SupervisorActor>,
    published: Published,
    shutdown: CancellationToken,
    done: Option<oneshot::Receiver<Result<Exit, SupervisorError>>>,
}

fn config(max_restarts: u32) -> TandemConfig {
    let mut c = TandemConfig::default();
    c.supervisor.heartbeat_timeout_ms = 500;
    c.supervisor.max_restarts = max_restarts;
    c.supervisor.restart_window_s = 60;
    c.supervisor.backoff_initial_ms = 100;
    c.supervisor.backoff_max_ms = 1_000;
    c
}

impl Rig {
    /// A supervisor that starts the group (or continues it) on `log`, with a jitter of 1
    /// (the full backoff).
    async fn start(log: MemoryLog, clock: ManualClock, config: TandemConfig) -> Rig {
        let state = start_state(&log).await.expect("start state");
        let published = Published::new(&config.group.id, WORLD);
        let (done_tx, done) = oneshot::channel();
        let shutdown = CancellationToken::new();
        let addr = SupervisorActor::new(SupervisorWiring {
            group: config.group.id.clone(),
            world_size: WORLD,
            machine: RestartMachine::new(
                machine_config(&config.supervisor, WORLD),
                state,
                clock.now_ms(),
            ),
            backends: Backends {
                epochs: Arc::new(log.clone()),
                liveness: Arc::new(log.clone()),
            },
            clock: Arc::new(clock.clone()),
            launcher: None,
            published: published.clone(),
            cadence: Cadence::from_config(&config.supervisor),
            window_ms: policy(&config.supervisor).window_ms,
            jitter: Box::new(|| 1.0),
            shutdown: shutdown.clone(),
            autonomous: false,
            done: done_tx,
        })
        .start();
        Rig {
            log,
            clock,
            config,
            addr,
            published,
            shutdown,
            done: Some(done),
        }
    }

    async fn round(&self) -> SupervisorView {
        self.addr.send(Observe).await.expect("the actor runs");
        self.published.snapshot().expect("a view")
    }

    /// Every rank in `ranks` beats now in `epoch` and joins it.
    async fn ranks_alive(&self, epoch: Epoch, ranks: &[u32]) {
        for &r in ranks {
            let beat = Heartbeat {
                epoch,
                unix_ms: self.clock.now_ms(),
                incarnation: 1,
            };
            self.log.heartbeat(Rank(r), beat, 60_000).await.unwrap();
            self.log.join(epoch, Rank(r)).await.unwrap();
        }
    }

    async fn stored(&self) -> SupervisorState {
        self.log
            .load_supervisor_state()
            .await
            .unwrap()
            .expect("saved")
    }

    async fn exit(&mut self) -> Result<Exit, SupervisorError> {
        let done = self.done.take().expect("exit awaited once");
        tokio::time::timeout(Duration::from_secs(10), done)
            .await
            .expect("the actor stops within 10 s")
            .expect("the actor sends its exit")
    }
}

fn group() -> (MemoryLog, ManualClock) {
    let clock = ManualClock::new(T0);
    let log = MemoryLog::with_clock(WORLD, Arc::new(clock.clone()));
    (log, clock)
}

#[actix_rt::test]
async fn a_silent_rank_restarts_the_whole_group_into_a_new_epoch() {
    let (log, clock) = group();
    let rig = Rig::start(log, clock, config(3)).await;
    assert_eq!(rig.stored().await.epoch, Epoch(1), "the group starts at 1");
    rig.ranks_alive(Epoch(1), &[0, 1]).await;
    let v = rig.round().await;
    assert!(v.ready, "{v:?}");
    assert_eq!((v.epoch, v.state.as_str()), (1, "healthy"));

    // Rank 1 goes silent; rank 0 keeps beating.
    rig.clock.advance(600);
    rig.ranks_alive(Epoch(1), &[0]).await;
    let v = rig.round().await;
    assert_eq!(v.state, "restarting", "{v:?}");
    assert!(!v.ready);
    assert!(
        v.reason
            .as_deref()
            .is_some_and(|r| r.contains("rank 1 silent for 600 ms")),
        "{v:?}"
    );
    assert_eq!(
        rig.log.current_epoch().await.unwrap(),
        Epoch(1),
        "the backoff (100 ms) is not over"
    );

    rig.clock.advance(100);
    let v = rig.round().await;
    assert_eq!(rig.log.current_epoch().await.unwrap(), Epoch(2));
    assert_eq!(v.epoch, 2);
    assert_eq!(v.restarts_total, 1);
    assert_eq!(v.restart_history.len(), 1, "{v:?}");
    let record = &v.restart_history[0];
    assert_eq!((record.from_epoch, record.epoch), (1, 2));
    assert_eq!(record.unix_ms, T0 + 700);
    assert!(record.cause.contains("rank 1 silent"), "{record:?}");
    let stored = rig.stored().await;
    assert_eq!(stored.epoch, Epoch(2));
    assert_eq!(stored.restarts_ms, vec![T0 + 700]);
    assert!(matches!(stored.state, GroupState::Restarting { .. }));

    // Both ranks rejoin the new epoch: healthy again, the recovery measured.
    rig.clock.advance(250);
    rig.ranks_alive(Epoch(2), &[0, 1]).await;
    let v = rig.round().await;
    assert!(v.ready, "{v:?}");
    assert_eq!(v.last_recovery_ms, Some(350));
    assert_eq!(rig.stored().await.state, GroupState::Healthy);
}

#[actix_rt::test]
async fn a_failure_report_past_the_limit_marks_the_group_failed_and_exits() {
    let (log, clock) = group();
    let mut rig = Rig::start(log, clock, config(1)).await;
    rig.ranks_alive(Epoch(1), &[0, 1]).await;
    rig.round().await;

    // The first report restarts the group (one restart allowed).
    let report = |epoch| FailureReport {
        epoch: Epoch(epoch),
        rank: Rank(0),
        reason: "lost rank 1".into(),
    };
    rig.log.report_failure(&report(1)).await.unwrap();
    rig.round().await;
    rig.clock.advance(100);
    rig.round().await;
    assert_eq!(rig.log.current_epoch().await.unwrap(), Epoch(2));

    // A report about the old epoch is not about this one.
    rig.log.report_failure(&report(1)).await.unwrap();
    rig.ranks_alive(Epoch(2), &[0, 1]).await;
    assert!(rig.round().await.ready);

    rig.log.report_failure(&report(2)).await.unwrap();
    let v = rig.round().await;
    assert_eq!(v.state, "failed", "{v:?}");
    let stored = rig.stored().await;
    let GroupState::Failed { reason } = &stored.state else {
        panic!("stored {stored:?}");
    };
    assert!(reason.contains("reached the limit of 1"), "{reason}");
    assert_eq!(rig.exit().await.unwrap(), Exit::GroupFailed(reason.clone()));
    assert_eq!(
        rig.log.current_epoch().await.unwrap(),
        Epoch(2),
        "no restart"
    );

    // A new supervisor does not resurrect the failed group.
    let again = Supervisor::new(rig.config.clone(), None);
    let backends = Backends {
        epochs: Arc::new(rig.log.clone()),
        liveness: Arc::new(rig.log.clone()),
    };
    let exit = again
        .run_with(
            backends,
            Arc::new(rig.clock.clone()),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(exit, Exit::GroupFailed(reason.clone()));
}

#[actix_rt::test]
async fn blind_while_the_log_is_unreachable_then_judged_afresh() {
    let (log, clock) = group();
    let rig = Rig::start(log, clock, config(3)).await;
    rig.ranks_alive(Epoch(1), &[0, 1]).await;
    rig.round().await;

    rig.log.set_unavailable(Some("connection refused"));
    rig.clock.advance(10_000);
    let v = rig.round().await;
    assert!(!v.ready);
    assert!(
        v.reason
            .as_deref()
            .is_some_and(|r| r.starts_with("Redis unreachable:")),
        "{v:?}"
    );
    assert!(v.redis.contains("connection refused"), "{v:?}");

    // Back: the ranks could not beat meanwhile; they get the start-up grace, not a restart.
    rig.log.set_unavailable(None);
    rig.clock.advance(100);
    let v = rig.round().await;
    assert_eq!(v.state, "healthy", "{v:?}");
    assert_eq!(rig.log.current_epoch().await.unwrap(), Epoch(1));
    rig.ranks_alive(Epoch(1), &[0, 1]).await;
    assert!(rig.round().await.ready);
}

#[actix_rt::test]
async fn a_supervisor_restarted_over_a_healthy_group_continues_it() {
    let (log, clock) = group();
    let state = SupervisorState {
        epoch: Epoch(4),
        restarts_ms: vec![T0 - 1_000],
        state: GroupState::Healthy,
    };
    for _ in 0..4 {
        log.next_epoch().await.unwrap();
    }
    log.save_supervisor_state(&state).await.unwrap();
    let rig = Rig::start(log, clock, config(3)).await;
    rig.ranks_alive(Epoch(4), &[0, 1]).await;
    let v = rig.round().await;
    assert!(v.ready, "{v:?}");
    assert_eq!(v.epoch, 4);
    assert_eq!(v.restarts_in_window, 1);
    assert_eq!(rig.stored().await, state, "nothing rewritten");
    assert_eq!(rig.log.current_epoch().await.unwrap(), Epoch(4));
}

#[actix_rt::test]
async fn the_shutdown_token_stops_the_actor_even_during_a_backoff() {
    let (log, clock) = group();
    let mut rig = Rig::start(log, clock, config(3)).await;
    rig.ranks_alive(Epoch(1), &[0, 1]).await;
    rig.log
        .report_failure(&FailureReport {
            epoch: Epoch(1),
            rank: Rank(1),
            reason: "peer reset".into(),
        })
        .await
        .unwrap();
    assert_eq!(rig.round().await.state, "restarting");
    rig.shutdown.cancel();
    assert_eq!(rig.exit().await.unwrap(), Exit::Stopped);
    assert_eq!(
        rig.log.current_epoch().await.unwrap(),
        Epoch(1),
        "the pending restart was dropped with the supervisor"
    );
}

#[actix_rt::test]
async fn run_with_restarts_on_its_own_cadence_and_stops_on_the_token() {
    // The autonomous actor on the system clock: rounds every 20 ms by themselves.
    let log = MemoryLog::new(WORLD);
    let mut config = config(3);
    config.supervisor.heartbeat_interval_ms = 20;
    config.supervisor.heartbeat_timeout_ms = 60_000;
    config.supervisor.backoff_initial_ms = 10;
    let supervisor = Supervisor::new(config, None);
    let published = supervisor.published();
    let shutdown = CancellationToken::new();
    let backends = Backends {
        epochs: Arc::new(log.clone()),
        liveness: Arc::new(log.clone()),
    };
    let clock: Arc<dyn WallClock> = Arc::new(tandem_durable::SystemClock);
    let run = actix_rt::spawn(supervisor.run_with(backends, clock.clone(), shutdown.clone()));
    let wait_for = |what: &'static str, f: Box<dyn Fn(&SupervisorView) -> bool>| {
        let published = published.clone();
        async move {
            for _ in 0..500 {
                if published.snapshot().is_some_and(|v| f(&v)) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("{what} within 5 s: {:?}", published.snapshot());
        }
    };
    wait_for("epoch 1", Box::new(|v| v.epoch == 1 && v.redis == "ok")).await;
    log.report_failure(&FailureReport {
        epoch: Epoch(1),
        rank: Rank(0),
        reason: "engine gone".into(),
    })
    .await
    .unwrap();
    wait_for("a restart into epoch 2", Box::new(|v| v.epoch == 2)).await;
    assert_eq!(log.current_epoch().await.unwrap(), Epoch(2));
    shutdown.cancel();
    let exit = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stops within 5 s")
        .expect("joined")
        .expect("no error");
    assert_eq!(exit, Exit::Stopped);
}
