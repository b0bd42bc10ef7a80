//! `--otlp-endpoint` and `--otlp-logs`, started: the metrics' exporter, and the
//! incidents' log records as a sink with the task that sends them.

use tokio::task::JoinHandle;

use crate::sinks::otlp::{
    Exporter, OtlpError,
    attributes::Origin,
    logs::{LogExporter, OtlpLogs},
};

pub struct OtlpOptions {
    pub endpoint: String,
    pub interval: std::time::Duration,
    /// Incidents as log records too (`--otlp-logs`).
    pub logs: bool,
    /// `k8s.cluster.name` (`--cluster-name`).
    pub cluster_name: Option<String>,
}

/// What `--otlp-*` asked for, built before anything is loaded (a bad URL stops the
/// agent then).
pub(super) struct Otlp {
    pub metrics: Exporter,
    pub logs: Option<(OtlpLogs, LogExporter)>,
}

impl Otlp {
    pub fn new(o: &OtlpOptions) -> Result<Otlp, OtlpError> {
        let origin = Origin::from_env(o.cluster_name.clone());
        let metrics = Exporter::new(&o.endpoint, o.interval, &origin)?;
        let logs = match o.logs {
            true => Some(LogExporter::new(
                &crate::sinks::otlp::base_url(&o.endpoint),
                &origin,
            )?),
            false => None,
        };
        Ok(Otlp { metrics, logs })
    }
}

/// The log records' task, sending until the daemon's sinks are dropped.
pub(super) fn spawn_logs(exporter: LogExporter) -> JoinHandle<()> {
    tokio::spawn(exporter.run())
}
