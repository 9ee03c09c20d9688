//! Test-only fault hooks: a panic injected at the Nth message of an actor.
//!
//! Owns the parsing of `TANDEM_FAULT_PANIC_AT` (`store:N` or `protocol:N`, N ≥ 1) and the
//! per-actor message counters. It is compiled in only with the `fault-hooks` cargo feature
//! (off by default, never in a release build); without it [`message`] does nothing and the
//! variable is ignored. It must never be the way an agent reports an error: it exists so that
//! a process test can exercise the real panic path ([`crate::panics`]).

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

#[cfg(feature = "fault-hooks")]
mod hook {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    use super::{parse, Actor, PANIC_AT_VAR};

    static ARMED: OnceLock<Option<(Actor, u64)>> = OnceLock::new();
    static STORE: AtomicU64 = AtomicU64::new(0);
    static PROTOCOL: AtomicU64 = AtomicU64::new(0);

    fn armed() -> Option<(Actor, u64)> {
        *ARMED.get_or_init(|| {
            let value = std::env::var(PANIC_AT_VAR).ok()?;
            match parse(&value) {
                Ok(hook) => Some(hook),
                Err(e) => {
                    tracing::warn!(error = %e, "fault hook ignored");
                    None
                }
            }
        })
    }

    pub(super) fn announce() {
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
}
