//! Detection: kernel facts plus pod metadata → startup / drain / steady / unresolved
//! incidents with the sidecar, its pattern and the race window.

pub(crate) mod advice;
pub(crate) mod detector;
pub(crate) mod fact;
pub mod incident;
pub(crate) mod incident_log;
pub(crate) mod listener_table;
pub(crate) mod listeners;
pub(crate) mod pairs;
pub mod processes;
pub mod render;
pub mod service;
pub(crate) mod socket_view;
pub mod timeline;
pub mod timeline_view;
pub(crate) mod unix_listeners;

#[cfg(test)]
mod tests;

pub use crate::pods::pod_meta::{NoMeta, PodMeta};
pub use detector::{Change, Detector, DetectorConfig};
pub use fact::{Client, Fact};
pub use incident::{Incident, Kind, Phase, State};

#[cfg(test)]
mod bounds_tests;
