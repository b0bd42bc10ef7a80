//! `--otlp-endpoint`: the same metrics `/metrics` serves, pushed over OTLP/HTTP
//! (protobuf) every `--otlp-interval` and once more when the agent stops, for
//! pipelines built on OpenTelemetry. Off by default; a collector that is down costs a
//! warning when exports start failing and one when they work again, nothing else.
//! Data points are named by the OpenTelemetry semantic conventions where they name a
//! label (`semconv`), under a resource that names the agent, its node and cluster.

pub mod attributes;
mod convert;
mod exposition;
mod log_record;
pub mod logs;
mod semconv;
mod transport;

#[cfg(test)]
mod tests;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, SystemTime},
};

use parking_lot::Mutex;
use prost::Message;
use tokio::sync::Notify;

use opentelemetry_proto::tonic::resource::v1::Resource;

use super::metrics::Metrics;

use transport::{METRICS_PATH, client, unix_nano};
pub use transport::{OtlpError, base_url};

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
    resource: Resource,
    start_unix_nano: u64,
    pub counts: Arc<ExportCounts>,
}

impl Exporter {
    /// `endpoint`: the collector's base URL (`http://collector:4318`), or the full
    /// metrics URL ending in `/v1/metrics`.
    pub fn new(
        endpoint: &str,
        interval: Duration,
        origin: &attributes::Origin,
    ) -> Result<Self, OtlpError> {
        let base = base_url(endpoint);
        let client = client(&base)?;
        let resource = origin.resource();
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
        let mut said = transport::Said::new("OTLP export", self.url.clone());
        loop {
            let last = tokio::select! {
                _ = tick.tick() => false,
                _ = stop.notified() => true,
            };
            let result = self.export(&metrics).await;
            match &result {
                Ok(()) => self.counts.ok.fetch_add(1, Relaxed),
                Err(_) => self.counts.failed.fetch_add(1, Relaxed),
            };
            said.result(&result);
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
        let body = convert::request(&families, self.resource.clone(), times).encode_to_vec();
        transport::post(&self.client, METRICS_PATH, body).await
    }
}
