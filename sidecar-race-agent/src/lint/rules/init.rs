//! SR007: an init container that waits for a port served only by a container that
//! starts after it: one in `containers[]` (after every init container), or a native
//! sidecar listed after it in `initContainers` (init containers start in order).

use std::collections::BTreeSet;

use super::evidence::served_ports;
use crate::{
    lint::{
        finding::{Finding, Rule, Severity},
        refs,
        workload::Workload,
    },
    pods::pod_info::{ContainerInfo, Role},
};

/// The position of `name` in the template's `initContainers`.
fn init_position(w: &Workload, name: &str) -> Option<usize> {
    w.pod
        .spec
        .as_ref()?
        .init_containers
        .as_ref()?
        .iter()
        .position(|c| c.name == name)
}

/// Whether `c` starts only after init container `init` has finished.
fn starts_after(w: &Workload, c: &ContainerInfo, init: &str) -> bool {
    c.role.in_containers()
        || (c.role == Role::NativeSidecar && init_position(w, &c.name) > init_position(w, init))
}

pub(super) fn init_waits(w: &Workload, out: &mut Vec<Finding>) {
    for init in w.info.containers.iter().filter(|c| c.role == Role::Init) {
        let Some(typed) = w.container(&init.name) else {
            continue;
        };
        let ports = refs::dialed_ports(typed);
        let mut seen = BTreeSet::new();
        for port in ports {
            let Some(server) = w
                .info
                .containers
                .iter()
                .find(|c| starts_after(w, c, &init.name) && served_ports(w, c).contains(&port))
            else {
                continue;
            };
            if !seen.insert(&server.name) {
                continue;
            }
            let (where_, fix) = match server.role {
                Role::NativeSidecar => (
                    format!(
                        "a native sidecar listed after {} in initContainers, so it starts only once {} has finished",
                        init.name, init.name
                    ),
                    format!(
                        "List {} before {} in initContainers, with a startupProbe on port {port}",
                        server.name, init.name
                    ),
                ),
                Role::ClassicSidecar => (
                    "in containers[] and starts only after every init container has finished"
                        .into(),
                    format!(
                        "Make {} a native sidecar (initContainers, restartPolicy: Always) listed before {}, with a startupProbe on port {port}",
                        server.name, init.name
                    ),
                ),
                _ => (
                    "in containers[] and starts only after every init container has finished"
                        .into(),
                    format!(
                        "{} is an app container: if it is a helper, name it in sidecar-race.io/sidecars and make it a native sidecar listed before {}; otherwise {} must not wait for it",
                        server.name, init.name, init.name
                    ),
                ),
            };
            out.push(
                Finding::new(
                    w,
                    Rule::InitWaitsForContainer,
                    Severity::Error,
                    vec![init.name.clone(), server.name.clone()],
                )
                .says(
                    format!(
                        "init container {} waits for port {port} of {}, which is {where_}: the pod never starts",
                        init.name, server.name
                    ),
                    fix,
                ),
            );
        }
    }
}
