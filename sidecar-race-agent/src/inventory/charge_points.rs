//! The containers and pods the kernel charges budgets to (its `CHARGE_POINTS` map):
//! every live cgroup that is the top of a container or a pod, not its sub-cgroups, so
//! a container with a delegated cgroup tree spends one budget (SECURITY.md).

use std::collections::{HashMap, HashSet};

use super::{
    cgroup_path::{self, PathInfo},
    cgroups::CgroupIndex,
};

/// Where the marks go: the kernel map, or a set in tests.
pub trait Marks {
    fn mark(&mut self, cgroup_id: u64) -> Result<(), String>;
    fn unmark(&mut self, cgroup_id: u64);
}

impl Marks for crate::kernel::probes::Probes {
    fn mark(&mut self, cgroup_id: u64) -> Result<(), String> {
        self.mark_charge_point(cgroup_id).map_err(|e| e.to_string())
    }
    fn unmark(&mut self, cgroup_id: u64) {
        self.unmark_charge_point(cgroup_id);
    }
}

#[derive(Default)]
pub struct ChargePoints {
    /// Cgroup ids marked in the kernel.
    marked: HashSet<u64>,
    /// Whether each cgroup id seen is a charge point (a path never changes for an id).
    is_point: HashMap<u64, bool>,
    generation: Option<u64>,
    /// Marks the kernel map had no room for.
    pub failed: u64,
}

impl ChargePoints {
    /// Starts from the marks the kernel map already holds (pins an earlier agent left),
    /// so that the first sync removes those of cgroups gone while no agent ran.
    pub fn with_marked(marked: impl IntoIterator<Item = u64>) -> Self {
        Self {
            marked: marked.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Brings the marks in line with the index, when it changed since the last call.
    pub fn sync(&mut self, index: &CgroupIndex, marks: &mut impl Marks) {
        if self.generation == Some(index.generation()) {
            return;
        }
        self.generation = Some(index.generation());
        let mut want = HashSet::new();
        for (id, path) in index.live() {
            if *self
                .is_point
                .entry(id)
                .or_insert_with(|| is_charge_point(path))
            {
                want.insert(id);
            }
        }
        self.is_point
            .retain(|id, _| want.contains(id) || index.path(*id).is_some());
        for gone in self.marked.difference(&want) {
            marks.unmark(*gone);
        }
        for new in want.difference(&self.marked) {
            if let Err(e) = marks.mark(*new) {
                self.failed += 1;
                tracing::debug!("cannot mark cgroup {new} for budgets: {e}");
            }
        }
        self.marked = want;
    }
}

/// Whether the cgroup at `path` is the top of a container or a pod: it is one, and
/// its parent is not the same one (a sub-cgroup, or a conmon scope inside a pod).
pub fn is_charge_point(path: &str) -> bool {
    let info = cgroup_path::parse(path);
    if !matches!(
        info,
        PathInfo::PodContainer { .. } | PathInfo::Pod { .. } | PathInfo::Container { .. }
    ) {
        return false;
    }
    let parent = path
        .trim_end_matches('/')
        .rsplit_once('/')
        .map_or("/", |(p, _)| p);
    cgroup_path::parse(parent) != info
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "/kubepods/burstable/pod6f2c1a6e-8b0f-4d8e-9a53-3c1d2e4f5a6b";

    fn container() -> String {
        format!("{POD}/{}", "a".repeat(64))
    }

    #[derive(Default)]
    struct Set(HashSet<u64>);

    impl Marks for Set {
        fn mark(&mut self, id: u64) -> Result<(), String> {
            self.0.insert(id);
            Ok(())
        }
        fn unmark(&mut self, id: u64) {
            self.0.remove(&id);
        }
    }

    #[test]
    fn containers_and_pods_are_charge_points_their_sub_cgroups_are_not() {
        assert!(is_charge_point(POD));
        assert!(is_charge_point(&container()));
        assert!(!is_charge_point(&format!("{}/init.scope", container())));
        assert!(!is_charge_point(&format!("{}/a/b/c", container())));
        assert!(!is_charge_point("/kubepods/burstable"));
        assert!(!is_charge_point("/system.slice/containerd.service"));
        assert!(!is_charge_point("/"));
    }

    #[test]
    fn marks_follow_cgroups_made_and_removed() {
        let dir = std::env::temp_dir().join(format!("sr-charge-{}", std::process::id()));
        let mut index = CgroupIndex::new(&dir, 0);
        let (mut points, mut set) = (ChargePoints::default(), Set::default());
        index.created(2, POD);
        index.created(3, &container());
        index.created(4, &format!("{}/sub", container()));
        index.created(5, "/system.slice");
        points.sync(&index, &mut set);
        assert_eq!(set.0, HashSet::from([2, 3]));
        index.removed(3, &container(), 10);
        points.sync(&index, &mut set);
        assert_eq!(set.0, HashSet::from([2]), "a removed container is unmarked");
    }

    #[test]
    fn marks_an_earlier_agent_left_for_gone_cgroups_are_removed_at_the_first_sync() {
        let dir = std::env::temp_dir().join(format!("sr-charge-adopt-{}", std::process::id()));
        let mut index = CgroupIndex::new(&dir, 0);
        index.created(2, POD);
        // 9: a container removed while no agent ran; its mark is in the pinned map.
        let mut set = Set(HashSet::from([2, 9]));
        let mut points = ChargePoints::with_marked(set.0.clone());
        points.sync(&index, &mut set);
        assert_eq!(set.0, HashSet::from([2]));
    }
}
