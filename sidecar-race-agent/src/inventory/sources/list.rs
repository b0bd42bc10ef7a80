//! A full list of the node's pods read from JSON objects: the ones that are not pods
//! are counted and logged, and keep their last good version.

use super::{health::SourceStats, update::PodUpdate};
use crate::pods::pod_info::PodInfo;

/// Turns JSON objects into pods, skipping (and counting) the ones that are not.
pub(crate) fn pods_from_values(
    values: impl IntoIterator<Item = serde_json::Value>,
    stats: &SourceStats,
    source: &str,
) -> Vec<PodInfo> {
    let PodUpdate::Replace { pods, .. } = full_list(values, stats, source) else {
        unreachable!("full_list returns a Replace")
    };
    pods
}

/// A full list of the node's pods. An object that cannot be read is counted and
/// logged, and its uid (when it has one) listed as unparsable so the pod keeps its
/// last good version rather than being taken as deleted.
pub(crate) fn full_list(
    values: impl IntoIterator<Item = serde_json::Value>,
    stats: &SourceStats,
    source: &str,
) -> PodUpdate {
    let mut pods = Vec::new();
    let mut unparsable = Vec::new();
    for v in values {
        let field = |f: &str| v["metadata"][f].as_str().map(str::to_string);
        let (uid, namespace, name) = (field("uid"), field("namespace"), field("name"));
        match PodInfo::from_json(v) {
            Ok(p) => pods.push(p),
            Err(e) => {
                stats.malformed();
                let pod = format!(
                    "{}/{}",
                    namespace.as_deref().unwrap_or("?"),
                    name.as_deref().unwrap_or("?")
                );
                match uid {
                    Some(uid) => {
                        tracing::warn!(
                            source,
                            pod,
                            uid,
                            "cannot read pod object ({e}); keeping its last good version"
                        );
                        unparsable.push(uid);
                    }
                    None => tracing::warn!(source, pod, "skipping a pod object without uid: {e}"),
                }
            }
        }
    }
    PodUpdate::Replace { pods, unparsable }
}
