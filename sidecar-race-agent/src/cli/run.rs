//! `run`: the node daemon's flags.

use std::net::SocketAddr;

use clap::Args;

use super::{
    kernel::KernelArgs,
    values::{parse_duration, parse_seconds},
};
use crate::detect::DetectorConfig;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Address for /healthz, /readyz, /metrics and /api/v1/incidents.
    #[arg(long, env = "SIDECAR_RACE_LISTEN", default_value = "0.0.0.0:9965")]
    pub listen: SocketAddr,
    /// Serve /api/v1/incidents only on this address (e.g. 127.0.0.1:9966, reached
    /// with `kubectl port-forward`), or `off`; default: on --listen with the others.
    #[arg(long, env = "SIDECAR_RACE_API_LISTEN", value_name = "ADDR|off")]
    pub api_listen: Option<crate::http::ApiListen>,
    /// Who may read /metrics and /api/v1/incidents: `none`, or `kubernetes` (a bearer
    /// token the API server authenticates, whose user may `get` the resource
    /// `metrics` or `incidents` of the group `sidecar-race.io` in the agent's
    /// namespace; /healthz and /readyz stay open).
    #[arg(long, env = "SIDECAR_RACE_AUTH", value_enum, default_value_t = AuthMode::None)]
    pub auth: AuthMode,
    /// Serve every endpoint over TLS with this PEM certificate chain (with
    /// --tls-key-file); read again when it changes. Default: plain HTTP.
    #[arg(
        long,
        env = "SIDECAR_RACE_TLS_CERT_FILE",
        value_name = "PATH",
        requires = "tls_key_file"
    )]
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert-file (PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        env = "SIDECAR_RACE_TLS_KEY_FILE",
        value_name = "PATH",
        requires = "tls_cert_file"
    )]
    pub tls_key_file: Option<std::path::PathBuf>,
    /// Seconds between log lines with kernel event counts.
    #[arg(
        long,
        env = "SIDECAR_RACE_STATS_INTERVAL_SECONDS",
        default_value_t = 60
    )]
    pub stats_interval_seconds: u64,
    /// Incidents kept for /api/v1/incidents (evicted fairly per pod, see the per-pod cap).
    #[arg(long, env = "SIDECAR_RACE_INCIDENT_HISTORY", default_value_t = 10_000)]
    pub incident_history: usize,
    /// Incidents one pod may hold in the history; beyond the total, the pod holding
    /// the most gives up its oldest final incident first.
    #[arg(
        long,
        env = "SIDECAR_RACE_INCIDENT_HISTORY_PER_POD",
        default_value_t = 1_000
    )]
    pub incident_history_per_pod: usize,
    /// Seconds without a listener after which refusals are `unresolved`.
    #[arg(
        long,
        env = "SIDECAR_RACE_UNRESOLVED_AFTER_SECONDS",
        default_value_t = 120.0, value_parser = parse_seconds
    )]
    pub unresolved_after_seconds: f64,
    /// Without pod metadata, containers torn down within this many seconds after the
    /// listener went away make refusals a drain (Kubernetes' default grace period).
    #[arg(long, env = "SIDECAR_RACE_DRAIN_GRACE_SECONDS", default_value_t = 30.0, value_parser = parse_seconds)]
    pub drain_grace_seconds: f64,
    /// Refusals before a port's listener are a startup race only when the client
    /// container (and the serving one, when known) started at most this many seconds
    /// before the first refusal.
    #[arg(
        long,
        env = "SIDECAR_RACE_STARTUP_BOUND_SECONDS",
        default_value_t = 120.0, value_parser = parse_seconds
    )]
    pub startup_bound_seconds: f64,
    /// Seconds the final accounting of an incident (metrics, Event, log line) waits
    /// for the pod source to name its pod and container, and a refusal to a pod IP
    /// waits for the pod's IPs.
    #[arg(
        long,
        env = "SIDECAR_RACE_METADATA_WAIT_SECONDS",
        default_value_t = 10.0, value_parser = parse_seconds
    )]
    pub metadata_wait_seconds: f64,
    /// A Job pod whose app containers all finished this many seconds ago while a
    /// classic sidecar still runs is reported stuck.
    #[arg(
        long,
        env = "SIDECAR_RACE_STUCK_JOB_AFTER_SECONDS",
        default_value_t = 60.0, value_parser = parse_seconds
    )]
    pub stuck_job_after_seconds: f64,
    /// Post Kubernetes Events (events.k8s.io/v1) on pods with races; `--events=false`
    /// turns them off.
    #[arg(
        long,
        env = "SIDECAR_RACE_EVENTS",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub events: bool,
    /// Events the node's agent may post per minute (a burst of as many is allowed).
    #[arg(long, env = "SIDECAR_RACE_EVENTS_PER_MINUTE", default_value_t = 30)]
    pub events_per_minute: u32,
    /// Add a `pod` label to the workload metrics (more series: one per pod).
    #[arg(long, env = "SIDECAR_RACE_METRICS_POD_LABEL")]
    pub metrics_pod_label: bool,
    /// Series kept per metric family with workload, container, sidecar or port
    /// labels; samples beyond fold into one `overflow` series.
    #[arg(
        long,
        env = "SIDECAR_RACE_MAX_SERIES_PER_METRIC",
        default_value_t = crate::sinks::metrics::DEFAULT_MAX_SERIES
    )]
    pub max_series_per_metric: usize,
    /// Series of workloads not seen for this long (`90s`, `30m`, `1h`) are dropped and
    /// free their slot under --max-series-per-metric.
    #[arg(
        long,
        env = "SIDECAR_RACE_SERIES_TTL",
        default_value = "1h",
        value_parser = parse_duration
    )]
    pub series_ttl: std::time::Duration,
    /// Also push the metrics over OTLP/HTTP (protobuf) to this OpenTelemetry collector:
    /// its base URL (`http://otel-collector:4318`) or a URL ending in `/v1/metrics`.
    /// Off by default.
    #[arg(long, env = "SIDECAR_RACE_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// How often the metrics are pushed with --otlp-endpoint (`10s`, `1m`); once more
    /// when the agent stops.
    #[arg(
        long,
        env = "SIDECAR_RACE_OTLP_INTERVAL",
        default_value = "30s",
        value_parser = parse_duration
    )]
    pub otlp_interval: std::time::Duration,
    /// Also push each incident's state changes (opened, in another phase, resolved) as
    /// OTLP log records to the --otlp-endpoint collector (`/v1/logs`), named by the
    /// OpenTelemetry semantic conventions. Off by default.
    #[arg(long, env = "SIDECAR_RACE_OTLP_LOGS", requires = "otlp_endpoint")]
    pub otlp_logs: bool,
    /// The cluster's name, as `k8s.cluster.name` on everything pushed over OTLP.
    #[arg(long, env = "SIDECAR_RACE_CLUSTER_NAME", value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// Milliseconds kernel facts are held to be put back in time order.
    #[arg(long, env = "SIDECAR_RACE_REORDER_WINDOW_MS", default_value_t = 200)]
    pub reorder_window_ms: u64,
    #[command(flatten)]
    pub kernel: KernelArgs,
    #[command(flatten)]
    pub state: super::state::StateArgs,
}

/// `--auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    None,
    Kubernetes,
}

impl RunArgs {
    /// `--tls-cert-file` and `--tls-key-file` (clap requires both or neither).
    pub fn tls_files(&self) -> Option<crate::http::tls::TlsFiles> {
        Some(crate::http::tls::TlsFiles {
            cert: self.tls_cert_file.clone()?,
            key: self.tls_key_file.clone()?,
        })
    }

    pub fn detector(&self) -> DetectorConfig {
        DetectorConfig {
            unresolved_after_ns: secs_ns(self.unresolved_after_seconds),
            drain_grace_ns: secs_ns(self.drain_grace_seconds),
            startup_bound_ns: secs_ns(self.startup_bound_seconds),
            metadata_wait_ns: secs_ns(self.metadata_wait_seconds),
            stuck_job_after_ns: secs_ns(self.stuck_job_after_seconds),
            history: self.incident_history.max(1),
            history_per_pod: self.incident_history_per_pod.max(1),
            ..DetectorConfig::default()
        }
    }
}

fn secs_ns(s: f64) -> u64 {
    (s.max(0.0) * 1e9) as u64
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use crate::{
        cli::command::{Cli, Command},
        inventory::sources::PodSourceSpec,
    };

    #[test]
    fn durations_must_be_finite_and_in_range() {
        for bad in ["inf", "NaN", "-1", "1e300", "five"] {
            let flag = format!("--pods-poll-seconds={bad}");
            let err = Cli::try_parse_from(["a", "run", &flag])
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("`{bad}`")), "{bad}: {err}");
            assert!(err.contains("--pods-poll-seconds"), "{bad}: {err}");
            let flag = format!("--metadata-wait-seconds={bad}");
            let err = Cli::try_parse_from(["a", "run", &flag])
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("`{bad}`")), "{bad}: {err}");
        }
        let err = Cli::try_parse_from(["a", "run", "--pods-poll-seconds", "0"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("a poll interval is at least 0.1"), "{err}");
        let Command::Run(r) = Cli::try_parse_from(["a", "run", "--pods-poll-seconds", "0.5"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert_eq!(
            r.kernel.pods.options().poll_interval,
            Duration::from_millis(500)
        );
    }

    #[test]
    fn run_defaults() {
        let Command::Run(r) = Cli::try_parse_from(["a", "run"]).unwrap().command else {
            panic!()
        };
        assert_eq!(r.listen.to_string(), "0.0.0.0:9965");
        assert_eq!(r.series_ttl, Duration::from_secs(3600));
        assert_eq!(r.auth, super::AuthMode::None);
        assert_eq!(r.kernel.ring_buffer_bytes, 1 << 20);
        assert_eq!(
            r.kernel.options().probes.refusal_budget,
            sidecar_race_ebpf::layout::RefusalBudget::new(200, 100)
        );
        assert!(Cli::try_parse_from(["a", "run", "--refusal-refill-per-second", "0"]).is_err());
        let Command::Run(r) = Cli::try_parse_from([
            "a",
            "run",
            "--pods-from",
            "file:/p.json",
            "--node-name",
            "n1",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        assert_eq!(r.kernel.pods.spec(), PodSourceSpec::File("/p.json".into()));
        assert_eq!(r.kernel.pods.options().node_name.as_deref(), Some("n1"));
        assert!(Cli::try_parse_from(["a", "run", "--pods-from", "etcd"]).is_err());
        let Command::Run(r) = Cli::try_parse_from(["a", "run", "--events=false"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert!(!r.events);
        let Command::Run(r) = Cli::try_parse_from(["a", "run", "--events"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert!(r.events);
        let Command::Run(r) = Cli::try_parse_from(["a", "run"]).unwrap().command else {
            panic!()
        };
        assert!(r.events);
    }
}
