//! One engine's [`EngineSession`] and page pool, and what its errors mean for the replay.
//!
//! Owns joining (connect with retry, checking the world size, creating the pool with the
//! agent's shard size, registering it) and the translation of session errors into the
//! replay's: a new epoch is something the engine loops handle ([`Interrupt::NewEpoch`]);
//! every other error ends the engine with an [`EngineError`] that names its rank and position.
//! Stale epochs, "not ready" and broken sockets are the session's business
//! ([`tandem_client::session`]): the replay does not re-implement the way back into the group.

use tandem_client::{AgentError, EngineSession, PagePool, SessionConfig, SessionError, Welcome};

use crate::error::EngineError;
use crate::params::ReplayParams;
use crate::shared::Shared;

/// How a failed session call ends for an engine loop.
#[derive(Debug)]
pub(crate) enum Interrupt {
    /// The group restarted: the session is at step 0 of the new epoch; `waited_ms` is how long
    /// the call spent from its first failure to the rejoin.
    NewEpoch {
        /// The epoch before.
        from: u64,
        /// Milliseconds from the failure to the rejoin.
        waited_ms: u64,
    },
    /// A typed refusal the loop may handle (window full, leader behind).
    Agent(AgentError),
    /// The engine stops.
    Fatal(EngineError),
}

impl From<EngineError> for Interrupt {
    fn from(e: EngineError) -> Self {
        Interrupt::Fatal(e)
    }
}

/// An engine's session and page pool.
pub(crate) struct Session {
    rank: u32,
    inner: EngineSession,
    pool: PagePool,
}

impl Session {
    /// Join the group as `rank`: connect, hello, create the pool, register it.
    ///
    /// # Errors
    /// [`EngineError::Join`], [`EngineError::WorldSize`], [`EngineError::Pool`],
    /// [`EngineError::Refused`], [`EngineError::Stopped`], and as [`sort`].
    pub(crate) fn open(
        rank: u32,
        params: &ReplayParams,
        shared: &Shared,
        run_id: &str,
    ) -> Result<Session, EngineError> {
        let socket = params
            .sockets
            .get(rank as usize)
            .cloned()
            .unwrap_or_default();
        let config = SessionConfig {
            connect: params.deadlines.connect,
            recovery: params.deadlines.recovery,
            ..SessionConfig::default()
        };
        let mut inner =
            EngineSession::connect_cancellable(&socket, rank, config, Some(shared.stop_flag()))
                .map_err(|e| match e {
                    SessionError::Join {
                        rank,
                        waited_ms,
                        source,
                    } => EngineError::Join {
                        rank,
                        waited_ms,
                        source,
                    },
                    e => fatal(rank, "hello", 0, 0, e),
                })?;
        let welcome = inner.welcome();
        if welcome.world_size != params.world_size() {
            return Err(EngineError::WorldSize {
                rank,
                agent: welcome.world_size,
                given: params.world_size(),
            });
        }
        let path = params.pool_dir.join(format!("{run_id}-rank{rank}.pages"));
        let pool = PagePool::create(&path, u64::from(params.pool_pages), welcome.shard_bytes)
            .map_err(|source| EngineError::Pool { rank, source })?;
        match inner.register_pool(&pool) {
            // Registered in whatever epoch the group is in now.
            Ok(_) | Err(SessionError::NewEpoch { .. }) => {}
            Err(e) => {
                let (epoch, step) = (inner.epoch().0, inner.step().0);
                return Err(fatal(rank, "register_buffer", epoch, step, e));
            }
        }
        Ok(Session { rank, inner, pool })
    }

    /// The engine session, for calls.
    pub(crate) fn s(&mut self) -> &mut EngineSession {
        &mut self.inner
    }

    /// The page pool.
    pub(crate) fn pool(&self) -> &PagePool {
        &self.pool
    }

    /// The page pool, for writing.
    pub(crate) fn pool_mut(&mut self) -> &mut PagePool {
        &mut self.pool
    }

    /// The epoch the engine works in.
    pub(crate) fn epoch(&self) -> u64 {
        self.inner.epoch().0
    }

    /// What the last hello answered.
    pub(crate) fn welcome(&self) -> Welcome {
        self.inner.welcome()
    }

    /// Sort `e`, met in `call` at the engine's `step` (see [`sort`]).
    pub(crate) fn sort(&self, e: SessionError, call: &'static str, step: u64) -> Interrupt {
        sort(self.rank, self.epoch(), step, call, e)
    }

    /// A refusal no loop handles, at the engine's `step`: the engine stops.
    pub(crate) fn refused(&self, source: AgentError, call: &'static str, step: u64) -> Interrupt {
        Interrupt::Fatal(EngineError::Refused {
            rank: self.rank,
            call,
            epoch: self.epoch(),
            step,
            source,
        })
    }

    /// End the run: the counters of the task map and the tasks still open (lost).
    pub(crate) fn close(self) -> (tandem_client::TaskTally, Vec<tandem_client::StartedTask>) {
        self.inner.close()
    }
}

/// What a session error means for an engine at `step` of `epoch`: a new epoch and typed
/// refusals go back to the loop, the rest ends the engine.
pub(crate) fn sort(
    rank: u32,
    epoch: u64,
    step: u64,
    call: &'static str,
    e: SessionError,
) -> Interrupt {
    match e {
        SessionError::NewEpoch {
            from, waited_ms, ..
        } => Interrupt::NewEpoch {
            from: from.0,
            waited_ms,
        },
        SessionError::Agent(a) => Interrupt::Agent(a),
        e => Interrupt::Fatal(fatal(rank, call, epoch, step, e)),
    }
}

/// The engine error for a session error no loop handles.
fn fatal(rank: u32, call: &'static str, epoch: u64, step: u64, e: SessionError) -> EngineError {
    match e {
        SessionError::Agent(source) => EngineError::Refused {
            rank,
            call,
            epoch,
            step,
            source,
        },
        SessionError::Rejoin {
            call,
            epoch,
            step,
            waited_ms,
            last,
            ..
        } => EngineError::Rejoin {
            rank,
            call,
            epoch: epoch.0,
            step: step.0,
            waited_ms,
            last,
        },
        SessionError::Ambiguous {
            call,
            epoch,
            step,
            waited_ms,
            ..
        } => EngineError::Ambiguous {
            rank,
            call,
            epoch: epoch.0,
            step: step.0,
            waited_ms,
        },
        SessionError::Cancelled { .. } => EngineError::Stopped { rank },
        SessionError::Join {
            waited_ms, source, ..
        } => EngineError::Join {
            rank,
            waited_ms,
            source,
        },
        SessionError::Protocol { detail, .. } => EngineError::Protocol {
            rank,
            call,
            epoch,
            step,
            detail,
        },
        e @ (SessionError::NewEpoch { .. }
        | SessionError::Client(_)
        | SessionError::PageOutOfRange { .. }) => EngineError::Protocol {
            rank,
            call,
            epoch,
            step,
            detail: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::ids::{Epoch, Step};

    #[test]
    fn new_epochs_and_refusals_go_back_to_the_loop_and_the_rest_is_fatal() {
        let e = SessionError::NewEpoch {
            call: "frame",
            from: Epoch(2),
            to: Epoch(3),
            waited_ms: 40,
        };
        assert!(matches!(
            sort(1, 2, 7, "frame", e),
            Interrupt::NewEpoch {
                from: 2,
                waited_ms: 40
            }
        ));
        let behind = SessionError::Agent(AgentError::LeaderBehind {
            rank: 1,
            epoch: Epoch(1),
            wanted: Step(3),
            sealed: None,
        });
        assert!(matches!(
            sort(1, 1, 3, "frame", behind),
            Interrupt::Agent(AgentError::LeaderBehind { .. })
        ));
        let gone = SessionError::Rejoin {
            rank: 1,
            call: "frame",
            epoch: Epoch(1),
            step: Step(3),
            waited_ms: 60_000,
            last: "engine socket: eof".into(),
        };
        let Interrupt::Fatal(e) = sort(1, 1, 3, "frame", gone) else {
            panic!("a failed rejoin ends the engine")
        };
        assert_eq!(
            e.to_string(),
            "rank 1: could not rejoin the group within 60000 ms after frame failed at step 3 of epoch 1; last error: engine socket: eof"
        );
        let Interrupt::Fatal(e) = sort(2, 4, 0, "hello", SessionError::Cancelled { call: "hello" })
        else {
            panic!("cancelled is a stop")
        };
        assert!(matches!(e, EngineError::Stopped { rank: 2 }));
    }
}
