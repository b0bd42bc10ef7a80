//! What the detector holds: per-pod state (starts, removals, listeners) and the
//! incidents, keyed by client and service.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::Arc,
};

use serde::{Deserialize, Serialize};

use super::{
    config::DetectorConfig, held::Held, in_place::InPlaceStarts, incidents::Incidents,
    last_socket::ResolvedSocket,
};
use crate::detect::{
    listener_table::ListenerTable, timeline::Entry, unix_listeners::UnixListeners,
};

/// Removed container ids remembered per pod, to merge a crash loop's instances.
pub(super) const REMOVED_PER_POD: usize = 64;

#[derive(Default, Clone, Serialize, Deserialize)]
pub(super) struct PodState {
    /// The pod's cgroup was created while the agent watched.
    pub(super) started_at: Option<u64>,
    /// Container cgroups created while the agent watched, by container id.
    pub(super) containers_started: HashMap<String, u64>,
    /// Containers torn down and when, newest last (bounded).
    pub(super) removed: VecDeque<(String, u64)>,
    /// When the pod source stopped reporting the pod while its cgroups lived (a force
    /// delete, a missed relist): its deletion began no later than this.
    pub(super) source_gone_at: Option<u64>,
    pub(super) listeners: ListenerTable,
    /// UDP sockets seen bound (in the pod's socket table while an incident was open).
    #[serde(default)]
    pub(super) udp_listeners: ListenerTable,
    pub(super) unix_listeners: UnixListeners,
    /// Unix-socket facts waiting for the pod's metadata.
    pub(super) held: Held,
    /// Unix facts were decided before their container's mounts were known: keyed by
    /// the path as written until the pod source names the container (see `rekey`).
    #[serde(default)]
    pub(super) unkeyed: bool,
    /// Its in-place restarts of all containers seen (KEP-5532).
    #[serde(default)]
    pub(super) in_place: InPlaceStarts,
    /// Each container's `started` and `ready` as the pod source last showed them, by
    /// name: what a probe result is a change from.
    #[serde(default)]
    pub(super) probes: BTreeMap<String, (Option<bool>, bool)>,
    /// The latest changes of those, for incidents opened after them (bounded).
    #[serde(default)]
    pub(super) probe_changes: VecDeque<Entry>,
}

pub struct Detector {
    pub(super) cfg: DetectorConfig,
    /// Keyed by the facts' shared pod uids (a refusal's lookup copies nothing).
    pub(super) pods: foldhash::HashMap<Arc<str>, PodState>,
    pub(super) incidents: Incidents,
    /// Listeners not tracked: their pod had the maximum of open listeners.
    pub(super) listeners_dropped: u64,
    /// Unix-socket facts dropped because their pod held its maximum while it waited
    /// for its metadata.
    pub(super) held_dropped: u64,
    /// The socket the last Unix refusal resolved to.
    pub(super) last_socket: Option<ResolvedSocket>,
}

impl PodState {
    /// When container `id` was torn down, if it was while the agent watched.
    pub(super) fn removed_at(&self, id: &str) -> Option<u64> {
        self.removed
            .iter()
            .rev()
            .find(|(r, _)| r == id)
            .map(|(_, t)| *t)
    }
}

impl Detector {
    /// The pod's state, made when first needed (only then is the uid copied).
    pub(super) fn pod_state(&mut self, uid: &str) -> &mut PodState {
        if !self.pods.contains_key(uid) {
            self.pods.insert(uid.into(), PodState::default());
        }
        self.pods.get_mut(uid).expect("just inserted")
    }
}
