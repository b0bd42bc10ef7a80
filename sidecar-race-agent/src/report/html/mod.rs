//! `report --format html`: one self-contained page to look at and forward. Nothing in
//! it is fetched: the style is inline, the charts and swimlanes are inline SVG, there is
//! no script, and a Content-Security-Policy of `default-src 'none'` keeps a browser
//! from fetching even if a name slipped through (every string from data is escaped:
//! [`escape`]).
//!
//! It is drawn from the report's model, as the other formats are (its rows are
//! [`crate::report::rows`]' cells, its sentences [`crate::report::words`]'), plus the
//! agents' incidents and, with `--manifests`/`--cluster --with-patches`, the patches:
//! the headline; the ranked workloads; then per workload its share of affected starts
//! and its race windows over time ([`chart`]), the verdict on its last template change
//! ([`crate::report::migration`]), its fixes with their patch, and its top incidents'
//! timelines as swimlanes ([`swimlane`]).
//!
//! DOM hooks, stable for tests and tools (docs/reference.md, "The html page"): the
//! ranking's rows and the workloads' articles carry `data-rank` and `data-workload`
//! (`Kind namespace/name`); charts `data-chart`; a migration's verdict
//! `data-verdict`; fixes `data-fix`, patches `data-patch`; the swimlanes' hooks are
//! [`swimlane`]'s.

pub mod chart;
pub mod escape;
pub mod style;
pub mod swimlane;

use std::fmt::Write as _;

use self::escape::text;
use crate::report::{
    agents::AgentIncident,
    migration::Verdict,
    migration_text,
    rank::{Report, WorkloadReport},
    rows::{PatchRow, fleet_table, lines_table},
    words::{by_cluster_headline, fix_subject, fleet_headline, footer, headline, workload_name},
};

/// The incidents drawn per workload, most refused first.
pub const TOP_INCIDENTS: usize = 3;

/// What the page shows.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    pub report: &'a Report,
    /// The agents' incidents (none when only Prometheus was read): each workload's
    /// windows over time and its top incidents come from them.
    pub incidents: &'a [AgentIncident],
    /// The patches of `--with-patches`, by rank.
    pub patches: Option<&'a [PatchRow]>,
}

impl<'a> Page<'a> {
    /// The report alone: no incidents, no patches.
    pub fn of(report: &'a Report) -> Self {
        Self {
            report,
            incidents: &[],
            patches: None,
        }
    }
}

/// The whole page.
pub fn page(p: &Page) -> String {
    let r = p.report;
    let mut out = String::from(concat!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
        "<title>Sidecar race report</title>\n<style>"
    ));
    out.push_str(style::CSS);
    out.push_str("</style>\n</head>\n<body>\n<header><h1>Sidecar race report</h1>");
    let _ = write!(out, r#"<p class="headline">{}</p>"#, text(&headline(r)));
    out.push_str("</header>\n");
    if r.workloads.is_empty() {
        let _ = write!(out, r#"<p class="note">{}</p>"#, text(footer(r).trim()));
        out.push_str("</body>\n</html>\n");
        return out;
    }
    if let Some(f) = &r.fleet {
        let _ = write!(
            out,
            r#"<section id="fleet"><h2>Across clusters</h2><p class="note">{}</p>"#,
            text(&fleet_headline(f))
        );
        let (columns, rows) = fleet_table(f, false);
        let ranks: Vec<&WorkloadReport> = f.workloads.iter().map(|w| &w.line).collect();
        out.push_str(&table("fleet", &columns, &rows, &ranks));
        let _ = write!(
            out,
            r#"</section><p class="note">{}</p>"#,
            text(&by_cluster_headline(r))
        );
    }
    out.push_str(r#"<section id="workloads"><h2>Ranked workloads</h2>"#);
    let (columns, rows) = lines_table(r, false);
    let ranks: Vec<&WorkloadReport> = r.workloads.iter().collect();
    out.push_str(&table("ranking", &columns, &rows, &ranks));
    let _ = write!(
        out,
        r#"<p class="note">{}</p></section>"#,
        text(footer(r).trim())
    );
    for w in &r.workloads {
        out.push_str(&workload(p, w));
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// A table of ranked lines; each row carries its line's hooks.
fn table(
    id: &str,
    columns: &[crate::report::table::Column],
    rows: &[Vec<String>],
    lines: &[&WorkloadReport],
) -> String {
    let mut out = format!(r#"<table class="ranking" data-table="{id}"><thead><tr>"#);
    for c in columns {
        let class = if c.numeric { r#" class="num""# } else { "" };
        let _ = write!(out, "<th{class}>{}</th>", text(c.md_header));
    }
    out.push_str("</tr></thead><tbody>");
    for (row, w) in rows.iter().zip(lines) {
        let _ = write!(
            out,
            r#"<tr data-rank="{}" data-workload="{}"{}>"#,
            w.rank,
            text(&workload_name(w)),
            cluster_hook(w),
        );
        for (cell, c) in row.iter().zip(columns) {
            let class = if c.numeric { r#" class="num""# } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", text(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

fn cluster_hook(w: &WorkloadReport) -> String {
    w.cluster
        .as_deref()
        .map(|c| format!(r#" data-cluster="{}""#, text(c)))
        .unwrap_or_default()
}

/// The agents' incidents of `w`'s workload (by namespace, kind and name: an agent
/// does not know its cluster), migration evidence only.
fn incidents_of<'a>(p: &Page<'a>, w: &WorkloadReport) -> Vec<&'a AgentIncident> {
    p.incidents
        .iter()
        .filter(|i| {
            i.namespace == w.namespace
                && i.workload.as_ref().map(|r| &r.kind) == w.workload_kind.as_ref()
                && i.workload.as_ref().map(|r| &r.name) == w.workload.as_ref()
                && i.kind != "stuck_job"
                && i.kind != "app_not_ready"
        })
        .collect()
}

/// The incidents to draw: resolved before open, most refused first, then newest.
fn top(mut incidents: Vec<&AgentIncident>) -> Vec<&AgentIncident> {
    incidents.sort_by(|a, b| {
        (b.state == "resolved")
            .cmp(&(a.state == "resolved"))
            .then(b.refused_count.cmp(&a.refused_count))
            .then(b.id.cmp(&a.id))
    });
    incidents.truncate(TOP_INCIDENTS);
    incidents
}

/// The verdict as JSON names it (`fixed`, `still_racing`, `not_enough_starts`).
fn verdict_hook(v: Verdict) -> &'static str {
    match v {
        Verdict::Fixed => "fixed",
        Verdict::StillRacing => "still_racing",
        Verdict::NotEnoughStarts => "not_enough_starts",
    }
}

/// One workload's article: charts, its migration's verdict, fixes and patch, top
/// incidents.
fn workload(p: &Page, w: &WorkloadReport) -> String {
    let name = workload_name(w);
    let cluster = w
        .cluster
        .as_deref()
        .map(|c| format!(r#" <span class="tag">cluster {}</span>"#, text(c)))
        .unwrap_or_default();
    let mut out = format!(
        r#"<article class="workload" data-rank="{}" data-workload="{}"{}><h2>{}. {}{cluster}</h2><div class="charts">"#,
        w.rank,
        text(&name),
        cluster_hook(w),
        w.rank,
        text(&name),
    );
    let mine = incidents_of(p, w);
    out.push_str(&chart::share(w));
    out.push_str(&chart::windows(
        &chart::points(&mine),
        w.race_window_p50_seconds,
        w.race_window_p95_seconds,
    ));
    out.push_str("</div>");
    if let Some(m) = &w.migration {
        let _ = write!(
            out,
            r#"<h3>Since the template change</h3><p class="migration" data-verdict="{}"><strong>{}</strong>: {}</p>"#,
            text(verdict_hook(m.verdict)),
            text(m.verdict.words()),
            text(&migration_text::sentence(m)),
        );
    }
    out.push_str("<h3>Fix</h3><ul class=\"fixes\">");
    for f in &w.fixes {
        let _ = write!(
            out,
            r#"<li data-fix="{}"><strong>{}</strong>: {}</li>"#,
            text(f.phase.as_str()),
            text(&fix_subject(f, false)),
            text(&f.advice),
        );
    }
    out.push_str("</ul>");
    let patch = p
        .patches
        .and_then(|ps| ps.iter().find(|pr| pr.rank == w.rank));
    match (patch, p.patches) {
        (Some(pr), _) => {
            let _ = write!(
                out,
                r#"<p class="note">The kustomization fragment for {} (<code>lint --fix</code> writes the same change into the manifest):</p><pre class="patch" data-patch="{}">{}</pre>"#,
                text(&pr.workload),
                w.rank,
                escape::lines(&pr.patch),
            );
        }
        (None, Some(_)) => out.push_str(
            r#"<p class="note">No patch: the manifests hold no such workload.</p>"#,
        ),
        (None, None) => out.push_str(
            r#"<p class="note">Its patch: run the report with <code>--manifests PATH --with-patches</code> (or <code>--cluster --with-patches</code>).</p>"#,
        ),
    }
    let top = top(mine);
    if !top.is_empty() {
        let _ = write!(
            out,
            r#"<h3>Top incidents</h3><p class="note">The {} most refused of the {} incident{} the agents hold for it, each as a lane per container: refusals are the red marks on the app's lane, the sidecar serves where its lane is green.</p>"#,
            top.len(),
            incidents_of(p, w).len(),
            if incidents_of(p, w).len() == 1 {
                ""
            } else {
                "s"
            },
        );
        for i in top {
            out.push_str(&swimlane::incident(i));
        }
    }
    out.push_str("</article>\n");
    out
}

#[cfg(test)]
mod tests;
