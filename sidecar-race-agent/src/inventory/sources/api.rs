//! `--pods-from api`: this node's pods through kube's watcher (list + watch with
//! bookmarks; resumes after dropped connections, relists after 410 Gone, backs off
//! from errors). Objects are watched untyped and analysed one by one, so one malformed
//! pod is skipped and counted instead of failing the whole list.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
    runtime::{WatchStreamExt, watcher},
};
use tokio::sync::mpsc;

use super::{
    health::{SourceStats, with_causes},
    list::{full_list, pods_from_values},
    update::PodUpdate,
};

/// The first list taking longer than this is logged (once).
const FIRST_LIST_LATE_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// Connects with in-cluster config or `KUBECONFIG`, then watches until `tx` closes.
pub async fn run(node_name: Option<String>, tx: mpsc::Sender<PodUpdate>, stats: Arc<SourceStats>) {
    let client = loop {
        match Client::try_default().await {
            Ok(c) => break c,
            Err(e) => {
                stats.error();
                tracing::warn!(
                    "pod source api: no Kubernetes client configuration ({e}); attribution by cgroup only, retrying in 30 s"
                );
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            }
        }
    };
    watch(client, node_name, tx, stats).await
}

/// Watches pods through `client` (tests point it at a fake API server).
pub async fn watch(
    client: Client,
    node_name: Option<String>,
    tx: mpsc::Sender<PodUpdate>,
    stats: Arc<SourceStats>,
) {
    let api: Api<DynamicObject> = Api::all_with(client, &ApiResource::erase::<Pod>(&()));
    let mut config = watcher::Config::default();
    match &node_name {
        Some(node) => config = config.fields(&format!("spec.nodeName={node}")),
        None => {
            tracing::warn!("pod source api: NODE_NAME is not set; watching the pods of every node")
        }
    }
    let stream = watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut initial: Option<Vec<serde_json::Value>> = None;
    let mut failing = false;
    // A slow API server fails nothing, so say once that the first list is late.
    let mut slow_deadline = Some(tokio::time::Instant::now() + FIRST_LIST_LATE_AFTER);
    loop {
        let next = match slow_deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(next) => next,
                Err(_) => {
                    slow_deadline = None;
                    tracing::warn!(
                        "pod source api: no pod list from the API server after {} s (slow or unreachable); still waiting, attribution by cgroup continues",
                        FIRST_LIST_LATE_AFTER.as_secs()
                    );
                    continue;
                }
            },
            None => stream.next().await,
        };
        let Some(event) = next else { break };
        let update = match event {
            Ok(watcher::Event::Init) => {
                initial = Some(Vec::new());
                None
            }
            Ok(watcher::Event::InitApply(obj)) => {
                initial.get_or_insert_with(Vec::new).push(value(obj));
                None
            }
            Ok(watcher::Event::InitDone) => {
                slow_deadline = None;
                let update = full_list(initial.take().unwrap_or_default(), &stats, "api");
                if let PodUpdate::Replace { pods, .. } = &update {
                    tracing::info!(pods = pods.len(), "pod source api: listed this node's pods");
                }
                Some(update)
            }
            Ok(watcher::Event::Apply(obj)) => pods_from_values([value(obj)], &stats, "api")
                .pop()
                .map(|p| PodUpdate::Apply(Box::new(p))),
            Ok(watcher::Event::Delete(obj)) => {
                obj.metadata.uid.map(|uid| PodUpdate::Delete { uid })
            }
            Err(e) => {
                stats.error();
                if !failing {
                    tracing::warn!(
                        "pod source api: {}; retrying with backoff, attribution by cgroup continues",
                        with_causes(&e)
                    );
                }
                failing = true;
                continue;
            }
        };
        if failing {
            tracing::info!("pod source api: recovered");
            failing = false;
        }
        if let Some(u) = update
            && tx.send(u).await.is_err()
        {
            return;
        }
    }
}

/// The object as JSON, without managed fields (never needed, often large).
fn value(mut obj: DynamicObject) -> serde_json::Value {
    obj.metadata.managed_fields = None;
    serde_json::to_value(obj).unwrap_or_default()
}
