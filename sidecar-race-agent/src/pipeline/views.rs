//! Incidents as the API shows them: the filtered, newest-first list and each view,
//! with the wall-clock times and the kernel's suppressed counts filled in.

use super::state::Pipeline;
use crate::{
    clock,
    detect::{
        Incident,
        render::{Filter, IncidentView, view},
    },
};

impl Pipeline {
    /// Incidents as the API shows them, newest first, at most `limit`, and whether
    /// more matched. Phase, state and namespace are checked before a view is built
    /// (views are what costs), the kind (it depends on the containers' roles) after.
    pub fn incidents(&self, filter: &Filter, limit: usize) -> (Vec<IncidentView>, bool) {
        let pods = &self.inventory.pods;
        // Filtered before any view is built: only the answer's incidents are rendered.
        let mut matching = self
            .detector
            .incidents()
            .newest_first()
            .filter(|i| i.is_shown() && filter.matches(i, pods));
        let list: Vec<IncidentView> = matching
            .by_ref()
            .take(limit)
            .map(|i| self.view(i))
            .collect();
        let more = matching.next().is_some();
        (list, more)
    }

    pub fn view(&self, incident: &Incident) -> IncidentView {
        #[cfg(test)]
        VIEWS_RENDERED.with(|n| n.set(n.get() + 1));
        let mut v = view(incident, &self.inventory.pods, &wall);
        v.refusals_suppressed = self
            .suppressed
            .of_client(&incident.pod_uid, &incident.client);
        v
    }
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
