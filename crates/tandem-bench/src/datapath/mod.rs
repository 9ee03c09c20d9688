//! The data-path benchmark behind `tandem bench datapath`: a block from engine pages to every
//! rank's tier and back, timed from the engine's `store` / `load` call to the frame that
//! reports the task finished, through real agents (the caller starts the group and passes the
//! engine sockets).
//!
//! Owns the engine side of one case ([`drive_case`]: page pools, one engine thread per
//! follower, the leader's calls, verification of every loaded byte) and the baselines measured
//! beside it ([`copy_floor`], [`disk_floor`]). It never starts agents and never asserts a time;
//! it must never be called from a test except through the `tandem bench datapath --quick`
//! smoke test, which checks only that every case produced figures.
//!
//! # Layout
//! - `engines`: [`drive_case`], the leader's store then load of the working set, lookups and
//!   the control floor, the followers' frame readers, the content checks.
//! - `baseline`: [`copy_floor`] (memcpy between shared-memory buffers of the same shape, one
//!   thread), [`concurrent_copy_floor`] (the same, one copy per rank at once) and
//!   [`disk_floor`] (pwrite / pread of the same bytes, shard by shard, in the same directory;
//!   [`concurrent_disk_floor`]: one such loop per rank at once, each on its own file).
//! - `figures`: [`Latency`], [`PhaseFigures`], [`CaseFigures`].
//! - `trace`: each follower thread's last call and reply, for the report of a case that
//!   failed (with the caller's [`StatusProbe`]: every agent's own view).

mod baseline;
mod engines;
mod figures;
mod trace;

pub use baseline::{concurrent_copy_floor, concurrent_disk_floor, copy_floor, disk_floor, Floor};
pub use engines::{drive_case, DriveOptions, StatusProbe};
pub use figures::{CaseFigures, Latency, PhaseFigures};

/// Why a case could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum DatapathError {
    /// A baseline file, a pool file or a thread could not be used.
    #[error("datapath: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An engine page pool could not be created or mapped.
    #[error("datapath: {0}")]
    Pool(#[from] tandem_client::PagePoolError),
    /// A call of one rank's engine failed.
    #[error("datapath: rank {rank}: {source}")]
    Session {
        /// The rank.
        rank: u32,
        /// The session's error.
        source: tandem_client::SessionError,
    },
    /// A task did not finish `Ok`, a lookup did not match, or loaded bytes were wrong.
    #[error("datapath: {0}")]
    Check(String),
    /// The leader's side failed (`source`); `state` is where every follower engine and agent
    /// stood at that moment (each follower's last call and its reply, the caller's probe).
    #[error("{source}\n--- state when it failed ---\n{state}")]
    Failed {
        /// The leader's error.
        source: Box<DatapathError>,
        /// Every follower's last call, then the probe's text.
        state: String,
    },
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DatapathError {
    let what = what.into();
    move |source| DatapathError::Io { what, source }
}
