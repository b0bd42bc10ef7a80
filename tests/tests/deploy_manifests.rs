//! The deployment as shipped in `deploy/`: the manifests render (kustomize) and
//! validate against the Kubernetes schemas, the DaemonSet and RBAC keep to least
//! privilege, the Prometheus rules pass `promtool` and their unit tests, the
//! PrometheusRule holds the same groups as the plain rules file, every alert has a
//! runbook section, and the dashboard passes Grafana's own dashboard schema (the
//! Grafana Foundation SDK's types) and queries only metrics that exist.
//!
//! Needs kubectl, promtool and kubernetes-validate (in a venv under
//! target/deploy-tools/): `cargo xtask setup` installs them. A missing tool fails the
//! test rather than skipping it (CI runs the set-up first). Nothing here needs root.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Command,
};

use serde_json::Value;
use sidecar_race_tests::{
    grafana_schema,
    manifests::{
        by_key, deploy, is_crd_object, kind, name, rendered, schema_versions, str_at, yaml_docs,
    },
    tools::{on_path, run, validate_strictly},
};

/// The capabilities the agent's container adds, and nothing else. SECURITY.md
/// ("Privileges") says why each is needed; change both together.
const AGENT_CAPABILITIES: &[&str] = &["BPF", "PERFMON"];

/// The host paths the agent mounts read-only (SECURITY.md, "Privileges"): it reads
/// the tracepoints' formats and walks the cgroup tree, and writes neither.
const READ_ONLY_HOST_PATHS: &[&str] = &["/sys/fs/cgroup", "/sys/kernel/tracing"];

/// The host paths the agent writes, with their hostPath type and mount propagation
/// (SECURITY.md, "Privileges"). Added for zero-loss restarts (#33): the node's bpffs,
/// where the agent pins its links, maps and rings so that the kernel keeps recording
/// while no agent runs and the next agent adopts them (HostToContainer: a bpffs the
/// node mounts later is seen; never Bidirectional, which would need a privileged
/// container); and its state dir, holding the lock (one agent per node) and the
/// checkpoint written at SIGTERM (made by the kubelet when absent).
const READ_WRITE_HOST_PATHS: &[(&str, &str, Option<&str>)] = &[
    ("/sys/fs/bpf", "Directory", Some("HostToContainer")),
    ("/var/lib/sidecar-race", "DirectoryOrCreate", None),
];

/// What the default install's ClusterRole may grant: (API group, resource, verb).
const DEFAULT_GRANTS: &[(&str, &str, &str)] = &[
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
    // `--auth kubernetes`: who is calling /metrics and /api/v1/incidents, and may they.
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
];

/// The virtual resources of the group `sidecar-race.io` the agent reviews its two
/// guarded paths as (`--auth kubernetes`: `incidents` for /api/v1/incidents, `metrics`
/// for /metrics), and the only ones the scraper ClusterRole of deploy/monitoring/
/// grants `get` on.
const SCRAPED_RESOURCES: &[&str] = &["incidents", "metrics"];

/// Only for `--pods-from kubelet`, only in deploy/kubelet-source/.
const KUBELET_SOURCE_GRANT: (&str, &str, &str) = ("", "nodes/proxy", "get");
const KUBELET_SOURCE_ROLE: &str = "sidecar-race-agent-kubelet-source";

/// The metrics the agent exposes (names fixed); histograms with their series.
const AGENT_METRICS: &[&str] = &[
    "sidecar_race_refused_connections_total",
    "sidecar_race_incidents_total",
    "sidecar_race_window_seconds_bucket",
    "sidecar_race_window_seconds_sum",
    "sidecar_race_window_seconds_count",
    "sidecar_race_pod_starts_total",
    "sidecar_race_affected_pod_starts_total",
    "sidecar_race_kernel_events_total",
    "sidecar_race_kernel_events_lost_total",
    "sidecar_race_refusals_other_total",
    "sidecar_race_self_refusals_total",
    "sidecar_race_app_not_ready_refusals_total",
    "sidecar_race_stuck_job_pods",
    "sidecar_race_unattributed_events_total",
    "sidecar_race_pod_source_errors_total",
    "sidecar_race_k8s_events_not_posted_total",
    "sidecar_race_build_info",
    "sidecar_race_incidents_evicted_total",
    "sidecar_race_facts_out_of_order_total",
    "sidecar_race_listeners_dropped_total",
    "sidecar_race_log_lines_suppressed_total",
    "sidecar_race_series_overflow_total",
    "sidecar_race_pod_template_created_timestamp_seconds",
    // Emitted by the event stream and the Event publisher.
    "sidecar_race_kernel_events_dropped_total",
    "sidecar_race_kernel_records_undecodable_total",
    "sidecar_race_k8s_events_not_posted_total",
];
/// Series Prometheus itself adds for every target.
const SCRAPE_METRICS: &[&str] = &["up"];

const ALERTS: &[&str] = &[
    "SidecarStartupRace",
    "SidecarDrainRace",
    "SidecarInitDeadlock",
    "SidecarKeepsJobRunning",
    "SidecarRaceAgentDown",
    "SidecarRaceEventsLost",
    "SidecarRaceKernelEventsDropped",
    "SidecarRaceUndecodableRecords",
    "SidecarRaceEventsNotPosted",
    "SidecarRaceFactsOutOfOrder",
    "SidecarRaceSeriesOverflow",
];

const NAMESPACE: &str = "sidecar-race";
const AGENT_NAME: &str = "sidecar-race-agent";

// ---------------------------------------------------------------------------------
// Tools

fn yaml_file(rel: &str) -> Vec<Value> {
    let path = deploy(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    yaml_docs(&text)
}

fn one_yaml_file(rel: &str) -> Value {
    let mut docs = yaml_file(rel);
    assert_eq!(docs.len(), 1, "{rel} should hold one document");
    docs.remove(0)
}

fn of_kind<'a>(docs: &'a [Value], k: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| kind(d) == k).collect()
}

fn the<'a>(docs: &'a [Value], k: &str) -> &'a Value {
    let found = of_kind(docs, k);
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {k}, found {}",
        found.len()
    );
    found[0]
}

// ---------------------------------------------------------------------------------
// Rendering and schemas

#[test]
fn every_kustomization_renders_and_the_default_install_is_the_base() {
    let default = rendered(".");
    let base = rendered("base");
    assert_eq!(
        by_key(&default),
        by_key(&base),
        "deploy/kustomization.yaml and deploy/base/kustomization.yaml must list the same files"
    );
    for k in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "DaemonSet",
        "Service",
        "NetworkPolicy",
    ] {
        assert!(!of_kind(&default, k).is_empty(), "deploy/ installs no {k}");
    }
    let kubelet = rendered("kubelet-source");
    assert_eq!(
        kubelet.len(),
        default.len() + 2,
        "kubelet-source adds one role and its binding"
    );
    let monitoring = rendered("monitoring");
    for k in ["PodMonitor", "PrometheusRule", "ConfigMap"] {
        the(&monitoring, k);
    }
}

#[test]
fn manifests_validate_strictly_against_kubernetes_schemas() {
    let versions = schema_versions();
    let mut sets: Vec<(String, Vec<Value>)> = [
        "base",
        "kubelet-source",
        "monitoring",
        "monitoring-servicemonitor",
        "overlays/example",
        "overlays/example-monitoring",
        "overlays/local-cluster",
    ]
    .into_iter()
    .map(|dir| (dir.replace(['-', '/'], "_"), rendered(dir)))
    .collect();
    sets.push(("default".into(), rendered(".")));
    for file in ["checkout-classic.yaml", "checkout-native.yaml"] {
        sets.push((
            file.trim_end_matches(".yaml").replace('-', "_"),
            yaml_file(&format!("examples/{file}")),
        ));
    }
    for (label, docs) in &sets {
        // PodMonitor and PrometheusRule are CRD objects: kubernetes-validate has no
        // schema for them; crd_objects_have_the_expected_shape checks them instead.
        let builtin: Vec<&Value> = docs.iter().filter(|d| !is_crd_object(d)).collect();
        assert!(!builtin.is_empty(), "{label}: nothing to validate");
        validate_strictly(label, &builtin, &versions);
    }
}

// ---------------------------------------------------------------------------------
// Least privilege

fn walk<'a>(v: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                walk(child, format!("{path}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                walk(child, format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push((path, v));
}

fn containers(pod_spec: &Value) -> Vec<&Value> {
    ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .filter_map(|k| pod_spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect()
}

fn assert_least_privilege(docs: &[Value], what: &str) {
    for doc in docs {
        let mut nodes = Vec::new();
        walk(doc, String::new(), &mut nodes);
        for (path, v) in nodes {
            assert!(
                !(path.ends_with("/privileged") && v == &Value::Bool(true)),
                "{what}: privileged: true at {}{path}",
                name(doc)
            );
        }
    }
    let ds = the(docs, "DaemonSet");
    let pod = ds.pointer("/spec/template/spec").expect("pod spec");
    for host_ns in ["hostNetwork", "hostIPC"] {
        assert_ne!(
            pod.get(host_ns),
            Some(&Value::Bool(true)),
            "{what}: the agent must not use {host_ns}"
        );
    }
    // The host's pid namespace, for the pods' socket tables through their pids: in a
    // pod's own, cgroup.procs reads 0 and a UDP sidecar's bind is never seen.
    assert_eq!(
        pod.get("hostPID"),
        Some(&Value::Bool(true)),
        "{what}: the agent reads the pods' socket tables through their pids (hostPID)"
    );
    let pod_seccomp = pod.pointer("/securityContext/seccompProfile/type");

    let host_volumes: BTreeMap<&str, &str> = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .filter_map(|v| Some((str_at(v, "/name"), v.pointer("/hostPath/path")?.as_str()?)))
        .collect();
    assert_eq!(
        host_volumes.values().copied().collect::<BTreeSet<_>>(),
        READ_ONLY_HOST_PATHS
            .iter()
            .copied()
            .chain(READ_WRITE_HOST_PATHS.iter().map(|(p, _, _)| *p))
            .collect(),
        "{what}: host paths mounted (see SECURITY.md, Privileges)"
    );
    for v in pod["volumes"].as_array().into_iter().flatten() {
        let Some(path) = v.pointer("/hostPath/path").and_then(Value::as_str) else {
            continue;
        };
        let want = READ_WRITE_HOST_PATHS
            .iter()
            .find(|(p, _, _)| *p == path)
            .map_or("Directory", |(_, t, _)| *t);
        assert_eq!(
            v.pointer("/hostPath/type").and_then(Value::as_str),
            Some(want),
            "{what}: hostPath {path}: its type"
        );
    }

    let expected_caps: BTreeSet<&str> = AGENT_CAPABILITIES.iter().copied().collect();
    let all = containers(pod);
    assert_eq!(all.len(), 1, "{what}: the agent pod has one container");
    for c in all {
        let cname = str_at(c, "/name");
        let sc = c.get("securityContext").expect("container securityContext");
        let drop: Vec<&str> = sc
            .pointer("/capabilities/drop")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(
            drop,
            ["ALL"],
            "{what}/{cname}: capabilities.drop must be [ALL]"
        );
        let add: BTreeSet<&str> = sc
            .pointer("/capabilities/add")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(
            add, expected_caps,
            "{what}/{cname}: capabilities.add must be exactly AGENT_CAPABILITIES (SECURITY.md, Privileges)"
        );
        assert_eq!(
            sc.get("readOnlyRootFilesystem"),
            Some(&Value::Bool(true)),
            "{what}/{cname}"
        );
        assert_eq!(
            sc.get("allowPrivilegeEscalation"),
            Some(&Value::Bool(false)),
            "{what}/{cname}"
        );
        let seccomp = sc.pointer("/seccompProfile/type").or(pod_seccomp);
        assert_eq!(
            seccomp.and_then(Value::as_str),
            Some("RuntimeDefault"),
            "{what}/{cname}: seccomp profile"
        );

        for mount in c["volumeMounts"].as_array().into_iter().flatten() {
            let volume = str_at(mount, "/name");
            if let Some(host) = host_volumes.get(volume) {
                let read_write = READ_WRITE_HOST_PATHS.iter().find(|(p, _, _)| p == host);
                match read_write {
                    None => assert_eq!(
                        mount.get("readOnly"),
                        Some(&Value::Bool(true)),
                        "{what}/{cname}: host volume {volume} must be mounted read-only"
                    ),
                    Some((_, _, propagation)) => assert_eq!(
                        mount.get("mountPropagation").and_then(Value::as_str),
                        *propagation,
                        "{what}/{cname}: host volume {volume}: its mount propagation"
                    ),
                }
                assert_eq!(
                    str_at(mount, "/mountPath"),
                    host_volumes[volume],
                    "{what}/{cname}: {volume} is mounted where the agent looks for it"
                );
            }
        }

        let port = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == "http-metrics")
            .unwrap_or_else(|| panic!("{what}/{cname}: no http-metrics port"));
        assert_eq!(port["containerPort"], 9965, "{what}/{cname}");
        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            let get = c
                .pointer(&format!("/{probe}/httpGet"))
                .unwrap_or_else(|| panic!("{what}/{cname}: no {probe} httpGet"));
            assert_eq!(get["path"], path, "{what}/{cname}: {probe}");
            assert_eq!(get["port"], "http-metrics", "{what}/{cname}: {probe}");
        }
        for bound in ["requests", "limits"] {
            for resource in ["cpu", "memory"] {
                assert!(
                    c.pointer(&format!("/resources/{bound}/{resource}"))
                        .is_some(),
                    "{what}/{cname}: resources.{bound}.{resource} must be set"
                );
            }
        }
        let env: BTreeMap<&str, &str> = c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| {
                Some((
                    e["name"].as_str()?,
                    e.pointer("/valueFrom/fieldRef/fieldPath")?.as_str()?,
                ))
            })
            .collect();
        assert_eq!(
            env.get("NODE_NAME"),
            Some(&"spec.nodeName"),
            "{what}/{cname}"
        );
        assert_eq!(env.get("NODE_IP"), Some(&"status.hostIP"), "{what}/{cname}");
    }
    assert!(
        pod["tolerations"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["operator"] == "Exists" && t.get("key").is_none()),
        "{what}: the agent tolerates every taint (runs on every node)"
    );
    assert!(
        pod.get("priorityClassName").is_some(),
        "{what}: priorityClassName"
    );
    assert_eq!(
        ds.pointer("/spec/updateStrategy/type")
            .and_then(Value::as_str),
        Some("RollingUpdate"),
        "{what}"
    );
}

#[test]
fn daemonset_keeps_to_least_privilege() {
    let default = rendered(".");
    assert_least_privilege(&default, "deploy/");
    let ds = the(&default, "DaemonSet");
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["args"],
        serde_json::json!([
            "run",
            "--listen",
            "0.0.0.0:9965",
            "--pods-from",
            "api",
            "--auth",
            "kubernetes"
        ]),
        "the shipped DaemonSet guards /metrics and /api/v1/incidents"
    );
    assert_eq!(c["image"], "ghcr.io/sidecar-race/sidecar-race-agent:0.1.0");

    let kubelet = rendered("kubelet-source");
    assert_least_privilege(&kubelet, "deploy/kubelet-source/");
    let ds = the(&kubelet, "DaemonSet");
    assert_eq!(
        ds["spec"]["template"]["spec"]["containers"][0]["args"][4],
        "kubelet"
    );
}

/// Whether OpenShift's SecurityContextConstraints `scc` admits the agent's pod `pod`
/// (the host namespaces it uses, the capabilities it adds): `Err` names what it refuses.
fn scc_admits(scc: &Value, pod: &Value) -> Result<(), String> {
    let mut refused = Vec::new();
    for (ns, allow) in [
        ("hostPID", "allowHostPID"),
        ("hostNetwork", "allowHostNetwork"),
        ("hostIPC", "allowHostIPC"),
    ] {
        if pod[ns] == Value::Bool(true) && scc[allow] != Value::Bool(true) {
            refused.push(format!("{ns} without {allow}"));
        }
    }
    let allowed: BTreeSet<&str> = scc["allowedCapabilities"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for c in containers(pod) {
        for cap in c
            .pointer("/securityContext/capabilities/add")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !allowed.contains(cap) {
                refused.push(format!("capability {cap}"));
            }
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(refused.join(", "))
    }
}

/// The OpenShift overlay's SCC admits exactly what the DaemonSet asks for (an SCC
/// narrower than the pod leaves the DaemonSet with no pod on OpenShift), and the check
/// refuses an SCC without `allowHostPID`, which the agent needs.
#[test]
fn the_openshift_scc_admits_the_agents_pod() {
    let docs = rendered("overlays/openshift");
    let scc = the(&docs, "SecurityContextConstraints");
    let pod = the(&docs, "DaemonSet")
        .pointer("/spec/template/spec")
        .expect("pod spec");
    assert_eq!(scc_admits(scc, pod), Ok(()));
    let mut narrower = scc.clone();
    narrower["allowHostPID"] = Value::Bool(false);
    assert_eq!(
        scc_admits(&narrower, pod),
        Err("hostPID without allowHostPID".to_string())
    );
}

/// The agent's port is open to the monitoring namespace only: /api/v1/incidents names
/// every pod of the node. The policy selects the agent's pods, admits ingress (the
/// kubelet's probes come from the node, always admitted), and leaves egress alone.
#[test]
fn network_policy_admits_only_the_monitoring_namespace_to_the_agent_port() {
    let default = rendered(".");
    let np = the(&default, "NetworkPolicy");
    let ds = the(&default, "DaemonSet");
    assert_eq!(np["metadata"]["namespace"], NAMESPACE);
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    for (k, v) in np["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&pod_labels[k], v, "selects the agent's pods ({k})");
    }
    assert_eq!(np["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
    let port = agent_container(ds)["ports"][0]["containerPort"].clone();
    assert_eq!(
        np["spec"]["ingress"],
        serde_json::json!([{
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
            "ports": [{"port": port, "protocol": "TCP"}],
        }]),
        "one rule: the monitoring namespace, the agent's port"
    );
}

type Grant = (String, String, String);

/// (API group, resource, verb) granted by each ClusterRole/Role, by name.
fn grants(docs: &[Value]) -> BTreeMap<String, BTreeSet<Grant>> {
    let mut out = BTreeMap::new();
    for doc in docs
        .iter()
        .filter(|d| kind(d) == "ClusterRole" || kind(d) == "Role")
    {
        let mut set = BTreeSet::new();
        for rule in doc["rules"].as_array().into_iter().flatten() {
            for forbidden in ["nonResourceURLs", "resourceNames"] {
                assert!(
                    rule.get(forbidden).is_none(),
                    "{}: unexpected {forbidden}",
                    name(doc)
                );
            }
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .unwrap_or_else(|| panic!("{}: rule without {k}", name(doc)))
                    .iter()
                    .map(|v| v.as_str().expect("string").to_string())
                    .collect()
            };
            for g in list("apiGroups") {
                for r in list("resources") {
                    for v in list("verbs") {
                        assert!(
                            g != "*" && r != "*" && v != "*",
                            "{}: wildcard in a rule",
                            name(doc)
                        );
                        set.insert((g.clone(), r.clone(), v));
                    }
                }
            }
        }
        out.insert(name(doc).to_string(), set);
    }
    out
}

fn grant((g, r, v): (&str, &str, &str)) -> Grant {
    (g.to_string(), r.to_string(), v.to_string())
}

fn assert_bindings(docs: &[Value], roles: &BTreeMap<String, BTreeSet<Grant>>) {
    assert!(
        of_kind(docs, "RoleBinding").is_empty(),
        "no namespaced bindings expected"
    );
    for b in of_kind(docs, "ClusterRoleBinding") {
        assert_eq!(b["roleRef"]["kind"], "ClusterRole");
        assert!(
            roles.contains_key(str_at(b, "/roleRef/name")),
            "{} binds a role this install does not define",
            name(b)
        );
        assert_eq!(
            b["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": AGENT_NAME, "namespace": NAMESPACE}]),
            "{}: binds only the agent's service account",
            name(b)
        );
    }
}

#[test]
fn rbac_grants_only_what_the_agent_uses() {
    let default = rendered(".");
    let roles = grants(&default);
    let expected: BTreeSet<Grant> = DEFAULT_GRANTS.iter().copied().map(grant).collect();
    assert_eq!(
        roles.keys().collect::<Vec<_>>(),
        [AGENT_NAME],
        "the default install defines one ClusterRole"
    );
    assert_eq!(
        roles[AGENT_NAME], expected,
        "the default ClusterRole's grants"
    );
    assert_bindings(&default, &roles);

    let kubelet = rendered("kubelet-source");
    let roles = grants(&kubelet);
    assert_eq!(
        roles[AGENT_NAME], expected,
        "kubelet-source leaves the default role alone"
    );
    assert_eq!(
        roles[KUBELET_SOURCE_ROLE],
        BTreeSet::from([grant(KUBELET_SOURCE_GRANT)]),
        "the kubelet-source role grants nodes/proxy get and nothing else"
    );
    assert_eq!(roles.len(), 2);
    assert_bindings(&kubelet, &roles);
}

// ---------------------------------------------------------------------------------
// Prometheus rules, runbook, CRD objects

#[test]
fn promtool_checks_and_unit_tests_pass() {
    let promtool = on_path("promtool");
    let dir = deploy("monitoring");
    run(
        Command::new(&promtool)
            .current_dir(&dir)
            .args(["check", "rules", "rules.yaml"]),
        None,
    );
    run(
        Command::new(&promtool)
            .current_dir(&dir)
            .args(["test", "rules", "rules_test.yaml"]),
        None,
    );
}

fn rules() -> Vec<Value> {
    one_yaml_file("monitoring/rules.yaml")["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

/// GitHub's anchor for a Markdown heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn prometheusrule_is_the_rules_file_and_every_alert_has_a_runbook_section() {
    let plain = one_yaml_file("monitoring/rules.yaml");
    let operator = one_yaml_file("monitoring/prometheusrule.yaml");
    assert_eq!(operator["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(operator["kind"], "PrometheusRule");
    assert_eq!(
        operator["spec"]["groups"], plain["groups"],
        "prometheusrule.yaml is out of date: run `sh deploy/monitoring/generate-prometheusrule.sh`"
    );

    let runbook = std::fs::read_to_string(deploy("monitoring/RUNBOOK.md")).expect("RUNBOOK.md");
    let sections: BTreeSet<String> = runbook
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(anchor)
        .collect();

    let rules = rules();
    let alerts: Vec<&Value> = rules.iter().filter(|r| r.get("alert").is_some()).collect();
    let names: BTreeSet<&str> = alerts.iter().map(|a| str_at(a, "/alert")).collect();
    assert_eq!(names, ALERTS.iter().copied().collect(), "the alerts");
    for alert in alerts {
        let alert_name = str_at(alert, "/alert");
        assert!(
            alert
                .pointer("/labels/severity")
                .and_then(Value::as_str)
                .is_some(),
            "{alert_name}: severity label"
        );
        for annotation in ["summary", "description", "runbook_url"] {
            let text = alert
                .pointer(&format!("/annotations/{annotation}"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            assert!(
                !text.trim().is_empty(),
                "{alert_name}: annotation {annotation}"
            );
        }
        let url = str_at(alert, "/annotations/runbook_url");
        let (page, fragment) = url
            .split_once('#')
            .unwrap_or_else(|| panic!("{alert_name}: runbook_url without #section: {url}"));
        assert!(
            page.ends_with("deploy/monitoring/RUNBOOK.md"),
            "{alert_name}: runbook_url points at {page}"
        );
        assert_eq!(
            fragment,
            anchor(alert_name),
            "{alert_name}: runbook_url section"
        );
        assert!(
            sections.contains(fragment),
            "RUNBOOK.md has no `## {alert_name}` section"
        );
    }
}

#[test]
fn crd_objects_have_the_expected_shape() {
    let monitoring = rendered("monitoring");
    let default = rendered(".");
    let ds = the(&default, "DaemonSet");
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];

    let pm = the(&monitoring, "PodMonitor");
    assert_eq!(pm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(pm["metadata"]["namespace"], NAMESPACE);
    let selector = pm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("PodMonitor selector.matchLabels");
    for (k, v) in selector {
        assert_eq!(
            &pod_labels[k], v,
            "PodMonitor selects the agent's pods ({k})"
        );
    }
    assert_eq!(
        pm["spec"]["namespaceSelector"]["matchNames"],
        serde_json::json!([NAMESPACE])
    );
    // job="sidecar-race-agent", which the rules and the dashboard assume.
    let job_label = str_at(pm, "/spec/jobLabel");
    assert_eq!(
        pod_labels[job_label], "sidecar-race-agent",
        "the job name the rules assume"
    );
    let endpoints = pm["spec"]["podMetricsEndpoints"]
        .as_array()
        .expect("endpoints");
    assert_eq!(endpoints.len(), 1);
    let ep = &endpoints[0];
    assert_eq!(ep["port"], "http-metrics");
    // The agent's workload series carry the app's namespace and container: the
    // operator's default honor_labels: false would overwrite them with the agent
    // pod's (tests/tests/prometheus_e2e.rs scrapes as the operator does).
    assert_eq!(
        ep["honorLabels"], true,
        "PodMonitor must keep the agent's namespace/container labels (honorLabels: true)"
    );
    assert!(
        ep["relabelings"].as_array().into_iter().flatten().any(|r| {
            r["sourceLabels"] == serde_json::json!(["__meta_kubernetes_pod_node_name"])
                && r["targetLabel"] == "node"
        }),
        "PodMonitor relabels the node name into `node`"
    );

    let pr = the(&monitoring, "PrometheusRule");
    assert_eq!(pr["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        pr["spec"]
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["groups".to_string()])
    );

    let cm = the(&monitoring, "ConfigMap");
    assert_eq!(cm["metadata"]["namespace"], NAMESPACE);
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let data = cm["data"].as_object().expect("ConfigMap data");
    assert_eq!(data.len(), 1);
    let (key, json) = data.iter().next().expect("one entry");
    assert!(
        key.ends_with(".json"),
        "Grafana's sidecar loads *.json keys: {key}"
    );
    let in_cm: Value = serde_json::from_str(json.as_str().expect("text")).expect("JSON");
    assert_eq!(in_cm, dashboard(), "the ConfigMap carries dashboard.json");
}

// ---------------------------------------------------------------------------------
// Dashboard and the metric names in queries

fn dashboard() -> Value {
    let text =
        std::fs::read_to_string(deploy("monitoring/dashboard.json")).expect("dashboard.json");
    serde_json::from_str(&text).expect("dashboard.json is valid JSON")
}

/// Index of the bracket closing the one at `open`, skipping quoted strings.
fn closing(chars: &[char], open: usize) -> usize {
    let (o, c) = (
        chars[open],
        match chars[open] {
            '(' => ')',
            '{' => '}',
            '[' => ']',
            other => panic!("not a bracket: {other}"),
        },
    );
    let mut depth = 0;
    let mut i = open;
    while i < chars.len() {
        match chars[i] {
            q @ ('"' | '\'' | '`') => i = end_of_string(chars, i, q),
            x if x == o => depth += 1,
            x if x == c => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    panic!("unbalanced {o} in {}", chars.iter().collect::<String>())
}

fn end_of_string(chars: &[char], start: usize, quote: char) -> usize {
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        if chars[i] == '\\' && quote != '`' {
            i += 1;
        }
        i += 1;
    }
    i
}

const PROMQL_KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "atan2",
];
/// Aggregation operators: `sum by (x) (...)` puts a keyword, not `(`, after the name.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Metric names a PromQL expression (Grafana variables allowed) selects: identifiers
/// that are not functions, keywords, label names or durations.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = end_of_string(&chars, i, c) + 1,
            // Label matchers and range/subquery durations.
            '{' | '[' => i = closing(&chars, i) + 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            // A Grafana variable: $name or ${name}.
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    i = closing(&chars, i) + 1;
                } else {
                    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let ident: String = chars[start..i].iter().collect();
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                let call = chars.get(j) == Some(&'(');
                if GROUPING.contains(&ident.as_str()) {
                    if call {
                        i = closing(&chars, j) + 1;
                    }
                } else if !call
                    && !PROMQL_KEYWORDS.contains(&ident.as_str())
                    && !AGGREGATIONS.contains(&ident.as_str())
                {
                    names.insert(ident);
                }
            }
            _ => i += 1,
        }
    }
    names
}

fn known_metric_names() -> BTreeSet<String> {
    let records = rules()
        .iter()
        .filter_map(|r| r.get("record").and_then(Value::as_str).map(str::to_string))
        .collect::<Vec<_>>();
    assert!(!records.is_empty(), "rules.yaml defines recording rules");
    AGENT_METRICS
        .iter()
        .chain(SCRAPE_METRICS)
        .map(|s| s.to_string())
        .chain(records)
        .collect()
}

#[test]
fn metric_name_extraction_sees_what_a_query_selects() {
    let e = r#"topk(10, sum by (namespace, le) (rate(a_total{x=~"$ns", y="}"}[$__rate_interval])) / on (n) group_left(m) b:rec:ratio1h > 0 or absent(up{job="j"}) unless c offset 1h)"#;
    assert_eq!(
        metric_names(e),
        ["a_total", "b:rec:ratio1h", "c", "up"]
            .map(String::from)
            .into()
    );
    assert_eq!(
        metric_names("histogram_quantile(0.95, x_bucket) >= 1e3"),
        ["x_bucket".to_string()].into()
    );
}

fn panels(list: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in list.as_array().into_iter().flatten() {
        out.push(p);
        out.extend(panels(&p["panels"]));
    }
    out
}

#[test]
fn dashboard_queries_only_known_metrics() {
    let d = dashboard();
    let known = known_metric_names();
    assert!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let ds_var = vars
        .iter()
        .find(|v| v["name"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(ds_var["type"], "datasource");
    assert_eq!(ds_var["query"], "prometheus");
    for v in ["namespace", "workload"] {
        assert!(vars.iter().any(|x| x["name"] == v), "variable {v}");
    }
    // Variable queries: label_values(METRIC{...}, label).
    for v in vars.iter().filter(|v| v["type"] == "query") {
        let q = v["definition"].as_str().expect("definition");
        let arg = q
            .strip_prefix("label_values(")
            .unwrap_or_else(|| panic!("variable {}: expected label_values(...): {q}", v["name"]));
        let metric: String = arg
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        assert!(
            known.contains(&metric),
            "variable {}: unknown metric {metric}",
            v["name"]
        );
    }

    let mut queried = 0;
    for p in panels(&d["panels"]) {
        if p["type"] == "row" {
            continue;
        }
        let title = p["title"].as_str().unwrap_or("?");
        assert_eq!(
            p["datasource"]["uid"], "${datasource}",
            "panel {title}: datasource"
        );
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {title}: targets"));
        assert!(!targets.is_empty(), "panel {title}: no query");
        for t in targets {
            let expr = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("panel {title}: expr"));
            let names = metric_names(expr);
            assert!(!names.is_empty(), "panel {title}: no metric in {expr}");
            let unknown: Vec<_> = names.difference(&known).collect();
            assert!(
                unknown.is_empty(),
                "panel {title}: unknown metrics {unknown:?} in {expr}"
            );
            queried += 1;
        }
    }
    assert!(queried >= 8, "the dashboard has its panels");
}

/// The metrics a checked query reads: a variable's `label_values(METRIC{...}, label)`
/// names its metric first, any other query is PromQL.
fn queried_metrics(expr: &str) -> BTreeSet<String> {
    match expr.strip_prefix("label_values(") {
        Some(arg) => [arg
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect()]
        .into(),
        None => metric_names(expr),
    }
}

/// The dashboard passes Grafana's own schema (the Grafana Foundation SDK's types,
/// decoded strictly: no unknown field, no value of another type, every required
/// option; its constraints; and a round trip that loses nothing), and every query the
/// SDK decoded from it (panel targets, the incident annotation, the variables) reads
/// only the agent's metrics, `up` and the recording rules. It failed on the dashboard
/// before #51: options Grafana requires (the bar gauge's `valueMode`, `sizing`, …; the
/// table's `frameIndex`; the heatmap's `exemplars`) and an empty `current` were missing.
#[test]
fn dashboard_matches_grafanas_schema_and_queries_known_metrics() {
    let report = grafana_schema::check(&deploy("monitoring/dashboard.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    let known = known_metric_names();
    let queries = report["queries"].as_array().expect("queries");
    for q in queries {
        let (where_, expr) = (q["where"].as_str().unwrap(), q["expr"].as_str().unwrap());
        let names = queried_metrics(expr);
        assert!(!names.is_empty(), "{where_}: no metric in {expr}");
        let unknown: Vec<_> = names.difference(&known).collect();
        assert!(
            unknown.is_empty(),
            "{where_}: unknown metrics {unknown:?} in {expr}"
        );
    }
    // Every panel but the rows was decoded by its own type's schema.
    let panels = panels(&dashboard()["panels"])
        .into_iter()
        .filter(|p| p["type"] != "row")
        .count();
    assert_eq!(report["panels"].as_u64(), Some(panels as u64), "{report}");
    // The views of #51 the HTML report has, where Prometheus data allows.
    let reads = |where_prefix: &str, metric: &str| {
        queries.iter().any(|q| {
            q["where"].as_str().unwrap().starts_with(where_prefix)
                && queried_metrics(q["expr"].as_str().unwrap()).contains(metric)
        })
    };
    assert!(
        reads(
            "panel \"Race windows by workload",
            "sidecar_race_window_seconds_count"
        ),
        "race windows by workload: {report}"
    );
    assert!(
        reads(
            "panel \"Affected-start share by workload",
            "sidecar_race_affected_pod_starts_total"
        ) && reads(
            "panel \"Affected-start share by workload",
            "sidecar_race_pod_starts_total"
        ),
        "affected-start share: {report}"
    );
    assert!(
        reads("annotation ", "sidecar_race_incidents_total"),
        "an annotation query on the incident series: {report}"
    );
}

/// The schema check rejects a dashboard Grafana's schema does not allow, each fault
/// named by its path: a field of another type, an unknown field, a panel type Grafana
/// does not have, a query without its expression.
#[test]
fn a_dashboard_off_grafanas_schema_is_rejected() {
    // What is changed, how, and the path the rejection must name.
    type Mutation = (&'static str, fn(&mut Value), &'static str);
    let mutations: [Mutation; 5] = [
        (
            "a width as text",
            |d| d["panels"][1]["gridPos"]["w"] = "half".into(),
            "panels[1].gridPos.w",
        ),
        (
            "a table option as text",
            |d| d["panels"][3]["options"]["showHeader"] = "yes".into(),
            "panels[3].options.showHeader",
        ),
        (
            "an unknown panel field",
            |d| d["panels"][2]["colour"] = "red".into(),
            "unexpected field 'colour'",
        ),
        (
            "a panel type Grafana has not",
            |d| d["panels"][2]["type"] = "timeserie".into(),
            "no panel type \"timeserie\"",
        ),
        (
            "a query's flag as text",
            |d| d["panels"][2]["targets"][0]["instant"] = "no".into(),
            "panels[2].targets[0].instant",
        ),
    ];
    for (what, mutate, named) in mutations {
        let mut d = dashboard();
        mutate(&mut d);
        let path = std::env::temp_dir().join(format!(
            "sidecar-race-dashboard-{}-{}.json",
            std::process::id(),
            what.replace(' ', "-")
        ));
        std::fs::write(&path, serde_json::to_string_pretty(&d).unwrap()).unwrap();
        let result = grafana_schema::check(&path);
        let _ = std::fs::remove_file(&path);
        match result {
            Ok(report) => panic!("{what}: accepted: {report}"),
            Err(e) => assert!(e.contains(named), "{what}: the error names {named}:\n{e}"),
        }
    }
}

#[test]
fn rules_query_only_known_metrics() {
    let known = known_metric_names();
    for r in rules() {
        let expr = str_at(&r, "/expr");
        let unknown: Vec<_> = metric_names(expr).difference(&known).cloned().collect();
        assert!(unknown.is_empty(), "{r}: unknown metrics {unknown:?}");
    }
}

// ---------------------------------------------------------------------------------
// Examples

fn container<'a>(list: &'a Value, cname: &str) -> &'a Value {
    list.as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == cname)
        .unwrap_or_else(|| panic!("no container {cname}"))
}

fn declares_port(c: &Value, port: u64) -> bool {
    c["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["containerPort"] == port)
}

#[test]
fn examples_race_and_fix_the_race() {
    let classic = one_yaml_file("examples/checkout-classic.yaml");
    let pod = &classic["spec"]["template"]["spec"];
    assert!(
        pod.get("initContainers").is_none(),
        "classic: no init containers"
    );
    let proxy = container(&pod["containers"], "proxy");
    assert!(
        declares_port(proxy, 15001),
        "classic: the proxy declares 15001"
    );
    container(&pod["containers"], "app");

    let native = one_yaml_file("examples/checkout-native.yaml");
    let pod = &native["spec"]["template"]["spec"];
    let proxy = container(&pod["initContainers"], "proxy");
    assert_eq!(proxy["restartPolicy"], "Always", "native: a native sidecar");
    assert!(
        declares_port(proxy, 15001),
        "native: the proxy declares 15001"
    );
    assert_eq!(
        proxy.pointer("/startupProbe/tcpSocket/port"),
        Some(&serde_json::json!(15001)),
        "native: the startupProbe tests the port the app dials"
    );
    container(&pod["containers"], "app");
    assert_eq!(classic["metadata"]["name"], "checkout-classic");

    // Not part of any kustomization.
    for dir in [".", "base", "monitoring"] {
        let docs = rendered(dir);
        assert!(
            !docs.iter().any(|d| kind(d) == "Deployment"),
            "deploy/{dir} must not install the examples"
        );
    }
}

// ---------------------------------------------------------------------------------
// Install knobs (deploy/overlays/) and the ServiceMonitor alternative

/// The agent container of a rendered DaemonSet.
fn agent_container(ds: &Value) -> &Value {
    &ds["spec"]["template"]["spec"]["containers"][0]
}

#[test]
fn overlay_example_sets_every_knob_and_changes_nothing_else() {
    let base = rendered("base");
    let docs = rendered("overlays/example");
    // Everything of the base, nothing else.
    let names = |d: &[Value]| -> BTreeSet<String> {
        d.iter()
            .map(|d| format!("{}/{}", kind(d), name(d)))
            .collect()
    };
    assert_eq!(names(&docs), names(&base));
    // Only the knobs differ from the base: the privileges, volumes, probes and the
    // rest of the pod stay as least_privilege checks them.
    let without_knobs = |ds: &Value| {
        let mut pod = ds["spec"]["template"]["spec"].clone();
        let o = pod.as_object_mut().unwrap();
        for k in [
            "tolerations",
            "nodeSelector",
            "affinity",
            "imagePullSecrets",
        ] {
            o.remove(k);
        }
        let c = pod["containers"][0].as_object_mut().unwrap();
        for k in ["image", "resources", "args", "env"] {
            c.remove(k);
        }
        pod
    };
    assert_eq!(
        without_knobs(the(&docs, "DaemonSet")),
        without_knobs(the(&base, "DaemonSet"))
    );
    let ds = the(&docs, "DaemonSet");
    let c = agent_container(ds);
    let pod = &ds["spec"]["template"]["spec"];
    // image
    assert_eq!(
        c["image"],
        "registry.example.com/platform/sidecar-race-agent:0.1.0"
    );
    // resources
    assert_eq!(c["resources"]["limits"]["memory"], "384Mi");
    assert_eq!(c["resources"]["requests"]["cpu"], "100m");
    // tolerations: replaced, no longer "tolerate everything"
    let tolerations = pod["tolerations"].as_array().expect("tolerations");
    assert_eq!(tolerations.len(), 2, "{tolerations:?}");
    assert!(tolerations.iter().all(|t| t.get("key").is_some()));
    // node selector: added to the base's
    assert_eq!(pod["nodeSelector"]["sidecar-race.io/observe"], "true");
    assert_eq!(pod["nodeSelector"]["kubernetes.io/os"], "linux");
    // affinity, a pull secret, pod labels and annotations (the selector's label kept),
    // and the update strategy
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["key"],
        "kubernetes.io/arch"
    );
    assert_eq!(
        pod["imagePullSecrets"],
        serde_json::json!([{"name": "regcred"}])
    );
    let meta = &ds["spec"]["template"]["metadata"];
    assert_eq!(meta["labels"]["team"], "platform");
    assert_eq!(
        meta["labels"]["app.kubernetes.io/name"],
        "sidecar-race-agent"
    );
    assert_eq!(
        meta["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"],
        "true"
    );
    assert_eq!(
        ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        1
    );
    // arguments (pod source and flags) and environment
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let i = args.iter().position(|a| *a == "--pods-from").unwrap();
    assert_eq!(args[i + 1], "api");
    assert!(args.contains(&"--metrics-pod-label"));
    let env = c["env"].as_array().unwrap();
    assert!(
        env.iter()
            .any(|e| e["name"] == "SIDECAR_RACE_EVENTS_PER_MINUTE" && e["value"] == "10")
    );
    // network policy: another monitoring namespace, and the control plane's addresses
    let np = the(&docs, "NetworkPolicy");
    assert_eq!(
        np["spec"]["ingress"][0]["from"],
        serde_json::json!([
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prometheus"}}},
            {"ipBlock": {"cidr": "10.0.0.0/28"}},
        ])
    );
    assert_eq!(
        np["spec"]["ingress"][0]["ports"],
        the(&base, "NetworkPolicy")["spec"]["ingress"][0]["ports"]
    );
    // The base's environment is kept (the downward API the pod source needs).
    assert!(env.iter().any(|e| e["name"] == "NODE_NAME"));
    // The arguments still parse: the agent's own CLI accepts them.
    sidecar_race_tests::agent::assert_accepts_args(&args, "the overlay");
}

#[test]
fn overlay_example_monitoring_labels_what_kube_prometheus_stack_selects() {
    let docs = rendered("overlays/example-monitoring");
    for k in ["PodMonitor", "PrometheusRule"] {
        assert_eq!(
            the(&docs, k)["metadata"]["labels"]["release"],
            "kube-prometheus-stack",
            "{k}"
        );
    }
    // Nothing else changed.
    let mut plain = rendered("monitoring");
    let mut labelled = docs.clone();
    for d in plain.iter_mut().chain(labelled.iter_mut()) {
        if let Some(l) = d["metadata"]["labels"].as_object_mut() {
            l.remove("release");
        }
    }
    assert_eq!(labelled, plain);
}

#[test]
fn servicemonitor_scrapes_the_service_like_the_podmonitor() {
    let docs = rendered("monitoring-servicemonitor");
    assert!(of_kind(&docs, "PodMonitor").is_empty(), "instead of it");
    the(&docs, "PrometheusRule");
    the(&docs, "ConfigMap");
    let sm = the(&docs, "ServiceMonitor");
    let monitoring = rendered("monitoring");
    let default = rendered(".");
    let pm = the(&monitoring, "PodMonitor");
    let svc = the(&default, "Service");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["namespace"], NAMESPACE);
    // It selects the Service, whose label names the job as the rules expect.
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "selects the Service ({k})"
        );
    }
    let job_label = str_at(sm, "/spec/jobLabel");
    assert_eq!(svc["metadata"]["labels"][job_label], AGENT_NAME);
    assert_eq!(
        sm["spec"]["namespaceSelector"],
        pm["spec"]["namespaceSelector"]
    );
    let ep = &sm["spec"]["endpoints"][0];
    let pep = &pm["spec"]["podMetricsEndpoints"][0];
    // The Service's port by name, which targets the container's port.
    let port = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == ep["port"])
        .expect("the ServiceMonitor's port is a port of the Service");
    assert_eq!(port["targetPort"], pep["port"]);
    assert_eq!(svc["spec"]["clusterIP"], "None", "one endpoint per agent");
    for k in [
        "path",
        "interval",
        "honorLabels",
        "relabelings",
        "authorization",
    ] {
        assert_eq!(ep[k], pep[k], "{k} as in the PodMonitor");
    }
    assert_eq!(ep["honorLabels"], true);
}

/// The scrapers of `--auth kubernetes`: deploy/monitoring/ holds a ServiceAccount, its
/// token Secret, and a ClusterRole granting `get` on the agent's virtual resources
/// (`sidecar-race.io` incidents and metrics) and nothing else, bound in the agent's
/// namespace only (a RoleBinding) to that ServiceAccount only; no non-resource URL
/// (the default `system:discovery` role lets everyone `get` /api/*, so a grant on the
/// URL /api/v1/incidents would mean nothing). The PodMonitor (and the ServiceMonitor)
/// send that Secret's token through the operator's `authorization`.
#[test]
fn monitoring_scrapes_with_a_token_allowed_only_the_agent_resources() {
    let monitoring = rendered("monitoring");
    let sa = the(&monitoring, "ServiceAccount");
    assert_eq!(sa["metadata"]["namespace"], NAMESPACE);
    let secret = the(&monitoring, "Secret");
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    assert_eq!(
        secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        sa["metadata"]["name"]
    );
    assert_eq!(
        secret["metadata"]["namespace"], NAMESPACE,
        "the operator reads Secrets of the monitor's namespace"
    );
    let role = the(&monitoring, "ClusterRole");
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": ["sidecar-race.io"], "resources": SCRAPED_RESOURCES, "verbs": ["get"]}]),
        "get on the agent's virtual resources, nothing else"
    );
    let roles = grants(&monitoring);
    assert!(
        roles
            .values()
            .flatten()
            .all(|(g, _, v)| g == "sidecar-race.io" && v == "get"),
        "{roles:?}"
    );
    assert!(
        of_kind(&monitoring, "ClusterRoleBinding").is_empty(),
        "the grant holds in the agent's namespace only"
    );
    let binding = the(&monitoring, "RoleBinding");
    assert_eq!(binding["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        binding["roleRef"],
        serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]})
    );
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}])
    );
    let pm = the(&monitoring, "PodMonitor");
    let service_monitor = rendered("monitoring-servicemonitor");
    let sm = the(&service_monitor, "ServiceMonitor");
    for ep in [
        &pm["spec"]["podMetricsEndpoints"][0],
        &sm["spec"]["endpoints"][0],
    ] {
        assert_eq!(
            ep["authorization"],
            serde_json::json!({"type": "Bearer", "credentials": {"name": secret["metadata"]["name"], "key": "token"}})
        );
    }
}
