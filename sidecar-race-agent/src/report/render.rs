//! The report as an aligned text table, a Markdown table (for tickets and docs) or
//! JSON (the [`Report`] as is). Unknown values are "-" in text, `null` in JSON.

use std::fmt::Write as _;

use clap::ValueEnum;

use super::{
    fixes::Fix,
    fleet::Source,
    rank::{Report, WorkloadReport},
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
        Format::Table => table(report),
        Format::Markdown => markdown(report),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(report).expect("a report serializes");
            s.push('\n');
            s
        }
    }
}

const HEADERS: [&str; 11] = [
    "#",
    "WORKLOAD",
    "SIDECARS",
    "STARTS",
    "AFFECTED",
    "SHARE",
    "INCIDENTS",
    "REFUSALS",
    "P50",
    "P95",
    "PHASES",
];
const MD_HEADERS: [&str; 11] = [
    "#",
    "Workload",
    "Sidecars",
    "Pod starts",
    "Affected starts",
    "Share affected",
    "Incidents",
    "Refusals",
    "Window p50",
    "Window p95",
    "Phases",
];
/// Numeric columns are right-aligned.
const NUMERIC: [bool; 11] = [
    true, false, false, true, true, true, true, true, true, true, false,
];

fn table(r: &Report) -> String {
    let mut out = format!("{}\n", printable(&headline(r)));
    if r.workloads.is_empty() {
        return out + &footer(r);
    }
    let rows: Vec<[String; 11]> = r
        .workloads
        .iter()
        .map(|w| cells(w, false).map(|c| printable(&c)))
        .collect();
    let mut widths = HEADERS.map(str::len);
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    out.push('\n');
    for row in std::iter::once(HEADERS.map(String::from)).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            let sep = if i == 0 { "" } else { "  " };
            if NUMERIC[i] {
                let _ = write!(line, "{sep}{}{cell}", " ".repeat(pad));
            } else {
                let _ = write!(line, "{sep}{cell}{}", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str("\nFixes:\n");
    for w in &r.workloads {
        let _ = writeln!(out, "{}. {}", w.rank, printable(&workload_name(w)));
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
    let _ = writeln!(out, "\n| {} |", MD_HEADERS.join(" | "));
    let align: Vec<&str> = NUMERIC
        .iter()
        .map(|n| if *n { "---:" } else { "---" })
        .collect();
    let _ = writeln!(out, "|{}|", align.join("|"));
    for w in &r.workloads {
        let _ = writeln!(out, "| {} |", cells(w, true).join(" | "));
    }
    out.push_str("\n### Fixes\n\n");
    for w in &r.workloads {
        let _ = writeln!(out, "{}. **{}**", w.rank, md_escape(&workload_name(w)));
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

fn headline(r: &Report) -> String {
    let from = match &r.source {
        Source::Prometheus { url, range } => {
            format!("Sidecar races in the last {range}, from Prometheus at {url}")
        }
        Source::Agents { urls } => format!(
            "Sidecar races in the incident history of {} agent{} ({})",
            urls.len(),
            if urls.len() == 1 { "" } else { "s" },
            urls.join(", ")
        ),
    };
    if r.workloads_total == 0 {
        return format!("{from}: none.");
    }
    let shown = if r.workloads.len() < r.workloads_total {
        format!(", top {} shown", r.workloads.len())
    } else {
        String::new()
    };
    format!(
        "{from}: {} workload{}{shown}, ranked by affected pod starts, then startup incidents, refusals and race window p95.",
        r.workloads_total,
        if r.workloads_total == 1 { "" } else { "s" },
    )
}

fn footer(r: &Report) -> String {
    match r.workloads_without_incidents {
        Some(n) if n > 0 => format!(
            "\n{n} other workload{} started pods without any incident.\n",
            if n == 1 { "" } else { "s" }
        ),
        _ => String::new(),
    }
}

fn cells(w: &WorkloadReport, md: bool) -> [String; 11] {
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
    let cells = [
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
    ];
    if md {
        cells.map(|c| md_escape(&c))
    } else {
        cells
    }
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

/// Keeps a cell a cell: `|` would split it, a newline would end the row.
fn md_escape(s: &str) -> String {
    printable(&s.replace('|', "\\|").replace('\n', " "))
}

/// Names come from users (pods, workloads, containers): control characters (terminal
/// escapes, carriage returns, newlines) and bidirectional overrides are shown escaped
/// (`\x1b`, `\u{202e}`) so they cannot rewrite the terminal or reorder what is read.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() && (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else if c.is_control() || bidi {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{inventory::pod_info::Pattern, report::SidecarReport};

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
