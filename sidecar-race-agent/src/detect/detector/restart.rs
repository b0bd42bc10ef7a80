//! In-place restarts of a whole pod (KEP-5532, on by default from Kubernetes 1.36): a
//! restart rule's `RestartAllContainers` action kills every container of the pod and
//! starts them again in the same sandbox. The pod keeps its UID and cgroup, so no pod
//! cgroup is created: the new start is read from the containers instead. A container
//! cgroup created after the pod's recorded start whose status says the instance before
//! it ended `RestartingAllContainers` belongs to a new start of the pod. A container
//! restarted alone (a crash: `Error`, `OOMKilled`) is no new start of the pod.

use super::{change::Change, in_place::EARLIER_PER_POD, state::Detector};
use crate::pods::pod_meta::PodMeta;

/// The `lastState.terminated.reason` the kubelet gives every container it killed to
/// restart all of the pod's containers in place.
pub(super) const RESTARTING_ALL_CONTAINERS: &str = "RestartingAllContainers";

impl Detector {
    /// New starts of pod `uid` that its statuses now tell (at most one per restart,
    /// however many of its containers are named by then), and its incidents of each.
    pub(super) fn in_place_restarts(&mut self, uid: &str, meta: &dyn PodMeta) -> Vec<Change> {
        let (Some(pod), Some(ps)) = (meta.pod(uid), self.pods.get_mut(uid)) else {
            return Vec::new();
        };
        // Restarted instances whose cgroup this agent saw created after the pod's
        // start, oldest first (the kubelet starts them in the pod's order).
        let mut restarted: Vec<(u64, &str, &str)> = pod
            .statuses
            .iter()
            .filter(|s| s.last_terminated_reason.as_deref() == Some(RESTARTING_ALL_CONTAINERS))
            .filter_map(|s| {
                let created = *ps.containers_started.get(&s.container_id)?;
                Some((created, s.name.as_str(), s.container_id.as_str()))
            })
            .filter(|(created, ..)| ps.started_at.is_none_or(|pod| *created > pod))
            .collect();
        restarted.sort_unstable();
        let mut new_starts = Vec::new();
        let starts = &mut ps.in_place;
        let began = starts.at;
        for (created, name, id) in restarted {
            if starts
                .members
                .values()
                .chain(&starts.earlier)
                .any(|m| m == id)
            {
                continue;
            }
            // An instance of a name the latest restart already has, created after it
            // began, is of a later restart.
            let later =
                starts.members.contains_key(name) && starts.at.is_some_and(|at| created > at);
            if starts.at.is_none() || later {
                starts.count += 1;
                starts.at = Some(created);
                let before = std::mem::take(&mut starts.members);
                starts.earlier.extend(before.into_values());
                while starts.earlier.len() > EARLIER_PER_POD {
                    starts.earlier.pop_front();
                }
                new_starts.push((starts.count, created));
            }
            starts.at = starts.at.map(|at| at.min(created));
            starts.members.insert(name.to_string(), id.to_string());
        }
        // The latest restart began no later than its earliest instance known now (one
        // named after the others may have started first).
        let moved = (starts.at != began).then_some((starts.count, starts.at));
        let mut changes = Vec::new();
        for (start, at) in new_starts {
            self.incidents.mark_start(uid, start, at);
            changes.push(Change::PodStarted {
                pod_uid: uid.to_string(),
                start,
            });
        }
        if let Some((start @ 1.., Some(at))) = moved {
            self.incidents.mark_start(uid, start, at);
        }
        changes
    }

    /// The pod's start that refusals at `ts` belong to, as known now.
    pub(super) fn start_at(&self, uid: &str, ts: u64) -> u32 {
        self.pods
            .get(uid)
            .map(|ps| &ps.in_place)
            .filter(|s| s.at.is_some_and(|at| ts >= at))
            .map_or(0, |s| s.count)
    }

    /// When the pod's latest start began: its latest in-place restart, else its
    /// cgroup's creation, as far as this agent saw either.
    pub(super) fn latest_start(&self, uid: &str) -> Option<u64> {
        let ps = self.pods.get(uid)?;
        ps.in_place.at.or(ps.started_at)
    }
}
