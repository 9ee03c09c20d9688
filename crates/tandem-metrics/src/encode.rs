//! Turning a registry into the text that `/metrics` serves, and choosing the format from
//! the request's `Accept` header.
//!
//! Owns the two text formats and their content types. Prometheus asks for OpenMetrics in
//! its `Accept` header and parses the body by the returned `Content-Type`; `curl` and
//! `promtool check metrics` read the classic Prometheus text format (0.0.4). The two differ
//! in how counters are named in `# HELP`/`# TYPE` (OpenMetrics names the family without
//! `_total`) and in the final `# EOF` line, so the body and its content type must always
//! travel together: use [`Exposition`]. This module never registers a metric.

use prometheus_client::registry::Registry;

use crate::error::MetricsError;

/// Content type of the OpenMetrics 1.0 text format.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Content type of the Prometheus text format 0.0.4.
pub const PROMETHEUS_TEXT_CONTENT_TYPE: &str =
    prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A text format of the exposition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextFormat {
    /// OpenMetrics 1.0 text, ends with `# EOF`.
    OpenMetrics,
    /// Prometheus text 0.0.4, what `promtool check metrics` and most humans expect.
    Prometheus,
}

impl TextFormat {
    /// The format a client asked for: OpenMetrics when the `Accept` header names
    /// `application/openmetrics-text`, otherwise Prometheus text (also when there is no
    /// header).
    pub fn from_accept(accept: Option<&str>) -> TextFormat {
        match accept {
            Some(a)
                if a.to_ascii_lowercase()
                    .contains("application/openmetrics-text") =>
            {
                TextFormat::OpenMetrics
            }
            _ => TextFormat::Prometheus,
        }
    }

    /// The `Content-Type` header value for a body in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            TextFormat::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            TextFormat::Prometheus => PROMETHEUS_TEXT_CONTENT_TYPE,
        }
    }

    fn name(self) -> &'static str {
        match self {
            TextFormat::OpenMetrics => "OpenMetrics",
            TextFormat::Prometheus => "Prometheus text 0.0.4",
        }
    }
}

/// A body to serve on `/metrics` with its content type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exposition {
    /// The `Content-Type` header value.
    pub content_type: &'static str,
    /// The text.
    pub body: String,
}

/// Encode `registry` in `format`.
///
/// # Errors
/// [`MetricsError::Encode`] when the library refuses (not expected: the writer is a
/// `String`).
pub fn try_encode(registry: &Registry, format: TextFormat) -> Result<String, MetricsError> {
    let mut out = String::new();
    let result = match format {
        TextFormat::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, registry),
        TextFormat::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, registry)
        }
    };
    result.map_err(|_| MetricsError::Encode {
        format: format.name(),
    })?;
    Ok(out)
}

/// Encode `registry` in `format`, never failing: if the library refuses, the text is a
/// single comment line saying so, which a scraper reports as an empty or failed scrape
/// instead of the process panicking.
pub fn encode_or_comment(registry: &Registry, format: TextFormat) -> String {
    match try_encode(registry, format) {
        Ok(text) => text,
        Err(e) => format!("# tandem: {e}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_header_picks_the_format() {
        assert_eq!(TextFormat::from_accept(None), TextFormat::Prometheus);
        assert_eq!(TextFormat::from_accept(Some("*/*")), TextFormat::Prometheus);
        assert_eq!(
            TextFormat::from_accept(Some("text/plain;version=0.0.4")),
            TextFormat::Prometheus
        );
        let prometheus_server =
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                                 version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(
            TextFormat::from_accept(Some(prometheus_server)),
            TextFormat::OpenMetrics
        );
        assert_eq!(
            TextFormat::OpenMetrics.content_type(),
            OPENMETRICS_CONTENT_TYPE
        );
        assert!(TextFormat::Prometheus
            .content_type()
            .starts_with("text/plain; version=0.0.4"));
    }

    #[test]
    fn empty_registry_encodes_in_both_formats() {
        let registry = Registry::default();
        assert_eq!(
            try_encode(&registry, TextFormat::OpenMetrics),
            Ok("# EOF\n".to_string())
        );
        assert_eq!(
            try_encode(&registry, TextFormat::Prometheus),
            Ok(String::new())
        );
        assert_eq!(
            encode_or_comment(&registry, TextFormat::OpenMetrics),
            "# EOF\n"
        );
    }
}
