//! sidecar-race agent: kernel facts about refused connections and listeners, turned
//! into evidence of sidecar startup and drain races.

pub mod admission;
pub(crate) mod agent;
pub mod checkpoint;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod detect;
pub mod http;
pub mod ingest;
pub mod inventory;
pub mod kernel;
pub mod kube_yaml;
pub mod lint;
pub mod logging;
pub mod node_lock;
pub mod outbound;
pub mod pipeline;
pub mod pods;
pub mod report;
pub(crate) mod shutdown;
pub mod sinks;
pub mod state_file;
pub mod trace;

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod test_facts;
