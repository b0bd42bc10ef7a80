//! This node's pods as the pod source last described them, with deleted pods kept
//! resolvable for a grace period (late and drain-time kernel events still attribute).
//! It plays the role of kube's reflector store, plus that grace period.

use std::{
    collections::VecDeque,
    sync::Arc,
    time::{Duration, Instant},
};

use crate::pods::pod_info::PodInfo;

struct Entry {
    info: Arc<PodInfo>,
    /// When the source stopped reporting it.
    gone_at: Option<Instant>,
    /// Container ids earlier versions of the pod reported (restarts), oldest first,
    /// still resolvable for late kernel events; at most `OLD_CONTAINER_IDS_PER_POD`.
    old_ids: VecDeque<String>,
}

/// Ids of replaced container instances (a crash loop) kept per pod at most.
pub const OLD_CONTAINER_IDS_PER_POD: usize = 16;

pub struct PodStore {
    pods: foldhash::HashMap<String, Entry>,
    /// Runtime container id → (pod uid, container name).
    containers: foldhash::HashMap<String, (String, String)>,
    grace: Duration,
    /// Bumped on every change; lets waiters know something new arrived.
    generation: u64,
}

impl PodStore {
    pub fn new(grace: Duration) -> Self {
        Self {
            pods: foldhash::HashMap::default(),
            containers: foldhash::HashMap::default(),
            grace,
            generation: 0,
        }
    }

    pub fn apply(&mut self, info: PodInfo) {
        let current = info.container_ids();
        for (id, name) in &current {
            self.containers
                .insert(id.to_string(), (info.uid.clone(), name.to_string()));
        }
        let mut old_ids = VecDeque::new();
        if let Some(prev) = self.pods.remove(&info.uid) {
            old_ids = prev.old_ids;
            let replaced = prev.info.container_ids();
            for id in replaced.keys().filter(|id| !current.contains_key(*id)) {
                if !old_ids.iter().any(|o| o == id) {
                    old_ids.push_back(id.to_string());
                }
            }
            old_ids.retain(|id| !current.contains_key(id.as_str()));
            while old_ids.len() > OLD_CONTAINER_IDS_PER_POD {
                let Some(id) = old_ids.pop_front() else { break };
                if self
                    .containers
                    .get(&id)
                    .is_some_and(|(uid, _)| *uid == info.uid)
                {
                    self.containers.remove(&id);
                }
            }
        }
        self.pods.insert(
            info.uid.clone(),
            Entry {
                info: Arc::new(info),
                gone_at: None,
                old_ids,
            },
        );
        self.generation += 1;
    }

    /// Container ids that resolve to a pod (current and recently replaced ones).
    pub fn container_ids_len(&self) -> usize {
        self.containers.len()
    }

    /// A pod a checkpoint named, as the source last described it: kept as deleted at
    /// `now` (resolvable for the grace period) unless the source reports it already;
    /// a later report of it makes it current again.
    pub fn remember_gone(&mut self, info: PodInfo, now: Instant) {
        if self.pods.contains_key(&info.uid) {
            return;
        }
        let uid = info.uid.clone();
        self.apply(info);
        self.delete(&uid, now);
    }

    pub fn delete(&mut self, uid: &str, now: Instant) {
        if let Some(e) = self.pods.get_mut(uid) {
            e.gone_at.get_or_insert(now);
            self.generation += 1;
        }
    }

    /// A full relist: everything not in `pods` is gone as of `now`, except the pods
    /// listed but `unparsable`, which keep their last good version.
    pub fn replace(&mut self, pods: Vec<PodInfo>, unparsable: &[String], now: Instant) {
        let listed: std::collections::HashSet<&str> = pods
            .iter()
            .map(|p| p.uid.as_str())
            .chain(unparsable.iter().map(String::as_str))
            .collect();
        for (uid, e) in self.pods.iter_mut() {
            if !listed.contains(uid.as_str()) {
                e.gone_at.get_or_insert(now);
            }
        }
        for p in pods {
            self.apply(p);
        }
        self.generation += 1;
    }

    /// Forgets pods gone longer than the grace period.
    pub fn expire(&mut self, now: Instant) {
        let grace = self.grace;
        let before = self.pods.len();
        self.pods
            .retain(|_, e| e.gone_at.is_none_or(|t| now.duration_since(t) <= grace));
        if self.pods.len() != before {
            let pods = &self.pods;
            self.containers.retain(|_, (uid, _)| pods.contains_key(uid));
            self.generation += 1;
        }
    }

    pub fn pod(&self, uid: &str) -> Option<&Arc<PodInfo>> {
        self.pods.get(uid).map(|e| &e.info)
    }

    /// Whether the source still reports the pod (false: deleted, within grace).
    pub fn is_live(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|e| e.gone_at.is_none())
    }

    /// Pod uid and container name of a runtime container id.
    pub fn container(&self, container_id: &str) -> Option<(&str, &str)> {
        self.containers
            .get(container_id)
            .map(|(uid, name)| (uid.as_str(), name.as_str()))
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<PodInfo>> {
        self.pods.values().map(|e| &e.info)
    }
}

impl crate::pods::pod_meta::PodMeta for PodStore {
    fn pod(&self, uid: &str) -> Option<&PodInfo> {
        PodStore::pod(self, uid).map(|p| p.as_ref())
    }

    fn is_deleted(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|e| e.gone_at.is_some())
    }

    fn container_name(&self, container_id: &str) -> Option<&str> {
        self.container(container_id).map(|(_, name)| name)
    }

    fn boot_ns(&self, t: jiff::Timestamp) -> Option<u64> {
        crate::clock::timestamp_to_boot_ns(t)
    }

    fn each_pod(&self, f: &mut dyn FnMut(&PodInfo)) {
        for e in self.pods.values().filter(|e| e.gone_at.is_none()) {
            f(&e.info);
        }
    }

    fn generation(&self) -> Option<u64> {
        Some(self.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::container_id::Runtime;
    use crate::pods::pod_info::{StatusInfo, Workload};

    pub fn pod(uid: &str, containers: &[(&str, &str)]) -> PodInfo {
        PodInfo {
            uid: uid.into(),
            namespace: "ns".into(),
            name: format!("pod-{uid}"),
            workload: Workload {
                kind: "Pod".into(),
                name: format!("pod-{uid}"),
            },
            containers: vec![],
            statuses: containers
                .iter()
                .map(|(name, id)| StatusInfo {
                    name: name.to_string(),
                    container_id: id.to_string(),
                    runtime: Runtime::Containerd,
                    state: crate::pods::pod_info::RunState::Running,
                    started_at: None,
                    finished_at: None,
                    ready: true,
                    restart_count: 0,
                    last_terminated_reason: None,
                    started: None,
                })
                .collect(),
            deletion_timestamp: None,
            deletion_grace_period_seconds: None,
            termination_grace_period_seconds: None,
            host_network: false,
            pod_ips: vec![],
            node_name: None,
            start_time: None,
            template: None,
        }
    }

    #[test]
    fn deleted_pods_resolve_until_the_grace_period_ends() {
        let t0 = Instant::now();
        let mut s = PodStore::new(Duration::from_secs(600));
        s.apply(pod("u1", &[("app", "c1")]));
        assert_eq!(s.container("c1"), Some(("u1", "app")));
        s.delete("u1", t0);
        assert!(!s.is_live("u1"));
        s.expire(t0 + Duration::from_secs(599));
        assert_eq!(s.container("c1"), Some(("u1", "app")));
        s.expire(t0 + Duration::from_secs(601));
        assert!(s.pod("u1").is_none());
        assert_eq!(s.container("c1"), None);
    }

    #[test]
    fn relist_marks_missing_pods_gone_and_keeps_listed_ones() {
        let t0 = Instant::now();
        let mut s = PodStore::new(Duration::from_secs(1));
        s.apply(pod("u1", &[("app", "c1")]));
        s.apply(pod("u2", &[("app", "c2")]));
        let g = s.generation();
        s.replace(
            vec![pod("u2", &[("app", "c2")]), pod("u3", &[("app", "c3")])],
            &[],
            t0,
        );
        assert!(s.generation() > g);
        assert!(!s.is_live("u1") && s.is_live("u2") && s.is_live("u3"));
        s.expire(t0 + Duration::from_secs(2));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn an_unparsable_pod_in_a_relist_keeps_its_last_good_version() {
        let t0 = Instant::now();
        let mut s = PodStore::new(Duration::from_secs(1));
        s.apply(pod("u1", &[("app", "c1")]));
        s.apply(pod("u2", &[("app", "c2")]));
        s.replace(vec![pod("u2", &[("app", "c2")])], &["u1".into()], t0);
        assert!(s.is_live("u1"), "not taken as deleted");
        assert_eq!(s.container("c1"), Some(("u1", "app")));
        s.expire(t0 + Duration::from_secs(2));
        assert!(s.pod("u1").is_some());
    }

    #[test]
    fn a_crash_loop_keeps_only_the_newest_replaced_container_ids() {
        let mut s = PodStore::new(Duration::from_secs(600));
        for restart in 0..100 {
            let id = format!("app-{restart}");
            s.apply(pod("u1", &[("proxy", "p1"), ("app", &id)]));
        }
        // The current two, and the replaced instances within the bound.
        assert_eq!(s.container_ids_len(), 2 + OLD_CONTAINER_IDS_PER_POD);
        assert_eq!(s.container("app-99"), Some(("u1", "app")));
        assert_eq!(s.container("app-98"), Some(("u1", "app")), "late events");
        assert_eq!(s.container("app-0"), None);
    }

    #[test]
    fn a_status_that_arrives_later_adds_the_container() {
        let mut s = PodStore::new(Duration::from_secs(1));
        s.apply(pod("u1", &[]));
        assert_eq!(s.container("c9"), None);
        s.apply(pod("u1", &[("proxy", "c9")]));
        assert_eq!(s.container("c9"), Some(("u1", "proxy")));
    }
}
