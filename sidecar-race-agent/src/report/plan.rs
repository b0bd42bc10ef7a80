//! `report --manifests`: the migration plan. The workloads that raced (the evidence
//! report, ranked by observed cost) come first; then the workloads of the manifests
//! that have not raced but that lint finds race-prone, ranked by static risk (worst
//! severity, then error findings, then findings). Each row names its sidecars and the
//! fix; `--with-patches` adds the kustomize patch of each workload found in the
//! manifests, whose startupProbe ports come from the runtime evidence.
//!
//! A manifest is deployed to any number of clusters, so a report with a fleet-wide
//! roll-up joins the manifests with the roll-up's workloads (and ranks), whose
//! evidence sums every cluster's.

use std::fmt::Write as _;

use serde::Serialize;

pub use super::rows::PatchRow;
use super::{
    html,
    rank::{Report, WorkloadReport},
    render,
};
use crate::lint::{self, Finding, Severity, Workload, rewrite};

/// Lint's findings for one workload that has not raced.
#[derive(Debug, Clone, Serialize)]
pub struct RiskRow {
    pub rank: usize,
    pub namespace: Option<String>,
    pub workload_kind: String,
    pub workload: String,
    pub sidecars: Vec<String>,
    pub worst_severity: Severity,
    pub findings: Vec<Finding>,
}

/// The evidence report joined with the manifests.
#[derive(Debug, Serialize)]
pub struct Plan {
    #[serde(flatten)]
    pub report: Report,
    /// Workloads read from the manifests.
    pub manifest_workloads: usize,
    /// Raced workloads found in the manifests.
    pub raced_in_manifests: usize,
    pub not_raced: Vec<RiskRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patches: Option<Vec<PatchRow>>,
}

/// The ranked workloads the manifests are joined with.
fn raced(report: &Report) -> Vec<&WorkloadReport> {
    match &report.fleet {
        Some(f) => f.workloads.iter().map(|w| &w.line).collect(),
        None => report.workloads.iter().collect(),
    }
}

fn same(w: &Workload, r: &WorkloadReport) -> bool {
    r.workload_kind.as_deref() == Some(w.kind.as_str())
        && r.workload.as_deref() == Some(w.name.as_str())
        && (w.namespace.is_none() || w.namespace == r.namespace)
}

/// The sidecars a workload's findings are about (their first container).
fn sidecars(findings: &[Finding]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in findings {
        let name = match f.rule {
            lint::Rule::InitWaitsForContainer => f.containers.get(1),
            lint::Rule::SleepBeforeApp => f.containers.get(1),
            lint::Rule::PreStopSleep => f.containers.last(),
            _ => f.containers.first(),
        };
        if let Some(n) = name
            && !out.contains(n)
        {
            out.push(n.clone());
        }
    }
    out
}

/// Evidence ports as lint options: each fix's sidecar and startupProbe port.
fn evidence_options(r: &WorkloadReport, base: &lint::Options) -> lint::Options {
    let mut opts = base.clone();
    for f in &r.fixes {
        let sidecar = f.move_to_init_containers.as_ref().or(f.sidecar.as_ref());
        if let (Some(s), Some(p)) = (sidecar, f.startup_probe_port) {
            opts.probe_ports.entry(s.clone()).or_insert(p);
        }
    }
    opts
}

pub fn plan(
    report: Report,
    workloads: &[Workload],
    opts: &lint::Options,
    with_patches: bool,
) -> Plan {
    let mut patches = Vec::new();
    let mut raced_in_manifests = 0;
    let raced = raced(&report);
    for r in &raced {
        let Some(w) = workloads.iter().find(|w| same(w, r)) else {
            continue;
        };
        raced_in_manifests += 1;
        if with_patches
            && let Some(patch) =
                rewrite::kustomize_patches(std::slice::from_ref(w), &evidence_options(r, opts))
        {
            patches.push(PatchRow {
                rank: r.rank,
                workload: w.display_name(),
                patch,
            });
        }
    }
    let mut not_raced: Vec<(Workload, Vec<Finding>)> = workloads
        .iter()
        .filter(|w| !raced.iter().any(|r| same(w, r)))
        .map(|w| {
            let findings = lint::lint(std::slice::from_ref(w), opts).findings;
            (w.clone(), findings)
        })
        .filter(|(_, f)| !f.is_empty())
        .collect();
    let risk = |f: &[Finding]| {
        let worst = f.iter().map(|f| f.severity).max();
        let errors = f.iter().filter(|f| f.severity == Severity::Error).count();
        (worst, errors, f.len())
    };
    not_raced.sort_by(|(a, fa), (b, fb)| {
        risk(fb)
            .cmp(&risk(fa))
            .then_with(|| (&a.namespace, &a.kind, &a.name).cmp(&(&b.namespace, &b.kind, &b.name)))
    });
    let first = raced.len() + 1;
    let rows: Vec<RiskRow> = not_raced
        .into_iter()
        .enumerate()
        .map(|(i, (w, findings))| {
            let rank = first + i;
            if with_patches
                && let Some(patch) = rewrite::kustomize_patches(std::slice::from_ref(&w), opts)
            {
                patches.push(PatchRow {
                    rank,
                    workload: w.display_name(),
                    patch,
                });
            }
            RiskRow {
                rank,
                namespace: w.namespace.clone(),
                workload_kind: w.kind.clone(),
                workload: w.name.clone(),
                sidecars: sidecars(&findings),
                worst_severity: findings
                    .iter()
                    .map(|f| f.severity)
                    .max()
                    .unwrap_or(Severity::Info),
                findings,
            }
        })
        .collect();
    Plan {
        report,
        manifest_workloads: workloads.len(),
        raced_in_manifests,
        not_raced: rows,
        patches: with_patches.then_some(patches),
    }
}

fn row_name(r: &RiskRow) -> String {
    match &r.namespace {
        Some(ns) => format!("{} {ns}/{}", r.workload_kind, r.workload),
        None => format!("{} {}", r.workload_kind, r.workload),
    }
}

/// The evidence report, then the not-raced workloads and the patches.
pub fn render(plan: &Plan, format: render::Format) -> String {
    if format == render::Format::Json {
        let mut s = serde_json::to_string_pretty(plan).expect("a plan serializes");
        s.push('\n');
        return s;
    }
    if format == render::Format::Html {
        return html::page(&html::Page {
            patches: plan.patches.as_deref(),
            ..html::Page::of(&plan.report)
        });
    }
    let md = format == render::Format::Markdown;
    let mut out = render::render(&plan.report, format);
    let _ = writeln!(
        out,
        "\n{} of the {} raced workload{} found in the manifests ({} workloads read).",
        plan.raced_in_manifests,
        raced(&plan.report).len(),
        if raced(&plan.report).len() == 1 {
            ""
        } else {
            "s"
        },
        plan.manifest_workloads
    );
    if !plan.not_raced.is_empty() {
        out.push_str(if md {
            "\n### Not raced yet, ranked by static risk (lint)\n\n"
        } else {
            "\nNot raced yet, ranked by static risk (lint findings in the manifests):\n\n"
        });
        let mut rows = vec![vec![
            "#".to_string(),
            "WORKLOAD".into(),
            "SIDECARS".into(),
            "RISK".into(),
            "FINDINGS".into(),
        ]];
        for r in &plan.not_raced {
            let ids: Vec<&str> = r.findings.iter().map(|f| f.id).collect();
            rows.push(vec![
                r.rank.to_string(),
                row_name(r),
                r.sidecars.join(","),
                r.worst_severity.as_str().into(),
                ids.join(","),
            ]);
        }
        if md {
            for (i, row) in rows.iter().enumerate() {
                let _ = writeln!(out, "| {} |", row.join(" | "));
                if i == 0 {
                    let _ = writeln!(out, "|{}|", vec!["---"; row.len()].join("|"));
                }
            }
        } else {
            out.push_str(&lint::render::columns(&rows));
        }
        out.push_str(if md { "\n#### Fixes\n\n" } else { "\nFixes:\n" });
        for r in &plan.not_raced {
            let _ = writeln!(out, "{}. {}", r.rank, row_name(r));
            for f in &r.findings {
                let _ = writeln!(out, "   - {} {}: {}.", f.id, f.rule.name(), f.fix);
            }
        }
    }
    if let Some(patches) = &plan.patches {
        out.push_str(if md {
            "\n### Patches\n"
        } else {
            "\nPatches (kustomization fragments; `lint --fix` writes the same change into the manifest):\n"
        });
        for p in patches {
            let _ = write!(out, "\n# {}. {}\n", p.rank, p.workload);
            if md {
                let _ = write!(out, "```yaml\n{}```\n", p.patch);
            } else {
                out.push_str(&p.patch);
            }
        }
    }
    out
}
