//! The Prometheus that `cargo xtask setup` builds (Kubernetes service discovery only;
//! Debian's 2.42 is built without it) run with the configuration the real Prometheus
//! Operator generated for a Prometheus resource of the cluster (`cargo xtask cluster up`
//! runs the operator), byte for byte: the Secret `prometheus-<name>`
//! (`prometheus.yaml.gz`).
//!
//! That configuration names paths that exist in the operator's Prometheus pod:
//! - its `kubernetes_sd_configs` have no `api_server`, so Prometheus takes client-go's
//!   in-cluster configuration: `KUBERNETES_SERVICE_HOST`/`_PORT` and the ServiceAccount
//!   token and CA at `/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}`;
//! - its `rule_files` are `/etc/prometheus/rules/prometheus-<name>-rulefiles-N/*.yaml`,
//!   the keys of the operator's ConfigMaps of the same names;
//! - a monitor's `tlsConfig` becomes `ca_file: /etc/prometheus/certs/<asset>`, a key of
//!   the operator's Secrets `prometheus-<name>-tls-assets-N`, which the pod mounts there.
//!
//! - `$(SHARD)` (in the sharding `keep` rule) and `$(POD_NAME)` (the
//!   `prometheus_replica` external label) are left for the pod's config-reloader,
//!   which expands them from the pod's environment when it writes the file Prometheus
//!   loads; unexpanded, the `keep` rule drops every target.
//!
//! Rather than rewrite the configuration, Prometheus runs in a mount namespace of its
//! own (`unshare --mount`) where tmpfs mounts on `/run` and `/etc/prometheus` hold
//! those files: the resource's ServiceAccount token (a TokenRequest, as the kubelet
//! projects it), the cluster CA (the `kube-root-ca.crt` ConfigMap pods get), and the
//! rule files. Nothing is written to the host's own paths.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::{Value, json};

use crate::{
    cluster::{AGENT_NAMESPACE, cluster, wait_until},
    command::run,
    prometheus::Prometheus,
};

/// Where client-go's in-cluster configuration reads the token and the CA.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Where the operator's Prometheus pod mounts its rule files.
pub const RULES_DIR: &str = "/etc/prometheus/rules";
/// Where it mounts the TLS assets (CA, client certificates) its monitors name.
pub const CERTS_DIR: &str = "/etc/prometheus/certs";
/// The `kubernetes` Service (xtask/src/cluster: the first IP of the Service CIDR).
const KUBERNETES_SERVICE_HOST: &str = "10.239.0.1";
/// What `cargo xtask setup` builds (xtask/src/cluster/versions.rs, PROMETHEUS_VERSION).
const DEFAULT_PROMETHEUS: &str = ".cache/sidecar-race/go/prometheus-v3.10.0/bin/prometheus";

/// The Prometheus binary: `SIDECAR_RACE_PROMETHEUS_BIN` (not `SIDECAR_RACE_PROMETHEUS`: `report --prometheus` reads that), or the one `cargo xtask setup`
/// built.
pub fn binary() -> PathBuf {
    crate::command::go_tool("SIDECAR_RACE_PROMETHEUS_BIN", DEFAULT_PROMETHEUS)
}

/// The binary's version, `vX.Y.Z`: what the Prometheus resource names, so that the
/// operator generates for it.
pub fn version() -> String {
    let out = run(Command::new(binary()).arg("--version"), None);
    let version = out
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.split('+').next())
        .unwrap_or_default();
    format!("v{version}")
}

/// The configuration the operator generated for Prometheus `name` in `ns`, once it holds
/// a scrape job named `job`.
pub fn generated_config(ns: &str, name: &str, job: &str) -> String {
    let c = cluster();
    wait_until(
        &format!("the operator's configuration for {ns}/{name} with job {job}"),
        Duration::from_secs(60),
        || {
            let out = c
                .cmd()
                .args(["-n", ns, "get", "secret", &format!("prometheus-{name}")])
                .args(["-o", "jsonpath={.data.prometheus\\.yaml\\.gz}"])
                .output()
                .ok()?;
            let b64 = String::from_utf8_lossy(&out.stdout).to_string();
            if b64.is_empty() {
                return None;
            }
            let config = run(
                Command::new("sh").args(["-c", "base64 -d | gzip -dc"]),
                Some(&b64),
            );
            config
                .contains(&format!("job_name: {job}\n"))
                .then_some(config)
        },
    )
}

/// Each rule file of the operator's ConfigMaps for Prometheus `name`: (ConfigMap, key,
/// content).
fn rule_files(ns: &str, name: &str) -> Vec<(String, String, String)> {
    let c = cluster();
    let maps = c.json(&[
        "-n",
        ns,
        "get",
        "configmaps",
        "-l",
        &format!("prometheus-name={name}"),
    ]);
    let mut files = Vec::new();
    for m in maps["items"].as_array().into_iter().flatten() {
        let map = m["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for (key, content) in m["data"].as_object().into_iter().flatten() {
            let text = content.as_str().unwrap_or_default().to_string();
            files.push((map.clone(), key.clone(), text));
        }
    }
    files
}

/// Each TLS asset of the operator's Secrets for Prometheus `name`: (key, content).
fn tls_assets(ns: &str, name: &str) -> Vec<(String, Vec<u8>)> {
    let secrets = cluster().json(&["-n", ns, "get", "secrets"]);
    let prefix = format!("prometheus-{name}-tls-assets-");
    let mut assets = Vec::new();
    for s in secrets["items"].as_array().into_iter().flatten() {
        if !s["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with(&prefix))
        {
            continue;
        }
        for (key, b64) in s["data"].as_object().into_iter().flatten() {
            let decoded = run(
                Command::new("base64").arg("-d"),
                Some(b64.as_str().unwrap_or_default()),
            );
            assets.push((key.clone(), decoded.into_bytes()));
        }
    }
    assets
}

/// `config` as the config-reloader of the first pod of Prometheus `name` writes it:
/// `$(SHARD)` and `$(POD_NAME)` expanded from that pod's environment (shard 0, pod
/// `prometheus-<name>-0`).
fn as_reloader_writes(name: &str, config: &str) -> String {
    config
        .replace("$(SHARD)", "0")
        .replace("$(POD_NAME)", &format!("prometheus-{name}-0"))
}

/// Prometheus on `config` in a mount namespace where the paths it names hold the token
/// of ServiceAccount `service_account` in `ns`, the cluster CA and the rule files of
/// Prometheus resource `name`.
pub fn start(ns: &str, name: &str, service_account: &str, config: &str) -> Prometheus {
    let c = cluster();
    let dir = Prometheus::fresh_dir(&format!("-{name}"));
    std::fs::write(dir.join("prometheus.yml"), as_reloader_writes(name, config)).unwrap();
    let sa = dir.join("serviceaccount");
    std::fs::create_dir_all(&sa).unwrap();
    let token = c.kubectl(&["-n", ns, "create", "token", service_account]);
    std::fs::write(sa.join("token"), token.trim()).unwrap();
    let ca = c.json(&["-n", ns, "get", "configmap", "kube-root-ca.crt"]);
    std::fs::write(
        sa.join("ca.crt"),
        ca["data"]["ca.crt"].as_str().expect("the cluster CA"),
    )
    .unwrap();
    std::fs::write(sa.join("namespace"), ns).unwrap();
    let rules = dir.join("rules");
    for (map, key, text) in rule_files(ns, name) {
        std::fs::create_dir_all(rules.join(&map)).unwrap();
        std::fs::write(rules.join(&map).join(key), text).unwrap();
    }
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    for (key, content) in tls_assets(ns, name) {
        std::fs::write(certs.join(key), content).unwrap();
    }
    Prometheus::launch(dir.clone(), in_pod_paths(&dir))
}

/// `binary()`, started by a shell in a new mount namespace that first mounts tmpfs on
/// /run (/var/run links there) and /etc/prometheus and copies `dir/serviceaccount`,
/// `dir/rules` and `dir/certs` to the paths a Prometheus pod has them at.
fn in_pod_paths(dir: &Path) -> Command {
    let script = format!(
        "set -e; mount -t tmpfs sr-prometheus /run; mkdir -p {SERVICE_ACCOUNT_DIR}; \
         cp \"$0\"/serviceaccount/* {SERVICE_ACCOUNT_DIR}/; \
         mount -t tmpfs sr-prometheus /etc/prometheus; mkdir -p {RULES_DIR}; \
         if [ -d \"$0\"/rules ]; then cp -r \"$0\"/rules/. {RULES_DIR}/; fi; \
         mkdir -p {CERTS_DIR}; cp -r \"$0\"/certs/. {CERTS_DIR}/; \
         bin=\"$1\"; shift; exec \"$bin\" \"$@\""
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(dir)
        .arg(binary())
        .env("KUBERNETES_SERVICE_HOST", KUBERNETES_SERVICE_HOST)
        .env("KUBERNETES_SERVICE_PORT", "443");
    cmd
}

/// The labels of each series `promql` returns, once it returns `count` of them.
pub fn series(prom: &Prometheus, promql: &str, count: usize, timeout: Duration) -> Vec<Value> {
    wait_until(
        &format!("{count} series of {promql} in Prometheus"),
        timeout,
        || {
            let found = prom.query(promql);
            (found.len() == count).then_some(found)
        },
    )
}

/// The scrape job names the operator gives the shipped PodMonitor and ServiceMonitor.
pub const POD_MONITOR_JOB: &str = "podMonitor/sidecar-race/sidecar-race-agent/0";
pub const SERVICE_MONITOR_JOB: &str = "serviceMonitor/sidecar-race/sidecar-race-agent/0";

/// ServiceAccount `prometheus` in `ns` with what a Prometheus needs to discover and
/// scrape the agent: list and watch pods, Services and their endpoints, and `get` on
/// the non-resource URL /metrics (for an agent that checks the scraper's token).
/// Cluster-scoped objects are named after `ns`; `cleanup_scraper_rbac` removes them.
pub fn scraper_rbac(ns: &str) {
    let c = cluster();
    c.kubectl(&["-n", ns, "create", "serviceaccount", "prometheus"]);
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": ns},
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "services", "endpoints"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ns},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": ns}],
    });
    c.apply(&role.to_string());
    c.apply(&binding.to_string());
}

pub fn cleanup_scraper_rbac(ns: &str) {
    let _ = cluster()
        .cmd()
        .args([
            "delete",
            "clusterrolebinding,clusterrole",
            ns,
            "--ignore-not-found",
        ])
        .output();
}

/// A Prometheus resource for the operator: Prometheus `version` (the operator
/// generates for that version), no pods (`replicas: 0`: no image is pulled here; the
/// operator generates the configuration all the same), ServiceAccount `prometheus`,
/// and `select`ing the agent's monitors and rules in the agent's namespace.
pub fn prometheus_resource(ns: &str, name: &str, version: &str, select: &[&str]) -> String {
    let agent = json!({"matchLabels": {"app.kubernetes.io/name": "sidecar-race-agent"}});
    let agent_ns = json!({"matchLabels": {"kubernetes.io/metadata.name": AGENT_NAMESPACE}});
    let mut spec = json!({
        "version": version,
        "replicas": 0,
        "serviceAccountName": "prometheus",
        "ruleSelector": agent, "ruleNamespaceSelector": agent_ns,
    });
    for kind in select {
        spec[format!("{kind}Selector")] = agent.clone();
        spec[format!("{kind}NamespaceSelector")] = agent_ns.clone();
    }
    json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
    .to_string()
}
