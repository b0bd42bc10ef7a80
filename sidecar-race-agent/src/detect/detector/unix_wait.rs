//! The way in for Unix-socket facts: held while their pod's metadata is awaited
//! (see `held`), then decided in their order.

use std::sync::Arc;

use super::{
    change::Change,
    held::{HeldFact, named},
    state::Detector,
};
use crate::{detect::fact::Fact, names::UnixName, pods::pod_meta::PodMeta};

impl Detector {
    /// A Unix refusal, bind or close: decided now, or held behind the pod's earlier
    /// held facts or until its pod and container are named.
    pub(super) fn unix_fact(&mut self, fact: Fact, meta: &dyn PodMeta) -> Vec<Change> {
        let ts = fact.ts();
        let Ok((pod_uid, held)) = HeldFact::of(fact) else {
            return Vec::new();
        };
        let mut changes = self.release_held(&pod_uid, ts, meta, false);
        let may_wait = self.cfg.metadata_wait_ns > 0 && meta.has_source();
        let waiting = self.pods.get(&*pod_uid).is_some_and(|p| !p.held.is_empty());
        if may_wait && (waiting || !named(meta, &pod_uid, held.container_id())) {
            if !self.pod_state(&pod_uid).held.push(held) {
                self.held_dropped += 1;
            }
            return changes;
        }
        changes.extend(self.rekey_sockets(&pod_uid, meta));
        changes.extend(self.decide_unix(pod_uid, held, meta));
        changes
    }

    /// The pod's held facts decided, in order, when they may be: all named, waited
    /// long enough by `now`, or `force` (the pod is gone: decide with what is known).
    pub(super) fn release_held(
        &mut self,
        pod_uid: &str,
        now: u64,
        meta: &dyn PodMeta,
        force: bool,
    ) -> Vec<Change> {
        let wait = self.cfg.metadata_wait_ns;
        let Some(uid) = self.pods.get_key_value(pod_uid).map(|(uid, _)| uid.clone()) else {
            return Vec::new();
        };
        let ps = self.pod_state(&uid);
        let Some(due) = ps.held.take_if_due(meta, pod_uid, (now, wait), force) else {
            return Vec::new();
        };
        due.into_iter()
            .flat_map(|held| self.decide_unix(uid.clone(), held, meta))
            .collect()
    }

    fn decide_unix(
        &mut self,
        pod_uid: Arc<str>,
        held: HeldFact,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let on_path = match &held {
            HeldFact::Refused { name, .. } | HeldFact::Listener { name, .. } => {
                matches!(name, UnixName::Path(_))
            }
        };
        if on_path && !named(meta, &pod_uid, held.container_id()) {
            self.pod_state(&pod_uid).unkeyed = true;
        }
        match held {
            HeldFact::Refused {
                burst,
                client,
                name,
                process,
                datagram,
            } => self.unix_refused(burst, pod_uid, (client, datagram), &name, process, meta),
            HeldFact::Listener {
                ts,
                container_id,
                name,
                up: true,
                datagram,
            } => self.unix_listener_up(ts, &pod_uid, (container_id, datagram), &name, meta),
            HeldFact::Listener {
                ts,
                container_id,
                name,
                up: false,
                ..
            } => {
                self.unix_listener_down(ts, &pod_uid, container_id, &name, meta);
                Vec::new()
            }
        }
    }
}
