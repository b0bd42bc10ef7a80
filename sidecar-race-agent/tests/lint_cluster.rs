//! `lint --cluster` against a fake API server at the HTTP level, through kube's real
//! client and the user's kubeconfig (`KUBECONFIG`): read-only lists of every workload
//! kind, objects owned by another workload skipped, the cluster's version used for
//! SR010 unless `--kube-version` says otherwise; the live namespaces' labels and the
//! meshes' own native-sidecar defaults (istiod, linkerd-config) decide injection, and
//! Consul's injector's `-default-inject` injects pods that ask for nothing.

mod common;

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Command, Output},
    sync::{Arc, Mutex},
};

use axum::{Json, Router, extract::State, http::Method, http::Uri};
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/lint")
        .join(name);
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
    docs.into_iter().next().unwrap()
}

fn owned_by(mut v: Value, kind: &str, name: &str) -> Value {
    v["metadata"]["name"] = json!(format!("{}-owned", v["metadata"]["name"].as_str().unwrap()));
    v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": kind, "name": name,
        "uid": "00000000-0000-4000-8000-00000000000a", "controller": true}]);
    v
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": format!("{kind}List"), "metadata": {"resourceVersion": "7"}, "items": items})
}

type Seen = Arc<Mutex<Vec<(Method, String)>>>;

async fn answer(State(seen): State<Seen>, method: Method, uri: Uri) -> Json<Value> {
    seen.lock().unwrap().push((method, uri.to_string()));
    let path = uri.path();
    let kind = path.rsplit('/').next().unwrap_or_default();
    let body = match kind {
        "version" => json!({"major": "1", "minor": "28+", "gitVersion": "v1.28.9-gke.1"}),
        "deployments" => list(
            "Deployment",
            vec![fixture("istio-injected-deployment.yaml")],
        ),
        "statefulsets" => list("StatefulSet", vec![fixture("native-sidecar-probed.yaml")]),
        "daemonsets" => list("DaemonSet", vec![]),
        "replicasets" => {
            let mut rs = fixture("sleep-hack.yaml");
            rs["kind"] = json!("ReplicaSet");
            list("ReplicaSet", vec![owned_by(rs, "Deployment", "admin-ui")])
        }
        "jobs" => {
            let job = fixture("cloud-sql-proxy-job.yaml");
            list(
                "Job",
                vec![job.clone(), owned_by(job, "CronJob", "nightly")],
            )
        }
        "cronjobs" => list("CronJob", vec![fixture("cronjob.yaml")]),
        "pods" => {
            let docs: Vec<Value> = serde_saphyr::from_multiple(
                &std::fs::read_to_string(
                    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/lint/multi-document.yaml"),
                )
                .unwrap(),
            )
            .unwrap();
            let pod = docs.into_iter().find(|d| d["kind"] == "Pod").unwrap();
            list("Pod", vec![pod.clone(), owned_by(pod, "ReplicaSet", "x")])
        }
        _ => json!({}),
    };
    Json(body)
}

/// Every request was a GET, and each of `paths` was asked (query aside).
fn assert_read_only_and_asked(seen: &[(Method, String)], paths: &[&str]) {
    assert!(
        seen.iter().all(|(m, _)| m == Method::GET),
        "read-only: {seen:?}"
    );
    for path in paths {
        assert!(
            seen.iter().any(|(_, p)| p.split('?').next() == Some(*path)),
            "{path} not asked: {seen:?}"
        );
    }
}

/// Serves `app` on a free loopback port.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn fake_api_server() -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new().fallback(answer).with_state(seen.clone());
    (serve(app).await, seen)
}

async fn lint(addr: SocketAddr, args: &[&str]) -> Output {
    let config = common::kubeconfig_for(addr, "lint");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sidecar-race-agent"));
    cmd.arg("lint").args(args).env("KUBECONFIG", &config);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let _ = std::fs::remove_file(config);
    out
}

fn findings(out: &Output) -> Vec<(String, String, String)> {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["id"].as_str().unwrap().to_string(),
                f["severity"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// (workload, id, reason) of each finding of a `--format json` run.
fn reasons(out: &Output) -> Vec<(String, String, String)> {
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap().to_string();
            (s("name"), s("id"), s("reason"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn lints_the_clusters_workloads_with_read_only_lists() {
    let (addr, seen) = fake_api_server().await;
    let out = lint(addr, &["--cluster", "--format", "json"]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f = findings(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["workloads"], 5,
        "checkout, ledger, migrate-orders, nightly-export, debug-client; owned objects skipped"
    );
    assert!(
        f.iter().all(|(name, ..)| !name.ends_with("-owned")),
        "{f:?}"
    );
    let has = |name: &str, id: &str, sev: &str| {
        f.contains(&(name.to_string(), id.to_string(), sev.to_string()))
    };
    assert!(has("checkout", "SR001", "error"), "{f:?}");
    assert!(has("migrate-orders", "SR002", "error"), "{f:?}");
    assert!(has("nightly-export", "SR002", "error"), "{f:?}");
    assert!(has("debug-client", "SR001", "error"), "{f:?}");
    assert!(
        has("ledger", "SR010", "error"),
        "the cluster says 1.28: its native sidecar would not start first: {f:?}"
    );
    assert!(
        v["findings"][0].get("file").is_none(),
        "no file for cluster objects"
    );
    let first = seen.lock().unwrap().clone();
    assert_read_only_and_asked(
        &first,
        &[
            "/version",
            "/apis/apps/v1/deployments",
            "/apis/apps/v1/statefulsets",
            "/apis/apps/v1/daemonsets",
            "/apis/apps/v1/replicasets",
            "/apis/batch/v1/jobs",
            "/apis/batch/v1/cronjobs",
            "/api/v1/pods",
        ],
    );

    // --kube-version wins over the cluster's; -n lists one namespace.
    let out = lint(
        addr,
        &[
            "--cluster",
            "-n",
            "shop",
            "--kube-version",
            "1.33",
            "--format",
            "json",
        ],
    )
    .await;
    let f = findings(&out);
    assert!(f.iter().all(|(_, id, _)| id != "SR010"), "{f:?}");
    let seen: Vec<_> = seen.lock().unwrap()[first.len()..].to_vec();
    assert!(
        seen.iter()
            .any(|(_, p)| p.starts_with("/apis/apps/v1/namespaces/shop/deployments")),
        "{seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|(_, p)| p == "/version").count(),
        0,
        "with --kube-version the version is not asked"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_patches_and_unreachable_clusters() {
    let (addr, _) = fake_api_server().await;
    let out = lint(addr, &["--cluster", "--fix=patch"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("name: migrate-orders"), "{text}");
    let out = lint(addr, &["--cluster", "--fix"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use --fix=patch"));
    let dead: SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let out = lint(dead, &["--cluster"]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error: cannot read the API server's version"),
        "{err}"
    );
}

fn corpus(name: &str, kind: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/lint-corpus")
        .join(name);
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
    docs.into_iter().find(|d| d["kind"] == kind).unwrap()
}

/// A cluster with Istio and Linkerd: namespaces labelled for injection, istiod of
/// `istio_tag`, Linkerd's values with `linkerd_native` (absent: unset).
#[derive(Clone)]
struct Mesh {
    istio_tag: &'static str,
    linkerd_native: Option<bool>,
    seen: Seen,
}

async fn mesh_answer(State(mesh): State<Mesh>, method: Method, uri: Uri) -> Json<Value> {
    mesh.seen.lock().unwrap().push((method, uri.to_string()));
    let path = uri.path();
    let body = match path {
        "/version" => json!({"major": "1", "minor": "33", "gitVersion": "v1.33.1"}),
        "/apis/apps/v1/deployments" => list(
            "Deployment",
            vec![
                corpus("istio-namespace.yaml", "Deployment"),
                corpus("linkerd.yaml", "Deployment"),
            ],
        ),
        "/api/v1/namespaces" => list(
            "Namespace",
            vec![
                corpus("istio-namespace.yaml", "Namespace"),
                corpus("linkerd.yaml", "Namespace"),
            ],
        ),
        "/apis/apps/v1/namespaces/istio-system/deployments" => list(
            "Deployment",
            vec![json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "istiod", "namespace": "istio-system", "labels": {"app": "istiod"}},
                "spec": {"selector": {"matchLabels": {"app": "istiod"}}, "template": {"spec": {"containers": [
                    {"name": "discovery", "image": format!("docker.io/istio/pilot:{}", mesh.istio_tag)}]}}}})],
        ),
        "/api/v1/namespaces/linkerd/configmaps/linkerd-config" => {
            let native = mesh
                .linkerd_native
                .map_or(String::new(), |n| format!("  nativeSidecar: {n}\n"));
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "linkerd-config", "namespace": "linkerd"},
                "data": {"values": format!("linkerdVersion: edge-26.5.2\nproxy:\n  logLevel: warn\n{native}")}})
        }
        // An agent with no incidents yet, for `report --agent`.
        "/api/v1/incidents" => json!({"incidents": []}),
        _ => list("Object", vec![]),
    };
    Json(body)
}

async fn mesh_api_server(
    istio_tag: &'static str,
    linkerd_native: Option<bool>,
) -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let state = Mesh {
        istio_tag,
        linkerd_native,
        seen: seen.clone(),
    };
    let app = Router::new().fallback(mesh_answer).with_state(state);
    (serve(app).await, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn live_namespace_labels_and_the_meshes_own_defaults_decide_injection() {
    // Istio 1.24 and a Linkerd without nativeSidecar: classic, as the cluster says.
    let (addr, seen) = mesh_api_server("1.24.2", None).await;
    let out = lint(
        addr,
        &["--cluster", "--format", "json", "--fail-on", "none"],
    )
    .await;
    let f = reasons(&out);
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(
        (f[0].0.as_str(), f[0].1.as_str()),
        ("productpage-v1", "SR009")
    );
    assert!(
        f[0].2.contains(
            "the cluster's default: istiod 1.24.2, ENABLE_NATIVE_SIDECARS unset: off by default"
        ),
        "{f:?}"
    );
    assert_eq!((f[1].0.as_str(), f[1].1.as_str()), ("voting", "SR009"));
    assert!(f[1].2.contains("proxy.nativeSidecar=unset"), "{f:?}");
    assert_read_only_and_asked(
        &seen.lock().unwrap(),
        &[
            "/api/v1/namespaces",
            "/apis/apps/v1/namespaces/istio-system/deployments",
            "/api/v1/namespaces/linkerd/configmaps/linkerd-config",
        ],
    );

    // Istio 1.27 (native by default) and Linkerd's proxy.nativeSidecar: nothing to flag.
    let (addr, _) = mesh_api_server("1.27.1", Some(true)).await;
    let out = lint(addr, &["--cluster", "--format", "json"]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(findings(&out), vec![]);
}

/// `report --cluster` joins the same lint as `lint --cluster`: with Istio 1.27 and
/// Linkerd's proxy.nativeSidecar the injected workloads get native proxies, so they
/// are no static risk; with Istio 1.24 and Linkerd unset they are.
#[tokio::test(flavor = "multi_thread")]
async fn report_cluster_reads_the_meshes_own_defaults_too() {
    async fn not_raced(istio_tag: &'static str, linkerd_native: Option<bool>) -> Vec<String> {
        let (addr, seen) = mesh_api_server(istio_tag, linkerd_native).await;
        let config = common::kubeconfig_for(addr, "report");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sidecar-race-agent"));
        cmd.args(["report", "--agent", &format!("http://{addr}")])
            .args(["--cluster", "--format", "json"])
            .env("KUBECONFIG", &config);
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let _ = std::fs::remove_file(config);
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_read_only_and_asked(
            &seen.lock().unwrap(),
            &[
                "/apis/apps/v1/namespaces/istio-system/deployments",
                "/api/v1/namespaces/linkerd/configmaps/linkerd-config",
            ],
        );
        v["not_raced"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["workload"].as_str().unwrap().to_string())
            .collect()
    }
    assert_eq!(
        not_raced("1.24.2", None).await,
        ["productpage-v1", "voting"]
    );
    assert_eq!(not_raced("1.27.1", Some(true)).await, Vec::<String>::new());
}

/// A cluster whose Consul connect injector runs with `-default-inject=<default>`, and
/// three plain Deployments: one in `shop`, one opting out, one in kube-system.
async fn consul_answer(
    State((default, seen)): State<(bool, Seen)>,
    method: Method,
    uri: Uri,
) -> Json<Value> {
    seen.lock().unwrap().push((method, uri.to_string()));
    let plain = |name: &str, ns: &str, annotations: Value| {
        let mut d = corpus("consul.yaml", "Deployment");
        d["metadata"]["name"] = json!(name);
        d["metadata"]["namespace"] = json!(ns);
        d["spec"]["template"]["metadata"]["annotations"] = annotations;
        d
    };
    let script = format!(
        "consul-k8s-control-plane inject-connect \\\n  -default-inject={default} \\\n  -allow-k8s-namespace=\"*\" \\\n  -listen=:8080\n"
    );
    let body = match (
        uri.path(),
        uri.query().unwrap_or_default().contains("labelSelector"),
    ) {
        ("/version", _) => json!({"major": "1", "minor": "33", "gitVersion": "v1.33.1"}),
        ("/apis/apps/v1/deployments", true) => list(
            "Deployment",
            vec![json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "consul-connect-injector", "namespace": "consul",
                    "labels": {"app": "consul", "component": "connect-injector"}},
                "spec": {"selector": {"matchLabels": {"app": "consul"}}, "template": {"spec": {"containers": [
                    {"name": "sidecar-injector", "image": "hashicorp/consul-k8s-control-plane:1.8.0",
                     "command": ["/bin/sh", "-ec", script]}]}}}})],
        ),
        ("/apis/apps/v1/deployments", false) => list(
            "Deployment",
            vec![
                plain("web", "shop", json!({})),
                plain(
                    "opted-out",
                    "shop",
                    json!({"consul.hashicorp.com/connect-inject": "false"}),
                ),
                plain("coredns-like", "kube-system", json!({})),
            ],
        ),
        _ => list("Object", vec![]),
    };
    Json(body)
}

#[tokio::test(flavor = "multi_thread")]
async fn consuls_default_injection_is_read_from_its_injector_deployment() {
    for default in [true, false] {
        let seen: Seen = Arc::default();
        let app = Router::new()
            .fallback(consul_answer)
            .with_state((default, seen.clone()));
        let addr = serve(app).await;
        let out = lint(
            addr,
            &["--cluster", "--format", "json", "--fail-on", "none"],
        )
        .await;
        let f = reasons(&out);
        if !default {
            assert_eq!(f, vec![], "no annotation, no default: no injection");
            continue;
        }
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].0.as_str(), f[0].1.as_str()), ("web", "SR011"));
        assert!(
            f[0].2.contains(
                "Consul injects consul-dataplane into this pod as a classic sidecar (by the cluster's default, consul/consul-connect-injector: -default-inject=true)"
            ),
            "{f:?}"
        );
        assert_read_only_and_asked(&seen.lock().unwrap(), &["/apis/apps/v1/deployments"]);
        assert!(
            seen.lock()
                .unwrap()
                .iter()
                .any(|(_, p)| p
                    .contains("labelSelector=app%3Dconsul%2Ccomponent%3Dconnect-injector")),
            "{:?}",
            seen.lock().unwrap()
        );
    }
}
