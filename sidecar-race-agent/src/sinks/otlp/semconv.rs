//! The OpenTelemetry semantic-convention names of what `/metrics` labels: one mapping
//! for the metrics' data points and the incident log records.
//!
//! | `/metrics` label | OTLP attribute |
//! |---|---|
//! | `namespace` | `k8s.namespace.name` |
//! | `pod` (`--metrics-pod-label`) | `k8s.pod.name` |
//! | `container` | `k8s.container.name` |
//! | `workload_kind`, `workload` | `k8s.<kind>.name` for the kinds the conventions name, else `sidecar_race.workload.kind`, `sidecar_race.workload.name` |
//! | any other | the same name |
//!
//! The labels the conventions have no name for keep their Prometheus names: the
//! OTel→Prometheus translation gives them back unchanged, so those series equal
//! `/metrics`' under the same names. The renamed ones come back as the translation of
//! their OTLP names (`k8s_namespace_name`); docs/reference.md has the table, and
//! tests/tests/otlp_export.rs compares the collector's data with `/metrics` through it.

use opentelemetry_proto::tonic::common::v1::KeyValue;

use super::attributes::string;

/// The workload kinds the semantic conventions name (`k8s.deployment.name`, ...).
const NAMED_KINDS: [&str; 6] = [
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
];

/// The labels named one to one.
const RENAMED: [(&str, &str); 3] = [
    ("namespace", "k8s.namespace.name"),
    ("pod", "k8s.pod.name"),
    ("container", "k8s.container.name"),
];

/// The workload as the conventions name it (`k8s.deployment.name`), or as ours where
/// they have no name for its kind.
pub fn workload<'a>(kind: &'a str, name: &'a str) -> Vec<(String, &'a str)> {
    match NAMED_KINDS.iter().find(|k| **k == kind) {
        Some(kind) => vec![(format!("k8s.{}.name", kind.to_lowercase()), name)],
        None => vec![
            ("sidecar_race.workload.kind".to_string(), kind),
            ("sidecar_race.workload.name".to_string(), name),
        ],
    }
}

/// A sample's labels as a data point's attributes, in the labels' order (the workload
/// where its kind was).
pub fn point_attributes(labels: &[(String, String)]) -> Vec<KeyValue> {
    let value_of = |key: &str| labels.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let workload_pair = value_of("workload_kind").zip(value_of("workload"));
    let mut out = Vec::with_capacity(labels.len());
    for (key, value) in labels {
        match (key.as_str(), workload_pair) {
            ("workload_kind", Some((kind, name))) => {
                out.extend(workload(kind, name).iter().map(|(k, v)| string(k, v)));
            }
            ("workload", Some(_)) => {}
            (key, _) => {
                let named = RENAMED.iter().find(|(l, _)| *l == key).map(|(_, a)| *a);
                out.push(string(named.unwrap_or(key), value));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(labels: &[(&str, &str)]) -> Vec<(String, String)> {
        let labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        point_attributes(&labels)
            .into_iter()
            .map(|kv| {
                let value = match kv.value.and_then(|v| v.value) {
                    Some(
                        opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s),
                    ) => s,
                    other => panic!("{other:?}"),
                };
                (kv.key, value)
            })
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn workload_labels_take_the_conventions_names_and_the_rest_keep_theirs() {
        assert_eq!(
            keys(&[
                ("namespace", "shop"),
                ("workload_kind", "Deployment"),
                ("workload", "checkout"),
                ("container", "app"),
                ("sidecar", "proxy"),
                ("phase", "startup"),
                ("pod", "checkout-1"),
            ]),
            pairs(&[
                ("k8s.namespace.name", "shop"),
                ("k8s.deployment.name", "checkout"),
                ("k8s.container.name", "app"),
                ("sidecar", "proxy"),
                ("phase", "startup"),
                ("k8s.pod.name", "checkout-1"),
            ])
        );
        assert_eq!(
            keys(&[
                ("namespace", "unknown"),
                ("workload_kind", "Pod"),
                ("workload", "lonely")
            ]),
            pairs(&[
                ("k8s.namespace.name", "unknown"),
                ("sidecar_race.workload.kind", "Pod"),
                ("sidecar_race.workload.name", "lonely"),
            ])
        );
        assert_eq!(
            keys(&[("kind", "refused"), ("version", "1")]),
            pairs(&[("kind", "refused"), ("version", "1")]),
            "labels the conventions do not name are kept"
        );
    }

    #[test]
    fn workloads_take_the_conventions_names_where_they_have_one() {
        assert_eq!(
            workload("Deployment", "checkout"),
            [("k8s.deployment.name".to_string(), "checkout")]
        );
        assert_eq!(
            workload("StatefulSet", "db"),
            [("k8s.statefulset.name".to_string(), "db")]
        );
        assert_eq!(
            workload("Rollout", "web"),
            [
                ("sidecar_race.workload.kind".to_string(), "Rollout"),
                ("sidecar_race.workload.name".to_string(), "web"),
            ]
        );
    }
}
