//! Errors of configuration loading and validation.

use crate::layout::LayoutError;

/// Why a configuration was refused. Every message names the key and where it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {path}: {source}")]
    Read {
        /// The file's path as given.
        path: String,
        /// The IO error.
        source: std::io::Error,
    },
    /// The file is not valid TOML, has a key of the wrong type, or a key Tandem does not know.
    /// `detail` is the parser's message, which names the key (and line and column).
    #[error("invalid configuration in {origin}: {detail}")]
    Invalid {
        /// The file path, or `environment` for `TANDEM__*` variables, or `overrides`.
        origin: String,
        /// The parser's message, naming the offending key.
        detail: String,
    },
    /// A value is well-typed but out of range.
    #[error("invalid value for {key}: {reason}")]
    Value {
        /// Dotted key, e.g. `protocol.window_steps`.
        key: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// The model layout does not split evenly across the ranks.
    #[error("invalid model layout: {0}")]
    Layout(#[from] LayoutError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_key_and_origin() {
        let e = ConfigError::Invalid {
            origin: "a.toml".into(),
            detail: "unknown field `x`".into(),
        };
        assert_eq!(
            e.to_string(),
            "invalid configuration in a.toml: unknown field `x`"
        );
        let e = ConfigError::Value {
            key: "group.pp_size",
            reason: "must be at least 1".into(),
        };
        assert_eq!(
            e.to_string(),
            "invalid value for group.pp_size: must be at least 1"
        );
        let e = ConfigError::Read {
            path: "/nope.toml".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "not found"),
        };
        assert_eq!(
            e.to_string(),
            "cannot read configuration file /nope.toml: not found"
        );
        let e = ConfigError::from(LayoutError::HeadsNotDivisible {
            num_kv_heads: 8,
            tp_size: 3,
        });
        assert_eq!(
            e.to_string(),
            "invalid model layout: num_kv_heads = 8 does not divide evenly by tp_size = 3"
        );
    }
}
