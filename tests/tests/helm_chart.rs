//! The Helm chart (deploy/helm/sidecar-race) against the kustomize install it must
//! never drift from: its default values render exactly `kubectl kustomize deploy/`,
//! and each toggle renders exactly the kustomization that does the same
//! (deploy/kubelet-source, deploy/monitoring, ...), object by object. `helm lint
//! --strict` passes, and every rendering (defaults, the example, every toggle flipped)
//! validates strictly against the Kubernetes versions the manifests support.
//!
//! Needs helm (built by `cargo xtask setup` from its Go module), kubectl and
//! kubernetes-validate; a missing tool fails the test. Nothing here needs root. The
//! install, upgrade and uninstall on a real API server are in tests/tests/cluster.rs.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::{Value, json};
use sidecar_race_tests::{
    manifests::{
        CHART, by_key, helm, helm_template, is_crd_object, kind, rendered, schema_versions,
    },
    tools::{run, validate_strictly, workspace},
};

const EXAMPLE_VALUES: &str = "ci/example-values.yaml";
const EVERY_TOGGLE_VALUES: &str = "ci/every-toggle-values.yaml";

fn chart_file(rel: &str) -> PathBuf {
    workspace().join(CHART).join(rel)
}

/// Both renderings hold the same objects, each identical; on a difference, the
/// first object that differs, from both sides.
fn assert_same_objects(chart: &[Value], kustomize: &[Value], what: &str) {
    let (chart, kustomize) = (by_key(chart), by_key(kustomize));
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        kustomize.keys().collect::<Vec<_>>(),
        "{what}: the chart and kustomize render different objects"
    );
    for (key, from_chart) in &chart {
        let from_kustomize = &kustomize[key];
        assert!(
            from_chart == from_kustomize,
            "{what}: {key} differs.\n--- chart\n{from_chart:#}\n--- kustomize\n{from_kustomize:#}"
        );
    }
}

fn concat(parts: &[Vec<Value>]) -> Vec<Value> {
    parts.iter().flatten().cloned().collect()
}

#[test]
fn chart_lints_cleanly_with_defaults_and_every_values_file() {
    for values in [None, Some(EXAMPLE_VALUES), Some(EVERY_TOGGLE_VALUES)] {
        let mut cmd = Command::new(helm());
        cmd.current_dir(workspace())
            .args(["lint", "--strict", CHART]);
        if let Some(v) = values {
            cmd.arg("--values").arg(chart_file(v));
        }
        let out = run(&mut cmd, None);
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{out}"
        );
        assert!(!out.contains("[WARNING]"), "{values:?}: {out}");
    }
}

#[test]
fn default_values_render_exactly_the_kustomize_install() {
    assert_same_objects(
        &helm_template(&[], &[]),
        &rendered("."),
        "defaults vs deploy/",
    );
}

#[test]
fn each_toggle_renders_the_kustomization_that_does_the_same() {
    let base = rendered(".");
    assert_same_objects(
        &helm_template(&[], &["podSource=kubelet"]),
        &rendered("kubelet-source"),
        "podSource=kubelet vs deploy/kubelet-source",
    );
    let monitoring = ["prometheusRule.enabled=true", "dashboard.enabled=true"];
    assert_same_objects(
        &helm_template(
            &[],
            &[&monitoring[..], &["podMonitor.enabled=true"]].concat(),
        ),
        &concat(&[base.clone(), rendered("monitoring")]),
        "podMonitor, prometheusRule, dashboard vs deploy/ + deploy/monitoring",
    );
    assert_same_objects(
        &helm_template(
            &[],
            &[&monitoring[..], &["serviceMonitor.enabled=true"]].concat(),
        ),
        &concat(&[base.clone(), rendered("monitoring-servicemonitor")]),
        "serviceMonitor vs deploy/ + deploy/monitoring-servicemonitor",
    );
    assert_same_objects(
        &helm_template(
            &[],
            &[
                &monitoring[..],
                &[
                    "podMonitor.enabled=true",
                    "podMonitor.labels.release=kube-prometheus-stack",
                    "prometheusRule.labels.release=kube-prometheus-stack",
                ],
            ]
            .concat(),
        ),
        &concat(&[base, rendered("overlays/example-monitoring")]),
        "monitoring labels vs deploy/overlays/example-monitoring",
    );
    assert_same_objects(
        &helm_template(&[&chart_file(EXAMPLE_VALUES)], &[]),
        &rendered("overlays/example"),
        "ci/example-values.yaml vs deploy/overlays/example",
    );
}

/// The chart reads the rules and the dashboard from copies in its files/ (Helm reads
/// nothing outside the chart); the renderings above compare their content, this the
/// bytes, comments included.
#[test]
fn chart_files_are_copies_of_deploy_monitoring() {
    for file in ["rules.yaml", "dashboard.json"] {
        let source = workspace().join("deploy/monitoring").join(file);
        let copy = chart_file(&format!("files/{file}"));
        assert!(
            std::fs::read(&source).unwrap() == std::fs::read(&copy).unwrap(),
            "{} differs from {}: run `cp {} {}`",
            copy.display(),
            source.display(),
            source.display(),
            copy.display()
        );
    }
}

fn agent_args(docs: &[Value]) -> Vec<String> {
    let ds = docs
        .iter()
        .find(|d| kind(d) == "DaemonSet")
        .expect("a DaemonSet");
    serde_json::from_value(ds["spec"]["template"]["spec"]["containers"][0]["args"].clone())
        .expect("args are strings")
}

fn agent_rules(docs: &[Value]) -> Value {
    docs.iter()
        .find(|d| kind(d) == "ClusterRole" && d["metadata"]["name"] == "sidecar-race-agent")
        .expect("the agent's ClusterRole")["rules"]
        .clone()
}

#[test]
fn auth_is_kubernetes_by_default_with_the_review_grants_and_none_drops_both() {
    let default = helm_template(&[], &["auth=none"]);
    assert_eq!(agent_args(&default)[5..], ["--auth", "none"]);
    let with_auth = helm_template(&[], &[]);
    let args = agent_args(&with_auth);
    assert_eq!(args[5..], ["--auth", "kubernetes"], "{args:?}");
    let rules = agent_rules(&with_auth);
    let added: Vec<&Value> = rules
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !agent_rules(&default).as_array().unwrap().contains(r))
        .collect();
    assert_eq!(
        added,
        [
            &json!({"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}),
            &json!({"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}),
        ]
    );
}

#[test]
fn flags_render_as_the_agent_accepts_them() {
    let docs = helm_template(
        &[],
        &[
            "flags.metrics-pod-label=true",
            "flags.events=false",
            "flags.events-per-minute=10",
            "flags.api-listen=127.0.0.1:9966",
        ],
    );
    let args = agent_args(&docs);
    assert_eq!(
        args[7..],
        [
            "--api-listen=127.0.0.1:9966",
            "--events=false",
            "--events-per-minute=10",
            "--metrics-pod-label"
        ],
        "{args:?}"
    );
    sidecar_race_tests::agent::assert_accepts_args(&args, "the chart");
}

#[test]
fn an_empty_network_policy_is_refused_rather_than_admitting_everyone() {
    let out = Command::new(helm())
        .current_dir(workspace())
        .args(["template", "sidecar-race", CHART])
        .args(["--set", "networkPolicy.namespaces=null"])
        .output()
        .expect("run helm");
    assert!(
        !out.status.success(),
        "rendered a NetworkPolicy open to all"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("would admit everyone"), "{err}");
}

#[test]
fn every_rendering_validates_strictly() {
    let versions = schema_versions();
    let (example, every_toggle) = (chart_file(EXAMPLE_VALUES), chart_file(EVERY_TOGGLE_VALUES));
    let renderings: [(&str, &[&Path]); 3] = [
        ("helm_defaults", &[]),
        ("helm_example", &[&example]),
        ("helm_every_toggle", &[&every_toggle]),
    ];
    for (label, values) in renderings {
        let docs = helm_template(values, &[]);
        // CRD objects have no schema there; they are compared with deploy/monitoring's.
        let builtin: Vec<&Value> = docs.iter().filter(|d| !is_crd_object(d)).collect();
        validate_strictly(label, &builtin, &versions);
    }
}

/// The admission policy's toggle renders deploy/admission/ (Warn and Audit), and
/// `deny` the overlay that refuses instead; both validate strictly (with every
/// toggle flipped, in every_rendering_validates_strictly).
#[test]
fn admission_policy_toggle_renders_deploy_admission_and_its_deny_overlay() {
    let base = rendered(".");
    assert!(
        !helm_template(&[], &[])
            .iter()
            .any(|d| kind(d).starts_with("ValidatingAdmissionPolicy")),
        "the policy is opt-in"
    );
    assert_same_objects(
        &helm_template(&[], &["admissionPolicy.enabled=true"]),
        &concat(&[base.clone(), rendered("admission")]),
        "admissionPolicy.enabled vs deploy/ + deploy/admission",
    );
    assert_same_objects(
        &helm_template(
            &[],
            &["admissionPolicy.enabled=true", "admissionPolicy.deny=true"],
        ),
        &concat(&[base, rendered("overlays/admission-deny")]),
        "admissionPolicy.deny vs deploy/ + deploy/overlays/admission-deny",
    );
}

/// Under `--auth kubernetes` the agent reviews callers as `get` on its virtual
/// resources `sidecar-race.io` incidents and metrics in its own namespace: the chart's
/// scraper grant is exactly that, bound in the release's agent namespace (wherever
/// `namespace.name` puts it) and nowhere else, with no non-resource URL (which
/// `system:discovery` would grant everyone under /api/*).
#[test]
fn the_scraper_may_get_the_agents_virtual_resources_in_the_agents_namespace_only() {
    let docs = helm_template(
        &[],
        &["podMonitor.enabled=true", "namespace.name=observability"],
    );
    let of = |k: &str| -> Vec<&Value> { docs.iter().filter(|d| kind(d) == k).collect() };
    let role = of("ClusterRole")
        .into_iter()
        .find(|d| d["metadata"]["name"] == "sidecar-race-scraper")
        .expect("the scraper's ClusterRole");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["sidecar-race.io"], "resources": ["incidents", "metrics"], "verbs": ["get"]}])
    );
    assert!(
        of("ClusterRoleBinding")
            .iter()
            .all(|b| b["roleRef"]["name"] != "sidecar-race-scraper"),
        "not bound cluster-wide"
    );
    let binding = of("RoleBinding");
    assert_eq!(binding.len(), 1, "{binding:?}");
    assert_eq!(binding[0]["metadata"]["namespace"], "observability");
    assert_eq!(
        binding[0]["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "sidecar-race-scraper"})
    );
    assert_eq!(
        binding[0]["subjects"],
        json!([{"kind": "ServiceAccount", "name": "sidecar-race-scraper", "namespace": "observability"}])
    );
}
