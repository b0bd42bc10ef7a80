//! Why a report could not be made.

use thiserror::Error;

/// Why a report could not be made. Each message is one sentence for the user.
#[derive(Debug, Error, PartialEq)]
pub enum ReportError {
    #[error("invalid {what} URL `{url}`: {reason}")]
    BadUrl {
        what: &'static str,
        url: String,
        reason: String,
    },
    #[error("invalid range `{0}`: expected a Prometheus duration such as 7d, 12h or 1h30m")]
    BadRange(String),
    #[error("invalid cluster label `{label}`: {reason}")]
    BadClusterLabel { label: String, reason: &'static str },
    #[error("cannot reach {what} at {url}: {reason}")]
    Unreachable {
        what: &'static str,
        url: String,
        reason: String,
    },
    #[error("{what} at {url} answered HTTP {status} to {path}: {body}")]
    Http {
        what: &'static str,
        url: String,
        path: String,
        status: u16,
        body: String,
    },
    #[error(
        "{what} at {url} answered {path} with more than {limit_mib} MiB, more than the report reads from one answer"
    )]
    TooLarge {
        what: &'static str,
        url: String,
        path: String,
        limit_mib: usize,
    },
    #[error("Prometheus at {url} rejected the query ({error_type}): {error}")]
    Prometheus {
        url: String,
        error_type: String,
        error: String,
    },
    #[error("{what} at {url} answered {path} with something unexpected: {reason}")]
    Malformed {
        what: &'static str,
        url: String,
        path: String,
        reason: String,
    },
    #[error(
        "Prometheus at {url} has no sidecar_race metrics in the last {range}: is it scraping the agents?"
    )]
    NoData { url: String, range: String },
    /// Reaching the agents through the API server's pod proxy failed.
    #[error("through the API server: {0}")]
    Api(String),
}
