//! Where the pipeline's outcomes go: structured logs within their budget, Prometheus
//! metrics (also pushed over OTLP with --otlp-endpoint) and Kubernetes Events, each
//! behind the one port the daemon tells ([`fan_out`]).

pub mod fan_out;
pub(crate) mod incident_logs;
pub mod k8s_events;
pub(crate) mod log_budget;
pub mod metrics;
pub mod otlp;
pub(crate) mod token_bucket;
