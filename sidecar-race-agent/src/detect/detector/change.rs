//! What a fact or the passing of time changed, as the pipeline reads it.

use crate::detect::incident::Phase;

/// Why a refusal was not counted in any incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotARace {
    /// Not pod-local (another pod, another node, a node port).
    Other,
    /// A container refused on a port it serves itself (e.g. its own exec probe).
    SelfRefusal,
}

/// What a fact or the passing of time changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Opened(u64),
    /// Another refusal counted in an incident.
    Refused(u64),
    /// An open incident's phase is now known better.
    Rephased {
        id: u64,
        from: Phase,
    },
    Resolved(u64),
    /// Refusals that are not a race (at once, or an incident that turned out not to be).
    NotARace {
        why: NotARace,
        refused: u64,
    },
    /// The agent saw a pod start: its cgroup created (`start` 0), or its `start`-th
    /// in-place restart of all containers (KEP-5532).
    PodStarted {
        pod_uid: String,
        start: u32,
    },
}

impl Change {
    /// The incident this change is about.
    pub fn incident(&self) -> Option<u64> {
        match self {
            Change::Opened(id)
            | Change::Refused(id)
            | Change::Rephased { id, .. }
            | Change::Resolved(id) => Some(*id),
            Change::NotARace { .. } | Change::PodStarted { .. } => None,
        }
    }
}
