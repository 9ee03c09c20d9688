//! A panic anywhere in a running agent stops the agent: never a rank that looks healthy with a
//! dead actor.
//!
//! Owns the process's panic hook. Actix runs each actor as a task and the runtime catches a
//! task's panic, so a handler that panics would otherwise leave the actor gone and everything
//! around it (HTTP, heartbeats, the engine socket) still answering. The hook keeps the default
//! report (message, location, backtrace) and sends [`AgentRunError::Panicked`] to the agent's
//! fatal channel: the agent stops and exits with an error, its heartbeats stop, the supervisor
//! moves the group to a new epoch, and the outer restart policy starts the rank again (its
//! tiers are reopened from the manifest). It must never try to keep a panicked actor's state:
//! what the actor held is unknown after the panic.

use std::sync::{Mutex, Once};

use tokio::sync::mpsc::UnboundedSender;

use crate::AgentRunError;

/// Where a panic is reported: the running agent's fatal channel (the last one installed).
static FATAL: Mutex<Option<UnboundedSender<AgentRunError>>> = Mutex::new(None);
static INSTALL: Once = Once::new();

/// Installs the hook (once per process) and points it at `fatal`.
pub fn install(fatal: UnboundedSender<AgentRunError>) {
    if let Ok(mut slot) = FATAL.lock() {
        *slot = Some(fatal);
    }
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            let location = info
                .location()
                .map_or_else(String::new, |l| format!("{}:{}", l.file(), l.line()));
            let thread = std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .to_string();
            tracing::error!(%thread, %location, %message, "a thread of the agent panicked: the agent stops");
            // `try_lock`: a panic while the slot is held must not deadlock the hook.
            if let Ok(slot) = FATAL.try_lock() {
                if let Some(tx) = slot.as_ref() {
                    let _ = tx.send(AgentRunError::Panicked {
                        thread,
                        location,
                        message,
                    });
                }
            }
        }));
    });
}
