//! SR007: an init container that waits for a port only a regular container serves.

use std::collections::BTreeSet;

use super::{
    Finding, Rule, Severity,
    evidence::{container, served_ports},
};
use crate::{
    inventory::pod_info::Role,
    lint::{refs, workload::Workload},
};

pub(super) fn init_waits(w: &Workload, out: &mut Vec<Finding>) {
    for init in w.info.containers.iter().filter(|c| c.role == Role::Init) {
        let Some(typed) = container(w, &init.name) else {
            continue;
        };
        let ports = refs::dialed_ports(typed);
        let mut seen = BTreeSet::new();
        for port in ports {
            let Some(server) = w
                .info
                .containers
                .iter()
                .find(|c| c.role.in_containers() && served_ports(w, c).contains(&port))
            else {
                continue;
            };
            if !seen.insert(&server.name) {
                continue;
            }
            let fix = if server.role == Role::ClassicSidecar {
                format!(
                    "Make {} a native sidecar (initContainers, restartPolicy: Always) listed before {}, with a startupProbe on port {port}",
                    server.name, init.name
                )
            } else {
                format!(
                    "{} is an app container: if it is a helper, name it in sidecar-race.io/sidecars and make it a native sidecar listed before {}; otherwise {} must not wait for it",
                    server.name, init.name, init.name
                )
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
                        "init container {} waits for port {port} of {}, which is in containers[] and starts only after every init container has finished: the pod never starts",
                        init.name, server.name
                    ),
                    fix,
                ),
            );
        }
    }
}
