//! SR005, SR006: sleeps that guess at ordering: before the app's own command, and in
//! preStop hooks next to classic sidecars.

use super::evidence::names;
use crate::{
    lint::{
        finding::{Finding, Rule, Severity},
        refs,
        workload::Workload,
    },
    pods::pod_info::{ContainerInfo, Role},
};

pub(super) fn sleep_hacks(w: &Workload, classic: &[&ContainerInfo], out: &mut Vec<Finding>) {
    let sidecars: Vec<String> = w
        .info
        .containers
        .iter()
        .filter(|c| c.role.is_sidecar())
        .map(|c| c.name.clone())
        .collect();
    if sidecars.is_empty() {
        return;
    }
    for app in w.info.containers.iter().filter(|c| c.role == Role::App) {
        let Some(typed) = w.container(&app.name) else {
            continue;
        };
        if let Some(wrap) = refs::sleep_wrap(typed) {
            let mut containers = vec![app.name.clone()];
            containers.extend(sidecars.iter().cloned());
            out.push(
                Finding::new(w, Rule::SleepBeforeApp, Severity::Warning, containers).says(
                    format!(
                        "{} runs `{}` before its own command: a guess at how long {} take(s) to serve; a slower start still races, a faster one wastes the wait",
                        app.name, wrap.sleep, names(&sidecars)
                    ),
                    format!(
                        "Make {} native sidecar(s) with a startupProbe and drop the sleep, keeping `{}`",
                        names(&sidecars), wrap.rest
                    ),
                ),
            );
        }
    }
    if classic.is_empty() {
        return;
    }
    let classic_names: Vec<String> = classic.iter().map(|c| c.name.clone()).collect();
    for c in w.info.containers.iter().filter(|c| c.role.in_containers()) {
        let Some(sleep) = w.container(&c.name).and_then(refs::prestop_sleep) else {
            continue;
        };
        let (reason, fix) = if c.role == Role::ClassicSidecar {
            (
                format!(
                    "{}'s preStop hook runs `{sleep}` so that it outlives the app's drain: a tuned race",
                    c.name
                ),
                format!(
                    "Make {} a native sidecar (the kubelet stops it only after the app containers have exited) and drop the hook",
                    c.name
                ),
            )
        } else {
            (
                format!(
                    "{}'s preStop hook runs `{sleep}`: it delays {}'s SIGTERM, not that of {}, which stop(s) at once",
                    c.name,
                    c.name,
                    names(&classic_names)
                ),
                format!(
                    "Make {} native sidecar(s); keep this hook only if it waits for the pod's removal from load balancers",
                    names(&classic_names)
                ),
            )
        };
        let mut containers = vec![c.name.clone()];
        containers.extend(classic_names.iter().filter(|n| **n != c.name).cloned());
        out.push(
            Finding::new(w, Rule::PreStopSleep, Severity::Warning, containers).says(reason, fix),
        );
    }
}
