//! The workload a pod belongs to, as users name it: a Deployment rather than its
//! ReplicaSet, a CronJob rather than its Job, read from owner references and labels
//! alone (no RBAC beyond pods).

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

/// The workload a pod belongs to, as users name it (a Deployment, not its ReplicaSet).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Workload {
    pub kind: String,
    pub name: String,
}

/// The pod template a pod was made from: the hash its controller labels it with
/// (`pod-template-hash` from a Deployment's ReplicaSet, `controller-revision-hash` from
/// a StatefulSet or DaemonSet), and the pod's creation time. `report` dates a
/// workload's last template change from the first pod of its newest template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodTemplate {
    pub hash: String,
    /// `metadata.creationTimestamp` (the API server's clock, the same on every node).
    pub created: Option<jiff::Timestamp>,
}

/// The pod's template, when a controller labelled it with one (Jobs, CronJobs and
/// bare pods have none).
pub(super) fn template(pod: &Pod) -> Option<PodTemplate> {
    let labels = pod.metadata.labels.as_ref()?;
    let hash = labels
        .get("pod-template-hash")
        .or_else(|| labels.get("controller-revision-hash"))
        .filter(|h| !h.is_empty())?;
    Some(PodTemplate {
        hash: hash.clone(),
        created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
    })
}

/// The owner users think in. A ReplicaSet with the pod-template-hash suffix is its
/// Deployment; a Job whose name ends in a CronJob's schedule suffix is that CronJob.
/// Both are derived from names and labels, so the agent needs no RBAC beyond pods.
pub(super) fn workload(pod: &Pod, pod_name: &str) -> Workload {
    let meta = &pod.metadata;
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .or_else(|| meta.owner_references.iter().flatten().next());
    let Some(owner) = owner else {
        return Workload {
            kind: "Pod".into(),
            name: pod_name.into(),
        };
    };
    let hash = meta
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash"));
    match (owner.kind.as_str(), hash) {
        ("ReplicaSet", Some(hash)) => match owner.name.strip_suffix(&format!("-{hash}")) {
            Some(deployment) if !deployment.is_empty() => Workload {
                kind: "Deployment".into(),
                name: deployment.into(),
            },
            _ => Workload {
                kind: "ReplicaSet".into(),
                name: owner.name.clone(),
            },
        },
        ("Job", _) => match cronjob_of(&owner.name) {
            Some(cronjob) => Workload {
                kind: "CronJob".into(),
                name: cronjob.into(),
            },
            None => Workload {
                kind: "Job".into(),
                name: owner.name.clone(),
            },
        },
        (kind, _) => Workload {
            kind: kind.into(),
            name: owner.name.clone(),
        },
    }
}

/// The CronJob controller names Jobs `<cronjob>-<scheduled time in minutes>`.
fn cronjob_of(job: &str) -> Option<&str> {
    let (base, suffix) = job.rsplit_once('-')?;
    (suffix.len() >= 8 && suffix.bytes().all(|b| b.is_ascii_digit()) && !base.is_empty())
        .then_some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cronjob_names() {
        assert_eq!(
            cronjob_of("nightly-report-29071440"),
            Some("nightly-report")
        );
        assert_eq!(cronjob_of("reindex"), None);
        assert_eq!(cronjob_of("batch-42"), None);
    }
}
