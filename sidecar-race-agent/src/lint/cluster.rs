//! `lint --cluster` / `report --cluster`: the workloads of a live cluster, read with
//! the user's kubeconfig through read-only lists (Deployments, StatefulSets,
//! DaemonSets, ReplicaSets without an owner, Jobs without an owner, CronJobs and bare
//! Pods), their namespaces' labels (injection), the cluster's version for `SR010` and
//! the meshes' native-injection defaults (`mesh_config`).

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet},
        batch::v1::{CronJob, Job},
        core::v1::{Namespace, Pod},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{Api, Client, Resource, api::ListParams};
use serde::{Serialize, de::DeserializeOwned};
use thiserror::Error;

use super::{
    mesh_config,
    node::Node,
    options::{KubeVersion, Options},
    workload::{self, NamespaceMeta},
};

#[derive(Debug, Error)]
pub enum ClusterError {
    #[error("cannot connect with the kubeconfig: {0}")]
    Config(String),
    #[error("cannot list {what}: {reason}")]
    List { what: &'static str, reason: String },
    #[error("cannot read the API server's version: {0}")]
    Version(String),
}

/// The client of the user's kubeconfig (`KUBECONFIG`, `~/.kube/config`, or in-cluster).
pub async fn client() -> Result<Client, ClusterError> {
    Client::try_default()
        .await
        .map_err(|e| ClusterError::Config(e.to_string()))
}

/// The API server's version (`minor: "29+"` on some providers).
pub async fn version(client: &Client) -> Result<KubeVersion, ClusterError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(|e| ClusterError::Version(e.to_string()))?;
    format!("{}.{}", info.major, info.minor)
        .parse()
        .map_err(ClusterError::Version)
}

/// What lint learns from the cluster besides its workloads, the same for `lint
/// --cluster` and `report --cluster`: its version (unless one was given) and the
/// meshes' own native-injection defaults, which win over assumed ones.
pub async fn settings(client: &Client, opts: &mut Options) -> Result<(), ClusterError> {
    if opts.kube_version.is_none() {
        opts.kube_version = Some(version(client).await?);
    }
    opts.mesh_defaults.extend(mesh_config::read(client).await);
    opts.injected_by_default
        .extend(mesh_config::read_default_injection(client).await);
    Ok(())
}

async fn list<K>(
    client: &Client,
    namespace: Option<&str>,
    what: &'static str,
) -> Result<Vec<K>, ClusterError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| ClusterError::List {
            what,
            reason: e.to_string(),
        })
}

fn owned(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .as_ref()
        .is_some_and(|o| !o.is_empty())
}

/// The object as lint reads a manifest, without what the server adds.
fn node<K: Serialize + Resource>(object: &K) -> Node {
    let mut v = serde_json::to_value(object).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
        if let Some(meta) = m.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("managedFields");
        }
    }
    serde_json::from_value(v).unwrap_or(Node::Null)
}

/// Every workload of the cluster (or of `namespace`), analysed; objects whose pod
/// template cannot be analysed are returned as errors.
pub async fn workloads(
    client: &Client,
    namespace: Option<&str>,
    site_sidecars: &[String],
) -> Result<(Vec<workload::Workload>, Vec<String>), ClusterError> {
    let mut nodes = Vec::new();
    nodes.extend(
        list::<Deployment>(client, namespace, "deployments")
            .await?
            .iter()
            .map(node),
    );
    nodes.extend(
        list::<StatefulSet>(client, namespace, "statefulsets")
            .await?
            .iter()
            .map(node),
    );
    nodes.extend(
        list::<DaemonSet>(client, namespace, "daemonsets")
            .await?
            .iter()
            .map(node),
    );
    nodes.extend(
        list::<ReplicaSet>(client, namespace, "replicasets")
            .await?
            .iter()
            .filter(|r| !owned(&r.metadata))
            .map(node),
    );
    nodes.extend(
        list::<Job>(client, namespace, "jobs")
            .await?
            .iter()
            .filter(|j| !owned(&j.metadata))
            .map(node),
    );
    nodes.extend(
        list::<CronJob>(client, namespace, "cronjobs")
            .await?
            .iter()
            .map(node),
    );
    nodes.extend(
        list::<Pod>(client, namespace, "pods")
            .await?
            .iter()
            .filter(|p| !owned(&p.metadata))
            .map(node),
    );
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for n in nodes {
        match workload::analyse(n, None, site_sidecars) {
            Ok(Some(w)) => out.push(w),
            Ok(None) => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    workload::attach_namespaces(&mut out, &namespaces(client, namespace).await);
    Ok((out, errors))
}

/// The live namespaces' labels and annotations (injectors read them); a namespace
/// that cannot be read counts as unlabelled.
async fn namespaces(client: &Client, only: Option<&str>) -> BTreeMap<String, NamespaceMeta> {
    let api: Api<Namespace> = Api::all(client.clone());
    let found = match only {
        Some(ns) => api.get_opt(ns).await.ok().flatten().into_iter().collect(),
        None => api
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default(),
    };
    found
        .iter()
        .filter_map(|ns| workload::namespace(&node(ns)))
        .collect()
}
