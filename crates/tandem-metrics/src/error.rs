//! [`MetricsError`], the error of this crate's fallible calls.
//!
//! Owns nothing else. Encoding writes into a `String`, which cannot fail by itself; the
//! error exists so that a failure inside the metrics library is reported, never a panic.

/// What can go wrong producing an exposition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    /// The metrics library refused to encode the registry.
    #[error("encoding the {format} exposition failed")]
    Encode {
        /// `OpenMetrics` or `Prometheus text 0.0.4`.
        format: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_message_names_the_format() {
        let e = MetricsError::Encode {
            format: "OpenMetrics",
        };
        assert_eq!(e.to_string(), "encoding the OpenMetrics exposition failed");
    }
}
