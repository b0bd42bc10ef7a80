//! Which label names a series' cluster: the one `--cluster-label` gave, or the first of
//! the two names fleets use that the agents' series carry.

use serde::Serialize;

/// The names fleets give a series' cluster, in the order `report` looks for them:
/// Prometheus' external-label habit (`cluster`), then OpenTelemetry's
/// `k8s.cluster.name` as Prometheus' OTLP receiver and the collector's Prometheus
/// exporters write it.
pub const CONVENTIONS: [&str; 2] = ["cluster", "k8s_cluster_name"];

/// What `--cluster-label` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterLabel {
    /// `--cluster-label ''`: one line per workload whatever the series say.
    Off,
    /// `--cluster-label NAME`.
    Given(String),
    /// No flag: the first of [`CONVENTIONS`] some agent's series carries in the range.
    Conventional,
}

impl ClusterLabel {
    /// The flag's value as typed: absent, empty or a name.
    pub fn from_flag(flag: Option<String>) -> Self {
        match flag {
            None => Self::Conventional,
            Some(l) if l.is_empty() => Self::Off,
            Some(l) => Self::Given(l),
        }
    }
}

/// Where the label the report grouped by came from (JSON `fleet.cluster_label_from`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LabelFrom {
    /// `--cluster-label NAME`.
    #[default]
    Flag,
    /// Found on the series: the first of [`CONVENTIONS`] they carry.
    Series,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_absent_looks_for_either_convention_and_empty_turns_it_off() {
        assert_eq!(ClusterLabel::from_flag(None), ClusterLabel::Conventional);
        assert_eq!(
            ClusterLabel::from_flag(Some(String::new())),
            ClusterLabel::Off
        );
        assert_eq!(
            ClusterLabel::from_flag(Some("k8s_cluster".into())),
            ClusterLabel::Given("k8s_cluster".into())
        );
    }
}
