//! A report's lines as rows of cells under their columns, for every format that
//! shows them as a table (text, Markdown, html): one list of columns, one way to fill
//! them; and the migration plan's patch rows, which every format shows too.

use serde::Serialize;

use super::{
    migration_text,
    rank::{FleetReport, Report, WorkloadReport},
    table::{Column, md_escape},
    words::{name, opt, seconds, workload_name},
};

const fn column(header: &'static str, md_header: &'static str, numeric: bool) -> Column {
    Column {
        header,
        md_header,
        numeric,
    }
}

/// A workload line's columns.
const COLUMNS: [Column; 11] = [
    column("#", "#", true),
    column("WORKLOAD", "Workload", false),
    column("SIDECARS", "Sidecars", false),
    column("STARTS", "Pod starts", true),
    column("AFFECTED", "Affected starts", true),
    column("SHARE", "Share affected", true),
    column("INCIDENTS", "Incidents", true),
    column("REFUSALS", "Refusals", true),
    column("P50", "Window p50", true),
    column("P95", "Window p95", true),
    column("PHASES", "Phases", false),
];
/// After `#`, when any line names its cluster.
const CLUSTER: Column = column("CLUSTER", "Cluster", false);
/// After `WORKLOAD`, in the fleet-wide roll-up.
const CLUSTERS: Column = column("CLUSTERS", "Clusters", false);

/// The per-cluster lines' columns and rows (Markdown-escaped when `md`, else as is).
pub fn lines_table(r: &Report, md: bool) -> (Vec<Column>, Vec<Vec<String>>) {
    let named = r.workloads.iter().any(|w| w.cluster.is_some());
    let verified = migration_text::any(&r.workloads);
    let mut columns = COLUMNS.to_vec();
    if named {
        columns.insert(1, CLUSTER);
    }
    if verified {
        columns.push(migration_text::VERDICT);
    }
    let rows = r
        .workloads
        .iter()
        .map(|w| {
            let mut row = cells(w, md);
            if named {
                row.insert(1, escaped(w.cluster.as_deref().unwrap_or("-"), md));
            }
            if verified {
                row.push(migration_text::cell(w));
            }
            row
        })
        .collect();
    (columns, rows)
}

/// The fleet-wide roll-up's columns and rows.
pub fn fleet_table(f: &FleetReport, md: bool) -> (Vec<Column>, Vec<Vec<String>>) {
    let mut columns = COLUMNS.to_vec();
    columns.insert(2, CLUSTERS);
    let rows = f
        .workloads
        .iter()
        .map(|w| {
            let mut row = cells(&w.line, md);
            let clusters = if w.clusters.is_empty() {
                "-".to_string()
            } else {
                w.clusters.join(", ")
            };
            row.insert(2, escaped(&clusters, md));
            row
        })
        .collect();
    (columns, rows)
}

fn escaped(s: &str, md: bool) -> String {
    if md { md_escape(s) } else { s.to_string() }
}

pub fn cells(w: &WorkloadReport, md: bool) -> Vec<String> {
    let code = |s: &str| if md { format!("`{s}`") } else { s.to_string() };
    let sidecars = if w.sidecars.is_empty() {
        "-".to_string()
    } else {
        w.sidecars
            .iter()
            .map(|s| format!("{} ({})", code(name(&s.name)), s.pattern.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let phases = w
        .phases
        .iter()
        .map(|p| p.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let phases = if w.misconfiguration {
        format!("{phases}: misconfiguration, not a race")
    } else {
        phases
    };
    [
        w.rank.to_string(),
        workload_name(w),
        sidecars,
        opt(w.pod_starts),
        w.affected_pod_starts.to_string(),
        w.affected_share
            .map(|s| format!("{:.1}%", s * 100.0))
            .unwrap_or_else(|| "-".into()),
        w.incidents.to_string(),
        w.refusals.to_string(),
        seconds(w.race_window_p50_seconds),
        seconds(w.race_window_p95_seconds),
        phases,
    ]
    .iter()
    .map(|c| escaped(c, md))
    .collect()
}

/// The kustomize patch for one ranked workload (`report --with-patches`).
#[derive(Debug, Clone, Serialize)]
pub struct PatchRow {
    pub rank: usize,
    pub workload: String,
    /// A kustomization `patches:` fragment (JSON patch with its target).
    pub patch: String,
}
