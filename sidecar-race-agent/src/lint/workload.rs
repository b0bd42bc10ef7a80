//! A workload's pod template, analysed with the agent's own role logic
//! (`PodInfo::from_pod`, `pods::sidecars`): lint builds a `Pod` from the
//! template and asks the same questions the agent asks of a running pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use thiserror::Error;

use super::{input::Location, node::Node};
use crate::pods::pod_info::{PodInfo, Workload as WorkloadName};

#[derive(Debug, Error)]
#[error("{location}: {kind} {name}: {message}")]
pub struct TemplateError {
    pub location: String,
    pub kind: String,
    pub name: String,
    pub message: String,
}

/// A namespace's labels and annotations (from a Namespace object in the input, or
/// the live cluster's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceMeta {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// Where the pod template sits in an object of `kind` (`[]`: the object is a Pod).
pub fn template_path(kind: &str) -> Option<&'static [&'static str]> {
    match kind {
        "Pod" => Some(&[]),
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "ReplicationController"
        | "Job" => Some(&["spec", "template"]),
        "CronJob" => Some(&["spec", "jobTemplate", "spec", "template"]),
        _ => None,
    }
}

/// One workload with its analysed pod template.
#[derive(Debug, Clone)]
pub struct Workload {
    /// File position (`None` for objects read from a cluster).
    pub location: Option<Location>,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
    /// The whole object as read.
    pub node: Node,
    pub template_path: &'static [&'static str],
    /// The pod the template would create.
    pub pod: Pod,
    pub info: PodInfo,
    /// The workload's annotations, then its pod template's (the latter win).
    pub annotations: BTreeMap<String, String>,
    /// The pod template's labels (Istio's injection label lives there).
    pub labels: BTreeMap<String, String>,
    /// Its namespace's labels and annotations, when the input or the cluster has
    /// the Namespace (injectors read them).
    pub namespace_meta: Option<NamespaceMeta>,
}

impl Workload {
    /// `Deployment shop/checkout` (no namespace in the manifest: `Deployment checkout`).
    pub fn display_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    pub fn is_job(&self) -> bool {
        matches!(self.kind.as_str(), "Job" | "CronJob")
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }

    /// The typed container `name` of the template (any list).
    pub fn container(&self, name: &str) -> Option<&Container> {
        let spec = self.pod.spec.as_ref()?;
        spec.init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .find(|c| c.name == name)
    }
}

pub fn string_map(node: Option<&Node>) -> BTreeMap<String, String> {
    let Some(Node::Map(entries)) = node else {
        return BTreeMap::new();
    };
    entries
        .iter()
        .filter_map(|(k, v)| {
            let value = match v {
                Node::Str(s) => s.clone(),
                Node::Bool(b) => b.to_string(),
                Node::Int(i) => i.to_string(),
                Node::UInt(u) => u.to_string(),
                _ => return None,
            };
            Some((k.clone(), value))
        })
        .collect()
}

/// The labels and annotations of a `Namespace` object: (its name, them).
pub fn namespace(node: &Node) -> Option<(String, NamespaceMeta)> {
    if node.get("kind").and_then(Node::as_str) != Some("Namespace") {
        return None;
    }
    let name = node.at(&["metadata", "name"]).and_then(Node::as_str)?;
    Some((
        name.to_string(),
        NamespaceMeta {
            labels: string_map(node.at(&["metadata", "labels"])),
            annotations: string_map(node.at(&["metadata", "annotations"])),
        },
    ))
}

/// Gives each workload its namespace's labels and annotations from `namespaces`.
pub fn attach_namespaces(workloads: &mut [Workload], namespaces: &BTreeMap<String, NamespaceMeta>) {
    for w in workloads {
        if let Some(ns) = w.namespace.as_ref().and_then(|n| namespaces.get(n)) {
            w.namespace_meta = Some(ns.clone());
        }
    }
}

/// The workload in `node`, or `None` for kinds without a pod template (Services …).
/// `site_sidecars` are `--sidecar-names`.
pub fn analyse(
    node: Node,
    location: Option<Location>,
    site_sidecars: &[String],
) -> Result<Option<Workload>, TemplateError> {
    let kind = node
        .get("kind")
        .and_then(Node::as_str)
        .unwrap_or_default()
        .to_string();
    let Some(path) = template_path(&kind) else {
        return Ok(None);
    };
    let name = node
        .at(&["metadata", "name"])
        .and_then(Node::as_str)
        .unwrap_or("(unnamed)")
        .to_string();
    let namespace = node
        .at(&["metadata", "namespace"])
        .and_then(Node::as_str)
        .map(str::to_string);
    let fail = |message: String| TemplateError {
        location: location
            .as_ref()
            .map_or_else(|| "cluster".to_string(), |l| l.to_string()),
        kind: kind.clone(),
        name: name.clone(),
        message,
    };
    let template = node
        .at(path)
        .ok_or_else(|| fail(format!("has no pod template at {}", path.join("."))))?;
    let template_meta = template.get("metadata");
    let mut annotations = string_map(node.at(&["metadata", "annotations"]));
    let template_annotations = string_map(template_meta.and_then(|m| m.get("annotations")));
    annotations.extend(template_annotations.clone());
    let labels = string_map(template_meta.and_then(|m| m.get("labels")));
    let pod_json = serde_json::json!({
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "lint",
            "annotations": template_annotations,
            "labels": labels,
        },
        "spec": template.get("spec").map(Node::to_json).unwrap_or_default(),
    });
    let pod: Pod =
        serde_json::from_value(pod_json).map_err(|e| fail(format!("not a pod template: {e}")))?;
    if pod.spec.is_none() {
        return Err(fail("its pod template has no spec".into()));
    }
    let mut info = PodInfo::from_pod(&pod).map_err(|e| fail(e.to_string()))?;
    info.mark_site_sidecars(site_sidecars);
    info.workload = WorkloadName {
        kind: kind.clone(),
        name: name.clone(),
    };
    Ok(Some(Workload {
        location,
        kind,
        name,
        namespace,
        node,
        template_path: path,
        pod,
        info,
        annotations,
        labels,
        namespace_meta: None,
    }))
}
