//! One engine's connection to its agent and its page pool, and the way back into the group
//! after a failure.
//!
//! Owns: joining (connect with retry, hello, checking the world size, creating the pool with
//! the agent's shard size, registering it), sorting call errors into faults the engine
//! recovers from and refusals it cannot, and rejoining:
//! - **stale epoch** (the group restarted): hello on the same connection, register the pool
//!   again, continue at step 0 of the new epoch;
//! - **not ready**: wait a little, hello; the same epoch continues where it stood;
//! - **broken socket** (agent killed, or a reply past its deadline): connect again, hello,
//!   register again. If the call that broke changed group state (a store or load) and the
//!   group is still in the same epoch, the engine cannot know whether it took effect, so it
//!   waits for the new epoch the supervisor must start, and gives up with
//!   [`EngineError::Ambiguous`] after the recovery deadline.
//!
//! It never reconnects for any other reason: the agent counts an engine disconnect as a rank
//! failure. Every wait is bounded by [`crate::Deadlines`].

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tandem_client::wire::WireError;
use tandem_client::{AgentError, ClientError, EngineClient, PagePool, Welcome};

use crate::error::EngineError;
use crate::params::{Deadlines, ReplayParams};
use crate::shared::Shared;

/// Pause between attempts while rejoining or joining.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Longest single connect attempt, so the stop flag is seen.
const CONNECT_SLICE: Duration = Duration::from_millis(500);

/// A failure the engine recovers from by rejoining.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The group moved to another epoch.
    Stale(String),
    /// The group is not ready in this epoch.
    NotReady(String),
    /// The socket broke, timed out or could not connect.
    Broken(String),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Stale(s) | Fault::NotReady(s) | Fault::Broken(s) => f.write_str(s),
        }
    }
}

/// How a failed call is handled.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Rejoin and go on.
    Fault(Fault),
    /// A typed refusal the caller interprets (window full, leader behind, wrong step) or
    /// reports as fatal.
    Agent(AgentError),
    /// The agent broke the contract (a reply of the wrong kind, a malformed message).
    Protocol(String),
}

/// Sort a client error.
pub(crate) fn classify(err: ClientError) -> Failure {
    match err {
        ClientError::Agent(e @ AgentError::StaleEpoch { .. }) => {
            Failure::Fault(Fault::Stale(e.to_string()))
        }
        ClientError::Agent(e @ AgentError::NotReady { .. }) => {
            Failure::Fault(Fault::NotReady(e.to_string()))
        }
        ClientError::Agent(e) => Failure::Agent(e),
        ClientError::Wire(e @ WireError::Io(_)) => Failure::Fault(Fault::Broken(e.to_string())),
        e @ (ClientError::Connect { .. }
        | ClientError::Timeout { .. }
        | ClientError::Broken { .. }) => Failure::Fault(Fault::Broken(e.to_string())),
        e @ (ClientError::Wire(_) | ClientError::UnexpectedReply { .. }) => {
            Failure::Protocol(e.to_string())
        }
    }
}

/// What a rejoin found.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rejoined {
    /// The group is in another epoch than before the failure.
    pub new_epoch: bool,
    /// The agent's welcome.
    pub welcome: Welcome,
}

/// Where the failure happened, for rejoin errors.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FailedCall {
    /// The call.
    pub call: &'static str,
    /// The engine's step.
    pub step: u64,
    /// Whether the call changes group state (store, load): a broken socket then needs a new
    /// epoch.
    pub mutates: bool,
}

/// An engine's agent connection and page pool.
pub(crate) struct Session {
    rank: u32,
    client: EngineClient,
    pool: PagePool,
    deadlines: Deadlines,
}

impl Session {
    /// Join the group as `rank`: connect, hello, create the pool, register it.
    ///
    /// # Errors
    /// [`EngineError::Join`], [`EngineError::WorldSize`], [`EngineError::Pool`],
    /// [`EngineError::Refused`], [`EngineError::Stopped`].
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
        let deadlines = params.deadlines;
        let started = Instant::now();
        let mut client = connect_until(rank, &socket, started, deadlines.connect, shared)?;
        let welcome = client.welcome();
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
        loop {
            match client.register_buffer(&pool) {
                Ok(_) => break,
                Err(e) => {
                    let detail = e.to_string();
                    match classify(e) {
                        Failure::Fault(Fault::Broken(_)) => {
                            client =
                                connect_until(rank, &socket, started, deadlines.connect, shared)?
                        }
                        Failure::Fault(_) => {
                            if started.elapsed() > deadlines.connect {
                                return Err(EngineError::Rejoin {
                                    rank,
                                    call: "register_buffer",
                                    epoch: client.epoch().0,
                                    step: 0,
                                    waited_ms: ms(started),
                                    last: detail,
                                });
                            }
                            shared.sleep(RETRY_PAUSE);
                            let _ = client.hello();
                        }
                        Failure::Agent(source) => {
                            return Err(EngineError::Refused {
                                rank,
                                call: "register_buffer",
                                epoch: client.epoch().0,
                                step: 0,
                                source,
                            })
                        }
                        Failure::Protocol(detail) => {
                            return Err(EngineError::Protocol {
                                rank,
                                call: "register_buffer",
                                epoch: client.epoch().0,
                                step: 0,
                                detail,
                            })
                        }
                    }
                }
            }
            if shared.stopped() {
                return Err(EngineError::Stopped { rank });
            }
        }
        Ok(Session {
            rank,
            client,
            pool,
            deadlines,
        })
    }

    /// The client, for calls.
    pub(crate) fn client(&mut self) -> &mut EngineClient {
        &mut self.client
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
        self.client.epoch().0
    }

    /// What the last hello answered.
    pub(crate) fn welcome(&self) -> Welcome {
        self.client.welcome()
    }

    /// Get back into the group after `fault` in `failed`, within the recovery deadline.
    ///
    /// # Errors
    /// [`EngineError::Rejoin`], [`EngineError::Ambiguous`], [`EngineError::Refused`],
    /// [`EngineError::Protocol`], [`EngineError::Stopped`].
    pub(crate) fn rejoin(
        &mut self,
        fault: &Fault,
        failed: FailedCall,
        shared: &Shared,
    ) -> Result<Rejoined, EngineError> {
        let rank = self.rank;
        let old_epoch = self.epoch();
        let started = Instant::now();
        let mut broken = matches!(fault, Fault::Broken(_));
        let need_new_epoch = broken && failed.mutates;
        let mut stayed = false;
        let mut must_register = false;
        let mut last = fault.to_string();
        let mut pause = !matches!(fault, Fault::Stale(_));
        loop {
            if shared.stopped() {
                return Err(EngineError::Stopped { rank });
            }
            if started.elapsed() > self.deadlines.recovery {
                let waited_ms = ms(started);
                // Ambiguous only when the agent answered in the old epoch: an agent that never
                // came back is a plain failure to rejoin.
                return Err(if need_new_epoch && stayed {
                    EngineError::Ambiguous {
                        rank,
                        call: failed.call,
                        epoch: old_epoch,
                        step: failed.step,
                        waited_ms,
                    }
                } else {
                    EngineError::Rejoin {
                        rank,
                        call: failed.call,
                        epoch: old_epoch,
                        step: failed.step,
                        waited_ms,
                        last,
                    }
                });
            }
            if pause {
                shared.sleep(RETRY_PAUSE);
            }
            pause = true;
            let welcome = if broken {
                // The same client reconnects, so the outcomes it already received stay
                // suppressed when the new epoch redelivers them.
                match self.client.reconnect(CONNECT_SLICE) {
                    Ok(w) => {
                        broken = false;
                        must_register = true;
                        w
                    }
                    Err(e) => {
                        last = e.to_string();
                        continue;
                    }
                }
            } else {
                match self.client.hello() {
                    Ok(w) => w,
                    Err(e) => {
                        last = e.to_string();
                        broken = self.settle(e, "hello", failed.step)?;
                        continue;
                    }
                }
            };
            let new_epoch = welcome.epoch.0 != old_epoch;
            if !new_epoch && need_new_epoch {
                stayed = true;
                last = format!("the group is still in epoch {old_epoch}");
                continue;
            }
            if new_epoch || must_register {
                if let Err(e) = self.client.register_buffer(&self.pool) {
                    last = e.to_string();
                    must_register = true;
                    broken = self.settle(e, "register_buffer", failed.step)?;
                    continue;
                }
            }
            return Ok(Rejoined { new_epoch, welcome });
        }
    }

    /// Sort an error met while rejoining: `Ok(true)` when the socket broke, `Ok(false)` to
    /// retry on the same connection, `Err` when no retry can help.
    fn settle(&self, e: ClientError, call: &'static str, step: u64) -> Result<bool, EngineError> {
        let (rank, epoch) = (self.rank, self.epoch());
        match classify(e) {
            Failure::Fault(Fault::Broken(_)) => Ok(true),
            Failure::Fault(_) => Ok(false),
            Failure::Agent(source) => Err(EngineError::Refused {
                rank,
                call,
                epoch,
                step,
                source,
            }),
            Failure::Protocol(detail) => Err(EngineError::Protocol {
                rank,
                call,
                epoch,
                step,
                detail,
            }),
        }
    }
}

fn connect_until(
    rank: u32,
    socket: &PathBuf,
    started: Instant,
    deadline: Duration,
    shared: &Shared,
) -> Result<EngineClient, EngineError> {
    loop {
        if shared.stopped() {
            return Err(EngineError::Stopped { rank });
        }
        match EngineClient::connect(socket, rank, CONNECT_SLICE) {
            Ok(c) => return Ok(c),
            Err(source) => {
                if started.elapsed() > deadline {
                    return Err(EngineError::Join {
                        rank,
                        waited_ms: ms(started),
                        source,
                    });
                }
                if let Failure::Agent(refusal) = classify_ref(&source) {
                    return Err(EngineError::Refused {
                        rank,
                        call: "hello",
                        epoch: 0,
                        step: 0,
                        source: refusal,
                    });
                }
                shared.sleep(RETRY_PAUSE);
            }
        }
    }
}

/// Whether a join error is a refusal no retry can fix (for example a rank mismatch).
fn classify_ref(e: &ClientError) -> Failure {
    match e {
        ClientError::Agent(
            a @ (AgentError::BadRequest { .. }
            | AgentError::NotLeader { .. }
            | AgentError::Buffer { .. }),
        ) => Failure::Agent(a.clone()),
        _ => Failure::Fault(Fault::NotReady(e.to_string())),
    }
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::ids::{Epoch, Step};

    #[test]
    fn errors_are_sorted_into_faults_refusals_and_violations() {
        let stale = ClientError::Agent(AgentError::StaleEpoch {
            ours: Epoch(3),
            theirs: Epoch(2),
        });
        assert!(
            matches!(classify(stale), Failure::Fault(Fault::Stale(s)) if s == "stale epoch: request for epoch 2, the group is at epoch 3")
        );
        let not_ready = ClientError::Agent(AgentError::NotReady {
            reason: "joining".into(),
        });
        assert!(matches!(
            classify(not_ready),
            Failure::Fault(Fault::NotReady(_))
        ));
        let eof = ClientError::Wire(WireError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "eof",
        )));
        assert!(matches!(classify(eof), Failure::Fault(Fault::Broken(_))));
        let behind = ClientError::Agent(AgentError::LeaderBehind {
            rank: 1,
            epoch: Epoch(1),
            wanted: Step(3),
            sealed: None,
        });
        assert!(matches!(
            classify(behind),
            Failure::Agent(AgentError::LeaderBehind { .. })
        ));
        let odd = ClientError::UnexpectedReply {
            request: "ack",
            reply: "Acked".into(),
        };
        assert!(
            matches!(classify(odd), Failure::Protocol(s) if s == "unexpected reply to ack: Acked")
        );
        let malformed = ClientError::Wire(WireError::Malformed("bad".into()));
        assert!(matches!(classify(malformed), Failure::Protocol(_)));
        assert!(matches!(
            classify_ref(&ClientError::Agent(AgentError::BadRequest {
                reason: "rank".into()
            })),
            Failure::Agent(_)
        ));
        assert!(matches!(
            classify_ref(&ClientError::Agent(AgentError::NotReady {
                reason: "x".into()
            })),
            Failure::Fault(_)
        ));
        assert_eq!(
            Fault::Broken("engine socket: eof".into()).to_string(),
            "engine socket: eof"
        );
    }
}
