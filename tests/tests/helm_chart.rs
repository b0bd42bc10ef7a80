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
        CHART, by_key, helm, helm_template, helm_template_tests, is_crd_object, kind, rendered,
        schema_versions,
    },
    tools::{run, validate_strictly, workspace},
};

const EXAMPLE_VALUES: &str = "ci/example-values.yaml";
const EVERY_TOGGLE_VALUES: &str = "ci/every-toggle-values.yaml";
const TLS_HELM_VALUES: &str = "ci/tls-helm-values.yaml";

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

/// `helm template` of the chart with `args`, which it must refuse: what helm said.
fn refused_rendering(args: &[&str]) -> String {
    let out = Command::new(helm())
        .current_dir(workspace())
        .args(["template", "sidecar-race", CHART])
        .args(args)
        .output()
        .expect("run helm");
    assert!(
        !out.status.success(),
        "helm rendered the chart with {args:?}"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn concat(parts: &[Vec<Value>]) -> Vec<Value> {
    parts.iter().flatten().cloned().collect()
}

#[test]
fn chart_lints_cleanly_with_defaults_and_every_values_file() {
    for values in [
        None,
        Some(EXAMPLE_VALUES),
        Some(EVERY_TOGGLE_VALUES),
        Some(TLS_HELM_VALUES),
    ] {
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

/// `tls.enabled` renders deploy/overlays/tls (the Secret made by the user), with the
/// monitors deploy/overlays/monitoring-tls, and `tls.source=cert-manager`
/// deploy/overlays/tls-cert-manager: the agent reads the Secret's files, the probes
/// and the monitors use HTTPS, the monitors verify against the Secret's CA.
#[test]
fn tls_toggle_renders_the_tls_overlays() {
    let base = rendered(".");
    let tls = rendered("overlays/tls");
    assert_same_objects(
        &helm_template(&[], &["tls.enabled=true"]),
        &tls,
        "tls.enabled vs deploy/overlays/tls",
    );
    assert_same_objects(
        &helm_template(
            &[],
            &[
                "tls.enabled=true",
                "podMonitor.enabled=true",
                "prometheusRule.enabled=true",
                "dashboard.enabled=true",
            ],
        ),
        &concat(&[tls.clone(), rendered("overlays/monitoring-tls")]),
        "tls.enabled with the monitors vs deploy/overlays/tls + deploy/overlays/monitoring-tls",
    );
    assert_same_objects(
        &helm_template(&[], &["tls.enabled=true", "tls.source=cert-manager"]),
        &rendered("overlays/tls-cert-manager"),
        "tls.source=cert-manager vs deploy/overlays/tls-cert-manager",
    );
    // What TLS changes, and only that: the base differs from the overlay in the agent's
    // DaemonSet alone.
    let differing: Vec<String> = {
        let (plain, tls) = (by_key(&base), by_key(&tls));
        plain
            .iter()
            .filter(|(k, v)| tls.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect()
    };
    assert_eq!(differing.len(), 1, "{differing:?}");
    let ds = tls
        .iter()
        .find(|d| kind(d) == "DaemonSet")
        .expect("the DaemonSet");
    let agent = &ds["spec"]["template"]["spec"]["containers"][0];
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        assert_eq!(agent[probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
    }
    let env: Vec<(&str, &str)> = agent["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str()?)))
        .collect();
    assert!(env.contains(&(
        "SIDECAR_RACE_TLS_CERT_FILE",
        "/etc/sidecar-race/tls/tls.crt"
    )));
    assert!(env.contains(&("SIDECAR_RACE_TLS_KEY_FILE", "/etc/sidecar-race/tls/tls.key")));
    let volume = ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "tls")
        .expect("the tls volume");
    assert_eq!(
        volume["secret"],
        json!({"secretName": "sidecar-race-agent-tls", "defaultMode": 0o400})
    );
}

/// `openshift.scc.create=true` renders deploy/overlays/openshift; `auto` (the default)
/// renders it only where the API server serves security.openshift.io/v1.
#[test]
fn openshift_scc_renders_the_openshift_overlay_when_asked_or_served() {
    assert_same_objects(
        &helm_template(&[], &["openshift.scc.create=true"]),
        &rendered("overlays/openshift"),
        "openshift.scc.create=true vs deploy/overlays/openshift",
    );
    let scc = |docs: &[Value]| {
        docs.iter()
            .filter(|d| kind(d) == "SecurityContextConstraints")
            .count()
    };
    assert_eq!(scc(&helm_template(&[], &[])), 0, "auto, not OpenShift");
    let mut cmd = Command::new(helm());
    cmd.current_dir(workspace())
        .args(["template", "sidecar-race", CHART, "--skip-tests"])
        .args(["--api-versions", "security.openshift.io/v1"]);
    let openshift = sidecar_race_tests::manifests::yaml_docs(&run(&mut cmd, None));
    assert_eq!(scc(&openshift), 1, "auto, on OpenShift");
    let docs = helm_template(
        &[],
        &["openshift.scc.create=true", "namespace.name=observability"],
    );
    let scc = docs
        .iter()
        .find(|d| kind(d) == "SecurityContextConstraints")
        .unwrap();
    assert_eq!(
        scc["users"],
        json!(["system:serviceaccount:observability:sidecar-race-agent"])
    );
    assert_eq!(scc["allowedCapabilities"], json!(["BPF", "PERFMON"]));
    assert_eq!(scc["allowPrivilegedContainer"], false);
}

/// The conventions of the charts users already run: a registry before the repository,
/// extra objects rendered with tpl, and values.schema.json refusing a wrong type or an
/// unknown key with the value's path.
#[test]
fn chart_conventions_global_registry_extra_objects_and_the_schema() {
    let docs = helm_template(&[&chart_file(EVERY_TOGGLE_VALUES)], &[]);
    let ds = docs.iter().find(|d| kind(d) == "DaemonSet").unwrap();
    assert_eq!(
        ds["spec"]["template"]["spec"]["containers"][0]["image"],
        "mirror.example.com/ghcr.io/sidecar-race/sidecar-race-agent:0.1.0"
    );
    assert_eq!(
        ds["spec"]["template"]["metadata"]["labels"]["team"],
        "platform"
    );
    assert_eq!(
        ds["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "sidecar-race-agent"}),
        "podLabels never reach the selector"
    );
    let extra = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "sidecar-race-extra")
        .expect("the extra ConfigMap, its name rendered with tpl");
    assert_eq!(extra["metadata"]["namespace"], "sidecar-race");
    for (set, want) in [
        ("port=http", "at '/port': got string, want integer"),
        (
            "tls.enabled=yes",
            "at '/tls/enabled': got string, want boolean",
        ),
        (
            "podsource=api",
            "additional properties 'podsource' not allowed",
        ),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        ("openshift.scc.create=maybe", "at '/openshift/scc/create'"),
    ] {
        let err = refused_rendering(&["--set", set]);
        assert!(
            err.contains("values don't meet the specifications of the schema"),
            "{set}: {err}"
        );
        assert!(err.contains(want), "{set}: {err}");
    }
}

/// The `helm test` pod: the agent's own image and binary (`report --agents-via-api`),
/// with the scraper's token when a monitor made one, else its own ServiceAccount's,
/// whose Role allows exactly what the report needs; it validates strictly.
#[test]
fn helm_test_pod_reads_the_agents_with_the_agents_own_binary() {
    let with_scraper = helm_template_tests(&[], &["podMonitor.enabled=true"]);
    let pod = with_scraper.iter().find(|d| kind(d) == "Pod").unwrap();
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["image"], "ghcr.io/sidecar-race/sidecar-race-agent:0.1.0");
    assert_eq!(
        c["args"],
        json!([
            "report",
            "--agents-via-api",
            "--agent-namespace=sidecar-race",
            "--agent-port=9965",
            "--agent-token-file=/var/run/sidecar-race/scraper/token"
        ])
    );
    assert_eq!(
        pod["spec"]["volumes"][0]["secret"]["secretName"],
        "sidecar-race-scraper-token"
    );
    let own = helm_template_tests(&[], &[]);
    let pod = own.iter().find(|d| kind(d) == "Pod").unwrap();
    assert_eq!(
        pod["spec"]["containers"][0]["args"][4],
        "--agent-token-file=/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    let role = own.iter().find(|d| kind(d) == "Role").unwrap();
    assert_eq!(
        role["rules"],
        json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
            {"apiGroups": ["sidecar-race.io"], "resources": ["incidents"], "verbs": ["get"]},
        ])
    );
    let versions = schema_versions();
    let objects: Vec<&Value> = with_scraper.iter().chain(own.iter()).collect();
    validate_strictly("helm_test_hooks", &objects, &versions);
}

/// `tls.source=helm`: the chart makes one kubernetes.io/tls Secret holding a
/// certificate for the name the monitors verify, and the CA that signed it; the
/// monitors point at that CA. A source the chart does not know is refused.
#[test]
fn tls_from_helm_makes_the_secret_the_monitors_verify_and_unknown_sources_are_refused() {
    let docs = helm_template(
        &[&chart_file(TLS_HELM_VALUES)],
        &["namespace.name=observability"],
    );
    let secrets: Vec<&Value> = docs
        .iter()
        .filter(|d| kind(d) == "Secret" && d["type"] == "kubernetes.io/tls")
        .collect();
    assert_eq!(secrets.len(), 1, "{secrets:#?}");
    assert_eq!(secrets[0]["metadata"]["name"], "sidecar-race-agent-tls");
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        let b64 = secrets[0]["data"][key].as_str().unwrap_or_default();
        assert!(b64.len() > 100, "{key} is empty");
    }
    for monitor in ["PodMonitor", "ServiceMonitor"] {
        let m = docs.iter().find(|d| kind(d) == monitor).expect(monitor);
        let endpoints = if monitor == "PodMonitor" {
            &m["spec"]["podMetricsEndpoints"]
        } else {
            &m["spec"]["endpoints"]
        };
        assert_eq!(endpoints[0]["scheme"], "https", "{monitor}");
        assert_eq!(
            endpoints[0]["tlsConfig"],
            json!({"ca": {"secret": {"name": "sidecar-race-agent-tls", "key": "ca.crt"}},
                   "serverName": "sidecar-race-agent.observability.svc"}),
            "{monitor}"
        );
    }
    let vault = ["--set", "tls.enabled=true", "--set", "tls.source=vault"];
    let err = refused_rendering(&vault);
    assert!(err.contains("at '/tls/source'"), "the schema: {err}");
    // Without the schema (`--skip-schema-validation`) the template says it too.
    let err = refused_rendering(&[&["--skip-schema-validation"][..], &vault].concat());
    assert!(
        err.contains(r#"tls.source is "vault": expected secret, helm or cert-manager"#),
        "{err}"
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

fn agent_pod(docs: &[Value]) -> Value {
    docs.iter()
        .find(|d| kind(d) == "DaemonSet")
        .expect("a DaemonSet")["spec"]["template"]["spec"]
        .clone()
}

/// `pin.enabled=false` drops the bpffs mount (nothing stays attached after the agent
/// stops) and tells the agent so; the state dir stays, and `stateDir` moves it on
/// the node only (the pod sees it where the agent looks by default).
#[test]
fn pin_disabled_drops_the_bpffs_mount_and_turns_pinning_off() {
    let names = |pod: &Value, list: &str| -> Vec<String> {
        pod[list]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| v["name"].as_str().unwrap().to_string())
            .collect()
    };
    let pinned = agent_pod(&helm_template(&[], &[]));
    assert!(names(&pinned, "volumes").contains(&"bpffs".to_string()));
    let pod = agent_pod(&helm_template(
        &[],
        &["pin.enabled=false", "stateDir=/var/lib/agents/sr"],
    ));
    let agent = &pod["containers"][0];
    assert!(!names(&pod, "volumes").contains(&"bpffs".to_string()));
    assert!(!names(agent, "volumeMounts").contains(&"bpffs".to_string()));
    assert!(
        agent["env"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "SIDECAR_RACE_PIN", "value": "off"})),
        "{agent:#}"
    );
    let state = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "state")
        .expect("the state volume");
    assert_eq!(
        state["hostPath"],
        json!({"path": "/var/lib/agents/sr", "type": "DirectoryOrCreate"})
    );
    assert!(
        agent["volumeMounts"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "state", "mountPath": "/var/lib/sidecar-race"}))
    );
    refused_rendering(&["--set", "stateDir=relative"]);
}

#[test]
fn an_empty_network_policy_is_refused_rather_than_admitting_everyone() {
    let err = refused_rendering(&["--set", "networkPolicy.namespaces=null"]);
    assert!(err.contains("would admit everyone"), "{err}");
}

#[test]
fn every_rendering_validates_strictly() {
    let versions = schema_versions();
    let (example, every_toggle) = (chart_file(EXAMPLE_VALUES), chart_file(EVERY_TOGGLE_VALUES));
    let tls = chart_file(TLS_HELM_VALUES);
    let renderings: [(&str, &[&Path]); 4] = [
        ("helm_defaults", &[]),
        ("helm_example", &[&example]),
        ("helm_every_toggle", &[&every_toggle]),
        ("helm_tls_helm", &[&tls]),
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
