//! Unix facts decided before their container's mounts were known (the metadata wait
//! ran out: an API server outage, a container the pod source named late) are keyed by
//! the path as dialed or bound, and two containers' paths to one volume differ. Once
//! the pod source names the containers, whenever that is, those facts are keyed on the
//! volume again, so a refusal still meets its listener: a race is not discarded as
//! `other`, and an incident is not left open to become a false `unresolved`.

use super::{
    change::Change,
    incidents::Key,
    state::Detector,
    unix::{Candidate, container},
};
use crate::{
    detect::{
        incident::{Hidden, State},
        service::{Service, SocketKey, UnixSocket},
    },
    names::UnixName,
    pods::pod_meta::PodMeta,
};

impl Detector {
    /// Re-keys the pod's path-keyed Unix listeners and incidents whose containers the
    /// pod source now names, and lets them meet: nothing unless the pod has such facts.
    pub(super) fn rekey_sockets(&mut self, uid: &str, meta: &dyn PodMeta) -> Vec<Change> {
        let Some(ps) = self.pods.get(uid).filter(|p| p.unkeyed) else {
            return Vec::new();
        };
        if meta.pod(uid).is_none() {
            return Vec::new();
        }
        let mut unnamed = false;
        let mut moved = Vec::new();
        for (path, l) in ps.unix_listeners.on_paths() {
            let Some(id) = l.container_id.as_deref() else {
                continue;
            };
            match on_volume(meta, uid, id, &path) {
                Some(key) => moved.push((path, key, l)),
                None => unnamed |= container(meta, uid, Some(id)).is_none(),
            }
        }
        let ps = self.pod_state(uid);
        for (path, key, _) in &moved {
            ps.unix_listeners.rekey(path, key.clone());
        }
        let mut changes = Vec::new();
        for (from, id) in self.incidents.on_socket_paths(uid) {
            let (client, Service::Socket(SocketKey::Path(path))) = &from else {
                continue;
            };
            let Some(client_id) = client.container_id() else {
                continue;
            };
            if container(meta, uid, Some(client_id)).is_none() {
                unnamed = true;
                continue;
            }
            let Some(key) = on_volume(meta, uid, client_id, path) else {
                continue;
            };
            changes.extend(self.rekey_incident(uid, id, &from, key, meta));
        }
        // The moved listeners resolve what was refused before them.
        for (_, key, l) in moved {
            if let Some(up) = l.up_at {
                changes.extend(self.listener_came(up, uid, l.container_id, key, meta));
            }
        }
        if let Some(ps) = self.pods.get_mut(uid) {
            ps.unkeyed = unnamed;
        }
        changes
    }

    /// Incident `id`, open or resolved under `from`, is on socket `key`: merged into
    /// the incident open there already, else kept under `key`, shown once a sidecar
    /// could serve it, and resolved when that socket's listener came after it.
    fn rekey_incident(
        &mut self,
        uid: &str,
        id: u64,
        from: &Key,
        key: SocketKey,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let to = (from.0.clone(), Service::Socket(key.clone()));
        if let Some(into) = self.incidents.rekey(uid, id, from, to) {
            return self.merge(uid, id, into);
        }
        let Some(inc) = self.incidents.get_mut(id) else {
            return Vec::new();
        };
        let Some(socket) = inc.socket.as_mut() else {
            return Vec::new();
        };
        socket.key = key.clone();
        socket.volume = match &key {
            SocketKey::OnVolume { volume, .. } => Some(volume.clone()),
            _ => None,
        };
        if inc.state != State::Open {
            return Vec::new();
        }
        let (client, first, socket) = (inc.client.clone(), inc.first_refused_at, socket.clone());
        if inc.hidden == Some(Hidden::SocketUnproven) {
            match self.candidate(uid, &client, &socket, meta) {
                Candidate::Yes => {}
                Candidate::Unproven => return Vec::new(),
                Candidate::No(why) => return self.discard(uid, id, why),
            }
        }
        let listener = self
            .pods
            .get(uid)
            .and_then(|p| p.unix_listeners.get(&key))
            .cloned();
        let late = self.cfg.late_refusal_ns;
        match listener.and_then(|l| Some((l.up_at?, l.container_id))) {
            Some((up, server)) if first <= up.saturating_add(late) => {
                self.resolve_by_listener(uid, id, up, server, meta)
            }
            _ => match self.incidents.get_mut(id) {
                Some(inc) if inc.hidden == Some(Hidden::SocketUnproven) => {
                    inc.hidden = None;
                    vec![Change::Opened(id)]
                }
                _ => Vec::new(),
            },
        }
    }
}

/// The key of `path` as container `id` of the pod sees it, when that differs from the
/// path as written (it lies on a volume); `None` when the container is not named yet
/// or the path is on no volume.
fn on_volume(meta: &dyn PodMeta, uid: &str, id: &str, path: &str) -> Option<SocketKey> {
    let info = container(meta, uid, Some(id))?;
    let socket = UnixSocket::resolve(&UnixName::Path(path.into()), Some(info))?;
    matches!(socket.key, SocketKey::OnVolume { .. }).then_some(socket.key)
}
