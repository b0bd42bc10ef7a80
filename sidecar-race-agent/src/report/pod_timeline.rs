//! `timeline POD`: one pod's incidents, read from the agent on its node through the
//! API server's pod proxy with the user's kubeconfig (as `report --agents-via-api`
//! reads every agent, [`super::via_api`]): the pod gives its node and UID, the node its
//! agent, and the agent the incidents of that UID, with their timelines.

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::ListParams};
use serde_json::Value;
use thiserror::Error;

use super::{
    error::ReportError,
    via_api::{AGENT_SELECTOR, ProxiedAgent, answer_text, proxy_scheme, scraper_token},
};
use crate::api::{MAX_LIMIT, Page};

/// Why a pod's timelines could not be read. Each message is one sentence.
#[derive(Debug, Error)]
pub enum TimelineError {
    #[error("cannot use the kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("cannot reach the API server: {0}")]
    ApiUnreachable(String),
    #[error("the API server refused to {what}: {reason}")]
    ApiRefused { what: String, reason: String },
    #[error(
        "pod {namespace}/{name} does not exist (deleted, or never made): without it the API \
         server cannot say which node's agent saw it"
    )]
    PodNotFound { namespace: String, name: String },
    #[error("pod {namespace}/{name} has no node yet: no agent has seen it")]
    NotScheduled { namespace: String, name: String },
    #[error(
        "no sidecar-race agent is running on node {node} (no running pod labelled \
         {AGENT_SELECTOR} in namespace {agent_namespace} there)"
    )]
    NoAgent {
        node: String,
        agent_namespace: String,
    },
    #[error("agent {agent} on node {node} is not reachable: {reason}")]
    AgentUnreachable {
        agent: String,
        node: String,
        reason: ReportError,
    },
    /// No token for an agent run with `--auth kubernetes` (the sentence says how to get one).
    #[error("{0}")]
    Token(ReportError),
    #[error("agent {agent} answered with something that is not an incident list: {reason}")]
    Malformed { agent: String, reason: String },
}

/// Where to look: the pod, and where the agents run.
#[derive(Debug, Clone)]
pub struct Request {
    pub pod: String,
    /// `None`: the kubeconfig context's namespace, else `default`.
    pub namespace: Option<String>,
    pub agent_namespace: String,
    pub agent_port: u16,
    /// `None`: a short-lived token of the scraper ServiceAccount.
    pub token: Option<String>,
}

/// The pod, the agent that watched it, and its incidents as the agent gave them.
#[derive(Debug, Clone)]
pub struct PodTimelines {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub node: String,
    /// `NS/POD` of the agent.
    pub agent: String,
    /// The incidents of the pod's UID, each its `/api/v1/incidents` JSON, newest first.
    pub incidents: Vec<Value>,
    /// The agent held more of the namespace's incidents than one answer carries.
    pub truncated: bool,
}

/// Reads `request`'s pod's incidents with the kubeconfig's client.
pub async fn read(request: &Request) -> Result<PodTimelines, TimelineError> {
    let client = Client::try_default()
        .await
        .map_err(|e| TimelineError::Kubeconfig(e.to_string()))?;
    read_with(&client, request).await
}

/// A kube error as this command's: the API server's own refusals apart from not
/// reaching it at all.
fn api_error(what: &str, e: kube::Error) -> TimelineError {
    match e {
        kube::Error::Api(status) => TimelineError::ApiRefused {
            what: what.to_string(),
            reason: status.message,
        },
        e => TimelineError::ApiUnreachable(e.to_string()),
    }
}

pub async fn read_with(client: &Client, request: &Request) -> Result<PodTimelines, TimelineError> {
    let namespace = request
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let name = request.pod.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let pod = pods
        .get_opt(&name)
        .await
        .map_err(|e| api_error(&format!("get pod {namespace}/{name}"), e))?
        .ok_or_else(|| TimelineError::PodNotFound {
            namespace: namespace.clone(),
            name: name.clone(),
        })?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
        return Err(TimelineError::NotScheduled { namespace, name });
    };
    let agent_ns = &request.agent_namespace;
    let agents: Api<Pod> = Api::namespaced(client.clone(), agent_ns);
    let listed = agents
        .list(
            &ListParams::default()
                .labels(AGENT_SELECTOR)
                .fields(&format!("spec.nodeName={node}")),
        )
        .await
        .map_err(|e| api_error(&format!("list the agent pods in namespace {agent_ns}"), e))?;
    // The field selector already keeps the node's; a server that ignores it is
    // answered all the same.
    let agent = listed
        .items
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node))
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .find_map(|p| Some((p.metadata.name.clone()?, proxy_scheme(p))));
    let Some((agent_name, scheme)) = agent else {
        return Err(TimelineError::NoAgent {
            node,
            agent_namespace: agent_ns.clone(),
        });
    };
    let agent = format!("{agent_ns}/{agent_name}");
    let unreachable = |reason: ReportError| TimelineError::AgentUnreachable {
        agent: agent.clone(),
        node: node.clone(),
        reason,
    };
    let token = match &request.token {
        Some(t) => t.clone(),
        None => scraper_token(client, agent_ns)
            .await
            .map_err(TimelineError::Token)?,
    };
    // The API filters by namespace (not by pod): the pod's UID is kept here.
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("namespace", &namespace)
        .append_pair("limit", &MAX_LIMIT.to_string())
        .finish();
    let proxied = ProxiedAgent {
        namespace: agent_ns,
        name: &agent_name,
        scheme,
        port: request.agent_port,
    };
    let (status, body) = proxied
        .incidents_answer(client, &query, &token)
        .await
        .map_err(unreachable)?;
    let body = answer_text(&format!("pods/proxy {agent}"), status, &body).map_err(unreachable)?;
    let page: Page<Vec<Value>> =
        serde_json::from_str(&body).map_err(|e| TimelineError::Malformed {
            agent: agent.clone(),
            reason: e.to_string(),
        })?;
    let incidents = page
        .incidents
        .into_iter()
        .filter(|i| i["pod_uid"].as_str() == Some(uid.as_str()))
        .collect();
    Ok(PodTimelines {
        namespace,
        pod: name,
        uid,
        node,
        agent,
        incidents,
        truncated: page.truncated,
    })
}
