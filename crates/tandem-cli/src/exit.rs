//! Exit codes, documented in README.md ("Exit codes") for process supervisors.

/// Clean stop (including a drained SIGTERM).
pub const OK: i32 = 0;
/// Any other failure (IO, an unreachable dependency at start-up, a bug).
pub const FAILURE: i32 = 1;
/// The configuration was refused (unknown key, wrong type, value out of range, bad layout).
pub const BAD_CONFIG: i32 = 78; // EX_CONFIG from sysexits.h: systemd and supervisors know it.

/// Map an error from a subcommand to its exit code.
pub fn code_for(err: &anyhow::Error) -> i32 {
    let config_error = err.chain().any(|e| {
        e.downcast_ref::<tandem_config::ConfigError>().is_some()
            || matches!(e.downcast_ref::<tandem_agent::SettingsError>(), Some(_))
    });
    if config_error {
        BAD_CONFIG
    } else {
        FAILURE
    }
}
