//! Unix sockets: a refused connect or send opens (or counts into) the client's
//! incident on that socket, a listener coming up resolves it. A socket is named so
//! that both containers' views meet (see `detect::service`), and a refusal proves
//! the socket's listener gone even when its close was not seen (a path unlinked
//! while the socket still listens; the syscall fallback, which sees no closes).

use std::sync::Arc;

use super::{
    change::{Change, NotARace},
    held::Burst,
    last_socket::ResolvedSocket,
    listener::same_container,
    refusal::{count_burst, not_a_race},
    state::Detector,
};
use crate::detect::service::{Protocol, Service};
use crate::{
    detect::{
        fact::Client,
        incident::{Episode, Hidden, Incident, Phase},
        service::{SocketKey, UnixSocket},
        socket_view::served_path,
    },
    names::{Comm, UnixName},
    pods::{pod_info::ContainerInfo, pod_meta::PodMeta},
};

impl Detector {
    /// `burst` refusals of `client` on socket `name`, as one: counted into the client's
    /// incident on that socket, a new incident when a sidecar could serve it, else
    /// counted as no race.
    pub(super) fn unix_refused(
        &mut self,
        burst: Burst,
        pod_uid: Arc<str>,
        (client, datagram): (Client, bool),
        name: &UnixName,
        process: Comm,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let ts = burst.first;
        self.resolve_socket(meta, &pod_uid, client, name);
        let Some(resolved) = &self.last_socket else {
            return vec![not_a_race(NotARace::Other, burst.count)];
        };
        if let Some((id, inc)) = self.incidents.open(&pod_uid, &resolved.key) {
            return count_burst(inc, id, burst, &process);
        }
        let late = self.cfg.late_refusal_ns;
        if let Some((id, inc)) = self.incidents.resolved_by_listener(&pod_uid, &resolved.key) {
            let ready = inc.listener_ready_at.unwrap_or(0);
            if ts <= ready.saturating_add(late) && ts >= inc.first_refused_at {
                return count_burst(inc, id, burst, &process);
            }
        }
        let (key, socket) = (resolved.key.clone(), resolved.socket.clone());
        let client = key.0.clone();
        let hidden = match self.candidate(&pod_uid, &client, &socket, meta) {
            Candidate::Yes => None,
            Candidate::Unproven => Some(Hidden::SocketUnproven),
            Candidate::No(why) => return vec![not_a_race(why, burst.count)],
        };
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
        // A path a datagram socket was bound at is refused to datagram senders: a
        // stream connect would have failed (EPROTOTYPE) while it was bound. So a
        // drain's refused connect() on the syscall path, which cannot tell its
        // socket's type, is a datagram's when the path's last listener was one.
        let datagram = datagram || listener.as_ref().is_some_and(|l| l.datagram);
        let server = listener.and_then(|l| l.container_id);
        let phase = match episode {
            Episode::BeforeListener
                if self.is_startup(&pod_uid, &client, server.as_deref(), ts, meta) =>
            {
                Phase::Startup
            }
            _ => Phase::Steady,
        };
        let mut incident = Incident::opened(
            pod_uid.to_string(),
            client,
            (phase, episode),
            (ts, &process),
            server,
        );
        incident.hidden = hidden;
        incident.socket = Some(socket);
        incident.protocol = if datagram {
            Protocol::Unixgram
        } else {
            Protocol::Unix
        };
        let (id, changes) = self.insert_refusals(incident, key, meta);
        if burst.count > 1
            && let Some(inc) = self.incidents.get_mut(id)
        {
            let rest = Burst {
                first: burst.last,
                last: burst.last,
                count: burst.count - 1,
            };
            count_burst(inc, id, rest, &process);
        }
        changes
    }

    /// Whether a sidecar of the pod could serve `socket` to `client`: a socket some
    /// container of the pod was seen listening on (the client's own: a self-refusal),
    /// an abstract name in the pod's network namespace, a path on a volume another
    /// container mounts. A path on the client's own filesystem or on a volume only it
    /// mounts (the nscd socket, `/dev/log`, a hostPath shared with the node alone) is
    /// none. Without the client's metadata (no pod source, or its wait is over), a path
    /// is unproven until a listener in the pod serves it.
    pub(super) fn candidate(
        &self,
        pod_uid: &str,
        client: &Client,
        socket: &UnixSocket,
        meta: &dyn PodMeta,
    ) -> Candidate {
        let client_id = client.container_id();
        let seen = self
            .pods
            .get(pod_uid)
            .and_then(|p| p.unix_listeners.get(&socket.key));
        if let Some(l) = seen {
            return match (client_id, l.container_id.as_deref()) {
                (Some(c), Some(s)) if same_container(c, s, meta) => {
                    Candidate::No(NotARace::SelfRefusal)
                }
                _ => Candidate::Yes,
            };
        }
        let pod = meta.pod(pod_uid);
        let Some((pod, info)) = pod.zip(container(meta, pod_uid, client_id)) else {
            return match socket.key {
                SocketKey::Abstract(_) if !pod.is_some_and(|p| p.host_network) => Candidate::Yes,
                _ => Candidate::Unproven,
            };
        };
        match &socket.key {
            // A hostNetwork pod's abstract names are the node's.
            SocketKey::Abstract(_) if pod.host_network => Candidate::Unproven,
            SocketKey::Abstract(_) => Candidate::Yes,
            SocketKey::OnVolume { .. }
                if pod
                    .containers
                    .iter()
                    .any(|c| c.name != info.name && served_path(socket, c).is_some()) =>
            {
                Candidate::Yes
            }
            SocketKey::OnVolume { .. } | SocketKey::Path(_) => Candidate::No(NotARace::Other),
        }
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
        (container_id, datagram): (Option<String>, bool),
        name: &UnixName,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let Some(socket) = served(meta, pod_uid, container_id.as_deref(), name) else {
            return Vec::new();
        };
        let ps = self.pod_state(pod_uid);
        if !ps
            .unix_listeners
            .up(socket.key.clone(), container_id.clone(), ts, datagram)
        {
            self.listeners_dropped += 1;
            return Vec::new();
        }
        let service = Service::Socket(socket.key.clone());
        let changes = self.listener_came(ts, pod_uid, container_id, socket.key, meta);
        if datagram {
            // What a datagram socket's bind resolves was sent as datagrams.
            let ids: Vec<u64> = self
                .incidents
                .open_or_resolved_in(pod_uid)
                .filter(|((_, s), inc)| *s == service && inc.listener_ready_at == Some(ts))
                .map(|(_, inc)| inc.id)
                .collect();
            for id in ids {
                if let Some(inc) = self.incidents.get_mut(id) {
                    inc.protocol = Protocol::Unixgram;
                }
            }
        }
        changes
    }

    /// A listener of socket `key` came up at `ts`: it resolves the pod's open
    /// incidents on that socket refused before it (or just after).
    pub(super) fn listener_came(
        &mut self,
        ts: u64,
        pod_uid: &str,
        container_id: Option<String>,
        key: SocketKey,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let service = Service::Socket(key);
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

/// Whether a sidecar could serve a socket.
pub(super) enum Candidate {
    Yes,
    /// Not until a listener in the pod serves it: hidden till then.
    Unproven,
    No(NotARace),
}

pub(super) fn container<'a>(
    meta: &'a dyn PodMeta,
    pod_uid: &str,
    id: Option<&str>,
) -> Option<&'a ContainerInfo> {
    let name = meta.container_name(id?)?;
    meta.pod(pod_uid)?.container(name)
}
