//! Detection, the pipeline's stage after the reorder window: released facts into the
//! detector and time passed, returned as what changed with the refusals the step
//! found were no race already tallied, so the pipeline's counts and accounting each
//! read a step's changes once.

use crate::{
    detect::{Change, Detector, Fact, PodMeta, detector::NotARace},
    inventory::Inventory,
};

/// Refusals that did not become incidents, by why.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct NotRaces {
    /// Not pod-local (or not tied to their hostNetwork pod).
    pub(super) other: u64,
    /// A container's own, on a port it serves itself (its own probes).
    pub(super) self_refusals: u64,
}

impl NotRaces {
    pub(super) fn add(&mut self, more: NotRaces) {
        self.other += more.other;
        self.self_refusals += more.self_refusals;
    }

    fn count(&mut self, change: &Change) {
        if let Change::NotARace { why, refused } = change {
            match why {
                NotARace::Other => self.other += refused,
                NotARace::SelfRefusal => self.self_refusals += refused,
            }
        }
    }
}

/// What one step of the detector changed.
#[derive(Debug, Default)]
pub(super) struct Detected {
    pub(super) changes: Vec<Change>,
    /// The refusals among `changes` that were no race.
    pub(super) not_races: NotRaces,
}

/// Feeds `facts` to `detector`, then lets its time pass to `advance_to`. `earlier`
/// are the step's changes from before (pods forgotten), counted with the rest.
pub(super) fn detect(
    detector: &mut Detector,
    meta: &dyn PodMeta,
    facts: impl IntoIterator<Item = Fact>,
    advance_to: u64,
    earlier: Vec<Change>,
) -> Detected {
    let mut changes = earlier;
    for fact in facts {
        changes.extend(detector.observe(fact, meta));
    }
    changes.extend(detector.advance(advance_to, meta));
    let mut not_races = NotRaces::default();
    for c in &changes {
        not_races.count(c);
    }
    Detected { changes, not_races }
}

/// The detector's state of pods gone from both the pod source and the cgroup tree
/// (their removal event was lost): their open incidents end as if removed at `now`.
pub(super) fn forget_gone_pods(
    detector: &mut Detector,
    inventory: &Inventory,
    now: u64,
) -> Vec<Change> {
    let with_cgroups = inventory.pods_with_cgroups();
    let listed = |uid: &str| inventory.pods.pod(uid).is_some();
    let gone: Vec<String> = detector
        .tracked_pod_uids()
        .filter(|uid| !listed(uid) && !with_cgroups.contains(*uid))
        .map(str::to_string)
        .collect();
    forget_pods(detector, &inventory.pods, &gone, now)
}

/// The detector's state of `pods`, ended at `now` as a lost removal ends it.
pub(super) fn forget_pods(
    detector: &mut Detector,
    meta: &dyn PodMeta,
    pods: &[String],
    now: u64,
) -> Vec<Change> {
    let mut changes = Vec::new();
    for uid in pods {
        changes.extend(detector.forget_pod(now, uid, meta));
    }
    changes
}
