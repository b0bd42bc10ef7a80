//! `sidecar-race-agent report`: which workloads suffer most from sidecar races, and
//! the fix for each, as evidence for prioritising their migration to native sidecars.
//!
//! Evidence comes from Prometheus (the agents' metrics over a range, [`prometheus`]) or
//! straight from agents (their `/api/v1/incidents`, [`agents`]); both fill the same
//! [`Fleet`], which [`build`] ranks and [`render`] prints.
//!
//! One module per job: [`input`] says where evidence comes from and reads it,
//! [`fleet`] holds it, [`rank`] ranks it into the [`Report`] (its doc says how),
//! [`fixes`] gives each line its fixes, [`plan`] joins them with `lint`'s migration.
//! Through a federating or Thanos-style Prometheus, [`promql`] keeps the cluster label
//! in every query ([`cluster_label`]: the one given, or the first convention the
//! series carry) and [`rollup`] sums each workload over its clusters for the
//! fleet-wide ranking. [`migration`] gives each workload whose template the series
//! date a verdict on the starts since its last change ([`migration_query`] splits
//! the evidence there, [`migration_text`] says it). [`pod_timeline`] reads one pod's incidents from its node's
//! agent for `timeline POD`, and [`timeline_text`] prints their timelines.
//! [`words`] and [`rows`] are what every format says of a report (its headline, a
//! workload's line as cells); [`render`] prints the text formats and JSON, [`html`]
//! the self-contained page, with the top incidents' timelines as swimlanes.

pub mod agents;
pub mod client;
pub mod cluster_label;
pub mod error;
pub mod fixes;
pub mod fleet;
pub mod html;
pub mod input;
pub mod migration;
pub mod migration_query;
pub mod migration_text;
pub mod plan;
pub mod pod_timeline;
pub mod prom_api;
pub mod prometheus;
pub mod promql;
pub mod rank;
pub mod render;
pub mod rollup;
pub mod rows;
pub mod table;
pub mod timeline_text;
pub mod via_api;
pub mod words;

#[cfg(test)]
mod tests;

pub use self::{
    error::ReportError,
    fixes::Fix,
    fleet::{
        Clusters, Evidence, Fleet, IncidentCount, RefusalCount, Source, WorkloadKey, parse_kind,
        parse_pattern,
    },
    input::{Input, collect},
    rank::{
        FleetReport, FleetWorkload, Report, SidecarReport, WorkloadReport, build, build_verified,
    },
};
