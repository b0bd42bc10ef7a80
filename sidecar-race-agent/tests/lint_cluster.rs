//! `lint --cluster` against a fake API server at the HTTP level, through kube's real
//! client and the user's kubeconfig (`KUBECONFIG`): read-only lists of every workload
//! kind, objects owned by another workload skipped, the cluster's version used for
//! SR010 unless `--kube-version` says otherwise.

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

async fn fake_api_server() -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new().fallback(answer).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
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
    assert!(
        first.iter().all(|(m, _)| m == Method::GET),
        "read-only: {first:?}"
    );
    for path in [
        "/version",
        "/apis/apps/v1/deployments",
        "/apis/apps/v1/statefulsets",
        "/apis/apps/v1/daemonsets",
        "/apis/apps/v1/replicasets",
        "/apis/batch/v1/jobs",
        "/apis/batch/v1/cronjobs",
        "/api/v1/pods",
    ] {
        assert!(
            first.iter().any(|(_, p)| p.split('?').next() == Some(path)),
            "{path} not listed: {first:?}"
        );
    }

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
