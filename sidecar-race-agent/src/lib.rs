//! sidecar-race agent: kernel facts about refused connections and listeners, turned
//! into evidence of sidecar startup and drain races.

pub mod agent;
pub mod cgroups;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod detect;
pub mod events;
pub mod http;
pub mod incident_logs;
pub mod inventory;
pub mod k8s_events;
pub mod kernel;
pub mod lint;
pub mod log_budget;
pub mod logging;
pub mod metrics;
pub mod mountinfo;
pub mod outcome;
pub mod pipeline;
pub mod report;
pub mod shutdown;
pub mod stream;
pub mod suppressed;
pub mod token_bucket;
pub mod trace_record;
pub mod trace_view;

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod test_facts;
