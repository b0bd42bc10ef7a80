//! Which pod, container and workload a fact belongs to, and the pod (and container)
//! a cgroup belongs to.

use std::sync::Arc;

use serde::Serialize;

use super::cgroup_path::PathInfo;
use crate::pods::{container_id::Runtime, pod_info::Workload};

/// Which pod, container and workload a fact belongs to: a kernel event, a pod start,
/// refusals the kernel counted instead of sending. Unknown values are `None` (`null`
/// in JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Attribution {
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
    /// Not in JSON: trace records name pods and containers only, as they always did.
    #[serde(skip)]
    pub workload: Option<Workload>,
    #[serde(skip)]
    pub runtime: Option<Runtime>,
}

impl Attribution {
    /// A pod container whose name the pod source has not reported (yet).
    pub fn lacks_container_name(&self) -> bool {
        self.container_id.is_some() && self.pod_uid.is_some() && self.container.is_none()
    }
}

/// The pod (and container) a cgroup belongs to, with ids shared by every event of
/// that cgroup: cloning them is a count, not a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodOwner {
    pub pod_uid: Arc<str>,
    pub container_id: Option<Arc<str>>,
}

impl PodOwner {
    /// The pod a parsed cgroup path belongs to and, for a container's cgroup, the
    /// container; `None` for a cgroup of no pod.
    pub fn of(info: &PathInfo) -> Option<PodOwner> {
        match info {
            PathInfo::PodContainer {
                pod_uid,
                container_id,
                ..
            } => Some(PodOwner {
                pod_uid: pod_uid.as_str().into(),
                container_id: Some(container_id.as_str().into()),
            }),
            PathInfo::Pod { pod_uid } => Some(PodOwner {
                pod_uid: pod_uid.as_str().into(),
                container_id: None,
            }),
            _ => None,
        }
    }
}
