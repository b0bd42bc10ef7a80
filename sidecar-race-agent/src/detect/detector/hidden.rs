//! Incidents hidden until the pod source tells more: shown once it does (or its wait
//! is over), merged into an earlier instance's incident, or found to be no race.

use super::{
    change::{Change, NotARace},
    listener::same_container,
    state::Detector,
};
use crate::{
    detect::{
        incident::{Hidden, State},
        listeners::canonical,
        service::Protocol,
    },
    pods::{pod_info::PodInfo, pod_meta::PodMeta},
};

/// Whether `pod` (when known) owns UDP `port`: a container declares it, or a known
/// sidecar of the pod serves it.
pub(super) fn pod_owns_udp(pod: Option<&PodInfo>, port: u16) -> bool {
    pod.is_some_and(|p| p.owns_udp(port))
}

/// Targets kept per incident (both loopback families and a pod IP, say).
pub(super) const TARGETS_PER_INCIDENT: usize = 4;

impl Detector {
    /// What the pod source now says about incident `id`, hidden while awaiting it
    /// (`last`: the pod is gone, decide with what is known). Nothing while it waits.
    pub(super) fn reveal(
        &mut self,
        now: u64,
        uid: &str,
        id: u64,
        meta: &dyn PodMeta,
        last: bool,
    ) -> Vec<Change> {
        let Some(inc) = self.incidents.get(id) else {
            return vec![];
        };
        let Some(hidden) = inc.hidden.filter(|h| h.awaits_metadata()) else {
            return vec![];
        };
        let timed_out =
            last || now.saturating_sub(inc.first_refused_at) >= self.cfg.metadata_wait_ns;
        let (port, open) = (inc.port, inc.state == State::Open);
        let key = (inc.client.clone(), inc.service());
        let service = key.1.clone();
        // A UDP port no container of the pod owns stays unproven (the noise rule).
        let udp_unowned = inc.protocol == Protocol::Udp
            && !pod_owns_udp(meta.pod(uid), port)
            && inc.listener_ready_at.is_none();
        let pod = meta.pod(uid);
        match hidden {
            Hidden::PodIpUnknown => {
                let target = canonical(inc.targets[0].ip());
                let own = match pod.filter(|p| !p.pod_ips.is_empty()) {
                    Some(p) => p.pod_ips.iter().any(|ip| canonical(*ip) == target),
                    None if timed_out => false,
                    None => return vec![],
                };
                if !own {
                    return self.discard(uid, id, NotARace::Other);
                }
                match open
                    .then(|| self.incidents.confirm_pod_local(uid, id, key))
                    .flatten()
                {
                    Some(into) => self.merge(uid, id, into),
                    None => self.show(uid, id),
                }
            }
            // On a hostNetwork pod loopback is the node's, unless the pod serves the port.
            Hidden::PodUnknown => match pod {
                Some(p)
                    if p.host_network
                        && inc.local_destination.is_none()
                        && p.declaring(port).is_none()
                        && !self.listened_on(uid, port) =>
                {
                    self.incidents.stop_awaiting(uid, id);
                    if let Some(inc) = self.incidents.get_mut(id) {
                        inc.hidden = Some(Hidden::HostNetworkPort);
                    }
                    vec![]
                }
                Some(_) | None if udp_unowned && (pod.is_some() || timed_out) => {
                    self.incidents.stop_awaiting(uid, id);
                    if let Some(inc) = self.incidents.get_mut(id) {
                        inc.hidden = Some(Hidden::UdpPortUnproven);
                    }
                    vec![]
                }
                Some(_) => self.show(uid, id),
                None if timed_out => self.show(uid, id),
                None => vec![],
            },
            Hidden::ClientUnnamed => {
                let client_id = inc.client_container_id().unwrap_or_default().to_string();
                let Some(name) = meta.container_name(&client_id) else {
                    return if timed_out {
                        self.show(uid, id)
                    } else {
                        vec![]
                    };
                };
                let earlier = self
                    .earlier_instances(uid, &service, &client_id)
                    .into_iter()
                    .find(|(old, _)| meta.container_name(old) == Some(name))
                    .map(|(_, inc)| inc.id);
                match earlier {
                    Some(into) => self.merge(uid, id, into),
                    None => self.show(uid, id),
                }
            }
            Hidden::ListenerUnnamed => {
                let timed_out = last
                    || now.saturating_sub(inc.resolved_at.unwrap_or(now))
                        >= self.cfg.metadata_wait_ns;
                let client = inc.client_container_id().map(str::to_string);
                let Some(server) = inc.listener_container_id.clone() else {
                    return self.unhide_resolved(uid, id);
                };
                match (meta.container_name(&server), client) {
                    (Some(_), Some(c)) if same_container(&c, &server, meta) => {
                        self.discard(uid, id, NotARace::SelfRefusal)
                    }
                    (None, _) if !timed_out => vec![],
                    _ => self.unhide_resolved(uid, id),
                }
            }
            Hidden::HostNetworkPort
            | Hidden::SocketUnproven
            | Hidden::UdpPortUnproven
            | Hidden::Discarded
            | Hidden::Merged => vec![],
        }
    }

    /// Hidden incident `id` is shown: opened now, and resolved if it already was.
    fn show(&mut self, uid: &str, id: u64) -> Vec<Change> {
        self.incidents.stop_awaiting(uid, id);
        let Some(inc) = self.incidents.get_mut(id) else {
            return vec![];
        };
        inc.hidden = None;
        let mut changes = vec![Change::Opened(id)];
        if inc.state == State::Resolved {
            changes.push(Change::Resolved(id));
        }
        changes
    }

    /// Incident `id`, shown before and hidden while its listener was unnamed, is shown
    /// again as resolved (its opening was reported already).
    fn unhide_resolved(&mut self, uid: &str, id: u64) -> Vec<Change> {
        self.incidents.stop_awaiting(uid, id);
        let Some(inc) = self.incidents.get_mut(id) else {
            return vec![];
        };
        inc.hidden = None;
        vec![Change::Resolved(id)]
    }

    /// Hidden incident `from` joins incident `into` (the same container's earlier
    /// instance, or the same client's open incident): its refusals count there, and
    /// when it was open, `into` continues under its client.
    pub(super) fn merge(&mut self, uid: &str, from: u64, into: u64) -> Vec<Change> {
        self.incidents.stop_awaiting(uid, from);
        let Some(src) = self.incidents.get(from).cloned() else {
            return vec![];
        };
        if src.state == State::Open {
            self.incidents
                .reopen_under(uid, into, (src.client.clone(), src.service()));
        }
        self.incidents.close(uid, from);
        if let Some(f) = self.incidents.get_mut(from) {
            f.hidden = Some(Hidden::Merged);
            f.state = State::Resolved;
        }
        let Some(inc) = self.incidents.get_mut(into) else {
            return vec![];
        };
        if src.state == State::Open {
            inc.client = src.client;
        }
        inc.refused_count += src.refused_count;
        inc.timeline.absorb(&src.timeline);
        inc.client_instances += src.client_instances;
        inc.first_refused_at = inc.first_refused_at.min(src.first_refused_at);
        inc.last_refused_at = inc.last_refused_at.max(src.last_refused_at);
        for t in src.targets {
            if inc.targets.len() < TARGETS_PER_INCIDENT && !inc.targets.contains(&t) {
                inc.targets.push(t);
            }
        }
        if inc.is_shown() {
            vec![Change::Refused(into)]
        } else {
            vec![]
        }
    }
}
