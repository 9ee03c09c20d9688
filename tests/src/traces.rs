//! The request traces the repository ships (`data/traces/`, gzip-compressed; see its README).

use std::path::PathBuf;

/// The Mooncake FAST'25 trace called `name` (`conversation` or `synthetic`):
/// `data/traces/mooncake_{name}_trace.jsonl.gz`, or the same name in `$TANDEM_TRACE_DIR`
/// (where a plain `.jsonl` is taken when no `.jsonl.gz` is there).
///
/// # Panics
/// When the file is missing, naming the path: a test cannot run without its trace.
pub fn mooncake_trace(name: &str) -> PathBuf {
    let dir = std::env::var_os("TANDEM_TRACE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/traces"));
    let plain = dir.join(format!("mooncake_{name}_trace.jsonl"));
    let gz = dir.join(format!("mooncake_{name}_trace.jsonl.gz"));
    let path = if gz.exists() || !plain.exists() {
        gz
    } else {
        plain
    };
    assert!(
        path.exists(),
        "trace {} is missing (the repository ships it in data/traces/; TANDEM_TRACE_DIR \
         overrides the directory)",
        path.display()
    );
    path
}
