//! What the detector writes into its incidents' timelines from the facts it sees and
//! the pod source: a new incident takes what its pod showed before its first refusal
//! (container starts, the listener's close, the deletion, recent probe results), an
//! open one each start, probe result and deletion that follows. Refusals and the
//! listen are written where they are counted (`refusal`, `listener`).

use super::state::Detector;
use crate::{
    detect::{
        incident::{Episode, Subject},
        timeline::{Entry, EntryKind, StartSource},
    },
    pods::pod_meta::PodMeta,
};

/// Probe results remembered per pod, newest last, for the incidents opened after them.
pub(super) const PROBE_CHANGES_PER_POD: usize = 8;

impl Detector {
    /// Incident `id` was just opened: what its pod showed before.
    pub(super) fn seed_timeline(&mut self, id: u64, meta: &dyn PodMeta) {
        let Some(inc) = self.incidents.get_mut(id) else {
            return;
        };
        let ps = self.pods.get(inc.pod_uid.as_str());
        let tl = &mut inc.timeline;
        for (cid, at) in ps.into_iter().flat_map(|p| &p.containers_started) {
            tl.started(*at, cid, meta.container_name(cid), StartSource::Kernel);
        }
        // A close inferred from the refusal itself (no hook sees a UDP socket close)
        // is no event of its own.
        if let Episode::AfterClose { closed_at } = inc.episode
            && closed_at < inc.first_refused_at
        {
            let cid = inc.listener_container_id.clone();
            let name = cid.as_deref().and_then(|c| meta.container_name(c));
            tl.add(Entry::new(EntryKind::ListenerClosed, closed_at).of(cid, name.map(Into::into)));
        }
        for e in ps.into_iter().flat_map(|p| &p.probe_changes) {
            tl.add(e.clone());
        }
        self.follow_pod_source(id, meta);
    }

    /// What the pod source shows now for incident `id`: containers it says started
    /// (that the kernel did not show), the deletion, names of the containers its
    /// entries hold by id.
    pub(super) fn follow_pod_source(&mut self, id: u64, meta: &dyn PodMeta) {
        // A stuck Job's finding is no refusal's: nothing to tell around it.
        let Some(inc) = self
            .incidents
            .get(id)
            .filter(|i| i.subject == Subject::Refusals)
        else {
            return;
        };
        let uid = inc.pod_uid.clone();
        let deletion = self.deletion_began(&uid, meta).filter(|at| *at > 0);
        let pod = meta.pod(&uid);
        let Some(inc) = self.incidents.get_mut(id) else {
            return;
        };
        let tl = &mut inc.timeline;
        // Once the bound drops entries, a start it dropped would come back each tick:
        // past it only the kernel's starts (each told once) are written.
        let statuses = pod.filter(|_| !tl.is_full()).into_iter();
        for s in statuses.flat_map(|p| &p.statuses) {
            if let Some(at) = s.started_at.and_then(|t| meta.boot_ns(t)) {
                tl.started(at, &s.container_id, Some(&s.name), StartSource::Pod);
            }
        }
        if let Some(at) = deletion {
            let mut e = Entry::new(EntryKind::PodDeleted, at);
            // Only a deletion the pod shows has a grace period; one seen as the pod
            // leaving the source has none.
            e.grace_seconds = pod
                .filter(|p| p.deletion_timestamp.is_some())
                .and_then(|p| p.deletion_grace_period_seconds);
            tl.deleted(e);
        }
        let unnamed: Vec<String> = tl.unnamed().map(str::to_string).collect();
        for cid in unnamed {
            if let Some(name) = meta.container_name(&cid) {
                tl.name(&cid, name);
            }
        }
    }

    /// Container `cid` of the pod started at `at` (its cgroup made): in the timeline
    /// of each of the pod's open incidents.
    pub(super) fn container_started_in_timelines(
        &mut self,
        pod_uid: &str,
        cid: &str,
        at: u64,
        meta: &dyn PodMeta,
    ) {
        let name = meta.container_name(cid);
        for id in self.incidents.open_ids_in(pod_uid) {
            if let Some(inc) = self.incidents.get_mut(id) {
                inc.timeline.started(at, cid, name, StartSource::Kernel);
            }
        }
    }

    /// The pod's containers' `started` and `ready` as the pod source shows them now,
    /// against what it showed before: each change is an entry at `now` (the pod source
    /// tells no time for them) in the pod's open incidents, and remembered for the
    /// ones opened next. A container seen for the first time sets what is compared.
    pub(super) fn probe_results(&mut self, uid: &str, now: u64, meta: &dyn PodMeta) {
        let Some(pod) = meta.pod(uid) else {
            return;
        };
        let Some(ps) = self.pods.get_mut(uid) else {
            return;
        };
        let mut changed = Vec::new();
        for s in &pod.statuses {
            let seen = (s.started, s.ready);
            let before = ps.probes.insert(s.name.clone(), seen);
            let Some((started, ready)) = before else {
                continue;
            };
            let of = |kind, value| {
                let mut e =
                    Entry::new(kind, now).of(Some(s.container_id.clone()), Some(s.name.clone()));
                e.value = Some(value);
                e
            };
            if let Some(now_started) = s.started
                && started != Some(now_started)
            {
                changed.push(of(EntryKind::Started, now_started));
            }
            if ready != s.ready {
                changed.push(of(EntryKind::Ready, s.ready));
            }
        }
        // Containers no longer reported are forgotten (the map stays the pod's size).
        ps.probes
            .retain(|name, _| pod.statuses.iter().any(|s| &s.name == name));
        if changed.is_empty() {
            return;
        }
        for e in &changed {
            ps.probe_changes.push_back(e.clone());
            if ps.probe_changes.len() > PROBE_CHANGES_PER_POD {
                ps.probe_changes.pop_front();
            }
        }
        for id in self.incidents.open_ids_in(uid) {
            if let Some(inc) = self.incidents.get_mut(id) {
                for e in &changed {
                    inc.timeline.add(e.clone());
                }
            }
        }
    }
}
