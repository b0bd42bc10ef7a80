//! sidecar-race agent: kernel facts about refused connections and listeners, turned
//! into evidence of sidecar startup and drain races.

pub mod admission;
pub(crate) mod agent;
pub(crate) mod api;
pub(crate) mod checkpoint;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod daemon;
pub mod detect;
pub mod http;
pub mod ingest;
pub mod inventory;
pub mod kernel;
pub(crate) mod kube_yaml;
pub mod lint;
pub mod logging;
pub(crate) mod names;
pub(crate) mod node_lock;
pub(crate) mod outbound;
pub mod pipeline;
pub mod pods;
pub mod report;
pub(crate) mod shutdown;
pub mod sinks;
pub(crate) mod state_file;
pub mod trace;

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod test_facts;
