//! Where the pipeline's outcomes go: structured logs within their budget, Prometheus
//! metrics and Kubernetes Events.

pub(crate) mod incident_logs;
pub mod k8s_events;
pub(crate) mod log_budget;
pub mod metrics;
pub(crate) mod token_bucket;
