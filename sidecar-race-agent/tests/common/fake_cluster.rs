//! A fake Kubernetes API server at the HTTP level for the commands that read the
//! agents through it (`report --agents-via-api`, `timeline`): the agents' pods, their
//! incidents through the pod proxy, an app pod on one agent's node, and the
//! report-plan manifests as the cluster's workloads. Also the incidents it serves.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{Json, Router, http::StatusCode, response::IntoResponse};
use serde_json::{Value, json};

pub async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// An incident exactly as `/api/v1/incidents` shows it.
pub fn incident(
    id: u64,
    pod: &str,
    ns: &str,
    kind: &str,
    name: &str,
    (container, sidecar, pattern, port): (&str, &str, &str, u16),
    (phase, refused, window): (&str, u64, Option<f64>),
) -> Value {
    json!({
        "id": id,
        "phase": phase,
        "state": "resolved",
        "pod_uid": format!("uid-{pod}"),
        "namespace": ns,
        "pod": pod,
        "workload": {"kind": kind, "name": name},
        "container": container,
        "container_id": format!("containerd://{pod}-{container}"),
        "sidecar": sidecar,
        "sidecar_container_id": format!("containerd://{pod}-{sidecar}"),
        "pattern": pattern,
        "port": port,
        "destination": format!("127.0.0.1:{port}"),
        "local_destination": null,
        "refused_count": refused,
        "first_refused_at": "2026-11-29T17:00:00.000000000Z",
        "last_refused_at": "2026-11-29T17:00:01.400000000Z",
        "listener_ready_at": "2026-11-29T17:00:01.500000000Z",
        "listener_closed_at": null,
        "race_window_seconds": window,
        "advice": "(the agent's sentence)"
    })
}

/// A fake API server: the agents' pods (two running, one pending) in `sidecar-race`,
/// their incidents through the pod proxy, and the report-plan manifests as the
/// cluster's workloads. Records every request.
pub async fn fake_api_server(seen: Arc<Mutex<Vec<(String, String)>>>) -> SocketAddr {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/report-plan");
    let mut objects: Vec<Value> = Vec::new();
    for f in ["shop.yaml", "data.yaml"] {
        let text = std::fs::read_to_string(format!("{dir}/{f}")).unwrap();
        objects.extend(serde_saphyr::from_multiple::<Value>(&text).unwrap());
    }
    let checkout = with_timeline(incident(
        1,
        "checkout-1",
        "shop",
        "Deployment",
        "checkout",
        ("app", "istio-proxy", "classic", 15001),
        ("startup", 12, Some(1.2)),
    ));
    // An earlier pod of the same name (another UID), on the same node: `timeline`
    // shows the current pod's incidents only.
    let mut earlier = incident(
        2,
        "checkout-1",
        "shop",
        "Deployment",
        "checkout",
        ("app", "istio-proxy", "classic", 15001),
        ("drain", 3, Some(0.2)),
    );
    earlier["pod_uid"] = json!("uid-checkout-1-before");
    let ledger = incident(
        1,
        "ledger-0",
        "data",
        "StatefulSet",
        "ledger",
        ("app", "cloud-sql-proxy", "native", 5432),
        ("startup", 8, Some(0.4)),
    );
    let handler = move |method: axum::http::Method,
                        uri: axum::http::Uri,
                        headers: axum::http::HeaderMap| {
        let seen = seen.clone();
        let objects = objects.clone();
        let (checkout, earlier, ledger) = (checkout.clone(), earlier.clone(), ledger.clone());
        async move {
            let token = headers
                .get("x-sidecar-race-token")
                .and_then(|v| v.to_str().ok())
                .map(|t| format!(" token={t}"))
                .unwrap_or_default();
            seen.lock()
                .unwrap()
                .push((method.to_string(), format!("{uri}{token}")));
            let path = uri.path();
            let list = |kind: &str| {
                let items: Vec<Value> = objects
                    .iter()
                    .filter(|o| o["kind"] == kind)
                    .cloned()
                    .collect();
                json!({"apiVersion": "v1", "kind": format!("{kind}List"), "metadata": {"resourceVersion": "1"}, "items": items})
            };
            // agent-b serves TLS (deploy/overlays/tls): its probes say HTTPS.
            let agent = |name: &str, phase: &str| {
                let scheme = if name == "agent-b" { "HTTPS" } else { "HTTP" };
                let node = name.replace("agent", "node");
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "sidecar-race"},
                       "spec": {"nodeName": node, "containers": [{"name": "agent",
                           "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http-metrics", "scheme": scheme}}}]},
                       "status": {"phase": phase}})
            };
            let body = match path {
                "/version" => json!({"major": "1", "minor": "33", "gitVersion": "v1.33.1"}),
                "/api/v1/namespaces/sidecar-race/serviceaccounts/sidecar-race-scraper/token" => {
                    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                           "metadata": {"name": "sidecar-race-scraper"},
                           "spec": {"audiences": [], "expirationSeconds": 600},
                           "status": {"token": "scraper-token", "expirationTimestamp": "2026-01-01T00:10:00Z"}})
                }
                "/api/v1/namespaces/sidecar-race/pods" => {
                    json!({"apiVersion": "v1", "kind": "PodList",
                    "metadata": {"resourceVersion": "1"},
                    "items": [agent("agent-a", "Running"), agent("agent-b", "Running"), agent("agent-c", "Pending")]})
                }
                "/api/v1/namespaces/sidecar-race/pods/agent-a:9965/proxy/api/v1/incidents" => {
                    json!({"incidents": [checkout, earlier]})
                }
                // An app pod on agent-a's node, one on a node without an agent; any
                // other pod of `shop` is not found.
                "/api/v1/namespaces/shop/pods/checkout-1" => app_pod("checkout-1", "node-a"),
                "/api/v1/namespaces/shop/pods/lonely" => app_pod("lonely", "node-z"),
                p if p.starts_with("/api/v1/namespaces/shop/pods/") => {
                    let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                        "message": "pods not found", "reason": "NotFound", "code": 404});
                    return (StatusCode::NOT_FOUND, Json(status)).into_response();
                }
                "/api/v1/namespaces/sidecar-race/pods/https:agent-b:9965/proxy/api/v1/incidents" => {
                    json!({"incidents": [ledger]})
                }
                "/apis/apps/v1/deployments" => list("Deployment"),
                "/apis/apps/v1/statefulsets" => list("StatefulSet"),
                "/apis/batch/v1/jobs" => list("Job"),
                p if p.starts_with("/api") => {
                    let kind = match p.rsplit('/').next().unwrap() {
                        "daemonsets" => "DaemonSet",
                        "replicasets" => "ReplicaSet",
                        "cronjobs" => "CronJob",
                        _ => "Pod",
                    };
                    list(kind)
                }
                _ => return (StatusCode::NOT_FOUND, Json(json!({}))).into_response(),
            };
            Json(body).into_response()
        }
    };
    serve(Router::new().fallback(handler)).await
}

/// A running app pod of `shop` on `node`, its UID `uid-NAME` as [`incident`]'s.
fn app_pod(name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
           "spec": {"nodeName": node, "containers": [{"name": "app"}, {"name": "istio-proxy"}]},
           "status": {"phase": "Running"}})
}

/// `incident` with a startup race's timeline, as the agent writes it: the app starts
/// and is refused, the sidecar starts, the last refusals, the sidecar listens and
/// becomes ready.
pub fn with_timeline(mut incident: Value) -> Value {
    let at = |ms: u32| format!("2026-11-29T16:59:59.{ms:03}000000Z");
    let later = |ms: u32| format!("2026-11-29T17:00:0{}.{:03}000000Z", ms / 1000, ms % 1000);
    incident["protocol"] = json!("tcp");
    incident["timeline"] = json!([
        {"kind": "container_started", "at": at(880), "container": "app",
         "container_id": "containerd://checkout-1-app", "source": "kernel"},
        {"kind": "first_refusal", "at": later(0), "container": "app",
         "container_id": "containerd://checkout-1-app", "count": 1},
        {"kind": "container_started", "at": later(300), "container": "istio-proxy",
         "container_id": "containerd://checkout-1-istio-proxy", "source": "pod"},
        {"kind": "last_refusal", "at": later(1400), "container": "app",
         "container_id": "containerd://checkout-1-app", "count": 11},
        {"kind": "listening", "at": later(1500), "container": "istio-proxy",
         "container_id": "containerd://checkout-1-istio-proxy"},
        {"kind": "ready", "at": later(1620), "container": "istio-proxy",
         "container_id": "containerd://checkout-1-istio-proxy", "value": true}
    ]);
    incident
}
