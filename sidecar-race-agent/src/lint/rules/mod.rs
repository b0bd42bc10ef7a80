//! The lint rules. Each finding has a stable ID (`SR001` …, never reused), a
//! severity, the containers involved, the reason and the fix, in the names the user
//! knows. docs/reference.md's "lint" section lists them; change both together.
//!
//! One module per family of findings: `sidecars` (SR001–SR004, SR012: classic and
//! native sidecars that serve ports or Unix sockets), `sleeps` (SR005, SR006: sleeps that guess at ordering),
//! `init` (SR007), `meshes` (SR006 for Linkerd, SR008, SR009, SR011: injected
//! sidecars), `version` (SR010);
//! `evidence` holds what they share: who serves and who dials a port, the probe to add.
//! The [`Rule`](super::finding::Rule) and [`Finding`] types live in `lint::finding`.

mod evidence;
mod init;
mod meshes;
mod sidecars;
mod sleeps;
mod version;

pub use self::evidence::{ProbePlan, ProbeSpec, dialers, probe_for, served_ports};
use super::{finding::Finding, options::Options, workload::Workload};
use crate::pods::pod_info::{ContainerInfo, Role};

/// Every finding for one workload, before suppression.
pub fn check(w: &Workload, opts: &Options) -> Vec<Finding> {
    let mut out = Vec::new();
    let classic: Vec<&ContainerInfo> = w
        .info
        .containers
        .iter()
        .filter(|c| c.role == Role::ClassicSidecar)
        .collect();
    for s in &classic {
        sidecars::classic_sidecar(w, s, opts, &mut out);
    }
    for s in w
        .info
        .containers
        .iter()
        .filter(|c| c.role == Role::NativeSidecar)
    {
        sidecars::native_sidecar(w, s, opts, &mut out);
    }
    sleeps::sleep_hacks(w, &classic, &mut out);
    init::init_waits(w, &mut out);
    meshes::meshes(w, opts, &mut out);
    if let Some(v) = opts.kube_version {
        version::cluster_version(w, v, !out.is_empty(), &mut out);
    }
    out
}
