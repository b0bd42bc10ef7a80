//! The report as an aligned text table, a Markdown table (for tickets and docs) or
//! JSON (the [`Report`] as is). Unknown values are "-" in text, `null` in JSON. When
//! lines name their cluster, a CLUSTER column says which, and the fleet-wide roll-up
//! comes first as a table of its own.

use std::fmt::Write as _;

use clap::ValueEnum;

use super::{
    cluster_label::{CONVENTIONS, LabelFrom},
    fixes::Fix,
    fleet::Source,
    rank::{FleetReport, Report, WorkloadReport},
    table::{self, Column, md_escape, printable},
};
use crate::detect::{Phase, processes::summary};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Markdown,
    Json,
}

pub fn render(report: &Report, format: Format) -> String {
    match format {
        Format::Table => text(report),
        Format::Markdown => markdown(report),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(report).expect("a report serializes");
            s.push('\n');
            s
        }
    }
}

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

/// The per-cluster lines' columns and rows.
fn lines_table(r: &Report, md: bool) -> (Vec<Column>, Vec<Vec<String>>) {
    let named = r.workloads.iter().any(|w| w.cluster.is_some());
    let mut columns = COLUMNS.to_vec();
    if named {
        columns.insert(1, CLUSTER);
    }
    let rows = r
        .workloads
        .iter()
        .map(|w| {
            let mut row = cells(w, md);
            if named {
                row.insert(1, escaped(w.cluster.as_deref().unwrap_or("-"), md));
            }
            row
        })
        .collect();
    (columns, rows)
}

/// The fleet-wide roll-up's columns and rows.
fn fleet_table(f: &FleetReport, md: bool) -> (Vec<Column>, Vec<Vec<String>>) {
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

fn text(r: &Report) -> String {
    let mut out = format!("{}\n", printable(&headline(r)));
    if r.workloads.is_empty() {
        return out + &footer(r);
    }
    if let Some(f) = &r.fleet {
        let _ = writeln!(out, "\n{}\n", printable(&fleet_headline(f)));
        let (columns, rows) = fleet_table(f, false);
        out.push_str(&table::aligned(&columns, &rows));
        let _ = writeln!(out, "\n{}", printable(&by_cluster_headline(r)));
    }
    out.push('\n');
    let (columns, rows) = lines_table(r, false);
    out.push_str(&table::aligned(&columns, &rows));
    out.push_str("\nFixes:\n");
    for w in &r.workloads {
        let _ = writeln!(out, "{}. {}", w.rank, printable(&line_name(w)));
        for f in &w.fixes {
            let _ = writeln!(
                out,
                "   - {}: {}",
                printable(&fix_subject(f, false)),
                printable(&f.advice)
            );
        }
    }
    out + &footer(r)
}

fn markdown(r: &Report) -> String {
    let mut out = format!("## Sidecar race report\n\n{}\n", printable(&headline(r)));
    if r.workloads.is_empty() {
        return out + &footer(r);
    }
    if let Some(f) = &r.fleet {
        let _ = writeln!(
            out,
            "\n### Across clusters\n\n{}\n",
            md_escape(&fleet_headline(f))
        );
        let (columns, rows) = fleet_table(f, true);
        out.push_str(&table::markdown(&columns, &rows));
        let _ = writeln!(
            out,
            "\n### By cluster\n\n{}",
            md_escape(&by_cluster_headline(r))
        );
    }
    out.push('\n');
    let (columns, rows) = lines_table(r, true);
    out.push_str(&table::markdown(&columns, &rows));
    out.push_str("\n### Fixes\n\n");
    for w in &r.workloads {
        let _ = writeln!(out, "{}. **{}**", w.rank, md_escape(&line_name(w)));
        for f in &w.fixes {
            let _ = writeln!(
                out,
                "   - {}: {}",
                printable(&fix_subject(f, true)),
                md_escape(&f.advice)
            );
        }
    }
    out + &footer(r)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `, top 3 shown` when `--top` cut the list.
fn shown(shown: usize, total: usize) -> String {
    if shown < total {
        format!(", top {shown} shown")
    } else {
        String::new()
    }
}

fn headline(r: &Report) -> String {
    let from = match &r.source {
        Source::Prometheus { url, range } => {
            format!("Sidecar races in the last {range}, from Prometheus at {url}")
        }
        Source::Agents { urls } => format!(
            "Sidecar races in the incident history of {} agent{} ({})",
            urls.len(),
            plural(urls.len()),
            urls.join(", ")
        ),
    };
    if r.workloads_total == 0 {
        return format!("{from}: none.");
    }
    let ranked =
        "ranked by affected pod starts, then startup incidents, refusals and race window p95.";
    match &r.fleet {
        Some(f) => format!(
            "{from}: {} workload{} in {} cluster{} ({}), {ranked}",
            f.workloads_total,
            plural(f.workloads_total),
            f.clusters.len(),
            plural(f.clusters.len()),
            f.clusters.join(", "),
        ),
        None => format!(
            "{from}: {} workload{}{}, {ranked}",
            r.workloads_total,
            plural(r.workloads_total),
            shown(r.workloads.len(), r.workloads_total),
        ),
    }
}

fn fleet_headline(f: &FleetReport) -> String {
    let from = match f.cluster_label_from {
        LabelFrom::Flag => String::new(),
        LabelFrom::Series => format!(
            ", the first of `{}` the series carry",
            CONVENTIONS.join("`, `")
        ),
    };
    format!(
        "Across clusters (label `{}`{from}), each workload's evidence summed over its clusters: {} workload{}{}.",
        f.cluster_label,
        f.workloads_total,
        plural(f.workloads_total),
        shown(f.workloads.len(), f.workloads_total),
    )
}

fn by_cluster_headline(r: &Report) -> String {
    format!(
        "By cluster, one line per workload and cluster: {} line{}{}.",
        r.workloads_total,
        plural(r.workloads_total),
        shown(r.workloads.len(), r.workloads_total),
    )
}

fn footer(r: &Report) -> String {
    // Across clusters, a workload counts once however many clusters it started in.
    let without = match &r.fleet {
        Some(f) => Some(f.workloads_without_incidents),
        None => r.workloads_without_incidents,
    };
    match without {
        Some(n) if n > 0 => format!(
            "\n{n} other workload{} started pods without any incident.\n",
            plural(n)
        ),
        _ => String::new(),
    }
}

fn escaped(s: &str, md: bool) -> String {
    if md { md_escape(s) } else { s.to_string() }
}

fn cells(w: &WorkloadReport, md: bool) -> Vec<String> {
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

/// `Deployment shop/checkout`; "?" for a part the agents did not know.
pub fn workload_name(w: &WorkloadReport) -> String {
    match (&w.namespace, &w.workload_kind, &w.workload) {
        (None, None, None) => "(unknown workload: no pod metadata)".into(),
        (ns, kind, name) => format!(
            "{} {}/{}",
            kind.as_deref().unwrap_or("?"),
            ns.as_deref().unwrap_or("?"),
            name.as_deref().unwrap_or("?")
        ),
    }
}

/// The workload, and its cluster when it names one: `Deployment shop/checkout in
/// cluster east`.
fn line_name(w: &WorkloadReport) -> String {
    match &w.cluster {
        Some(c) => format!("{} in cluster {c}", workload_name(w)),
        None => workload_name(w),
    }
}

/// `startup: app → istio-proxy:15001 (classic, 12 refusals)`; `stuck job: keeps the
/// Job running → cloud-sql-proxy (classic)`
fn fix_subject(f: &Fix, md: bool) -> String {
    let code = |s: String| if md { format!("`{s}`") } else { s };
    let Some(port) = f.port else {
        let what = if md { "**stuck job**" } else { "stuck job" };
        return format!(
            "{what}: Job pods kept running by {} ({})",
            code(name(&f.sidecar).to_string()),
            f.pattern.as_str()
        );
    };
    let kind = match f.kind {
        crate::detect::Kind::InitDeadlock => "init deadlock, ",
        _ => "",
    };
    let phase = if md {
        format!("**{}**", f.phase.as_str())
    } else {
        f.phase.as_str().to_string()
    };
    let refusals = if f.phase == Phase::Unresolved {
        "refused"
    } else {
        "refusals"
    };
    let mut by = String::new();
    if !f.processes.is_empty() {
        by = format!(": {}", summary(&f.processes));
    }
    if f.guarded {
        by.push_str(", guarded");
    }
    format!(
        "{phase}: {} → {} ({kind}{}, {} {refusals}{by})",
        code(name(&f.container).to_string()),
        code(format!("{}:{}", name(&f.sidecar), port)),
        f.pattern.as_str(),
        f.refusals
    )
}

fn name(n: &Option<String>) -> &str {
    n.as_deref().unwrap_or("?")
}

fn opt(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn seconds(v: Option<f64>) -> String {
    match v {
        Some(s) => format!("{s:.2}s"),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{pods::pod_info::Pattern, report::SidecarReport};

    fn report() -> Report {
        let fix = Fix {
            kind: crate::detect::Kind::SidecarRace,
            phase: Phase::Startup,
            sidecar: Some("istio-proxy".into()),
            pattern: Pattern::Classic,
            container: Some("app".into()),
            port: Some(15001),
            refusals: 12,
            move_to_init_containers: Some("istio-proxy".into()),
            startup_probe_port: Some(15001),
            advice: "Move istio-proxy from containers to initContainers.".into(),
            processes: vec![],
            guarded: false,
        };
        Report {
            source: Source::Agents {
                urls: vec!["http://a:9965".into()],
            },
            workloads_total: 1,
            workloads_without_incidents: None,
            workloads: vec![WorkloadReport {
                rank: 1,
                cluster: None,
                namespace: Some("shop".into()),
                workload_kind: Some("Deployment".into()),
                workload: Some("checkout".into()),
                sidecars: vec![SidecarReport {
                    name: Some("istio-proxy".into()),
                    pattern: Pattern::Classic,
                    phases: vec![Phase::Startup],
                    incidents: 3,
                }],
                pod_starts: None,
                affected_pod_starts: 3,
                affected_share: None,
                incidents: 3,
                startup_incidents: 3,
                stuck_job_pods: 0,
                refusals: 12,
                race_window_p50_seconds: Some(1.5),
                race_window_p95_seconds: None,
                phases: vec![Phase::Startup],
                misconfiguration: false,
                guarded: false,
                fixes: vec![fix],
            }],
            fleet: None,
        }
    }

    #[test]
    fn table_aligns_and_shows_unknowns_as_dashes() {
        let t = render(&report(), Format::Table);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[2].starts_with("#  WORKLOAD"), "{t}");
        let row = lines[3];
        assert!(
            row.starts_with("1  Deployment shop/checkout  istio-proxy (classic)"),
            "{t}"
        );
        assert!(row.contains(" -  "), "starts unknown: {t}");
        assert!(row.contains("1.50s"), "{t}");
        assert!(t.contains("   - startup: app → istio-proxy:15001 (classic, 12 refusals): Move"));
    }

    #[test]
    fn control_characters_in_names_are_shown_escaped() {
        let mut r = report();
        let w = &mut r.workloads[0];
        w.workload = Some("checkout\x1b[2J\x1b]0;pwned\x07".into());
        w.fixes[0].container = Some("app\r\nFAKE LINE".into());
        w.fixes[0].advice = "Move \u{202e}yxorp-oitsi\u{202c} now.\u{9b}31m".into();
        for format in [Format::Table, Format::Markdown] {
            let t = render(&r, format);
            assert!(
                !t.chars()
                    .any(|c| (c.is_control() && c != '\n') || matches!(c, '\u{202a}'..='\u{202e}')),
                "{format:?}: {t:?}"
            );
            assert!(t.contains(r"checkout\x1b[2J\x1b]0;pwned\x07"), "{t}");
            assert!(t.contains(r"app\x0d\x0aFAKE LINE"), "{t}");
            assert!(
                t.contains(r"Move \u{202e}yxorp-oitsi\u{202c} now.\x9b31m"),
                "{t}"
            );
            assert!(!t.lines().any(|l| l.starts_with("FAKE LINE")), "{t}");
        }
        // JSON carries the names as they are (its escaping is JSON's).
        let j = render(&r, Format::Json);
        assert!(j.contains(r"checkout\u001b[2J"), "{j}");
    }

    #[test]
    fn markdown_is_a_table() {
        let m = render(&report(), Format::Markdown);
        assert!(
            m.contains("| # | Workload | Sidecars | Pod starts | Affected starts |"),
            "{m}"
        );
        assert!(m.contains("|---:|---|---|---:|"), "{m}");
        assert!(
            m.contains("| 1 | Deployment shop/checkout | `istio-proxy` (classic) | - | 3 |"),
            "{m}"
        );
        assert!(m.contains(
            "1. **Deployment shop/checkout**\n   - **startup**: `app` → `istio-proxy:15001`"
        ));
    }
}
