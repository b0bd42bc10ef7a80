//! SR010: the target cluster's version and native sidecars.

use super::evidence::names;
use crate::{
    lint::{
        finding::{Finding, Rule, Severity},
        options::KubeVersion,
        workload::Workload,
    },
    pods::pod_info::Role,
};

pub(super) fn cluster_version(
    w: &Workload,
    v: KubeVersion,
    needs_fix: bool,
    out: &mut Vec<Finding>,
) {
    let natives: Vec<String> = w
        .info
        .containers
        .iter()
        .filter(|c| c.role == Role::NativeSidecar)
        .map(|c| c.name.clone())
        .collect();
    let old = v < KubeVersion {
        major: 1,
        minor: 29,
    };
    let beta = !old
        && v < KubeVersion {
            major: 1,
            minor: 33,
        };
    let finding = if old && !natives.is_empty() {
        Finding::new(w, Rule::ClusterTooOld, Severity::Error, natives.clone()).says(
            format!(
                "Kubernetes {v} does not run native sidecars by default (1.28 only behind the SidecarContainers feature gate, earlier versions reject restartPolicy on init containers): {} would not start first",
                names(&natives)
            ),
            "Upgrade the cluster to 1.29 or later (native sidecars are GA in 1.33) before deploying this".into(),
        )
    } else if old && needs_fix {
        Finding::new(w, Rule::ClusterTooOld, Severity::Warning, Vec::new()).says(
            format!("the fix for this workload needs native sidecars, which Kubernetes {v} does not run by default"),
            "Upgrade the cluster to 1.29 or later (native sidecars are GA in 1.33); until then the sidecar ordering cannot be fixed in the pod spec".into(),
        )
    } else if beta && !natives.is_empty() {
        Finding::new(w, Rule::ClusterTooOld, Severity::Info, natives.clone()).says(
            format!("native sidecars are beta in Kubernetes {v}: on by default, GA from 1.33"),
            "Check that the SidecarContainers feature gate is not turned off on this cluster"
                .into(),
        )
    } else {
        return;
    };
    out.push(finding);
}
