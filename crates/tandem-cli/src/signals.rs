//! Signals, caught here at the binary's edge and nowhere below: SIGTERM and SIGINT cancel one
//! [`CancellationToken`] that the command passes to the libraries (agent runtime, supervisor,
//! local cluster), which stop their tasks and wait for them.
//!
//! A second signal while the first shutdown is under way ends the process at once, with the
//! signal's default action (as a second Ctrl-C does in most tools).

use anyhow::Context;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM or SIGINT. Call once, before starting anything.
///
/// # Errors
/// When the handlers cannot be installed or the thread that waits for signals cannot start.
pub(crate) fn shutdown_on_signals() -> anyhow::Result<CancellationToken> {
    let token = CancellationToken::new();
    let mut signals =
        Signals::new([SIGTERM, SIGINT]).context("cannot install the SIGTERM/SIGINT handlers")?;
    let cancel = token.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                let name = if sig == SIGTERM { "SIGTERM" } else { "SIGINT" };
                if cancel.is_cancelled() {
                    tracing::warn!("{name} again: stopping at once");
                    let _ = signal_hook::low_level::emulate_default_handler(sig);
                }
                tracing::info!("{name}: stopping");
                cancel.cancel();
            }
        })
        .context("cannot start the signal thread")?;
    Ok(token)
}
