//! Unix sockets: a refused connect or send opens (or counts into) the client's
//! incident on that socket, a listener coming up resolves it. A socket is named so
//! that both containers' views meet (see `detect::service`), and a refusal proves
//! the socket's listener gone even when its close was not seen (a path unlinked
//! while the socket still listens; the syscall fallback, which sees no closes).

use std::sync::Arc;

use super::{
    change::{Change, NotARace},
    last_socket::ResolvedSocket,
    refusal::{count_refusal, not_a_race},
    state::Detector,
};
use crate::detect::service::Service;
use crate::{
    detect::{
        fact::Client,
        incident::{Episode, Hidden, Incident, Phase},
        service::UnixSocket,
    },
    ingest::events::{Comm, UnixName},
    inventory::{pod_info::ContainerInfo, pod_meta::PodMeta},
};

impl Detector {
    pub(super) fn unix_refused(
        &mut self,
        ts: u64,
        pod_uid: Arc<str>,
        client: Client,
        name: &UnixName,
        process: Comm,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        self.resolve_socket(meta, &pod_uid, client, name);
        let Some(resolved) = &self.last_socket else {
            return vec![not_a_race(NotARace::Other)];
        };
        if let Some((id, inc)) = self.incidents.open(&pod_uid, &resolved.key) {
            return count_refusal(inc, id, ts, &process);
        }
        let late = self.cfg.late_refusal_ns;
        if let Some((id, inc)) = self.incidents.resolved_by_listener(&pod_uid, &resolved.key) {
            let ready = inc.listener_ready_at.unwrap_or(0);
            if ts <= ready.saturating_add(late) && ts >= inc.first_refused_at {
                return count_refusal(inc, id, ts, &process);
            }
        }
        let (key, socket) = (resolved.key.clone(), resolved.socket.clone());
        let client = key.0.clone();
        let ps = self.pod_state(&pod_uid);
        let listener = ps.unix_listeners.get(&socket.key).cloned();
        let episode = match &listener {
            // Up on record, yet refused: it went away unseen, by this refusal at the latest.
            Some(l) if l.is_up_at(ts) => {
                ps.unix_listeners.down(&socket.key, None, ts);
                Episode::AfterClose { closed_at: ts }
            }
            Some(l) => match l.down_at.filter(|d| *d <= ts) {
                Some(closed_at) => Episode::AfterClose { closed_at },
                None => Episode::BeforeListener,
            },
            None => Episode::BeforeListener,
        };
        let server = listener.and_then(|l| l.container_id);
        let phase = match episode {
            Episode::BeforeListener
                if self.is_startup(&pod_uid, &client, server.as_deref(), ts, meta) =>
            {
                Phase::Startup
            }
            _ => Phase::Steady,
        };
        let may_wait = self.cfg.metadata_wait_ns > 0 && meta.has_source();
        let mut incident = Incident::opened(
            pod_uid.to_string(),
            client,
            (phase, episode),
            (ts, &process),
            server,
        );
        incident.hidden =
            (meta.pod(&incident.pod_uid).is_none() && may_wait).then_some(Hidden::PodUnknown);
        incident.socket = Some(socket);
        self.insert_refusals(incident, key, meta).1
    }

    /// Leaves in `last_socket` the socket `name` as `client` sees it, with its
    /// incident key (`None`: it names no socket). Resolved through the client's mounts
    /// only when the last refusal was not of this client and name, or the pod metadata
    /// changed since: a storm on one socket resolves it once.
    fn resolve_socket(
        &mut self,
        meta: &dyn PodMeta,
        pod_uid: &Arc<str>,
        client: Client,
        name: &UnixName,
    ) {
        let generation = meta.generation();
        let reusable = |last: &ResolvedSocket| {
            generation.is_some()
                && last.generation == generation
                && last.pod_uid == *pod_uid
                && last.key.0 == client
                && last.name == *name
        };
        if !self.last_socket.as_ref().is_some_and(reusable) {
            self.last_socket =
                served(meta, pod_uid, client.container_id(), name).map(|socket| ResolvedSocket {
                    generation,
                    pod_uid: pod_uid.clone(),
                    name: name.clone(),
                    key: (client, Service::Socket(socket.key.clone())),
                    socket,
                });
        }
    }

    pub(super) fn unix_listener_up(
        &mut self,
        ts: u64,
        pod_uid: &str,
        container_id: Option<String>,
        name: &UnixName,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let Some(socket) = served(meta, pod_uid, container_id.as_deref(), name) else {
            return Vec::new();
        };
        let ps = self.pod_state(pod_uid);
        if !ps
            .unix_listeners
            .up(socket.key.clone(), container_id.clone(), ts)
        {
            self.listeners_dropped += 1;
            return Vec::new();
        }
        let service = Service::Socket(socket.key);
        let late = self.cfg.late_refusal_ns;
        let ids: Vec<u64> = self
            .incidents
            .open_in(pod_uid)
            .filter(|((_, s), inc)| {
                *s == service && inc.first_refused_at <= ts.saturating_add(late)
            })
            .map(|(_, inc)| inc.id)
            .collect();
        ids.into_iter()
            .flat_map(|id| self.resolve_by_listener(pod_uid, id, ts, container_id.clone(), meta))
            .collect()
    }

    pub(super) fn unix_listener_down(
        &mut self,
        ts: u64,
        pod_uid: &str,
        container_id: Option<String>,
        name: &UnixName,
        meta: &dyn PodMeta,
    ) {
        let Some(socket) = served(meta, pod_uid, container_id.as_deref(), name) else {
            return;
        };
        let ps = self.pod_state(pod_uid);
        ps.unix_listeners.down(&socket.key, container_id, ts);
    }
}

/// Socket `name` as container `id` of the pod sees it (through its mounts, when the
/// pod source declares them).
fn served(
    meta: &dyn PodMeta,
    pod_uid: &str,
    id: Option<&str>,
    name: &UnixName,
) -> Option<UnixSocket> {
    UnixSocket::resolve(name, container(meta, pod_uid, id))
}

fn container<'a>(
    meta: &'a dyn PodMeta,
    pod_uid: &str,
    id: Option<&str>,
) -> Option<&'a ContainerInfo> {
    let name = meta.container_name(id?)?;
    meta.pod(pod_uid)?.container(name)
}
