//! Exit codes, documented in README.md ("Exit codes") for process supervisors.

/// Clean stop (including a drained SIGTERM).
pub(crate) const OK: i32 = 0;
/// Any other failure (IO, an unreachable dependency at start-up, a bug).
pub(crate) const FAILURE: i32 = 1;
/// The configuration was refused (unknown key, wrong type, value out of range, bad layout).
pub(crate) const BAD_CONFIG: i32 = 78; // EX_CONFIG from sysexits.h: systemd and supervisors know it.

/// The group failed past the restart limit (`supervisor.max_restarts` within
/// `supervisor.restart_window_s`): the outer supervisor (systemd, a docker restart policy)
/// takes over.
pub(crate) const GROUP_FAILED: i32 = 3;

/// The error a supervisor returns when it gives up on the group.
#[derive(Debug, thiserror::Error)]
#[error("group failed: {0}")]
pub(crate) struct GroupFailed(pub String);

/// Map an error from a subcommand to its exit code.
pub(crate) fn code_for(err: &anyhow::Error) -> i32 {
    let config_error = err.chain().any(|e| {
        e.downcast_ref::<tandem_config::ConfigError>().is_some()
            || e.downcast_ref::<tandem_agent::SettingsError>().is_some()
    });
    if err
        .chain()
        .any(|e| e.downcast_ref::<GroupFailed>().is_some())
    {
        return GROUP_FAILED;
    }
    if config_error {
        BAD_CONFIG
    } else {
        FAILURE
    }
}
