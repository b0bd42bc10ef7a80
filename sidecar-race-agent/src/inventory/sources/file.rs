//! `--pods-from file:PATH`: `kubectl get pods -o json|yaml` saved to a file (a PodList
//! or List, or a single Pod), re-read when it changes. For offline analysis, demos and
//! tests. A malformed file is reported and the last good contents are kept.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::SystemTime,
};

use tokio::sync::mpsc;

use super::{health::SourceStats, list::full_list, pacer::Pacer, update::PodUpdate};

/// Parses the file's text: JSON, or YAML when it is not JSON.
pub fn parse(text: &str) -> Result<Vec<serde_json::Value>, String> {
    let doc: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(json_err) => crate::kube_yaml::from_str(text)
            .map_err(|yaml_err| format!("neither JSON ({json_err}) nor YAML ({yaml_err})"))?,
    };
    match doc.get("kind").and_then(|k| k.as_str()) {
        Some("PodList") | Some("List") => match doc.get("items") {
            Some(serde_json::Value::Array(items)) => Ok(items.clone()),
            _ => Err("a list without items".into()),
        },
        Some("Pod") => Ok(vec![doc]),
        Some(other) => Err(format!("kind {other} is not a Pod, PodList or List")),
        None => Err("no kind: not a Kubernetes object".into()),
    }
}

fn modified(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

pub async fn run(
    path: PathBuf,
    mut pacer: Pacer,
    tx: mpsc::Sender<PodUpdate>,
    stats: Arc<SourceStats>,
) {
    let mut seen: Option<Option<(SystemTime, u64)>> = None;
    loop {
        pacer.wait().await;
        let now = modified(&path);
        if seen == Some(now) {
            continue;
        }
        seen = Some(now);
        let read = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
            .and_then(|text| parse(&text).map_err(|e| format!("{}: {e}", path.display())));
        match read {
            Ok(items) => {
                let update = full_list(items, &stats, "file");
                if let PodUpdate::Replace { pods, .. } = &update {
                    tracing::info!(pods = pods.len(), file = %path.display(), "pod source file: read");
                }
                if tx.send(update).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                stats.error();
                tracing::warn!(
                    "pod source file: {e}; keeping the last good pods, attribution by cgroup continues"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_podlists_lists_single_pods_and_yaml() {
        let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","uid":"u"}}"#;
        assert_eq!(parse(pod).unwrap().len(), 1);
        let list = format!(r#"{{"apiVersion":"v1","kind":"List","items":[{pod},{pod}]}}"#);
        assert_eq!(parse(&list).unwrap().len(), 2);
        let yaml = "apiVersion: v1\nkind: PodList\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: a\n    uid: u\n";
        let items = parse(yaml).unwrap();
        assert_eq!(items[0]["metadata"]["name"], "a");
    }

    #[test]
    fn rejects_what_is_not_pods() {
        assert!(parse("{").unwrap_err().contains("neither JSON"));
        assert!(
            parse(r#"{"kind":"Service"}"#)
                .unwrap_err()
                .contains("kind Service")
        );
        assert!(parse(r#"{"a":1}"#).unwrap_err().contains("no kind"));
    }
}
