//! `--otlp-endpoint`: the same metrics `/metrics` serves, pushed over OTLP/HTTP
//! (protobuf) every `--otlp-interval` and once more when the agent stops, for
//! pipelines built on OpenTelemetry. Off by default; a collector that is down costs a
//! warning when exports start failing and one when they work again, nothing else.

mod convert;
mod exposition;

#[cfg(test)]
mod tests;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use kube::client::Body;
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::Notify;

use super::metrics::Metrics;

/// The OTLP/HTTP path of metrics below a collector's base URL.
const METRICS_PATH: &str = "/v1/metrics";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an OTLP endpoint cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("--otlp-endpoint {url}: {reason}")]
    BadUrl { url: String, reason: String },
}

/// Exports done and failed, for the agent's own logs and tests.
#[derive(Debug, Default)]
pub struct ExportCounts {
    pub ok: AtomicU64,
    pub failed: AtomicU64,
}

pub struct Exporter {
    url: String,
    client: kube::Client,
    interval: Duration,
    resource: Vec<(&'static str, String)>,
    start_unix_nano: u64,
    pub counts: Arc<ExportCounts>,
}

impl Exporter {
    /// `endpoint`: the collector's base URL (`http://collector:4318`), or the full
    /// metrics URL ending in `/v1/metrics`.
    pub fn new(endpoint: &str, interval: Duration) -> Result<Self, OtlpError> {
        let bad = |reason: String| OtlpError::BadUrl {
            url: endpoint.to_string(),
            reason,
        };
        let base = endpoint
            .trim_end_matches('/')
            .trim_end_matches(METRICS_PATH)
            .to_string();
        let client =
            crate::outbound::client(&base, CONNECT_TIMEOUT, SEND_TIMEOUT, None).map_err(bad)?;
        let mut resource = vec![
            ("service.name", "sidecar-race-agent".to_string()),
            ("service.version", env!("CARGO_PKG_VERSION").to_string()),
        ];
        if let Ok(node) = std::env::var("NODE_NAME")
            && !node.is_empty()
        {
            resource.push(("k8s.node.name", node));
        }
        Ok(Self {
            url: format!("{base}{METRICS_PATH}"),
            client,
            interval,
            resource,
            start_unix_nano: unix_nano(SystemTime::now()),
            counts: Arc::default(),
        })
    }

    /// Exports every interval until `stop`, then once more (the final counts).
    pub async fn run(self, metrics: Arc<Mutex<Metrics>>, stop: Arc<Notify>) {
        let mut tick = tokio::time::interval(self.interval);
        tick.tick().await;
        let mut failing = false;
        loop {
            let last = tokio::select! {
                _ = tick.tick() => false,
                _ = stop.notified() => true,
            };
            match self.export(&metrics).await {
                Ok(()) => {
                    self.counts.ok.fetch_add(1, Relaxed);
                    if failing {
                        tracing::info!(url = %self.url, "OTLP export works again");
                        failing = false;
                    }
                }
                Err(e) => {
                    self.counts.failed.fetch_add(1, Relaxed);
                    if !failing {
                        tracing::warn!(url = %self.url, "OTLP export failed (said once until it works again): {e}");
                        failing = true;
                    }
                }
            }
            if last {
                return;
            }
        }
    }

    async fn export(&self, metrics: &Arc<Mutex<Metrics>>) -> Result<(), String> {
        let metrics = metrics.clone();
        let text = tokio::task::spawn_blocking(move || metrics.lock().encode())
            .await
            .map_err(|e| e.to_string())?;
        let families = exposition::parse(&text).map_err(|e| e.to_string())?;
        let times = convert::Times {
            start_unix_nano: self.start_unix_nano,
            now_unix_nano: unix_nano(SystemTime::now()),
        };
        let body = convert::request(&families, &self.resource, times).encode_to_vec();
        let request = http::Request::post(METRICS_PATH)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .body(Body::from(body))
            .map_err(|e| e.to_string())?;
        let answer = self
            .client
            .send(request)
            .await
            .map_err(|e| format!("{e}"))?;
        let status = answer.status();
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        Ok(())
    }
}

fn unix_nano(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default()
}
