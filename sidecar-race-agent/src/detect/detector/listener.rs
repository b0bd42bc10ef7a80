//! A listener coming up resolves the open incidents it covers (as a startup race, a
//! steady outage or a drain, or not at all: a container refused by its own port);
//! one going away is remembered for the refusals that follow.

use std::net::SocketAddr;

use super::{
    change::{Change, NotARace},
    state::Detector,
};
use crate::detect::service::{Protocol, Service};
use crate::{
    detect::{
        fact::Client,
        incident::{DrainSubPhase, Episode, Hidden, Phase, State},
        listeners::covers,
        timeline::{Entry, EntryKind},
    },
    pods::{pod_info::Role, pod_meta::PodMeta},
};

impl Detector {
    pub(super) fn listener_up(
        &mut self,
        ts: u64,
        pod_uid: &str,
        container_id: Option<String>,
        (protocol, addr): (Protocol, SocketAddr),
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let ps = self.pod_state(pod_uid);
        let table = if protocol == Protocol::Udp {
            &mut ps.udp_listeners
        } else {
            &mut ps.listeners
        };
        // Up already, and not gone since: the same listener told twice (a restored
        // agent's look at the kernel's tables, then the record of the listen itself;
        // a UDP socket seen again in the pod's table).
        if table.is_up(addr) {
            return Vec::new();
        }
        if !table.up(addr, container_id.clone(), ts) {
            self.listeners_dropped += 1;
            return Vec::new();
        }
        let service = Service::port(protocol, addr.port());
        let ids: Vec<u64> = self
            .incidents
            .open_in(pod_uid)
            .filter(|((_, s), _)| *s == service)
            .map(|(_, inc)| inc.id)
            .collect();
        let mut changes = Vec::new();
        for id in ids {
            let Some(inc) = self.incidents.get(id) else {
                continue;
            };
            if inc.targets.iter().any(|t| covers(addr, *t))
                && inc.first_refused_at <= ts.saturating_add(self.cfg.late_refusal_ns)
            {
                changes.extend(self.resolve_by_listener(
                    pod_uid,
                    id,
                    ts,
                    container_id.clone(),
                    meta,
                ));
            } else if let Some(inc) = self.incidents.get_mut(id) {
                // Not the address refused (the other family, another address): named
                // in the advice if nothing ever takes it.
                inc.uncovering_listener.get_or_insert(addr);
                if inc.listener_container_id.is_none() {
                    inc.listener_container_id = container_id.clone();
                }
                // A listener in the pod on that port ties the port to the pod.
                if inc.hidden == Some(Hidden::HostNetworkPort) {
                    inc.hidden = None;
                    changes.push(Change::Opened(id));
                }
            }
        }
        changes
    }

    pub(super) fn resolve_by_listener(
        &mut self,
        pod_uid: &str,
        id: u64,
        ts: u64,
        container_id: Option<String>,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let Some(inc) = self.incidents.get(id) else {
            return vec![];
        };
        // A container refused by its own port before it listened (its exec probe), in
        // this instance or, named the same, an earlier one the kubelet replaced. Not once
        // the incident is `unresolved`: that phase is final and already counted.
        if let (Client::Container(client), Some(server)) = (&inc.client, &container_id)
            && same_container(client, server, meta)
            && !inc.is_final()
        {
            return self.discard(pod_uid, id, NotARace::SelfRefusal);
        }
        let startup = inc.episode == Episode::BeforeListener
            && self.is_startup(
                pod_uid,
                &inc.client,
                container_id.as_deref(),
                inc.first_refused_at,
                meta,
            );
        let drain = self.drain_condition(pod_uid, id, meta);
        let replaced = self.may_be_replaced(pod_uid, &inc.client, container_id.as_deref(), meta);
        let defer = replaced && inc.is_shown() && !inc.is_final();
        let Some(inc) = self.incidents.get_mut(id) else {
            return vec![];
        };
        let mut changes = Vec::new();
        if matches!(
            inc.hidden,
            Some(Hidden::HostNetworkPort | Hidden::SocketUnproven | Hidden::UdpPortUnproven)
        ) {
            inc.hidden = None;
            changes.push(Change::Opened(id));
        }
        inc.phase = match inc.episode {
            // A listener after the window does not make it a race.
            _ if inc.phase == Phase::Unresolved => Phase::Unresolved,
            Episode::BeforeListener if startup => Phase::Startup,
            Episode::BeforeListener => Phase::Steady,
            Episode::AfterClose { .. } if drain => Phase::Drain,
            Episode::AfterClose { .. } => Phase::Steady,
        };
        // A drain ended by another instance's listener than the one that went away:
        // the kubelet restarted the sidecar while the pod terminated (KEP-4438). Its
        // refusals are this one drain, not a drain and a restart.
        let closed_by = inc.listener_container_id.as_deref();
        if inc.phase == Phase::Drain
            && closed_by.is_some_and(|closed| container_id.as_deref().is_some_and(|c| c != closed))
        {
            inc.drain_sub_phase = Some(DrainSubPhase::SidecarRestarting);
        }
        inc.listener_ready_at = Some(ts);
        let name = container_id.as_deref().and_then(|c| meta.container_name(c));
        inc.timeline.add(
            Entry::new(EntryKind::Listening, ts).of(container_id.clone(), name.map(Into::into)),
        );
        inc.listener_container_id = container_id.or(inc.listener_container_id.take());
        inc.state = State::Resolved;
        inc.resolved_at = Some(ts);
        let key = (inc.client.clone(), inc.service());
        if defer {
            // Decided once the listener is named (see `Hidden::ListenerUnnamed`).
            inc.hidden = Some(Hidden::ListenerUnnamed);
            self.incidents.start_awaiting(pod_uid, id);
        } else if inc.is_shown() {
            changes.push(Change::Resolved(id));
        }
        self.incidents.resolved_by(pod_uid, id, key);
        changes
    }

    /// Whether listener container `server` may be a new instance of the refusing
    /// `client` container: the instance that refused is gone, it is a sidecar (or not
    /// named: an app is not refused by its own port in a race), and the pod source has
    /// not named the listener yet (it names a new instance some time after it starts).
    fn may_be_replaced(
        &self,
        pod_uid: &str,
        client: &Client,
        server: Option<&str>,
        meta: &dyn PodMeta,
    ) -> bool {
        let (Client::Container(client), Some(server)) = (client, server) else {
            return false;
        };
        let sidecar = || {
            let name = meta.container_name(client)?;
            let role = meta.pod(pod_uid)?.container(name)?.role;
            Some(role != Role::App)
        };
        self.cfg.metadata_wait_ns > 0
            && meta.has_source()
            && meta.container_name(server).is_none()
            && sidecar().unwrap_or(true)
            && self
                .pods
                .get(pod_uid)
                .is_some_and(|p| p.removed_at(client).is_some())
    }

    pub(super) fn listener_down(
        &mut self,
        ts: u64,
        pod_uid: &str,
        container_id: Option<String>,
        addr: SocketAddr,
    ) {
        let ps = self.pod_state(pod_uid);
        ps.listeners.down(addr, container_id, ts);
    }
}

/// Whether two container ids are the same container of the pod: the same instance, or
/// instances the pod source names the same (a container the kubelet restarted).
pub(super) fn same_container(a: &str, b: &str, meta: &dyn PodMeta) -> bool {
    a == b
        || meta
            .container_name(a)
            .is_some_and(|n| meta.container_name(b) == Some(n))
}
