//! An incident's state change as an OTLP log record (`--otlp-logs`): the same changes
//! the agent's log lines tell (opened, in another phase, resolved), named by the
//! OpenTelemetry semantic conventions where they have a name (`k8s.namespace.name`,
//! `k8s.pod.name`, `k8s.pod.uid`, `k8s.container.name`, `container.id`, the workload
//! as `k8s.<kind>.name`), the incident's own fields as `sidecar_race.*`, a severity by
//! phase, and the incident in a sentence as the body.

use opentelemetry_proto::tonic::{
    common::v1::{AnyValue, KeyValue, any_value},
    logs::v1::{LogRecord, SeverityNumber},
};

use super::{
    attributes::{boolean, double, int, string},
    semconv::workload,
};
use crate::detect::{
    Kind, Phase,
    processes::summary,
    render::{IncidentView, role_name},
    timeline_view::short,
};

/// The record of `view`'s change `what` ("incident opened", ...), observed at `now`.
pub fn record(view: &IncidentView, what: &str, now_unix_nano: u64) -> LogRecord {
    let (severity, text) = severity(view.kind, view.phase);
    LogRecord {
        time_unix_nano: now_unix_nano,
        observed_time_unix_nano: now_unix_nano,
        severity_number: severity as i32,
        severity_text: text.to_string(),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(body(view, what))),
        }),
        attributes: attributes(view, what),
        event_name: "sidecar_race.incident".to_string(),
        ..Default::default()
    }
}

/// A race the user can fix is a warning; one that says the sidecar never listened, or
/// a Job kept running, is an error; a restart in the middle of a pod's life is
/// information.
fn severity(kind: Kind, phase: Phase) -> (SeverityNumber, &'static str) {
    match (kind, phase) {
        (Kind::StuckJob, _) | (_, Phase::Unresolved) => (SeverityNumber::Error, "ERROR"),
        (_, Phase::Steady) => (SeverityNumber::Info, "INFO"),
        _ => (SeverityNumber::Warn, "WARN"),
    }
}

/// `startup race opened: app refused 40 times by proxy on 127.0.0.1:15001 (window
/// 1.52 s). <advice> Timeline: app started +0.00s, first refusal +0.12s, …`
fn body(view: &IncidentView, what: &str) -> String {
    let target = match (&view.destination, &view.socket) {
        (Some(d), _) => format!(" on {d}"),
        (None, Some(s)) => format!(" on {}", s.path),
        (None, None) => String::new(),
    };
    let window = view
        .race_window_seconds
        .map(|w| format!(" (window {w:.2} s)"))
        .unwrap_or_default();
    // The timeline is at most 33 entries: no cut needed for a record's body.
    let timeline = match short(&view.timeline, usize::MAX) {
        t if t.is_empty() => t,
        t => format!(" Timeline: {t}"),
    };
    format!(
        "{} {}: {} refused {} times by {}{target}{window}. {}{timeline}",
        view.phase.as_str(),
        what,
        view.container.as_deref().unwrap_or("a container"),
        view.refused_count,
        view.sidecar.as_deref().unwrap_or("no sidecar seen"),
        view.advice
    )
}

/// `container.id` is the runtime's id, without the CRI's `<runtime>://` scheme.
fn bare_container_id(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, id)| id)
}

fn attributes(view: &IncidentView, what: &str) -> Vec<KeyValue> {
    let mut out = vec![
        string("k8s.pod.uid", &view.pod_uid),
        string("sidecar_race.change", what),
        int("sidecar_race.incident.id", view.id as i64),
        string("sidecar_race.kind", view.kind.as_str()),
        string("sidecar_race.phase", view.phase.as_str()),
        string("sidecar_race.state", view.state.as_str()),
        string("sidecar_race.pattern", view.pattern.as_str()),
        int("sidecar_race.refused_count", view.refused_count as i64),
        int(
            "sidecar_race.refusals_suppressed",
            view.refusals_suppressed as i64,
        ),
        boolean("sidecar_race.guarded", view.guarded),
        string("sidecar_race.processes", &summary(&view.processes)),
        string("sidecar_race.advice", &view.advice),
    ];
    let mut text = |key: &str, value: &Option<String>| {
        if let Some(v) = value {
            out.push(string(key, v));
        }
    };
    text("k8s.namespace.name", &view.namespace);
    text("k8s.pod.name", &view.pod);
    text("k8s.container.name", &view.container);
    text("sidecar_race.sidecar", &view.sidecar);
    text("sidecar_race.destination", &view.destination);
    text("sidecar_race.local_destination", &view.local_destination);
    text("sidecar_race.first_refused_at", &view.first_refused_at);
    text("sidecar_race.last_refused_at", &view.last_refused_at);
    text("sidecar_race.listener_ready_at", &view.listener_ready_at);
    text("sidecar_race.listener_closed_at", &view.listener_closed_at);
    if let Some(id) = &view.container_id {
        out.push(string("container.id", bare_container_id(id)));
    }
    if let Some(w) = &view.workload {
        for (key, value) in workload(&w.kind, &w.name) {
            out.push(string(&key, value));
        }
    }
    if view.container_role.is_some() {
        out.push(string(
            "sidecar_race.container_role",
            role_name(view.container_role),
        ));
    }
    if view.sidecar_role.is_some() {
        out.push(string(
            "sidecar_race.sidecar_role",
            role_name(view.sidecar_role),
        ));
    }
    if let Some(port) = view.port {
        out.push(int("sidecar_race.port", i64::from(port)));
    }
    if let Some(socket) = &view.socket {
        out.push(string("sidecar_race.socket", &socket.path));
    }
    if let Some(w) = view.race_window_seconds {
        out.push(double("sidecar_race.race_window_seconds", w));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn races_warn_a_sidecar_that_never_came_or_a_stuck_job_is_an_error_a_restart_informs() {
        assert_eq!(severity(Kind::SidecarRace, Phase::Startup).1, "WARN");
        assert_eq!(severity(Kind::SidecarRace, Phase::Drain).1, "WARN");
        assert_eq!(severity(Kind::SidecarRace, Phase::Steady).1, "INFO");
        assert_eq!(severity(Kind::SidecarRace, Phase::Unresolved).1, "ERROR");
        assert_eq!(severity(Kind::StuckJob, Phase::Startup).1, "ERROR");
    }

    #[test]
    fn the_body_ends_with_the_timeline_in_short_form() {
        use crate::detect::{
            Client, NoMeta,
            incident::{Episode, Incident},
            render::view,
            timeline::{Entry, EntryKind},
        };
        let mut inc = Incident::opened(
            "uid".into(),
            Client::Container("aaaa".into()),
            (Phase::Startup, Episode::BeforeListener),
            (1_000_000_000, "app"),
            None,
        );
        inc.timeline.refused(1_500_000_000, 4, Some("aaaa"));
        inc.timeline
            .add(Entry::new(EntryKind::Listening, 2_000_000_000));
        let v = view(&inc, &NoMeta, &|ns| ns.to_string());
        let b = body(&v, "incident opened");
        assert!(
            b.ends_with(
                " Timeline: first refusal +0.00s, last refusal (4 since the previous) +0.50s, listener up +1.00s"
            ),
            "{b}"
        );
    }

    #[test]
    fn container_ids_lose_their_runtime_scheme() {
        assert_eq!(bare_container_id("containerd://abc"), "abc");
        assert_eq!(bare_container_id("cri-o://abc"), "abc");
        assert_eq!(bare_container_id("abc"), "abc");
    }
}
