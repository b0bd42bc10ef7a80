//! `lint` output: a table for people, JSON for programs, and GitHub Actions workflow
//! commands (`::error file=…,line=…::…`) that CI annotates the manifest with.

use super::{finding::Severity, outcome::Outcome};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    /// GitHub Actions workflow commands: one annotation per finding.
    Github,
}

pub fn render(outcome: &Outcome, format: Format) -> String {
    match format {
        Format::Table => table(outcome),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(outcome).expect("serializable");
            s.push('\n');
            s
        }
        Format::Github => github(outcome),
    }
}

fn summary(o: &Outcome) -> String {
    let count = |s: Severity| o.findings.iter().filter(|f| f.severity == s).count();
    let mut line = format!(
        "{} finding{} in {} workload{} ({} error, {} warning, {} info)",
        o.findings.len(),
        if o.findings.len() == 1 { "" } else { "s" },
        o.workloads,
        if o.workloads == 1 { "" } else { "s" },
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Info),
    );
    if o.suppressed > 0 {
        line.push_str(&format!(
            "; {} suppressed by sidecar-race.io/ignore",
            o.suppressed
        ));
    }
    line.push('.');
    line
}

/// Left-aligned columns, two spaces apart.
pub fn columns(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn table(o: &Outcome) -> String {
    let mut out = String::new();
    for e in &o.errors {
        out.push_str(&format!("error: {e}\n"));
    }
    if !o.findings.is_empty() {
        let mut rows = vec![vec![
            "#".to_string(),
            "LOCATION".into(),
            "WORKLOAD".into(),
            "ID".into(),
            "SEVERITY".into(),
            "CONTAINERS".into(),
        ]];
        for (i, f) in o.findings.iter().enumerate() {
            rows.push(vec![
                (i + 1).to_string(),
                f.location
                    .as_ref()
                    .map_or_else(|| "cluster".into(), ToString::to_string),
                f.workload(),
                f.id.into(),
                f.severity.as_str().into(),
                f.containers.join(","),
            ]);
        }
        out.push_str(&columns(&rows));
        out.push('\n');
        for (i, f) in o.findings.iter().enumerate() {
            out.push_str(&format!(
                "{}. {} {} ({}): {}.\n   Fix: {}.\n",
                i + 1,
                f.id,
                f.rule.name(),
                f.workload(),
                f.reason,
                f.fix
            ));
        }
        out.push('\n');
    }
    out.push_str(&summary(o));
    out.push('\n');
    out
}

/// Workflow-command escaping: data escapes `%`, CR, LF; properties also `:` and `,`.
fn escape(s: &str, property: bool) -> String {
    let mut out = s
        .replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A");
    if property {
        out = out.replace(':', "%3A").replace(',', "%2C");
    }
    out
}

fn github(o: &Outcome) -> String {
    let mut out = String::new();
    for e in &o.errors {
        out.push_str(&format!(
            "::error title=sidecar-race lint::{}\n",
            escape(e, false)
        ));
    }
    for f in &o.findings {
        let level = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "notice",
        };
        let mut props = Vec::new();
        if let Some(l) = &f.location
            && l.file != "-"
        {
            props.push(format!("file={}", escape(&l.file, true)));
            props.push(format!("line={}", l.line));
        }
        props.push(format!(
            "title={}",
            escape(
                &format!("{} {} ({})", f.id, f.rule.name(), f.workload()),
                true
            )
        ));
        out.push_str(&format!(
            "::{level} {}::{}\n",
            props.join(","),
            escape(&format!("{}. Fix: {}.", f.reason, f.fix), false)
        ));
    }
    out.push_str(&summary(o));
    out.push('\n');
    out
}
