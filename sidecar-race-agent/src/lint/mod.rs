//! `sidecar-race-agent lint`: race-prone pod templates found before they race. Each
//! workload's pod template is analysed with the agent's own role logic
//! ([`crate::pods::pod_info::PodInfo`]); [`rules`] turns what it finds into
//! findings with stable IDs, [`fix`] writes the native-sidecar migration.
//!
//! [`load`] reads the manifests' workloads ([`workload`]), [`options`] holds what
//! lint is told besides them, [`outcome`] runs the rules and drops what the ignore
//! annotation suppresses, [`finding`] is what it reports and [`render`] prints it.

pub mod cluster;
pub mod finding;
pub mod fix;
pub mod injection;
pub mod input;
pub mod known;
pub mod load;
pub mod mesh_config;
pub mod node;
pub mod options;
pub mod outcome;
pub mod refs;
pub mod render;
pub mod rewrite;
pub mod rules;
pub mod sockets;
pub mod workload;

pub use self::{
    finding::{Finding, Rule, Severity},
    input::Location,
    load::{load, namespaces},
    options::{KubeVersion, Options},
    outcome::{IGNORE_ANNOTATION, Outcome, ignores, lint},
    workload::Workload,
};
