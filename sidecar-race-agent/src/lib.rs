//! sidecar-race agent: kernel facts about refused connections and listeners, turned
//! into evidence of sidecar startup and drain races.

pub mod admission;
pub mod agent;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod detect;
pub mod http;
pub(crate) mod incident_logs;
pub mod ingest;
pub mod inventory;
pub mod k8s_events;
pub mod kernel;
pub mod lint;
pub(crate) mod log_budget;
pub mod logging;
pub mod metrics;
pub mod outcome;
pub mod pipeline;
pub mod report;
pub(crate) mod shutdown;
pub(crate) mod suppressed;
pub(crate) mod token_bucket;
pub mod trace;

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod test_facts;
