//! Test-only fault hooks: a panic injected at the Nth message of an actor, and disk faults
//! injected into the disk tier's transfers.
//!
//! Owns the parsing of `TANDEM_FAULT_PANIC_AT` (`store:N` or `protocol:N`, N ≥ 1) and of
//! `TANDEM_FAULT_DISK` ([`DiskFault`]), the per-actor message counters and the per-direction
//! page counters. It is compiled in only with the `fault-hooks` cargo feature (off by default,
//! never in a release build); without it [`message`] and [`disk_transfer`] do nothing and the
//! variables are ignored. It must never be the way an agent reports an error: it exists so
//! that a process test can exercise the real panic path ([`crate::panics`]) and the real
//! disk-error and disk-deadline paths ([`crate::disk_io`]). A test arms a hook on one rank by
//! setting the variable in that rank's agent process only.

#[cfg(all(feature = "fault-hooks", not(debug_assertions)))]
compile_error!("the fault-hooks feature is for debug builds of the process tests only");

/// The actor a hook counts messages of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    /// The `StoreActor`: one message per command of the core.
    Store,
    /// The `ProtocolActor`: one message per input of the core.
    Protocol,
}

/// The environment variable that arms the hook: `store:N` or `protocol:N`.
pub const PANIC_AT_VAR: &str = "TANDEM_FAULT_PANIC_AT";

/// Parses a hook's value: the actor and N (messages, counted from 1).
///
/// Errors: a text naming the value and the expected form.
pub fn parse(value: &str) -> Result<(Actor, u64), String> {
    let bad = || format!("{PANIC_AT_VAR}={value:?}: expected store:N or protocol:N with N >= 1");
    let (actor, n) = value.split_once(':').ok_or_else(bad)?;
    let actor = match actor {
        "store" => Actor::Store,
        "protocol" => Actor::Protocol,
        _ => return Err(bad()),
    };
    match n.parse::<u64>() {
        Ok(n) if n >= 1 => Ok((actor, n)),
        _ => Err(bad()),
    }
}

/// The environment variable that arms a disk fault (see [`DiskFault`] for its forms).
pub const DISK_VAR: &str = "TANDEM_FAULT_DISK";

/// A disk fault, counted in pages (one slot, one engine page: a transfer of the disk tier
/// counts the slots it carries pieces of, several in a batch; in a layerwise load a read
/// transfer is one layer of one slot, and counts as one page). A transfer that carries a page
/// the fault hits fails (or waits) whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskFault {
    /// `write-error:N`: every write after the first N fails with EIO.
    WriteError {
        /// Writes that succeed first, in pages.
        after: u64,
    },
    /// `enospc:N`: every write after the first N fails with ENOSPC.
    NoSpace {
        /// Writes that succeed first, in pages.
        after: u64,
    },
    /// `read-error:N`: every read after the first N fails with EIO.
    ReadError {
        /// Reads that succeed first, in pages.
        after: u64,
    },
    /// `delay-ms:M[:after:N]`: every transfer after the first N waits M ms first.
    Delay {
        /// The delay per page, in ms.
        ms: u64,
        /// Transfers (reads and writes) left alone first, in pages.
        after: u64,
    },
    /// `freeze-ms:M[:after:N]`: the disk freezes for M ms at the transfer after the first N
    /// (like `fsfreeze`: the transfers are serial, so every later one waits for the thaw too),
    /// then runs normally.
    Freeze {
        /// How long the freeze lasts, in ms.
        ms: u64,
        /// Transfers (reads and writes) left alone first, in pages.
        after: u64,
    },
}

/// Parses a disk fault: `write-error:N`, `enospc:N`, `read-error:N`, `delay-ms:M[:after:N]`
/// or `freeze-ms:M[:after:N]`.
///
/// Errors: a text naming the value and the expected forms.
pub fn parse_disk(value: &str) -> Result<DiskFault, String> {
    let bad = || {
        format!(
            "{DISK_VAR}={value:?}: expected write-error:N, enospc:N, read-error:N, \
             delay-ms:M[:after:N] or freeze-ms:M[:after:N]"
        )
    };
    let parts: Vec<&str> = value.split(':').collect();
    let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let after = |rest: &[&str]| match rest {
        [] => Ok(0),
        ["after", n] => num(n),
        _ => Err(bad()),
    };
    match parts.as_slice() {
        ["write-error", n] => Ok(DiskFault::WriteError { after: num(n)? }),
        ["enospc", n] => Ok(DiskFault::NoSpace { after: num(n)? }),
        ["read-error", n] => Ok(DiskFault::ReadError { after: num(n)? }),
        ["delay-ms", m, rest @ ..] => Ok(DiskFault::Delay {
            ms: num(m)?,
            after: after(rest)?,
        }),
        ["freeze-ms", m, rest @ ..] => Ok(DiskFault::Freeze {
            ms: num(m)?,
            after: after(rest)?,
        }),
        _ => Err(bad()),
    }
}

/// What an armed disk fault does to a transfer of `pages` pages whose last page is the `n`th
/// overall (`n_op`th of its direction, both counted from 1): the error it fails with, or the
/// wait before it runs, in ms.
#[cfg_attr(not(feature = "fault-hooks"), allow(dead_code))]
fn disk_effect(
    fault: DiskFault,
    write: bool,
    n: u64,
    n_op: u64,
    pages: u64,
) -> (Option<std::io::Error>, u64) {
    // Linux errno values.
    const EIO: i32 = 5;
    const ENOSPC: i32 = 28;
    match fault {
        DiskFault::WriteError { after } if write && n_op > after => {
            (Some(std::io::Error::from_raw_os_error(EIO)), 0)
        }
        DiskFault::NoSpace { after } if write && n_op > after => {
            (Some(std::io::Error::from_raw_os_error(ENOSPC)), 0)
        }
        DiskFault::ReadError { after } if !write && n_op > after => {
            (Some(std::io::Error::from_raw_os_error(EIO)), 0)
        }
        DiskFault::Delay { ms, after } if n > after => (None, ms),
        DiskFault::Freeze { ms, after } if n > after && n - pages.max(1) <= after => (None, ms),
        _ => (None, 0),
    }
}

#[cfg(feature = "fault-hooks")]
pub(crate) use hook::from_env;

#[cfg(feature = "fault-hooks")]
mod hook {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    use super::{disk_effect, parse, parse_disk, Actor, DiskFault, DISK_VAR, PANIC_AT_VAR};

    static ARMED: OnceLock<Option<(Actor, u64)>> = OnceLock::new();
    static DISK: OnceLock<Option<DiskFault>> = OnceLock::new();
    static TRANSFERS: AtomicU64 = AtomicU64::new(0);
    static WRITES: AtomicU64 = AtomicU64::new(0);
    static READS: AtomicU64 = AtomicU64::new(0);

    /// The hook armed by `var`, read and parsed once per process (`cell` keeps it); a value
    /// that does not parse is logged and ignored.
    pub(crate) fn from_env<T: Copy>(
        cell: &'static OnceLock<Option<T>>,
        var: &str,
        parse: fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        *cell.get_or_init(|| {
            let value = std::env::var(var).ok()?;
            parse(&value)
                .map_err(|e| tracing::warn!(error = %e, "fault hook ignored"))
                .ok()
        })
    }

    pub(super) fn disk_armed() -> Option<DiskFault> {
        from_env(&DISK, DISK_VAR, parse_disk)
    }

    pub(super) fn disk_transfer(write: bool, pages: u64) -> Option<std::io::Error> {
        let fault = disk_armed()?;
        let n = TRANSFERS.fetch_add(pages, Ordering::Relaxed) + pages;
        let n_op = if write { &WRITES } else { &READS }.fetch_add(pages, Ordering::Relaxed) + pages;
        let (error, wait_ms) = disk_effect(fault, write, n, n_op, pages);
        if wait_ms > 0 {
            if matches!(fault, DiskFault::Freeze { .. }) {
                tracing::warn!(
                    ms = wait_ms,
                    transfer = n,
                    "fault hook: the disk tier freezes"
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(wait_ms));
            if matches!(fault, DiskFault::Freeze { .. }) {
                tracing::warn!(transfer = n, "fault hook: the disk tier thaws");
            }
        }
        if let Some(e) = &error {
            tracing::warn!(transfer = n, error = %e, "fault hook: a disk transfer fails");
        }
        error
    }
    static STORE: AtomicU64 = AtomicU64::new(0);
    static PROTOCOL: AtomicU64 = AtomicU64::new(0);

    fn armed() -> Option<(Actor, u64)> {
        from_env(&ARMED, PANIC_AT_VAR, parse)
    }

    pub(super) fn announce() {
        if let Some(fault) = disk_armed() {
            tracing::warn!(?fault, "fault hook armed: disk transfers fail or wait");
        }
        if let Some((actor, n)) = armed() {
            tracing::warn!(
                ?actor,
                message = n,
                "fault hook armed: the actor panics at this message"
            );
        }
    }

    pub(super) fn message(actor: Actor) {
        let Some((target, n)) = armed() else {
            return;
        };
        if target != actor {
            return;
        }
        let counter = match actor {
            Actor::Store => &STORE,
            Actor::Protocol => &PROTOCOL,
        };
        if counter.fetch_add(1, Ordering::Relaxed) + 1 == n {
            panic!("fault hook: {actor:?} actor panics at message {n} ({PANIC_AT_VAR})");
        }
    }
}

/// Logs the armed hook, if any (at agent start, so a test can tell the hook is compiled in).
pub fn announce() {
    #[cfg(feature = "fault-hooks")]
    hook::announce();
}

/// One message of `actor` is being handled: panics when it is the armed Nth one (with the
/// `fault-hooks` feature; otherwise nothing).
#[inline]
pub fn message(actor: Actor) {
    #[cfg(feature = "fault-hooks")]
    hook::message(actor);
    #[cfg(not(feature = "fault-hooks"))]
    let _ = actor;
}

/// One transfer of the disk tier, carrying pieces of `pages` slots, is about to run on the
/// disk I/O thread (`write`: a write, else a read): the error an armed disk fault makes it fail with, after waiting as the fault
/// says (with the `fault-hooks` feature; otherwise `None` at once).
#[inline]
pub fn disk_transfer(write: bool, pages: u64) -> Option<std::io::Error> {
    #[cfg(feature = "fault-hooks")]
    return hook::disk_transfer(write, pages);
    #[cfg(not(feature = "fault-hooks"))]
    {
        let _ = (write, pages);
        None
    }
}

/// Whether a disk fault is armed (with the `fault-hooks` feature; otherwise never): every disk
/// read then goes through the disk I/O thread, where the fault applies, none straight from the
/// page cache (`DeadlineIo::cache_reads`).
#[inline]
pub fn disk_fault_armed() -> bool {
    #[cfg(feature = "fault-hooks")]
    return hook::disk_armed().is_some();
    #[cfg(not(feature = "fault-hooks"))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_or_are_refused_with_the_form() {
        assert_eq!(parse("store:3"), Ok((Actor::Store, 3)));
        assert_eq!(parse("protocol:1"), Ok((Actor::Protocol, 1)));
        for bad in ["store", "store:0", "disk:2", "protocol:x", ""] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("expected store:N or protocol:N"), "{e}");
        }
    }

    #[test]
    fn disk_faults_parse_or_are_refused_with_the_forms() {
        assert_eq!(
            parse_disk("write-error:5"),
            Ok(DiskFault::WriteError { after: 5 })
        );
        assert_eq!(parse_disk("enospc:0"), Ok(DiskFault::NoSpace { after: 0 }));
        assert_eq!(
            parse_disk("read-error:2"),
            Ok(DiskFault::ReadError { after: 2 })
        );
        assert_eq!(
            parse_disk("delay-ms:30"),
            Ok(DiskFault::Delay { ms: 30, after: 0 })
        );
        assert_eq!(
            parse_disk("freeze-ms:30000:after:4"),
            Ok(DiskFault::Freeze {
                ms: 30_000,
                after: 4
            })
        );
        for bad in [
            "",
            "write-error",
            "enospc:x",
            "freeze-ms:1:4",
            "delay-ms:1:after",
            "eio:1",
        ] {
            let e = parse_disk(bad).unwrap_err();
            assert!(e.contains("expected write-error:N"), "{e}");
        }
    }

    #[test]
    fn disk_faults_hit_the_pages_they_name() {
        let w = DiskFault::WriteError { after: 5 };
        assert!(disk_effect(w, true, 5, 5, 1).0.is_none());
        assert_eq!(
            disk_effect(w, true, 9, 6, 1).0.unwrap().raw_os_error(),
            Some(5)
        );
        assert!(
            disk_effect(w, false, 9, 6, 1).0.is_none(),
            "reads are left alone"
        );
        let e = disk_effect(DiskFault::NoSpace { after: 0 }, true, 1, 1, 1)
            .0
            .unwrap();
        assert_eq!(e.raw_os_error(), Some(28));
        let f = DiskFault::Freeze { ms: 70, after: 2 };
        let waits: Vec<u64> = (1..=5)
            .map(|n| disk_effect(f, n % 2 == 0, n, n, 1).1)
            .collect();
        assert_eq!(
            waits,
            vec![0, 0, 70, 0, 0],
            "one freeze, at the third transfer"
        );
        let d = DiskFault::Delay { ms: 3, after: 1 };
        let waits: Vec<u64> = (1..=3).map(|n| disk_effect(d, true, n, n, 1).1).collect();
        assert_eq!(waits, vec![0, 3, 3]);
        // Transfers of 4 pages: the one carrying page 6 (pages 5 to 8) freezes, alone; a
        // write error after 5 pages fails the transfer carrying page 6 and every later one.
        let f = DiskFault::Freeze { ms: 9, after: 5 };
        let waits: Vec<u64> = [4, 8, 12]
            .iter()
            .map(|&n| disk_effect(f, true, n, n, 4).1)
            .collect();
        assert_eq!(waits, vec![0, 9, 0]);
        let w = DiskFault::WriteError { after: 5 };
        let failed: Vec<bool> = [4, 8, 12]
            .iter()
            .map(|&n| disk_effect(w, true, n, n, 4).0.is_some())
            .collect();
        assert_eq!(failed, vec![false, true, true]);
    }
}
