//! Listeners the kernel's tables showed at a restore from a periodic checkpoint, for
//! open incidents: the agent before read their records and told the sinks what they
//! resolved, so the incidents they resolve now are settled without an outcome, and
//! the detector's clock waits for them to leave the reorder window.

use crate::{
    detect::Incident,
    inventory::{PodOwner, cgroup_path, cgroups::CgroupIndex},
};

/// How long past the reorder window at most the detector's clock waits for one.
const WAIT_PAST_WINDOW_NS: u64 = 1_000_000_000;

/// The listeners looked up at a restore.
#[derive(Debug, Default)]
pub(super) struct RestoreLook {
    /// (pod uid, port, boot ns): a Unix listener's port is 0, as its incident's is.
    seen: Vec<(String, u16, u64)>,
}

impl RestoreLook {
    /// Remembers a listener of cgroup `cgroup_id` on `port` at `ts`, when the
    /// cgroup is a pod's.
    pub(super) fn remember(&mut self, cgroups: &CgroupIndex, cgroup_id: u64, port: u16, ts: u64) {
        if let Some(owner) = cgroups
            .path(cgroup_id)
            .and_then(|p| PodOwner::of(&cgroup_path::parse(p)))
        {
            self.seen.push((owner.pod_uid.to_string(), port, ts));
        }
    }

    /// `now`, or earlier while one of these listeners waits in the reorder window
    /// (`released`: the newest fact it let go; at most a second past `window_ns`):
    /// the incidents it resolves do not time out before it is taken in.
    pub(super) fn advance_bound(&self, now: u64, released: Option<u64>, window_ns: u64) -> u64 {
        let most = window_ns.saturating_add(WAIT_PAST_WINDOW_NS);
        self.seen
            .iter()
            .map(|(_, _, ts)| *ts)
            .filter(|ts| released.is_none_or(|r| r < *ts) && now < ts.saturating_add(most))
            .min()
            .map_or(now, |ts| now.min(ts))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Whether `inc` was resolved by one of these listeners.
    pub(super) fn resolved(&self, inc: &Incident) -> bool {
        self.seen.iter().any(|(uid, port, ts)| {
            *uid == inc.pod_uid && *port == inc.port && inc.listener_ready_at == Some(*ts)
        })
    }
}
