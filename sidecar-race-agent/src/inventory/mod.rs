//! Attribution: from a kernel event's cgroup id to pod and container — by cgroup path
//! alone (works with no API server at all), then names from the pod source.

mod attribution;
pub mod cgroup_path;
pub mod cgroups;
pub mod charge_points;
mod node;
pub(crate) mod pending;
pub mod sources;
pub mod store;

pub use self::{
    attribution::{Attribution, PodOwner},
    node::Inventory,
};
