//! The pod model: what detection, lint, admission and report know about a pod from its
//! Kubernetes object (names, owner workload, container roles, declared ports, probes,
//! mounts, statuses), the table of known sidecars it is read with, and the runtimes'
//! container ids. It imports nothing from attribution or the kernel, so the commands that
//! only read manifests depend on the pod model alone.

pub(crate) mod catalog;
pub mod container_id;
pub mod mounts;
pub mod pod_info;
pub(crate) mod pod_meta;
mod probes;
mod roles;
pub(crate) mod sidecars;
mod sub_path_expr;
mod workload;
