//! A run's findings after suppression: the `sidecar-race.io/ignore` annotation drops
//! the findings it names, counted.

use serde::Serialize;

use super::{
    finding::{Finding, Rule, Severity},
    options::Options,
    rules,
    workload::Workload,
};

/// The annotation (on the workload or its pod template) that suppresses findings:
/// IDs or rule names, comma-separated; `all` suppresses every finding.
pub const IGNORE_ANNOTATION: &str = "sidecar-race.io/ignore";

/// Every finding of a run, after suppression.
#[derive(Debug, Default, Serialize)]
pub struct Outcome {
    pub workloads: usize,
    pub findings: Vec<Finding>,
    pub suppressed: usize,
    /// Inputs that could not be read or analysed (each also fails the run).
    pub errors: Vec<String>,
}

impl Outcome {
    /// The most severe finding's severity.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }
}

/// The workload's `sidecar-race.io/ignore` annotation names `rule` (its ID or
/// name, any case) or `all`.
pub fn ignores(w: &Workload, rule: Rule) -> bool {
    w.annotation(IGNORE_ANNOTATION).is_some_and(|v| {
        crate::pods::sidecars::split_names(v).any(|i| {
            i.eq_ignore_ascii_case("all")
                || i.eq_ignore_ascii_case(rule.id())
                || i.eq_ignore_ascii_case(rule.name())
        })
    })
}

/// The findings of every workload, suppressed ones counted and dropped.
pub fn lint(workloads: &[Workload], opts: &Options) -> Outcome {
    let mut out = Outcome {
        workloads: workloads.len(),
        ..Outcome::default()
    };
    for w in workloads {
        for f in rules::check(w, opts) {
            if ignores(w, f.rule) {
                out.suppressed += 1;
            } else {
                out.findings.push(f);
            }
        }
    }
    out
}
