//! The daemon's Kubernetes clients beside detection: the reviewer of `--auth=kubernetes`
//! and the Event publisher. Without a client configuration detection goes on.

use std::sync::Arc;

use crate::{
    agent::AgentOptions,
    http::auth::{Authenticator, CacheTtls, KubeReviewer, NoClient, Reviewer},
    sinks::k8s_events::EventPublisher,
};

/// `--auth=kubernetes` reviews callers with the API server. Without a client
/// configuration the agent still detects, but its protected paths answer 503 (never
/// 200: it would serve what it was told to guard), counted as `unavailable`.
pub(super) async fn start_auth() -> anyhow::Result<Arc<Authenticator>> {
    let reviewer: Box<dyn Reviewer> = match kube::Client::try_default().await {
        Ok(client) => {
            let reviewer = KubeReviewer::new(client);
            tracing::info!(
                namespace = reviewer.namespace(),
                "/metrics and /api/v1/incidents answer callers the API server allows `get` on sidecar-race.io metrics and incidents in this namespace"
            );
            Box::new(reviewer)
        }
        Err(e) => {
            let why = format!(
                "--auth=kubernetes has no Kubernetes client (in-cluster or KUBECONFIG): {e}"
            );
            tracing::error!(
                "{why}; /metrics and /api/v1/incidents answer 503 until the agent is restarted with one, detection goes on"
            );
            Box::new(NoClient(why))
        }
    };
    Ok(Arc::new(Authenticator::new(reviewer, CacheTtls::default())))
}

/// An Event publisher, when a Kubernetes client can be configured (in-cluster or
/// KUBECONFIG); without one, Events are off and detection goes on.
pub(super) async fn start_events(opts: &AgentOptions, per_minute: u32) -> Option<EventPublisher> {
    match kube::Client::try_default().await {
        Ok(client) => {
            let node = opts
                .source
                .node_name
                .clone()
                .unwrap_or_else(|| "unknown-node".into());
            tracing::info!(per_minute, "posting Kubernetes Events on pods with races");
            Some(EventPublisher::spawn(client, node, per_minute))
        }
        Err(e) => {
            tracing::warn!("Kubernetes Events are off: no client configuration ({e})");
            None
        }
    }
}
