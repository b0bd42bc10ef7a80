//! Attribution: from a kernel event's cgroup id to pod and container — by cgroup path
//! alone (works with no API server at all), then names from the pod source.

mod attribution;
pub mod cgroup_path;
pub mod cgroups;
pub mod mounts;
mod node;
pub(crate) mod pending;
pub mod pod_info;
pub(crate) mod pod_meta;
pub(crate) mod sidecars;
pub mod sources;
pub mod store;
mod sub_path_expr;

pub use self::{
    attribution::{Attribution, PodOwner},
    node::Inventory,
};
