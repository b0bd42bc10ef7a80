//! OTLP/HTTP as both exports use it: the collector's base URL from `--otlp-endpoint`,
//! one client with timeouts, a protobuf POST, and the clock the records are stamped by.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube::client::Body;

/// The OTLP/HTTP path of metrics below a collector's base URL.
pub const METRICS_PATH: &str = "/v1/metrics";
/// The OTLP/HTTP path of logs below a collector's base URL.
pub const LOGS_PATH: &str = "/v1/logs";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an OTLP endpoint cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("--otlp-endpoint {url}: {reason}")]
    BadUrl { url: String, reason: String },
}

/// The collector's base URL: `--otlp-endpoint` less a trailing `/v1/metrics`.
pub fn base_url(endpoint: &str) -> String {
    endpoint
        .trim_end_matches('/')
        .trim_end_matches(METRICS_PATH)
        .to_string()
}

/// The client of the collector at `base`, for the metrics and the logs.
pub fn client(base: &str) -> Result<kube::Client, OtlpError> {
    crate::outbound::client(base, CONNECT_TIMEOUT, SEND_TIMEOUT, None).map_err(|reason| {
        OtlpError::BadUrl {
            url: base.to_string(),
            reason,
        }
    })
}

/// POSTs an encoded OTLP request to `path` below the client's base URL; an answer
/// other than 2xx is an error.
pub async fn post(client: &kube::Client, path: &str, body: Vec<u8>) -> Result<(), String> {
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/x-protobuf")
        .body(Body::from(body))
        .map_err(|e| e.to_string())?;
    let answer = client.send(request).await.map_err(|e| format!("{e}"))?;
    let status = answer.status();
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    Ok(())
}

/// Says once when an export starts failing and once when it works again, nothing in
/// between: a collector that is down costs two lines, not one per export.
pub struct Said {
    what: &'static str,
    url: String,
    failing: bool,
}

impl Said {
    pub fn new(what: &'static str, url: String) -> Said {
        Said {
            what,
            url,
            failing: false,
        }
    }

    pub fn result(&mut self, result: &Result<(), String>) {
        match result {
            Ok(()) if self.failing => {
                tracing::info!(url = %self.url, "{} works again", self.what);
                self.failing = false;
            }
            Err(e) if !self.failing => {
                tracing::warn!(url = %self.url, "{} failed (said once until it works again): {e}", self.what);
                self.failing = true;
            }
            _ => {}
        }
    }
}

pub fn unix_nano(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default()
}
