//! `--otlp-logs`: incidents as OTLP log records, one per state change, pushed to the
//! collector of `--otlp-endpoint` (`/v1/logs`). The sink side ([`OtlpLogs`]) turns
//! outcomes into records and hands them to a task over a bounded channel, so the
//! daemon's loop never waits for the network; the task ([`LogExporter`]) sends what is
//! queued in one request, and at the agent's stop what is left.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::{Instant, SystemTime},
};

use opentelemetry_proto::tonic::{
    collector::logs::v1::ExportLogsServiceRequest,
    logs::v1::{LogRecord, ResourceLogs, ScopeLogs},
    resource::v1::Resource,
};
use prost::Message;
use tokio::sync::mpsc;

use super::{
    attributes, log_record,
    transport::{self, LOGS_PATH, OtlpError, unix_nano},
};
use crate::{pipeline::outcome::Outcome, sinks::fan_out::OutcomeSink};

/// Records waiting for the task; beyond it they are dropped and counted.
const QUEUE: usize = 4096;
/// Records sent in one request at most.
const BATCH: usize = 512;

/// Records sent, dropped because the queue was full, and lost with a request that
/// failed.
#[derive(Debug, Default)]
pub struct LogCounts {
    pub sent: AtomicU64,
    pub dropped: AtomicU64,
    pub lost: AtomicU64,
}

/// The sink side: outcomes in, records queued.
pub struct OtlpLogs {
    tx: mpsc::Sender<LogRecord>,
    counts: Arc<LogCounts>,
}

impl OutcomeSink for OtlpLogs {
    fn consume(&mut self, outcomes: &[Outcome], _now: Instant) {
        let now = unix_nano(SystemTime::now());
        for (view, what) in outcomes.iter().filter_map(Outcome::state_change) {
            if self
                .tx
                .try_send(log_record::record(view, what, now))
                .is_err()
            {
                self.counts.dropped.fetch_add(1, Relaxed);
            }
        }
    }
}

/// The task side: records out to the collector.
pub struct LogExporter {
    client: kube::Client,
    url: String,
    resource: Resource,
    rx: mpsc::Receiver<LogRecord>,
    pub counts: Arc<LogCounts>,
}

impl LogExporter {
    /// The two sides, for the collector at `base` (as `--otlp-endpoint` gave it, less
    /// any `/v1/metrics`).
    pub fn new(
        base: &str,
        origin: &attributes::Origin,
    ) -> Result<(OtlpLogs, LogExporter), OtlpError> {
        let client = transport::client(base)?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let counts = Arc::new(LogCounts::default());
        let sink = OtlpLogs {
            tx,
            counts: counts.clone(),
        };
        let exporter = LogExporter {
            client,
            url: format!("{base}{LOGS_PATH}"),
            resource: origin.resource(),
            rx,
            counts,
        };
        Ok((sink, exporter))
    }

    /// Sends until the sink side is dropped (the daemon stopped), then what is left:
    /// what is queued goes in one request (at most [`BATCH`] records).
    pub async fn run(mut self) {
        let mut said = transport::Said::new("OTLP log export", self.url.clone());
        while let Some(first) = self.rx.recv().await {
            let mut records = vec![first];
            while records.len() < BATCH
                && let Ok(record) = self.rx.try_recv()
            {
                records.push(record);
            }
            let n = records.len() as u64;
            let result = self.send(records).await;
            match &result {
                Ok(()) => self.counts.sent.fetch_add(n, Relaxed),
                Err(_) => self.counts.lost.fetch_add(n, Relaxed),
            };
            said.result(&result);
        }
    }

    async fn send(&self, records: Vec<LogRecord>) -> Result<(), String> {
        let body = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(self.resource.clone()),
                scope_logs: vec![ScopeLogs {
                    scope: Some(attributes::scope()),
                    log_records: records,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
        .encode_to_vec();
        transport::post(&self.client, LOGS_PATH, body).await
    }
}
