//! Migration verification in the text formats: a VERDICT column in the workload table
//! (when some line has a dated template), and one line per such workload saying when
//! its template changed, what raced before and since, and the verdict with the
//! pattern and fix of what still races.

use std::fmt::Write as _;

use super::{
    migration::{Migration, Side, Verdict, pattern_words},
    rank::{Report, WorkloadReport},
    table::{Column, md_escape, printable},
};

/// After the table's last column, when some line has a migration.
pub const VERDICT: Column = Column {
    header: "VERDICT",
    md_header: "Since template change",
    numeric: false,
};

/// Whether the report has a migration to show.
pub fn any(lines: &[WorkloadReport]) -> bool {
    lines.iter().any(|w| w.migration.is_some())
}

/// The VERDICT cell of a line: "-" without a dated template.
pub fn cell(w: &WorkloadReport) -> String {
    w.migration
        .as_ref()
        .map_or_else(|| "-".to_string(), |m| m.verdict.words().to_string())
}

/// `41 of 60 starts affected, 41 race windows (p95 1.40s)`
fn side(s: &Side) -> String {
    let mut out = format!(
        "{} of {} start{} affected",
        s.affected_starts,
        s.starts,
        if s.starts == 1 { "" } else { "s" }
    );
    if s.drain_incidents > 0 {
        let _ = write!(
            out,
            ", {} drain race{}",
            s.drain_incidents,
            plural(s.drain_incidents)
        );
    }
    let _ = write!(
        out,
        ", {} race window{}",
        s.race_windows,
        plural(s.race_windows)
    );
    if let Some(p95) = s.race_window_p95_seconds {
        let _ = write!(out, " (p95 {p95:.2}s)");
    }
    out
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The verdict in words, with what makes it.
fn verdict(m: &Migration) -> String {
    match m.verdict {
        Verdict::Fixed => format!(
            "fixed (no race in at least {} starts)",
            m.min_starts_since_change
        ),
        Verdict::NotEnoughStarts => format!(
            "not enough starts yet ({} of the {} clean starts that make fixed)",
            m.after.starts, m.min_starts_since_change
        ),
        Verdict::StillRacing => {
            let mut out = "still racing".to_string();
            if let Some(p) = m.pattern {
                let _ = write!(out, ": {}", pattern_words(p));
            }
            let phases: Vec<&str> = m.phases.iter().map(|p| p.as_str()).collect();
            match &m.sidecar {
                Some(s) => {
                    let _ = write!(out, " ({s}, {})", phases.join(", "));
                }
                None if !phases.is_empty() => {
                    let _ = write!(out, " ({})", phases.join(", "));
                }
                None => {}
            }
            if let Some(a) = &m.advice {
                let _ = write!(out, ". {a}");
            }
            out
        }
    }
}

/// One workload's migration in a sentence.
pub fn sentence(m: &Migration) -> String {
    let before = if m.templates_in_range > 1 {
        format!("before: {}", side(&m.before))
    } else {
        "before: older than the range".to_string()
    };
    format!(
        "template {} since {}; {before}; since: {} → {}",
        m.template,
        m.template_changed_at,
        side(&m.after),
        verdict(m)
    )
}

/// The section: one line per ranked workload with a dated template; nothing when none
/// has one.
pub fn section(r: &Report, md: bool, name: impl Fn(&WorkloadReport) -> String) -> String {
    if !any(&r.workloads) {
        return String::new();
    }
    let mut out = if md {
        "\n### Since each template change\n\n".to_string()
    } else {
        "\nSince each template change:\n".to_string()
    };
    for w in &r.workloads {
        let Some(m) = &w.migration else { continue };
        let text = format!("{}: {}", name(w), sentence(m));
        let _ = writeln!(
            out,
            "{}. {}",
            w.rank,
            if md {
                md_escape(&text)
            } else {
                printable(&text)
            }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        detect::Phase,
        pods::pod_info::Pattern,
        report::fleet::{IncidentCount, SplitEvidence, TemplateChange},
        report::migration::verify,
    };

    fn change(after: SplitEvidence, templates: usize) -> TemplateChange {
        TemplateChange {
            template: "6c4d9f8b7".into(),
            changed_at: 1_796_119_200.0,
            templates,
            before: SplitEvidence {
                pod_starts: 60.0,
                affected_pod_starts: 41.0,
                race_windows: 41.0,
                window_p95: Some(1.4),
                ..SplitEvidence::default()
            },
            after,
        }
    }

    #[test]
    fn sentences_say_the_split_and_the_verdict() {
        let fixed = verify(
            &change(
                SplitEvidence {
                    pod_starts: 75.0,
                    ..SplitEvidence::default()
                },
                2,
            ),
            30,
        );
        assert_eq!(
            sentence(&fixed),
            "template 6c4d9f8b7 since 2026-12-01T10:00:00Z; before: 41 of 60 starts affected, 41 race windows (p95 1.40s); since: 0 of 75 starts affected, 0 race windows → fixed (no race in at least 30 starts)"
        );
        let racing = verify(
            &change(
                SplitEvidence {
                    pod_starts: 4.0,
                    affected_pod_starts: 4.0,
                    incidents: vec![IncidentCount {
                        kind: crate::detect::Kind::SidecarRace,
                        sidecar: "proxy".into(),
                        phase: Phase::Startup,
                        pattern: Pattern::Native,
                        count: 4.0,
                    }],
                    race_windows: 4.0,
                    window_p95: Some(0.9),
                    ..SplitEvidence::default()
                },
                1,
            ),
            30,
        );
        let s = sentence(&racing);
        assert!(
            s.starts_with("template 6c4d9f8b7 since 2026-12-01T10:00:00Z; before: older than the range; since: 4 of 4 starts affected, 4 race windows (p95 0.90s) → still racing: a native sidecar without a startupProbe (proxy, startup)"),
            "{s}"
        );
        let early = verify(&change(SplitEvidence::default(), 2), 30);
        assert!(
            sentence(&early)
                .ends_with("→ not enough starts yet (0 of the 30 clean starts that make fixed)"),
            "{}",
            sentence(&early)
        );
    }
}
