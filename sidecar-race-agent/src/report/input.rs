//! What to read the evidence from, and reading it.

use super::{
    agents::{self, AgentIncident},
    cluster_label::ClusterLabel,
    error::ReportError,
    fleet::Fleet,
    prometheus, via_api,
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

/// The evidence, and the incidents it was counted from when agents gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    pub fleet: Fleet,
    /// Every agent's incidents as read (none from Prometheus, which counts only).
    pub incidents: Vec<AgentIncident>,
}

/// Reads the evidence from `input`, keeping the agents' incidents (the html page draws
/// the top ones).
pub async fn collect_keeping_incidents(input: &Input) -> Result<Collected, ReportError> {
    let (names, incidents) = match input {
        Input::Prometheus { .. } => {
            return Ok(Collected {
                fleet: collect(input).await?,
                incidents: Vec::new(),
            });
        }
        Input::Agents { urls, token } => agents::read(urls, token.as_deref()).await?,
        Input::AgentsViaApi {
            namespace,
            port,
            token,
        } => via_api::read(namespace, *port, token.as_deref()).await?,
    };
    Ok(Collected {
        fleet: agents::fleet(names, incidents.iter().cloned()),
        incidents,
    })
}
