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
    agent::agent_binary,
    cluster::{AGENT_NAMESPACE, TestNamespace, cluster, wait_until},
    manifests::{CHART, helm},
    operator_prometheus::{
        self, POD_MONITOR_JOB, cleanup_scraper_rbac, generated_config, prometheus_resource,
        scraper_rbac,
    },
    tools::{run, workspace},
};

const RELEASE: &str = "sidecar-race";
/// What `cargo xtask cluster up` imports the agent's image as (its overlay's newName).
const LOCAL_IMAGE: &str = "sr-test.local/sidecar-race-agent";
/// Every kind the chart can make, for "nothing left behind".
const KINDS: &str = "namespace,serviceaccount,clusterrole,clusterrolebinding,rolebinding,priorityclass,\
    daemonset,service,networkpolicy,configmap,secret,podmonitor,servicemonitor,prometheusrule";
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

/// OpenShift's SecurityContextConstraints CRD (openshift/api, which setup downloads),
/// so that the API server serves security.openshift.io/v1 as OpenShift's does.
fn install_scc_crd() -> String {
    let crd = std::env::var("SIDECAR_RACE_SCC_CRD").unwrap_or_else(|_| {
        panic!(
            "SIDECAR_RACE_SCC_CRD is not set ({}): run the tier with `cargo xtask test`",
            std::env::var("SIDECAR_RACE_SCC_CRD_ERROR").unwrap_or_default()
        )
    });
    let c = cluster();
    c.kubectl(&["apply", "--server-side", "-f", &crd]);
    c.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/securitycontextconstraints.security.openshift.io",
    ]);
    crd
}

/// `helm test`: its pod's report exits 0 only when every Running agent answered. On a
/// failure the pod is kept (hook-succeeded deletes only a passed one): its log is shown.
fn helm_test() {
    let c = cluster();
    let out = Command::new(helm())
        .current_dir(workspace())
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .args(["test", RELEASE, "--timeout", "3m"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !stdout.contains("Phase:          Succeeded") {
        let logs = c
            .cmd()
            .args([
                "-n",
                AGENT_NAMESPACE,
                "logs",
                "sidecar-race-test-agents-answer",
            ])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr)
            })
            .unwrap_or_default();
        panic!(
            "helm test failed:\n{stdout}{}\n--- the test pod's log\n{logs}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn helm_install_upgrade_uninstall() {
    let c = cluster();
    let crd = install_scc_crd();
    let result = std::panic::catch_unwind(helm_install_test_upgrade_rollback_uninstall);
    let _ = c
        .cmd()
        .args(["delete", "-f", &crd, "--ignore-not-found"])
        .output();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

fn helm_install_test_upgrade_rollback_uninstall() {
    let c = cluster();
    let image = format!("image.repository={LOCAL_IMAGE}");
    // Non-default values; openshift.scc.create stays `auto`, which the served
    // security.openshift.io/v1 turns on.
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
        "--set",
        "podLabels.team=platform",
        "--set",
        "podAnnotations.example\\.com/owner=platform",
        "--set",
        "updateStrategy.rollingUpdate.maxUnavailable=1",
        "--wait",
        "--timeout",
        "3m",
    ]);
    c.agent_rolled_out();
    let pod = c.agent_pod();
    assert_eq!(pod["metadata"]["labels"]["team"], "platform", "{pod:#}");
    assert_eq!(
        pod["metadata"]["annotations"]["example.com/owner"], "platform",
        "{pod:#}"
    );
    // The SCC the API server validated against OpenShift's schema on create, for the
    // agent's ServiceAccount; and the object passes a server-side dry run as is.
    let scc = c.json(&["get", "securitycontextconstraints", "sidecar-race-agent"]);
    assert_eq!(
        scc["users"],
        serde_json::json!(["system:serviceaccount:sidecar-race:sidecar-race-agent"])
    );
    c.kubectl(&[
        "apply",
        "--dry-run=server",
        "-k",
        &kustomize_dir("deploy/overlays/openshift"),
    ]);
    // helm test: the agent's own binary reads every agent through the pod proxy with
    // the scraper's token; its hook objects are gone once it passed.
    helm_test();
    let left = c.kubectl(&[
        "-n",
        AGENT_NAMESPACE,
        "get",
        "pods,serviceaccounts,roles,rolebindings",
        "-l",
        "app.kubernetes.io/component=test",
        "-o",
        "name",
    ]);
    assert!(left.trim().is_empty(), "helm test left: {left}");
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

    // Rollback to revision 1: its flags, limit, PodMonitor and dashboard are back, and
    // the ServiceMonitor of revision 2 is gone.
    helm_cmd(&["rollback", RELEASE, "1", "--wait", "--timeout", "3m"]);
    c.agent_rolled_out();
    let agent = wait_until(
        "the rolled-back agent pod",
        Duration::from_secs(120),
        || {
            let container = agent_container();
            (container["resources"]["limits"]["memory"] == "256Mi").then_some(container)
        },
    );
    assert!(
        !agent["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--metrics-pod-label"),
        "{agent:#}"
    );
    for (k, n) in [
        ("podmonitor", "sidecar-race-agent"),
        ("configmap", "sidecar-race-dashboard"),
    ] {
        c.kubectl(&["-n", AGENT_NAMESPACE, "get", k, n]);
    }
    let gone = c.kubectl(&[
        "-n",
        AGENT_NAMESPACE,
        "get",
        "servicemonitor",
        "-l",
        PART_OF,
        "-o",
        "name",
    ]);
    assert!(gone.trim().is_empty(), "left from revision 2: {gone}");
    helm_test();

    helm_cmd(&["uninstall", RELEASE, "--wait", "--timeout", "3m"]);
    wait_all_gone("helm uninstall");
    let releases = helm_cmd(&["list", "--all-namespaces", "--all", "-q"]);
    assert!(releases.trim().is_empty(), "releases left: {releases}");
    let secrets = c.kubectl(&["get", "secrets", "-A", "-l", "owner=helm", "-o", "name"]);
    assert!(secrets.trim().is_empty(), "release records left: {secrets}");
    let scc = c.kubectl(&["get", "securitycontextconstraints", "-o", "name"]);
    assert!(scc.trim().is_empty(), "left: {scc}");
}

/// The agent's certificate from the chart (tls.source=helm), the probes over HTTPS,
/// and Prometheus on the operator's configuration for the chart's PodMonitor scraping
/// the agent over TLS, verifying it against the Secret's CA; plain HTTP is gone; the
/// pod proxy of `report --agents-via-api` reaches the agent over HTTPS.
fn helm_tls_scraped_by_the_operators_prometheus() {
    let c = cluster();
    helm_cmd(&[
        "install",
        RELEASE,
        CHART,
        "--set",
        &format!("image.repository={LOCAL_IMAGE}"),
        "--values",
        &format!("{CHART}/ci/tls-helm-values.yaml"),
        "--wait",
        "--timeout",
        "3m",
    ]);
    c.agent_rolled_out();
    // Ready: the kubelet's HTTPS probes pass.
    let pod = c.agent_pod();
    let ip = pod["status"]["podIP"].as_str().expect("the agent's IP");
    let secret = c.json(&[
        "-n",
        AGENT_NAMESPACE,
        "get",
        "secret",
        "sidecar-race-agent-tls",
    ]);
    let ca = run(
        Command::new("base64").arg("-d"),
        Some(secret["data"]["ca.crt"].as_str().expect("ca.crt")),
    );
    let dir = workspace().join(format!("target/sr-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, &ca).unwrap();
    let server = format!("sidecar-race-agent.{AGENT_NAMESPACE}.svc");
    let curl = |url: &str, extra: &[&str]| {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "5",
            ])
            .args(extra)
            .arg(url)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let resolve = format!("{server}:9965:{ip}");
    let cacert = ca_file.to_str().unwrap();
    // The certificate verifies for the Service's name with the Secret's CA; without a
    // token the agent still says 401; plain HTTP gets no HTTP answer at all.
    assert_eq!(
        curl(
            &format!("https://{server}:9965/metrics"),
            &["--cacert", cacert, "--resolve", &resolve]
        ),
        "401"
    );
    assert_eq!(
        curl(
            &format!("https://{server}:9965/healthz"),
            &["--cacert", cacert, "--resolve", &resolve]
        ),
        "200"
    );
    assert_eq!(curl(&format!("http://{ip}:9965/healthz"), &[]), "000");
    let _ = std::fs::remove_dir_all(&dir);

    let ns = TestNamespace::create(format!("tls-{}", std::process::id()));
    scraper_rbac(&ns);
    let result = std::panic::catch_unwind(|| {
        let version = operator_prometheus::version();
        c.apply(&prometheus_resource(&ns, "tls", &version, &["podMonitor"]));
        let config = generated_config(&ns, "tls", POD_MONITOR_JOB);
        for want in [
            "scheme: https",
            // The operator's name for the Secret's key (0_ for a Secret, 1_ for a
            // ConfigMap), in the tls-assets Secret it mounts there.
            "ca_file: /etc/prometheus/certs/0_sidecar-race_sidecar-race-agent-tls_ca.crt",
            "server_name: sidecar-race-agent.sidecar-race.svc",
            "type: Bearer",
        ] {
            assert!(config.contains(want), "no `{want}` in:\n{config}");
        }
        let prom = operator_prometheus::start(&ns, "tls", "prometheus", &config);
        let up = operator_prometheus::series(
            &prom,
            "up{job=\"sidecar-race-agent\"} == 1",
            1,
            Duration::from_secs(90),
        );
        assert_eq!(
            up[0]["metric"]["node"].as_str(),
            pod["spec"]["nodeName"].as_str(),
            "{up:#?}\n{}",
            prom.log()
        );
        operator_prometheus::series(
            &prom,
            "sidecar_race_build_info{job=\"sidecar-race-agent\"}",
            1,
            Duration::from_secs(60),
        );
        // report --agents-via-api: the pod proxy over HTTPS (the agent's probes say so).
        let out = run(
            Command::new(agent_binary())
                .args(["report", "--agents-via-api", "--format", "json"])
                .env("KUBECONFIG", &c.kubeconfig),
            None,
        );
        let report: Value = serde_json::from_str(&out).expect("report's JSON");
        assert_eq!(
            report["source"]["urls"][0].as_str(),
            Some(
                format!(
                    "pods/proxy {AGENT_NAMESPACE}/{}",
                    pod["metadata"]["name"].as_str().unwrap()
                )
                .as_str()
            ),
            "{report:#}"
        );
    });
    cleanup_scraper_rbac(&ns);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    // An upgrade keeps the certificate and its CA (the chart looks the Secret up), so
    // the monitors' CA stays the one that signed what the agents serve.
    helm_cmd(&[
        "upgrade",
        RELEASE,
        CHART,
        "--reuse-values",
        "--set",
        "flags.metrics-pod-label=true",
        "--wait",
        "--timeout",
        "3m",
    ]);
    let after = c.json(&[
        "-n",
        AGENT_NAMESPACE,
        "get",
        "secret",
        "sidecar-race-agent-tls",
    ]);
    assert_eq!(
        after["data"], secret["data"],
        "helm upgrade made a new certificate"
    );
    helm_cmd(&["uninstall", RELEASE, "--wait", "--timeout", "3m"]);
    wait_all_gone("helm uninstall (TLS)");
}

/// The kustomize install out (same namespace and cluster-scoped names), `case`, then
/// the kustomize install back for the other cases, whatever happened.
fn in_turn_with_the_kustomize_install(case: fn()) {
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
    let result = std::panic::catch_unwind(case);
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

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn helm_install_upgrade_and_uninstall_in_turn_with_the_kustomize_install() {
    in_turn_with_the_kustomize_install(helm_install_upgrade_uninstall);
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn helm_tls_prometheus_scrapes_the_agent_over_tls_with_the_operators_configuration() {
    in_turn_with_the_kustomize_install(helm_tls_scraped_by_the_operators_prometheus);
}
