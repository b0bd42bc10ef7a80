//! The report as an aligned text table, a Markdown table (for tickets and docs),
//! JSON (the [`Report`] as is) or one html page ([`html`], drawn from the same model). Unknown values are "-" in text, `null` in JSON. When
//! lines name their cluster, a CLUSTER column says which, and the fleet-wide roll-up
//! comes first as a table of its own.

use std::fmt::Write as _;

use clap::ValueEnum;

use super::{
    html, migration_text,
    rank::Report,
    rows::{fleet_table, lines_table},
    table::{self, md_escape, printable},
    words::{by_cluster_headline, fix_subject, fleet_headline, footer, headline, line_name},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Markdown,
    Json,
    /// One self-contained page (inline CSS and SVG, nothing fetched): [`html`].
    Html,
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
        Format::Html => html::page(&html::Page::of(report)),
    }
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
    out.push_str(&migration_text::section(r, false, line_name));
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
    out.push_str(&migration_text::section(r, true, line_name));
    out + &footer(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        detect::Phase,
        pods::pod_info::Pattern,
        report::{SidecarReport, fixes::Fix, fleet::Source, rank::WorkloadReport},
    };

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
                migration: None,
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

    /// A line with a dated template gets a VERDICT column and its sentence after the
    /// fixes, in the table and in Markdown; JSON carries the object.
    #[test]
    fn a_verified_migration_shows_in_every_format() {
        use crate::report::{
            fleet::{SplitEvidence, TemplateChange},
            migration::verify,
        };
        let mut r = report();
        r.workloads[0].migration = Some(verify(
            &TemplateChange {
                template: "6c4d9f8b7".into(),
                changed_at: 1_796_119_200.0,
                templates: 2,
                before: SplitEvidence {
                    pod_starts: 60.0,
                    affected_pod_starts: 41.0,
                    ..SplitEvidence::default()
                },
                after: SplitEvidence {
                    pod_starts: 75.0,
                    ..SplitEvidence::default()
                },
            },
            30,
        ));
        let t = render(&r, Format::Table);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[2].ends_with("PHASES   VERDICT"), "{t}");
        assert!(lines[3].ends_with("startup  fixed"), "{t}");
        assert!(
            t.contains("\nSince each template change:\n1. Deployment shop/checkout: template 6c4d9f8b7 since 2026-12-01T10:00:00Z; before: 41 of 60 starts affected, 0 race windows; since: 0 of 75 starts affected, 0 race windows → fixed (no race in at least 30 starts)\n"),
            "{t}"
        );
        let m = render(&r, Format::Markdown);
        assert!(m.contains("| Phases | Since template change |"), "{m}");
        assert!(m.contains("| startup | fixed |"), "{m}");
        assert!(
            m.contains(
                "### Since each template change\n\n1. Deployment shop/checkout: template 6c4d9f8b7"
            ),
            "{m}"
        );
        let j: serde_json::Value = serde_json::from_str(&render(&r, Format::Json)).unwrap();
        let mj = &j["workloads"][0]["migration"];
        assert_eq!(mj["verdict"], "fixed");
        assert_eq!(mj["template_changed_at"], "2026-12-01T10:00:00Z");
        assert_eq!(
            (&mj["before"]["starts"], &mj["after"]["starts"]),
            (&60.into(), &75.into())
        );
        // Without one, the table is as it was.
        assert!(!render(&report(), Format::Table).contains("VERDICT"));
    }
}
