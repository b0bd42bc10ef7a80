//! Which processes an incident's refused connects came from: counts by process name
//! (the kernel's `comm` of the thread-group leader), bounded, and whether one of them
//! is a known wait tool, which means the pod already works around the start order.

use std::{cmp::Reverse, collections::BTreeMap};

use serde::{Deserialize, Serialize};

use crate::pods::catalog::CATALOG;

/// Names an incident shows; the rest are summed into one [`REST`] entry.
pub const SHOWN: usize = 8;
/// Names counted exactly per incident; refusals of names seen after these many count
/// only toward [`REST`] (memory stays bounded whatever a container runs).
pub const TRACKED: usize = 16;
/// The name of the entry that sums the names not shown.
pub const REST: &str = "(other)";

/// One process name and its refused connects, as the API and the report show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessCount {
    pub name: String,
    pub count: u64,
}

/// The refused processes of one incident.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Processes {
    /// Exact counts of the first [`TRACKED`] names, in order of first refusal.
    counts: Vec<(String, u64)>,
    /// Refusals of names beyond those.
    untracked: u64,
    /// The first known wait tool among the refused processes.
    wait_tool: Option<String>,
}

impl Processes {
    /// Counts one refused connect of process `name`.
    pub fn record(&mut self, name: &str) {
        self.record_n(name, 1);
    }

    /// Counts `count` refused connects of process `name`.
    pub fn record_n(&mut self, name: &str, count: u64) {
        // A refusal whose process is unknown (its reset handled outside the connecting
        // task: `socket_owner` in the kernel) counts with the rest, under no name.
        if name.is_empty() {
            self.untracked += count;
            return;
        }
        if let Some((_, n)) = self.counts.iter_mut().find(|(known, _)| known == name) {
            *n += count;
            return;
        }
        // A name new to the incident: the only time it is looked up in the catalog.
        if self.wait_tool.is_none() && CATALOG.is_wait_tool(name) {
            self.wait_tool = Some(name.to_string());
        }
        if self.counts.len() < TRACKED {
            self.counts.push((name.to_string(), count));
        } else {
            self.untracked += count;
        }
    }

    /// The wait tool that makes the incident `guarded`, if one was refused.
    pub fn wait_tool(&self) -> Option<&str> {
        self.wait_tool.as_deref()
    }

    /// The [`SHOWN`] names refused most, then [`REST`] summing the others.
    pub fn top(&self) -> Vec<ProcessCount> {
        let counts = self.counts.iter().map(|(name, n)| (name.as_str(), *n));
        ranked(counts.chain((self.untracked > 0).then_some((REST, self.untracked))))
    }
}

/// Counts by name (a name may repeat; [`REST`] entries sum into the rest) as shown:
/// the [`SHOWN`] names with the most (ties by name), then [`REST`] summing the others.
pub fn ranked<'a>(counts: impl IntoIterator<Item = (&'a str, u64)>) -> Vec<ProcessCount> {
    let mut by_name: BTreeMap<&str, u64> = BTreeMap::new();
    let mut rest = 0u64;
    for (name, n) in counts {
        let sum = if name == REST {
            &mut rest
        } else {
            by_name.entry(name).or_default()
        };
        *sum = sum.saturating_add(n);
    }
    let mut sorted: Vec<(&str, u64)> = by_name.into_iter().collect();
    // Stable: equal counts stay in name order.
    sorted.sort_by_key(|(_, n)| Reverse(*n));
    for (_, n) in sorted.iter().skip(SHOWN) {
        rest = rest.saturating_add(*n);
    }
    sorted.truncate(SHOWN);
    if rest > 0 {
        sorted.push((REST, rest));
    }
    sorted
        .into_iter()
        .map(|(name, count)| ProcessCount {
            name: name.to_string(),
            count,
        })
        .collect()
}

/// `java x12, curl x3` for log lines and tables.
pub fn summary(processes: &[ProcessCount]) -> String {
    processes
        .iter()
        .map(|p| format!("{} x{}", p.name, p.count))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(names: &[(&str, u64)]) -> Processes {
        let mut p = Processes::default();
        for (name, n) in names {
            for _ in 0..*n {
                p.record(name);
            }
        }
        p
    }

    fn pairs(p: &Processes) -> Vec<(String, u64)> {
        p.top().into_iter().map(|c| (c.name, c.count)).collect()
    }

    #[test]
    fn counts_by_name_most_refused_first() {
        let p = recorded(&[("curl", 3), ("java", 12), ("bash", 3)]);
        assert_eq!(
            pairs(&p),
            [("java".into(), 12), ("bash".into(), 3), ("curl".into(), 3)]
        );
        assert_eq!(summary(&p.top()), "java x12, bash x3, curl x3");
    }

    #[test]
    fn shows_eight_names_and_sums_the_rest() {
        // Ten names with 10, 9, … 1 refusals: the last two (2 + 1) are summed.
        let names: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
        let list: Vec<(&str, u64)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), 10 - i as u64))
            .collect();
        let top = recorded(&list).top();
        assert_eq!(top.len(), SHOWN + 1);
        assert_eq!(top[0].name, "p0");
        assert_eq!(top[SHOWN - 1].name, "p7");
        assert_eq!(
            top[SHOWN],
            ProcessCount {
                name: REST.into(),
                count: 3
            }
        );
        let total: u64 = top.iter().map(|c| c.count).sum();
        assert_eq!(total, 55, "every refusal is counted once");
    }

    #[test]
    fn names_beyond_the_tracked_ones_still_count_in_the_rest() {
        let names: Vec<String> = (0..TRACKED + 5).map(|i| format!("t{i}")).collect();
        let list: Vec<(&str, u64)> = names.iter().map(|n| (n.as_str(), 2)).collect();
        let top = recorded(&list).top();
        assert_eq!(top.len(), SHOWN + 1);
        assert_eq!(top[SHOWN].count, 2 * (TRACKED as u64 + 5 - SHOWN as u64));
    }

    #[test]
    fn a_refusal_of_an_unknown_process_counts_in_the_rest_under_no_name() {
        let p = recorded(&[("app", 2), ("", 3)]);
        assert_eq!(pairs(&p), [("app".to_string(), 2), (REST.to_string(), 3)]);
    }

    #[test]
    fn ranked_sums_repeated_names_and_rest_entries() {
        let top = ranked([
            ("java", 4),
            ("curl", 1),
            ("java", 8),
            (REST, 2),
            ("curl", 2),
        ]);
        let got: Vec<(&str, u64)> = top.iter().map(|c| (c.name.as_str(), c.count)).collect();
        assert_eq!(got, [("java", 12), ("curl", 3), (REST, 2)]);
        assert!(ranked([]).is_empty());
    }

    #[test]
    fn a_wait_tool_guards_and_other_names_do_not() {
        assert_eq!(recorded(&[("java", 5)]).wait_tool(), None);
        assert_eq!(recorded(&[("java", 5), ("nc", 1)]).wait_tool(), Some("nc"));
        for tool in [
            "linkerd-await",
            "wait-for-it",
            "wait-for",
            "ncat",
            "pg_isready",
            "curl",
            "wget",
        ] {
            assert_eq!(recorded(&[(tool, 1)]).wait_tool(), Some(tool));
        }
        // By name only: a name that merely contains one is not one.
        assert_eq!(recorded(&[("curl-exporter", 1)]).wait_tool(), None);
    }
}
