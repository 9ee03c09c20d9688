//! tracing set-up: human-readable lines by default, one JSON object per line with
//! `log.format = "json"` (or `--log-json`). The filter comes from `RUST_LOG` when set,
//! otherwise from `log.level`.

use tandem_config::{LogConfig, LogFormat};
use tracing_subscriber::EnvFilter;

/// Install the global subscriber; later calls are ignored (tests may call it twice).
pub(crate) fn init(log: &LogConfig, force_json: bool) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if force_json || log.format == LogFormat::Json {
        builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init()
    } else {
        builder.with_ansi(false).try_init()
    };
}
