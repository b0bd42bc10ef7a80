//! What the detector keeps of a pod's in-place restarts of all containers (KEP-5532);
//! `restart` finds them.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// The in-place restarts of one pod seen so far.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(super) struct InPlaceStarts {
    /// How many were seen: the pod's latest start is this one (0: as created).
    pub(super) count: u32,
    /// When the latest began: the earliest of its container cgroups seen.
    pub(super) at: Option<u64>,
    /// The latest restart's container instances, by container name: a second instance
    /// of a name that ended `RestartingAllContainers` is the next restart's.
    pub(super) members: BTreeMap<String, String>,
    /// Container ids of the restarts before (the newest few): a status still naming
    /// one of them while the next restart is under way never joins that one.
    #[serde(default)]
    pub(super) earlier: VecDeque<String>,
}

/// Ids of earlier restarts' instances remembered per pod.
pub(super) const EARLIER_PER_POD: usize = 64;
