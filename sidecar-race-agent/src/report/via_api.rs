//! `report --agents-via-api`: every agent's `/api/v1/incidents` through the API
//! server's pod proxy (`GET /api/v1/namespaces/NS/pods/POD:PORT/proxy/api/v1/incidents`)
//! with the user's kubeconfig, for a laptop that cannot reach the nodes. It needs, in
//! the agent's namespace only, `pods` list (to find the agents) and `pods/proxy` get.
//! The API server removes the `Authorization` header before proxying, so an agent run
//! with `--auth kubernetes` answers 401 here: the error says what to do instead.

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::ListParams};

use super::{Fleet, ReportError, agents};

/// The agents' pod label (deploy/base/daemonset.yaml).
pub const AGENT_SELECTOR: &str = "app.kubernetes.io/name=sidecar-race-agent";

pub async fn collect(namespace: &str, port: u16) -> Result<Fleet, ReportError> {
    let client = Client::try_default()
        .await
        .map_err(|e| ReportError::Api(format!("cannot connect with the kubeconfig: {e}")))?;
    collect_with(&client, namespace, port).await
}

pub async fn collect_with(
    client: &Client,
    namespace: &str,
    port: u16,
) -> Result<Fleet, ReportError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods
        .list(&ListParams::default().labels(AGENT_SELECTOR))
        .await
        .map_err(|e| {
            ReportError::Api(format!(
                "cannot list the agent pods in namespace {namespace}: {e}"
            ))
        })?;
    let running: Vec<String> = listed
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    if running.is_empty() {
        return Err(ReportError::Api(format!(
            "no running agent pod ({AGENT_SELECTOR}) in namespace {namespace}"
        )));
    }
    let fetches = running.iter().map(|name| async move {
        let path =
            format!("/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/api/v1/incidents");
        let what = format!("pods/proxy {namespace}/{name}");
        let request = http::Request::get(format!("{path}?limit={}", crate::http::MAX_LIMIT))
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
        let body = String::from_utf8_lossy(&body);
        if status == http::StatusCode::UNAUTHORIZED {
            return Err(ReportError::Api(format!(
                "{what}: HTTP 401: the agent answers only authenticated callers (--auth kubernetes), \
                 and the API server's pod proxy does not pass credentials on; read it with \
                 `kubectl port-forward` and --agent URL --agent-token-file PATH"
            )));
        }
        if !status.is_success() {
            return Err(ReportError::Api(format!(
                "{what}: HTTP {status}: {}",
                super::client::snippet(&body)
            )));
        }
        agents::parse(&what, &body)
    });
    let lists = futures::future::try_join_all(fetches).await?;
    let names = running
        .iter()
        .map(|n| format!("pods/proxy {namespace}/{n}"))
        .collect();
    Ok(agents::fleet(names, lists.into_iter().flatten()))
}
