//! Incidents as users see them (`/api/v1/incidents`, logs): names resolved from the
//! pod metadata at the time of asking, so names that arrived late are shown.

use serde::Serialize;

use super::{
    advice::{Subject, advice},
    detector::PodMeta,
    incident::{Incident, Phase, State},
};
use crate::inventory::pod_info::{Pattern, Workload};

/// One incident in the public JSON shape (field names are a stable interface).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IncidentView {
    pub id: u64,
    pub phase: Phase,
    pub state: State,
    pub pod_uid: String,
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub workload: Option<Workload>,
    pub container: Option<String>,
    pub container_id: Option<String>,
    pub sidecar: Option<String>,
    pub sidecar_container_id: Option<String>,
    pub pattern: Pattern,
    pub port: u16,
    pub destination: String,
    pub local_destination: Option<String>,
    pub refused_count: u64,
    pub first_refused_at: String,
    pub last_refused_at: String,
    pub listener_ready_at: Option<String>,
    pub listener_closed_at: Option<String>,
    pub race_window_seconds: Option<f64>,
    pub advice: String,
}

/// Renders `inc`; `wall` turns kernel boot-clock ns into RFC 3339.
pub fn view(inc: &Incident, meta: &dyn PodMeta, wall: &dyn Fn(u64) -> String) -> IncidentView {
    let pod = meta.pod(&inc.pod_uid);
    let container_id = inc.client_container_id().map(str::to_string);
    let container = container_id
        .as_deref()
        .and_then(|id| meta.container_name(id))
        .map(str::to_string);
    // The sidecar: the container declaring the port, else the one seen listening.
    let declared = pod
        .and_then(|p| p.declaring(inc.port))
        .map(|c| c.name.clone());
    let by_listener = inc
        .listener_container_id
        .as_deref()
        .and_then(|id| meta.container_name(id))
        .map(str::to_string);
    let sidecar = declared.or(by_listener);
    let sidecar_container_id = inc.listener_container_id.clone().or_else(|| {
        let (pod, name) = (pod?, sidecar.as_deref()?);
        pod.statuses
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.container_id.clone())
    });
    let pattern = match (pod, sidecar.as_deref()) {
        (Some(p), Some(name)) => p.pattern(name),
        _ => Pattern::Unknown,
    };
    let startup_probe = pod
        .zip(sidecar.as_deref())
        .and_then(|(p, name)| p.container(name))
        .and_then(|c| c.startup_probe.as_ref());
    let advice = advice(&Subject {
        phase: inc.phase,
        pattern,
        container: container.as_deref(),
        sidecar: sidecar.as_deref(),
        port: inc.port,
        startup_probe,
    });
    IncidentView {
        id: inc.id,
        phase: inc.phase,
        state: inc.state,
        pod_uid: inc.pod_uid.clone(),
        namespace: pod.map(|p| p.namespace.clone()),
        pod: pod.map(|p| p.name.clone()),
        workload: pod.map(|p| p.workload.clone()),
        container,
        container_id,
        sidecar,
        sidecar_container_id,
        pattern,
        port: inc.port,
        destination: inc.destination.to_string(),
        local_destination: inc.local_destination.map(|d| d.to_string()),
        refused_count: inc.refused_count,
        first_refused_at: wall(inc.first_refused_at),
        last_refused_at: wall(inc.last_refused_at),
        listener_ready_at: inc.listener_ready_at.map(wall),
        listener_closed_at: inc.listener_closed_at.map(wall),
        race_window_seconds: inc.race_window_ns().map(|ns| ns as f64 / 1e9),
        advice,
    }
}

/// `?phase=&namespace=&state=` of `/api/v1/incidents`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Filter {
    pub phase: Option<String>,
    pub namespace: Option<String>,
    pub state: Option<String>,
}

impl Filter {
    pub fn matches(&self, v: &IncidentView) -> bool {
        self.phase.as_deref().is_none_or(|p| p == v.phase.as_str())
            && self.state.as_deref().is_none_or(|s| s == v.state.as_str())
            && self
                .namespace
                .as_deref()
                .is_none_or(|n| v.namespace.as_deref() == Some(n))
    }
}
