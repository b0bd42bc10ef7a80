//! `report --agents-via-api`: every agent's `/api/v1/incidents` through the API
//! server's pod proxy (`GET /api/v1/namespaces/NS/pods/POD:PORT/proxy/api/v1/incidents`)
//! with the user's kubeconfig, for a laptop that cannot reach the nodes. It needs, in
//! the agent's namespace only, `pods` list (to find the agents) and `pods/proxy` get.
//! The API server removes the `Authorization` header before proxying, so the token for
//! agents run with `--auth kubernetes` travels in `X-Sidecar-Race-Token`: the one of
//! `--agent-token-file`, or else a 10-minute token of the `sidecar-race-scraper`
//! ServiceAccount (deploy/monitoring/scraper.yaml) from the TokenRequest API, which needs
//! `create` on `serviceaccounts/token` in the agent's namespace.
//!
//! Bounded however large the fleet ([`Bounds`]): 8 agents are read at a time, each
//! answer within 30 s and 64 MiB, all of them within 60 s plus 2 s per agent and
//! 512 MiB in total; past any bound the report stops with one sentence naming it.

use std::{
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
    time::Duration,
};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{Pod, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};

use super::{
    agents::{self, AgentIncident},
    error::ReportError,
    fleet::Fleet,
};

/// The agents' pod label (deploy/base/daemonset.yaml).
pub const AGENT_SELECTOR: &str = "app.kubernetes.io/name=sidecar-race-agent";

/// The ServiceAccount whose short-lived token reads the agents (deploy/monitoring/scraper.yaml).
pub const SCRAPER: &str = "sidecar-race-scraper";

/// How much reading the agents may take: a fleet of thousands of nodes neither opens
/// thousands of proxied requests at once nor holds the report without end.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Agents read at once.
    pub at_once: usize,
    /// One agent's answer, read whole, within this.
    pub per_agent: Duration,
    /// Every agent read within this, plus `total_per_agent` for each agent.
    pub total: Duration,
    pub total_per_agent: Duration,
    /// The agents' answers together (each is also capped at `MAX_BODY_BYTES`).
    pub total_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            at_once: 8,
            per_agent: Duration::from_secs(30),
            total: Duration::from_secs(60),
            total_per_agent: Duration::from_secs(2),
            total_bytes: 512 << 20,
        }
    }
}

pub async fn collect(
    namespace: &str,
    port: u16,
    token: Option<&str>,
) -> Result<Fleet, ReportError> {
    let client = Client::try_default()
        .await
        .map_err(|e| ReportError::Api(format!("cannot connect with the kubeconfig: {e}")))?;
    collect_with(&client, namespace, port, token).await
}

/// A token of the scraper ServiceAccount, valid for 10 minutes.
pub async fn scraper_token(client: &Client, namespace: &str) -> Result<String, ReportError> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let answer = accounts
        .create_token_request(SCRAPER, &PostParams::default(), &request)
        .await
        .map_err(|e| {
            ReportError::Api(format!(
                "cannot get a token of ServiceAccount {namespace}/{SCRAPER} to read the agents \
                 (--auth kubernetes): {e}; apply deploy/monitoring/scraper.yaml and allow \
                 `create serviceaccounts/token` there, or pass --agent-token-file PATH"
            ))
        })?;
    answer
        .status
        .map(|s| s.token)
        .ok_or_else(|| ReportError::Api("the TokenRequest came back without a token".into()))
}

/// The pod proxy's scheme prefix for an agent pod: `https:` when its container's
/// readiness probe uses HTTPS (the agent serves TLS: deploy/overlays/tls, the chart's
/// `tls.enabled`), else none (plain HTTP). The API server does not verify the pod's
/// certificate when it proxies; the token still travels encrypted.
pub fn proxy_scheme(pod: &Pod) -> &'static str {
    let https = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| c.readiness_probe.as_ref()?.http_get.as_ref())
        .any(|g| g.scheme.as_deref() == Some("HTTPS"));
    if https { "https:" } else { "" }
}

pub async fn collect_with(
    client: &Client,
    namespace: &str,
    port: u16,
    token: Option<&str>,
) -> Result<Fleet, ReportError> {
    collect_within(client, namespace, port, token, Bounds::default()).await
}

/// As [`collect_with`], within `bounds`.
pub async fn collect_within(
    client: &Client,
    namespace: &str,
    port: u16,
    token: Option<&str>,
    bounds: Bounds,
) -> Result<Fleet, ReportError> {
    let (names, incidents) = read_within(client, namespace, port, token, bounds).await?;
    Ok(agents::fleet(names, incidents))
}

/// Every agent's incidents with the kubeconfig's client, and the agents' names
/// (`pods/proxy NS/POD`), within the default bounds.
pub async fn read(
    namespace: &str,
    port: u16,
    token: Option<&str>,
) -> Result<(Vec<String>, Vec<AgentIncident>), ReportError> {
    let client = Client::try_default()
        .await
        .map_err(|e| ReportError::Api(format!("cannot connect with the kubeconfig: {e}")))?;
    read_within(&client, namespace, port, token, Bounds::default()).await
}

/// Every agent's incidents, and the agents' names (`pods/proxy NS/POD`), within `bounds`.
pub async fn read_within(
    client: &Client,
    namespace: &str,
    port: u16,
    token: Option<&str>,
    bounds: Bounds,
) -> Result<(Vec<String>, Vec<AgentIncident>), ReportError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods
        .list(&ListParams::default().labels(AGENT_SELECTOR))
        .await
        .map_err(|e| {
            ReportError::Api(format!(
                "cannot list the agent pods in namespace {namespace}: {e}"
            ))
        })?;
    let running: Vec<(String, &str)> = listed
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| Some((p.metadata.name.clone()?, proxy_scheme(p))))
        .collect();
    if running.is_empty() {
        return Err(ReportError::Api(format!(
            "no running agent pod ({AGENT_SELECTOR}) in namespace {namespace}"
        )));
    }
    let token = match token {
        Some(t) => t.to_string(),
        None => scraper_token(client, namespace).await?,
    };
    let token = &token;
    let read = AtomicUsize::new(0);
    let read = &read;
    let fetches = running.iter().map(|(name, scheme)| async move {
        let what = format!("pods/proxy {namespace}/{name}");
        let fetch = incidents(client, namespace, name, scheme, port, token, read, &bounds);
        tokio::time::timeout(bounds.per_agent, fetch)
            .await
            .map_err(|_| {
                ReportError::Api(format!(
                    "{what}: no whole answer within {}s",
                    bounds.per_agent.as_secs_f64()
                ))
            })?
    });
    let all = futures::stream::iter(fetches)
        .buffered(bounds.at_once.max(1))
        .try_collect::<Vec<_>>();
    let agents = u32::try_from(running.len()).unwrap_or(u32::MAX);
    let deadline = bounds.total + bounds.total_per_agent.saturating_mul(agents);
    let lists = tokio::time::timeout(deadline, all).await.map_err(|_| {
        ReportError::Api(format!(
            "the {agents} agents were not all read within {}s",
            deadline.as_secs_f64()
        ))
    })??;
    let names = running
        .iter()
        .map(|(n, _)| format!("pods/proxy {namespace}/{n}"))
        .collect();
    Ok((names, lists.into_iter().flatten().collect()))
}

/// One agent's incidents through the pod proxy; `read` counts the bytes of every
/// agent's answer, refused past `bounds.total_bytes`.
#[allow(clippy::too_many_arguments)]
async fn incidents(
    client: &Client,
    namespace: &str,
    name: &str,
    scheme: &str,
    port: u16,
    token: &str,
    read: &AtomicUsize,
    bounds: &Bounds,
) -> Result<Vec<AgentIncident>, ReportError> {
    let what = format!("pods/proxy {namespace}/{name}");
    let query = format!("limit={}", crate::api::MAX_LIMIT);
    let agent = ProxiedAgent {
        namespace,
        name,
        scheme,
        port,
    };
    let (status, body) = agent.incidents_answer(client, &query, token).await?;
    if read.fetch_add(body.len(), Relaxed) + body.len() > bounds.total_bytes {
        return Err(ReportError::Api(format!(
            "the agents' answers add up to more than {} MiB (at {what}), more than the report reads",
            bounds.total_bytes >> 20
        )));
    }
    let body = answer_text(&what, status, &body)?;
    agents::parse(&what, &body)
}

/// An agent pod, as the API server's pod proxy reaches it.
pub struct ProxiedAgent<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// [`proxy_scheme`] of the pod.
    pub scheme: &'a str,
    pub port: u16,
}

impl ProxiedAgent<'_> {
    /// The agent's `/api/v1/incidents?QUERY` through the pod proxy, with `token` in
    /// the header the proxy passes on: the answer's status and its body, read within
    /// [`super::client::MAX_BODY_BYTES`]. Only failing to get an answer is an error.
    pub async fn incidents_answer(
        &self,
        client: &Client,
        query: &str,
        token: &str,
    ) -> Result<(http::StatusCode, Vec<u8>), ReportError> {
        let Self {
            namespace,
            name,
            scheme,
            port,
        } = self;
        let path = format!(
            "/api/v1/namespaces/{namespace}/pods/{scheme}{name}:{port}/proxy{}",
            crate::api::INCIDENTS_PATH
        );
        let what = format!("pods/proxy {namespace}/{name}");
        let request = http::Request::get(format!("{path}?{query}"))
            .header(crate::api::PROXIED_TOKEN, token)
            .body(kube::client::Body::empty())
            .map_err(|e| ReportError::Api(format!("{what}: {e}")))?;
        let res = client
            .send(request)
            .await
            .map_err(|e| ReportError::Api(format!("{what}: {e}")))?;
        let status = res.status();
        let body = super::client::read_capped(res.into_body())
            .await
            .map_err(|e| match e {
                Some(e) => ReportError::Api(format!("{what}: {e}")),
                None => ReportError::TooLarge {
                    what: "agent",
                    url: what.clone(),
                    path: path.clone(),
                    limit_mib: super::client::MAX_BODY_BYTES >> 20,
                },
            })?;
        Ok((status, body))
    }
}

/// A proxied agent's answer as text, or why its status is not a success; `what`
/// names the agent (`pods/proxy NS/POD`).
pub fn answer_text(
    what: &str,
    status: http::StatusCode,
    body: &[u8],
) -> Result<String, ReportError> {
    let body = String::from_utf8_lossy(body);
    if status == http::StatusCode::UNAUTHORIZED {
        return Err(ReportError::Api(format!(
            "{what}: HTTP 401: the agent did not accept the token (--auth kubernetes): \
             the API server could not review it"
        )));
    }
    if !status.is_success() {
        return Err(ReportError::Api(format!(
            "{what}: HTTP {status}: {}",
            super::client::snippet(&body)
        )));
    }
    Ok(body.into_owned())
}
