//! Where pod metadata comes from (`--pods-from`): the API server, the kubelet, a
//! file, or nowhere. Each source sends [`PodUpdate`]s on a channel; errors are logged
//! and counted, never fatal: attribution by cgroup goes on without names.

pub mod api;
pub mod file;
mod health;
pub mod kubelet;
mod list;
mod options;
mod pacer;
mod spec;
mod update;

use std::sync::Arc;

use tokio::sync::mpsc;

pub use self::{
    health::{SourceStats, with_causes},
    options::SourceOptions,
    pacer::Pacer,
    spec::PodSourceSpec,
    update::PodUpdate,
};

/// Starts the source; its updates arrive on `tx`.
pub fn spawn(
    spec: &PodSourceSpec,
    opts: SourceOptions,
    tx: mpsc::Sender<PodUpdate>,
    stats: Arc<SourceStats>,
) -> Option<tokio::task::JoinHandle<()>> {
    let handle = match spec.clone() {
        PodSourceSpec::None => return None,
        PodSourceSpec::Api => tokio::spawn(api::run(opts.node_name, tx, stats)),
        PodSourceSpec::Kubelet => tokio::spawn(kubelet::run(opts, tx, stats)),
        PodSourceSpec::File(path) => {
            let pacer = Pacer::new(opts.poll_interval, opts.refresh);
            tokio::spawn(file::run(path, pacer, tx, stats))
        }
    };
    Some(handle)
}
