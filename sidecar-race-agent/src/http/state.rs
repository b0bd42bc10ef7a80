//! What the endpoints read: the reader's liveness, the pipeline, the metrics and the
//! authenticator, shared by every connection.

use std::sync::{Arc, atomic::AtomicBool};

use parking_lot::Mutex;

use super::auth;
use crate::{ingest::stream::StreamStats, pipeline::Pipeline, sinks::metrics::Metrics};

#[derive(Clone)]
pub struct HttpState {
    pub ready: Arc<AtomicBool>,
    /// What the agent cannot see on this node, said by `/readyz` (lockdown).
    pub degraded: Option<Arc<str>>,
    pub stream: Arc<StreamStats>,
    pub pipeline: Arc<Mutex<Pipeline>>,
    pub metrics: Arc<Mutex<Metrics>>,
    /// `--auth=kubernetes`: who may read `/metrics` and `/api/v1/incidents`.
    pub auth: Option<Arc<auth::Authenticator>>,
}
