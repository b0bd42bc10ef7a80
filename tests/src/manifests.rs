//! Rendered manifests as JSON: `kubectl kustomize` of a directory of deploy/ and
//! `helm template` of the chart, parsed with kubernetes-validate's PyYAML, and the
//! Kubernetes versions they are validated against.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

use crate::tools::{on_path, run, venv_bin, workspace};

/// Kubernetes versions the manifests are validated against: this one, and the newest
/// the pinned kubernetes-validate ships (`newest_schema_version`).
pub const KUBERNETES_VERSION: &str = "1.33.0";

/// What `cargo xtask setup` builds (xtask/src/cluster/versions.rs, HELM_VERSION).
const DEFAULT_HELM: &str = ".cache/sidecar-race/go/helm-v3.22.0/bin/helm";

/// The chart, under deploy/.
pub const CHART: &str = "deploy/helm/sidecar-race";

pub fn deploy(rel: &str) -> PathBuf {
    workspace().join("deploy").join(rel)
}

/// `kubectl kustomize deploy/DIR`.
pub fn kustomize(dir: &str) -> String {
    run(
        Command::new(on_path("kubectl"))
            .arg("kustomize")
            .arg(deploy(dir)),
        None,
    )
}

/// kustomize's rendering of deploy/DIR, as JSON documents.
pub fn rendered(dir: &str) -> Vec<Value> {
    yaml_docs(&kustomize(dir))
}

/// The helm binary: `SIDECAR_RACE_HELM`, or the one `cargo xtask setup` built.
pub fn helm() -> PathBuf {
    crate::tools::go_tool("SIDECAR_RACE_HELM", DEFAULT_HELM)
}

/// `helm template` of the chart with `values` files (paths relative to the workspace)
/// and `--set` pairs, as JSON documents: what `helm install` creates, without the
/// `helm test` hooks (`helm_template_tests` renders those).
pub fn helm_template(values: &[&Path], set: &[&str]) -> Vec<Value> {
    helm_template_with(values, set, &["--skip-tests"])
}

/// The `helm test` hooks' objects alone.
pub fn helm_template_tests(values: &[&Path], set: &[&str]) -> Vec<Value> {
    helm_template_with(
        values,
        set,
        &["--show-only", "templates/tests/agent-answers.yaml"],
    )
}

fn helm_template_with(values: &[&Path], set: &[&str], extra: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(helm());
    cmd.current_dir(workspace())
        .args(["template", "sidecar-race", CHART])
        .args(extra);
    for v in values {
        cmd.arg("--values").arg(v);
    }
    for s in set {
        cmd.args(["--set", s]);
    }
    yaml_docs(&run(&mut cmd, None))
}

/// YAML (one or more documents) as JSON values, with kubernetes-validate's PyYAML.
pub fn yaml_docs(text: &str) -> Vec<Value> {
    const TO_JSON: &str = "import json, sys, yaml\n\
        docs = [d for d in yaml.safe_load_all(sys.stdin.read()) if d is not None]\n\
        json.dump(docs, sys.stdout, default=str)\n";
    let json = run(
        Command::new(venv_bin("python")).args(["-c", TO_JSON]),
        Some(text),
    );
    match serde_json::from_str(&json).expect("python printed JSON") {
        Value::Array(docs) => docs,
        other => panic!("expected a list of documents, got {other}"),
    }
}

pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {v:#}"))
}

pub fn kind(doc: &Value) -> &str {
    str_at(doc, "/kind")
}

pub fn name(doc: &Value) -> &str {
    str_at(doc, "/metadata/name")
}

/// Documents by `Kind/name`.
pub fn by_key(docs: &[Value]) -> BTreeMap<String, Value> {
    docs.iter()
        .map(|d| (format!("{}/{}", kind(d), name(d)), d.clone()))
        .collect()
}

/// Objects of CRDs (Prometheus Operator, cert-manager, OpenShift's SCC): no schema in
/// kubernetes-validate.
pub fn is_crd_object(doc: &Value) -> bool {
    let api = str_at(doc, "/apiVersion");
    [
        "monitoring.coreos.com/",
        "cert-manager.io/",
        "security.openshift.io/",
    ]
    .iter()
    .any(|group| api.starts_with(group))
}

/// The newest Kubernetes version the installed kubernetes-validate ships schemas for.
pub fn newest_schema_version() -> String {
    run(
        Command::new(venv_bin("python")).args([
            "-c",
            "import kubernetes_validate.utils as u; print(u.latest_version())",
        ]),
        None,
    )
    .trim()
    .to_string()
}

/// The versions every rendering is validated against.
pub fn schema_versions() -> [String; 2] {
    [KUBERNETES_VERSION.to_string(), newest_schema_version()]
}
