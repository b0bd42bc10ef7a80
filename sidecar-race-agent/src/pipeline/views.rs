//! Incidents as the API shows them: the filtered, newest-first list and each view,
//! with the wall-clock times and the kernel's suppressed counts filled in. Free
//! functions of what they read, so the API, accounting and the sinks' outcomes build
//! a view the one same way.

use super::suppressed::Suppressed;
use crate::{
    clock,
    detect::{
        Incident,
        incident_log::IncidentLog,
        render::{Filter, IncidentView, view},
    },
    inventory::store::PodStore,
};

/// Incidents of `log` as the API shows them, newest first, at most `limit`, and
/// whether more matched. Phase, state and namespace are checked before a view is built
/// (views are what costs), the kind (it depends on the containers' roles) after.
pub(super) fn incidents(
    log: &IncidentLog,
    pods: &PodStore,
    suppressed: &Suppressed,
    filter: &Filter,
    limit: usize,
) -> (Vec<IncidentView>, bool) {
    // Filtered before any view is built: only the answer's incidents are rendered.
    let mut matching = log
        .newest_first()
        .filter(|i| i.is_shown() && filter.matches(i, pods));
    let list: Vec<IncidentView> = matching
        .by_ref()
        .take(limit)
        .map(|i| incident_view(i, pods, suppressed))
        .collect();
    let more = matching.next().is_some();
    (list, more)
}

/// The view of `incident`, named from `pods`, with the refusals of its client the
/// kernel counted instead of sending.
pub(super) fn incident_view(
    incident: &Incident,
    pods: &PodStore,
    suppressed: &Suppressed,
) -> IncidentView {
    #[cfg(test)]
    VIEWS_RENDERED.with(|n| n.set(n.get() + 1));
    // One offset for all the incident's times: its timeline's entries at one kernel
    // time read as one wall time, in order, and equal to the incident's own fields.
    let offset = clock::boot_offset_ns();
    let wall = |boot_ns: u64| clock::rfc3339_nanos(offset + boot_ns as i128);
    let mut v = view(incident, pods, &wall);
    v.refusals_suppressed = suppressed.of_client(&incident.pod_uid, &incident.client);
    v
}

/// Kernel boot-clock ns → RFC 3339 wall-clock time.
pub fn wall(boot_ns: u64) -> String {
    clock::rfc3339_nanos(clock::boot_to_unix_ns(boot_ns))
}

#[cfg(test)]
thread_local! {
    static VIEWS_RENDERED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Incident views this thread has rendered (tests: what a filter spares).
#[cfg(test)]
pub fn views_rendered() -> u64 {
    VIEWS_RENDERED.with(std::cell::Cell::get)
}
