//! The `cluster` tier's Helm case: the chart installed, upgraded with changed values and
//! uninstalled on the real API server and kubelet, in turn with the kustomize install
//! `cargo xtask cluster up` made (both use the same cluster-scoped names), leaving
//! nothing behind; then the kustomize install is put back for the other cases.
//!
//! Ignored by a plain `cargo test`; `cargo xtask test` runs it with the tier (see
//! tests/tests/cluster.rs).

use std::{process::Command, time::Duration};

use serde_json::Value;
use sidecar_race_tests::{
    cluster::{AGENT_NAMESPACE, cluster, wait_until},
    manifests::{CHART, helm},
    tools::{run, workspace},
};

const RELEASE: &str = "sidecar-race";
/// What `cargo xtask cluster up` imports the agent's image as (its overlay's newName).
const LOCAL_IMAGE: &str = "sr-test.local/sidecar-race-agent";
/// Every kind the chart can make, for "nothing left behind".
const KINDS: &str = "namespace,serviceaccount,clusterrole,clusterrolebinding,rolebinding,priorityclass,\
    daemonset,service,networkpolicy,configmap,podmonitor,servicemonitor,prometheusrule";
const PART_OF: &str = "app.kubernetes.io/part-of=sidecar-race";

fn helm_cmd(args: &[&str]) -> String {
    let c = cluster();
    run(
        Command::new(helm())
            .current_dir(workspace())
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .args(args),
        None,
    )
}

fn kustomize_dir(rel: &str) -> String {
    workspace().join(rel).to_string_lossy().into_owned()
}

/// The names of everything labelled part-of=sidecar-race, in every namespace.
fn ours() -> Vec<String> {
    cluster().json(&["get", KINDS, "-A", "-l", PART_OF])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn wait_all_gone(after: &str) {
    wait_until(
        &format!("nothing of sidecar-race left after {after}"),
        Duration::from_secs(120),
        || ours().is_empty().then_some(()),
    );
}

fn agent_container() -> Value {
    cluster().agent_pod()["spec"]["containers"][0].clone()
}

fn helm_install_upgrade_uninstall() {
    let c = cluster();
    let image = format!("image.repository={LOCAL_IMAGE}");
    helm_cmd(&[
        "install",
        RELEASE,
        CHART,
        "--set",
        &image,
        "--set",
        "podMonitor.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "dashboard.enabled=true",
        "--wait",
        "--timeout",
        "3m",
    ]);
    c.agent_rolled_out();
    let pod = c.agent_pod();
    let args = &pod["spec"]["containers"][0]["args"];
    assert_eq!(
        *args,
        serde_json::json!([
            "run",
            "--listen",
            "0.0.0.0:9965",
            "--pods-from",
            "api",
            "--auth",
            "kubernetes"
        ])
    );
    for (k, n) in [
        ("podmonitor", "sidecar-race-agent"),
        ("prometheusrule", "sidecar-race"),
        ("configmap", "sidecar-race-dashboard"),
    ] {
        c.kubectl(&["-n", AGENT_NAMESPACE, "get", k, n]);
    }

    // Changed values: a flag, a resource limit, another scrape namespace, and the
    // ServiceMonitor in place of the PodMonitor.
    helm_cmd(&[
        "upgrade",
        RELEASE,
        CHART,
        "--set",
        &image,
        "--set",
        "flags.metrics-pod-label=true",
        "--set",
        "resources.limits.memory=320Mi",
        "--set",
        "networkPolicy.namespaces={monitoring,prometheus}",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
        "--wait",
        "--timeout",
        "3m",
    ]);
    c.agent_rolled_out();
    let agent = wait_until("the upgraded agent pod", Duration::from_secs(120), || {
        let container = agent_container();
        (container["resources"]["limits"]["memory"] == "320Mi").then_some(container)
    });
    assert!(
        agent["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--metrics-pod-label"),
        "{agent:#}"
    );
    let np = c.json(&[
        "-n",
        AGENT_NAMESPACE,
        "get",
        "networkpolicy",
        "sidecar-race-agent",
    ]);
    assert_eq!(
        np["spec"]["ingress"][0]["from"].as_array().unwrap().len(),
        2,
        "{np:#}"
    );
    c.kubectl(&[
        "-n",
        AGENT_NAMESPACE,
        "get",
        "servicemonitor",
        "sidecar-race-agent",
    ]);
    let gone = c.kubectl(&[
        "-n",
        AGENT_NAMESPACE,
        "get",
        "podmonitor,configmap",
        "-l",
        PART_OF,
        "-o",
        "name",
    ]);
    assert!(gone.trim().is_empty(), "left from revision 1: {gone}");
    let history = helm_cmd(&["history", RELEASE, "-o", "json"]);
    let history: Value = serde_json::from_str(&history).unwrap();
    assert_eq!(history.as_array().map(Vec::len), Some(2), "{history:#}");

    helm_cmd(&["uninstall", RELEASE, "--wait", "--timeout", "3m"]);
    wait_all_gone("helm uninstall");
    let releases = helm_cmd(&["list", "--all-namespaces", "--all", "-q"]);
    assert!(releases.trim().is_empty(), "releases left: {releases}");
    let secrets = c.kubectl(&["get", "secrets", "-A", "-l", "owner=helm", "-o", "name"]);
    assert!(secrets.trim().is_empty(), "release records left: {secrets}");
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn helm_install_upgrade_and_uninstall_in_turn_with_the_kustomize_install() {
    let c = cluster();
    // The kustomize install out first: same namespace and cluster-scoped names.
    c.kubectl(&[
        "delete",
        "-k",
        &kustomize_dir("deploy/monitoring"),
        "--ignore-not-found",
    ]);
    c.kubectl(&[
        "delete",
        "-k",
        &kustomize_dir("deploy/overlays/local-cluster"),
        "--ignore-not-found",
    ]);
    wait_all_gone("kubectl delete -k");
    let result = std::panic::catch_unwind(helm_install_upgrade_uninstall);
    // Back to the kustomize install for the other cases, whatever happened above.
    let _ = Command::new(helm())
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .args(["uninstall", RELEASE, "--wait"])
        .output();
    wait_all_gone("the helm case");
    c.kubectl(&[
        "apply",
        "-k",
        &kustomize_dir("deploy/overlays/local-cluster"),
    ]);
    c.kubectl(&["apply", "-k", &kustomize_dir("deploy/monitoring")]);
    c.agent_rolled_out();
    c.agent_pod();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
