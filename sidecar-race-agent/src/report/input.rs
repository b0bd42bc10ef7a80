//! What to read the evidence from, and reading it.

use super::{
    agents, cluster_label::ClusterLabel, error::ReportError, fleet::Fleet, prometheus, via_api,
};

/// What to read the evidence from.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A Prometheus base URL and a range in Prometheus duration syntax; the label
    /// that names a series' cluster on a federating or Thanos-style Prometheus.
    Prometheus {
        url: String,
        range: String,
        cluster_label: ClusterLabel,
    },
    /// Agents' base URLs (`http://node:9965`), and the bearer token to send them (agents
    /// run with `--auth kubernetes`).
    Agents {
        urls: Vec<String>,
        token: Option<String>,
    },
    /// Every agent pod of `namespace` (label `app.kubernetes.io/name=sidecar-race-agent`),
    /// through the API server's pod proxy on `port`, with the user's kubeconfig.
    AgentsViaApi {
        namespace: String,
        port: u16,
        token: Option<String>,
    },
}

/// Reads the evidence from `input`.
pub async fn collect(input: &Input) -> Result<Fleet, ReportError> {
    match input {
        Input::Prometheus {
            url,
            range,
            cluster_label,
        } => prometheus::collect(url, range, cluster_label).await,
        Input::Agents { urls, token } => agents::collect(urls, token.as_deref()).await,
        Input::AgentsViaApi {
            namespace,
            port,
            token,
        } => via_api::collect(namespace, *port, token.as_deref()).await,
    }
}
