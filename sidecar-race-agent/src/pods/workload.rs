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
