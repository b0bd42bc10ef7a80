//! From kernel events to incidents: attribution, facts, the reorder window, the
//! detector. Owned by the daemon's loop and read by the HTTP API under one lock; its
//! totals are published after each step for the metrics and logs, which never wait
//! for that lock.

mod accounting;
mod accounts;
mod attributor;
mod detection;
pub mod outcome;
#[cfg(test)]
mod process_tests;
pub(crate) mod reorder;
mod restore_look;
mod snapshot;
mod state;
pub(crate) mod suppressed;
#[cfg(test)]
mod tests;
pub mod totals;
mod views;

pub use self::{
    accounting::POD_START_NAME_WAIT_NS,
    snapshot::{PipelineSnapshot, Restored, SnapshotSummary},
    state::{Pipeline, PipelineCounts},
    views::wall,
};

#[cfg(test)]
pub use self::views::views_rendered;
