//! The pipeline's outcomes as structured log lines: one per incident opened and
//! re-phased, and one when its final accounting is due ("incident resolved": metrics
//! and Events count it then too), within the log budget (per pod and for the node).

use std::{collections::HashMap, time::Instant};

use crate::{
    detect::{
        processes::summary,
        render::{IncidentView, role_name},
        timeline_view::short,
    },
    pipeline::outcome::Outcome,
    sinks::log_budget::LogBudget,
};

pub struct IncidentLogs {
    budget: LogBudget,
    /// `namespace/name` of pods with lines suppressed since the last summary.
    names: HashMap<String, String>,
}

impl IncidentLogs {
    pub fn new(now: Instant) -> Self {
        Self {
            budget: LogBudget::new(now),
            names: HashMap::new(),
        }
    }

    pub fn budget(&self) -> &LogBudget {
        &self.budget
    }

    pub fn consume(&mut self, outcomes: &[Outcome], now: Instant) {
        for (v, what) in outcomes.iter().filter_map(Outcome::state_change) {
            if self.budget.allow(&v.pod_uid, now) {
                line(v, what);
            } else if let (Some(ns), Some(pod)) = (&v.namespace, &v.pod) {
                self.names.insert(v.pod_uid.clone(), format!("{ns}/{pod}"));
            }
        }
    }

    /// One line per pod whose incident log lines the budget suppressed, when due.
    pub fn summary(&mut self, now: Instant) {
        for (pod_uid, n) in self.budget.summary(now) {
            let name = self
                .names
                .remove(&pod_uid)
                .unwrap_or_else(|| pod_uid.clone());
            tracing::warn!(
                pod_uid = %pod_uid,
                suppressed = n,
                "{n} incident log lines suppressed for pod {name}"
            );
        }
    }
}

fn line(v: &IncidentView, what: &str) {
    tracing::info!(
        incident = v.id,
        kind = v.kind.as_str(),
        phase = v.phase.as_str(),
        state = v.state.as_str(),
        pod_uid = %v.pod_uid,
        namespace = v.namespace.as_deref().unwrap_or(""),
        pod = v.pod.as_deref().unwrap_or(""),
        container = v.container.as_deref().unwrap_or(""),
        container_id = v.container_id.as_deref().unwrap_or(""),
        container_role = role_name(v.container_role),
        sidecar = v.sidecar.as_deref().unwrap_or(""),
        sidecar_role = role_name(v.sidecar_role),
        pattern = v.pattern.as_str(),
        port = v.port,
        destination = v.destination.as_deref().unwrap_or(""),
        socket = v.socket.as_ref().map_or("", |s| s.path.as_str()),
        refused_count = v.refused_count,
        processes = %summary(&v.processes),
        guarded = v.guarded,
        race_window_seconds = v.race_window_seconds,
        advice = %v.advice,
        timeline = %short(&v.timeline, usize::MAX),
        "{what}"
    );
}
