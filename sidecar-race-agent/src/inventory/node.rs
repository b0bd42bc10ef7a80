//! The node's inventory: cgroups from the kernel, pods from the pod source, and the
//! attribution of a cgroup id to pod and container (by path, then names).

use std::{
    collections::HashSet,
    sync::atomic::{AtomicU64, Ordering::Relaxed},
    time::Instant,
};

use super::{
    attribution::{Attribution, PodOwner},
    cgroup_path::{self, PathInfo},
    cgroups::CgroupIndex,
    sources::PodUpdate,
    store::PodStore,
};
use crate::ingest::events::{CgroupFact, KernelEvent};

/// `c` with the path the index gave it.
fn named(c: &CgroupFact, path: String) -> CgroupFact {
    CgroupFact {
        path,
        path_unread: false,
        ..c.clone()
    }
}

/// The node's inventory: cgroups from the kernel, pods from the pod source.
pub struct Inventory {
    pub cgroups: CgroupIndex,
    pub pods: PodStore,
    /// Whether a pod source feeds `pods` (names can still arrive).
    pub has_pod_source: bool,
    /// Events whose cgroup is unknown or has a layout the parser does not know.
    unattributed: AtomicU64,
    /// Site-wide classic sidecar names (`--sidecar-names`).
    site_sidecars: Vec<String>,
    /// Parsed paths of known cgroup ids, so a refusal storm from one cgroup parses
    /// its path once rather than per event. Emptied on every cgroup event (rare).
    parsed: foldhash::HashMap<u64, Parsed>,
}

/// A cgroup's parsed path, and its pod owner when it has one.
struct Parsed {
    info: PathInfo,
    owner: Option<PodOwner>,
}

impl Parsed {
    fn of(info: PathInfo) -> Self {
        let owner = PodOwner::of(&info);
        Parsed { info, owner }
    }
}

impl Inventory {
    pub fn new(cgroups: CgroupIndex, pods: PodStore, has_pod_source: bool) -> Self {
        Self {
            cgroups,
            pods,
            has_pod_source,
            unattributed: AtomicU64::new(0),
            site_sidecars: Vec::new(),
            parsed: foldhash::HashMap::default(),
        }
    }

    /// Containers with these names in `containers[]` are classic sidecars in every pod.
    pub fn with_site_sidecars(mut self, names: Vec<String>) -> Self {
        self.site_sidecars = names;
        self
    }

    /// Attributes a cgroup, counting the ones that cannot be (never guessed).
    pub fn attribute(&mut self, cgroup_id: u64) -> Attribution {
        let info = self.path_info(cgroup_id);
        self.names(info)
    }

    /// What a cgroup's path says (pod, container), counting the ones that cannot be
    /// attributed.
    pub fn path_info(&mut self, cgroup_id: u64) -> PathInfo {
        self.parsed(cgroup_id)
            .map_or(PathInfo::Unknown, |p| p.info.clone())
    }

    /// The pod and container a cgroup belongs to, or `None` (counted when the path
    /// cannot be attributed). The ids are shared by every event of the cgroup.
    pub fn pod_owner(&mut self, cgroup_id: u64) -> Option<PodOwner> {
        self.parsed(cgroup_id)?.owner.clone()
    }

    /// The cgroup's parsed path, cached per id while the id resolves; unknown ids are
    /// not cached so the index can still find them by rescanning.
    fn parsed(&mut self, cgroup_id: u64) -> Option<&Parsed> {
        if !self.parsed.contains_key(&cgroup_id) {
            let Some(path) = self.cgroups.resolve(cgroup_id) else {
                self.unattributed.fetch_add(1, Relaxed);
                return None;
            };
            let parsed = Parsed::of(cgroup_path::parse(path));
            self.parsed.insert(cgroup_id, parsed);
        }
        let parsed = self.parsed.get(&cgroup_id)?;
        if parsed.info == PathInfo::Unknown {
            self.unattributed.fetch_add(1, Relaxed);
        }
        Some(parsed)
    }

    /// [`Inventory::attribute`], also giving the cgroup's path (one lookup for both).
    pub fn attribute_with_path(&mut self, cgroup_id: u64) -> (Option<String>, Attribution) {
        let path = self.cgroups.resolve(cgroup_id).map(str::to_string);
        let info = path
            .as_deref()
            .map_or(PathInfo::Unknown, cgroup_path::parse);
        if info == PathInfo::Unknown {
            self.unattributed.fetch_add(1, Relaxed);
        }
        (path, self.names(info))
    }

    /// Attribution of a parsed path, with names from the pod store.
    pub fn names(&self, info: PathInfo) -> Attribution {
        let mut a = Attribution::default();
        match info {
            PathInfo::PodContainer {
                pod_uid,
                container_id,
                runtime,
            } => {
                if let Some((_, name)) = self.pods.container(&container_id) {
                    a.container = Some(name.to_string());
                }
                a.pod_uid = Some(pod_uid);
                a.container_id = Some(container_id);
                a.runtime = Some(runtime);
            }
            PathInfo::Pod { pod_uid } => a.pod_uid = Some(pod_uid),
            PathInfo::Container {
                container_id,
                runtime,
            } => {
                a.container_id = Some(container_id);
                a.runtime = Some(runtime);
            }
            PathInfo::Host | PathInfo::Unknown => {}
        }
        if let Some(pod) = a.pod_uid.as_deref().and_then(|uid| self.pods.pod(uid)) {
            a.namespace = Some(pod.namespace.clone());
            a.pod = Some(pod.name.clone());
            a.workload = Some(pod.workload.clone());
        }
        a
    }

    /// A pod's attribution (no container), with names from the pod store.
    pub fn pod_names(&self, pod_uid: &str) -> Attribution {
        self.names(PathInfo::Pod {
            pod_uid: pod_uid.to_string(),
        })
    }

    /// Fills in names that arrived since `a` was made.
    pub fn refresh(&self, a: &mut Attribution) {
        if let Some(id) = &a.container_id
            && a.container.is_none()
        {
            a.container = self.pods.container(id).map(|(_, n)| n.to_string());
        }
        if let Some(pod) = a.pod_uid.as_deref().and_then(|uid| self.pods.pod(uid)) {
            a.namespace.get_or_insert_with(|| pod.namespace.clone());
            a.pod.get_or_insert_with(|| pod.name.clone());
            a.workload.get_or_insert_with(|| pod.workload.clone());
        }
    }

    /// Whether waiting could still bring names for `a`.
    pub fn may_learn_names(&self, a: &Attribution) -> bool {
        self.has_pod_source && a.lacks_container_name()
    }

    /// Applies a pod source's update.
    pub fn apply(&mut self, update: PodUpdate) {
        let now = Instant::now();
        let names = &self.site_sidecars;
        match update {
            PodUpdate::Apply(mut p) => {
                p.mark_site_sidecars(names);
                self.pods.apply(*p)
            }
            PodUpdate::Delete { uid } => self.pods.delete(&uid, now),
            PodUpdate::Replace {
                pods: mut all,
                unparsable,
            } => {
                all.iter_mut().for_each(|p| p.mark_site_sidecars(names));
                self.pods.replace(all, &unparsable, now)
            }
        }
        self.pods.expire(now);
    }

    /// Keeps the cgroup index current from the kernel's cgroup events. A cgroup event
    /// whose path the kernel could not read comes back named from the index (`None`:
    /// the event serves as it is); a cgroup gone before cgroupfs showed it keeps its
    /// empty path, which names nothing.
    pub fn observe(&mut self, ev: &KernelEvent) -> Option<KernelEvent> {
        match ev {
            KernelEvent::CgroupCreated(c) => {
                self.parsed.clear();
                if c.path_unread {
                    let path = self.cgroups.name_new(c.cgroup_id)?.to_string();
                    return Some(KernelEvent::CgroupCreated(named(c, path)));
                }
                self.cgroups.created(c.cgroup_id, &c.path);
                None
            }
            KernelEvent::CgroupRemoved(c) => {
                self.parsed.clear();
                let named = match c.path_unread {
                    true => Some(named(c, self.cgroups.path(c.cgroup_id)?.to_string())),
                    false => None,
                };
                let path = named.as_ref().map_or(&c.path, |n| &n.path);
                self.cgroups.removed(c.cgroup_id, path, c.ts_boot_ns);
                self.cgroups.expire(c.ts_boot_ns);
                named.map(KernelEvent::CgroupRemoved)
            }
            _ => None,
        }
    }

    /// Periodic upkeep: prunes cgroups whose removal event was lost. True when it ran.
    pub fn maintain(&mut self, now_boot_ns: u64) -> bool {
        let pruned = self.cgroups.prune_if_due(now_boot_ns);
        if pruned {
            self.parsed.clear();
        }
        pruned
    }

    /// Uids of the pods that have a cgroup (not removed) on the node.
    pub fn pods_with_cgroups(&self) -> HashSet<String> {
        self.cgroups
            .live_paths()
            .filter_map(|path| match cgroup_path::parse(path) {
                PathInfo::Pod { pod_uid } | PathInfo::PodContainer { pod_uid, .. } => Some(pod_uid),
                _ => None,
            })
            .collect()
    }

    pub fn unattributed_events(&self) -> u64 {
        self.unattributed.load(Relaxed)
    }
}
