//! Where the pipeline's outcomes go: structured logs within their budget, Prometheus
//! metrics (also pushed over OTLP with --otlp-endpoint) and Kubernetes Events.

pub(crate) mod incident_logs;
pub mod k8s_events;
pub(crate) mod log_budget;
pub mod metrics;
pub mod otlp;
pub(crate) mod token_bucket;
