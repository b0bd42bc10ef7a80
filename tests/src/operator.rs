//! The scrape configuration the Prometheus Operator generates for a PodMonitor or a
//! ServiceMonitor, so that the end-to-end test scrapes the agent as a cluster's
//! Prometheus does.
//!
//! Built from the shipped `deploy/monitoring/podmonitor.yaml` and the DaemonSet's pod
//! template, following the operator's generator (`pkg/prometheus/promcfg.go`,
//! `generatePodMonitorConfig`): `honor_labels` from `honorLabels` (default false), a
//! `keep` on the selector's labels and on the port name, then the target labels it
//! always adds (`namespace`, `container`, `pod`, `job` — from `jobLabel` when the pod
//! has that label —, `endpoint`), then the PodMonitor's own `relabelings`. Kubernetes
//! service discovery is not available without an API server, so the target is a static
//! one carrying the `__meta_kubernetes_*` labels discovery would give the agent's pod;
//! the relabelling that turns them into target labels is the operator's.

use serde_json::{Value, json};

/// What discovery would say about the agent's pod.
pub struct DiscoveredPod<'a> {
    /// `host:port` of the agent's metrics endpoint.
    pub address: &'a str,
    pub pod_name: &'a str,
    pub node_name: &'a str,
}

/// Prometheus' label-name sanitising as in `__meta_kubernetes_pod_label_<name>`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn relabeling_to_prometheus(r: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for (k, v) in r.as_object().expect("a relabeling is a mapping") {
        let key = match k.as_str() {
            "sourceLabels" => "source_labels",
            "targetLabel" => "target_label",
            "action" => {
                out.insert(
                    "action".into(),
                    json!(v.as_str().unwrap().to_ascii_lowercase()),
                );
                continue;
            }
            "separator" | "regex" | "modulus" | "replacement" => k.as_str(),
            other => panic!("relabeling field `{other}` is not handled here"),
        };
        out.insert(key.into(), v.clone());
    }
    Value::Object(out)
}

/// One `scrape_configs` entry (JSON, which Prometheus reads as YAML) for endpoint `index`
/// of `pod_monitor`, whose target is the pod of `daemonset` described by `pod`.
pub fn pod_monitor_scrape_config(
    pod_monitor: &Value,
    daemonset: &Value,
    pod: &DiscoveredPod,
    index: usize,
    scrape_interval: &str,
) -> Value {
    let meta = &pod_monitor["metadata"];
    let spec = &pod_monitor["spec"];
    let endpoint = &spec["podMetricsEndpoints"][index];
    let template = &daemonset["spec"]["template"];
    let pod_labels = template["metadata"]["labels"]
        .as_object()
        .expect("pod template labels");
    let port_name = endpoint["port"]
        .as_str()
        .expect("the endpoint names a port");
    // The container of the pod that declares the port (discovery makes one target per
    // declared container port).
    let container = template["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["ports"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["name"] == port_name))
        })
        .unwrap_or_else(|| panic!("no container of the DaemonSet declares port {port_name}"));

    // Discovery's labels for that target.
    let mut sd = serde_json::Map::new();
    sd.insert(
        "__meta_kubernetes_namespace".into(),
        daemonset["metadata"]["namespace"].clone(),
    );
    sd.insert("__meta_kubernetes_pod_name".into(), json!(pod.pod_name));
    sd.insert(
        "__meta_kubernetes_pod_node_name".into(),
        json!(pod.node_name),
    );
    sd.insert(
        "__meta_kubernetes_pod_container_name".into(),
        container["name"].clone(),
    );
    sd.insert(
        "__meta_kubernetes_pod_container_port_name".into(),
        json!(port_name),
    );
    for (k, v) in pod_labels {
        let k = sanitize(k);
        sd.insert(format!("__meta_kubernetes_pod_label_{k}"), v.clone());
        sd.insert(
            format!("__meta_kubernetes_pod_labelpresent_{k}"),
            json!("true"),
        );
    }

    let mut relabel =
        vec![json!({"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"})];
    // The selector: one keep per matchLabels entry.
    if let Some(m) = spec["selector"]["matchLabels"].as_object() {
        for (k, v) in m {
            let k = sanitize(k);
            relabel.push(json!({
                "action": "keep",
                "source_labels": [format!("__meta_kubernetes_pod_label_{k}"), format!("__meta_kubernetes_pod_labelpresent_{k}")],
                "regex": format!("({});true", v.as_str().unwrap()),
            }));
        }
    }
    assert!(
        spec["selector"]["matchExpressions"].is_null(),
        "matchExpressions are not handled here"
    );
    relabel.push(json!({"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": port_name}));
    relabel.push(
        json!({"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"}),
    );
    relabel.push(json!({"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"}));
    relabel.push(json!({"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}));
    // job: "<namespace>/<name>", or the value of the pod label named by jobLabel.
    relabel.push(json!({"target_label": "job", "replacement": format!("{}/{}", meta["namespace"].as_str().unwrap(), meta["name"].as_str().unwrap())}));
    if let Some(job_label) = spec["jobLabel"].as_str() {
        relabel.push(json!({
            "source_labels": [format!("__meta_kubernetes_pod_label_{}", sanitize(job_label))],
            "target_label": "job", "regex": "(.+)", "replacement": "${1}",
        }));
    }
    relabel.push(json!({"target_label": "endpoint", "replacement": port_name}));
    for r in endpoint["relabelings"].as_array().into_iter().flatten() {
        relabel.push(relabeling_to_prometheus(r));
    }
    let metric_relabel: Vec<Value> = endpoint["metricRelabelings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(relabeling_to_prometheus)
        .collect();

    scrape_job(
        "podMonitor",
        meta,
        index,
        endpoint,
        scrape_interval,
        pod.address,
        sd,
        relabel,
        metric_relabel,
    )
}

/// One `scrape_configs` entry for endpoint `index` of `service_monitor`, whose target
/// is the agent's pod behind `service` (role `endpoints`), following the operator's
/// `generateServiceMonitorConfig`: the keep on the Service's labels and the port name,
/// `node`/`pod` from the endpoint's target, `namespace`, `service`, `pod`,
/// `container`, `job` (the Service's name, or its `jobLabel` label), `endpoint`, then
/// the ServiceMonitor's relabelings.
pub fn service_monitor_scrape_config(
    service_monitor: &Value,
    service: &Value,
    daemonset: &Value,
    pod: &DiscoveredPod,
    index: usize,
    scrape_interval: &str,
) -> Value {
    let meta = &service_monitor["metadata"];
    let spec = &service_monitor["spec"];
    let endpoint = &spec["endpoints"][index];
    let port_name = endpoint["port"]
        .as_str()
        .expect("the endpoint names a port");
    let svc_port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == port_name)
        .unwrap_or_else(|| panic!("the Service has no port {port_name}"));
    let template = &daemonset["spec"]["template"];
    let container = template["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["ports"].as_array().is_some_and(|ps| {
                ps.iter().any(|p| {
                    p["name"] == svc_port["targetPort"]
                        || p["containerPort"] == svc_port["targetPort"]
                })
            })
        })
        .expect("the Service's targetPort is a port of the agent's container");

    let mut sd = serde_json::Map::new();
    sd.insert(
        "__meta_kubernetes_namespace".into(),
        service["metadata"]["namespace"].clone(),
    );
    sd.insert(
        "__meta_kubernetes_service_name".into(),
        service["metadata"]["name"].clone(),
    );
    for (k, v) in service["metadata"]["labels"].as_object().unwrap() {
        let k = sanitize(k);
        sd.insert(format!("__meta_kubernetes_service_label_{k}"), v.clone());
        sd.insert(
            format!("__meta_kubernetes_service_labelpresent_{k}"),
            json!("true"),
        );
    }
    sd.insert(
        "__meta_kubernetes_endpoint_port_name".into(),
        json!(port_name),
    );
    sd.insert(
        "__meta_kubernetes_endpoint_address_target_kind".into(),
        json!("Pod"),
    );
    sd.insert(
        "__meta_kubernetes_endpoint_address_target_name".into(),
        json!(pod.pod_name),
    );
    sd.insert("__meta_kubernetes_pod_name".into(), json!(pod.pod_name));
    sd.insert(
        "__meta_kubernetes_pod_node_name".into(),
        json!(pod.node_name),
    );
    sd.insert("__meta_kubernetes_pod_phase".into(), json!("Running"));
    sd.insert(
        "__meta_kubernetes_pod_container_name".into(),
        container["name"].clone(),
    );

    let mut relabel =
        vec![json!({"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"})];
    for (k, v) in spec["selector"]["matchLabels"].as_object().unwrap() {
        let k = sanitize(k);
        relabel.push(json!({
            "action": "keep",
            "source_labels": [format!("__meta_kubernetes_service_label_{k}"), format!("__meta_kubernetes_service_labelpresent_{k}")],
            "regex": format!("({});true", v.as_str().unwrap()),
        }));
    }
    relabel.push(json!({"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": port_name}));
    for (kind, label) in [("Node", "node"), ("Pod", "pod")] {
        relabel.push(json!({
            "source_labels": ["__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"],
            "separator": ";", "regex": format!("{kind};(.*)"), "replacement": "${1}", "target_label": label,
        }));
    }
    relabel.push(
        json!({"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"}),
    );
    relabel.push(
        json!({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"}),
    );
    relabel.push(json!({"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}));
    relabel.push(json!({"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"}));
    relabel.push(json!({"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"}));
    relabel.push(json!({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"}));
    if let Some(job_label) = spec["jobLabel"].as_str() {
        relabel.push(json!({
            "source_labels": [format!("__meta_kubernetes_service_label_{}", sanitize(job_label))],
            "target_label": "job", "regex": "(.+)", "replacement": "${1}",
        }));
    }
    relabel.push(json!({"target_label": "endpoint", "replacement": port_name}));
    for r in endpoint["relabelings"].as_array().into_iter().flatten() {
        relabel.push(relabeling_to_prometheus(r));
    }
    let metric_relabel = endpoint["metricRelabelings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(relabeling_to_prometheus)
        .collect();
    scrape_job(
        "serviceMonitor",
        meta,
        index,
        endpoint,
        scrape_interval,
        pod.address,
        sd,
        relabel,
        metric_relabel,
    )
}

/// The scrape job the operator writes for one endpoint of a PodMonitor or ServiceMonitor
/// (`kind`), with discovery replaced by one static target carrying `sd` labels.
#[allow(clippy::too_many_arguments)]
fn scrape_job(
    kind: &str,
    meta: &Value,
    index: usize,
    endpoint: &Value,
    scrape_interval: &str,
    address: &str,
    sd: serde_json::Map<String, Value>,
    relabel: Vec<Value>,
    metric_relabel: Vec<Value>,
) -> Value {
    json!({
        "job_name": format!("{kind}/{}/{}/{index}", meta["namespace"].as_str().unwrap(), meta["name"].as_str().unwrap()),
        // The operator writes `honor_labels: false` unless the endpoint says otherwise.
        "honor_labels": endpoint["honorLabels"].as_bool().unwrap_or(false),
        "honor_timestamps": endpoint["honorTimestamps"].as_bool().unwrap_or(true),
        "scrape_interval": scrape_interval,
        "metrics_path": endpoint["path"].as_str().unwrap_or("/metrics"),
        "scheme": endpoint["scheme"].as_str().unwrap_or("http"),
        "static_configs": [{"targets": [address], "labels": Value::Object(sd)}],
        "relabel_configs": relabel,
        "metric_relabel_configs": metric_relabel,
    })
}
