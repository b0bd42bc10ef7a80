//! SR001–SR004: classic sidecars that serve ports (or keep a Job's pod running), and
//! native sidecars whose startupProbe is missing or checks the wrong port.

use super::{
    Finding, Rule, Severity,
    evidence::{dialed, dialers, list, names, probe_clause, probe_for, served_ports},
};
use crate::{
    inventory::pod_info::{ContainerInfo, ProbeTarget},
    lint::{Options, known, workload::Workload},
};

pub(super) fn classic_sidecar(
    w: &Workload,
    s: &ContainerInfo,
    opts: &Options,
    out: &mut Vec<Finding>,
) {
    let by = s.sidecar_by.map_or("name", |e| e.as_str());
    let served = served_ports(s);
    let probe = probe_for(w, s, opts);
    if !served.is_empty() {
        let mut evidence = Vec::new();
        let mut clients = Vec::new();
        for port in &served {
            let d = dialers(w, &s.name, *port);
            if !d.is_empty() {
                evidence.push(format!("{} dials port {port}", names(&d)));
                clients.extend(d);
            }
        }
        let proxy = known::proxy(s).is_some();
        if proxy {
            evidence.push(format!("{} is a known proxy", s.name));
        }
        let severity = if evidence.is_empty() {
            Severity::Warning
        } else {
            Severity::Error
        };
        let mut containers = vec![s.name.clone()];
        for c in clients {
            if !containers.contains(&c) {
                containers.push(c);
            }
        }
        let evidence = if evidence.is_empty() {
            String::new()
        } else {
            format!(" ({})", evidence.join("; "))
        };
        out.push(
            Finding::new(w, Rule::ClassicSidecarServesPort, severity, containers).says(
                format!(
                    "{} is a classic sidecar (in containers[], recognised by {by}) serving {}{evidence}: it starts and stops together with the app, so the app's first and last connections race it",
                    s.name,
                    list(&served)
                ),
                format!(
                    "Move {} to initContainers with restartPolicy: Always{}, so the app starts once it serves and it stops after the app",
                    s.name,
                    probe_clause(probe.as_ref())
                ),
            ),
        );
    }
    if w.is_job() {
        out.push(
            Finding::new(w, Rule::JobWithClassicSidecar, Severity::Error, vec![s.name.clone()])
                .says(
                    format!(
                        "{} is a classic sidecar in a {}'s pod: it keeps running after the app containers finish, so the pod never completes",
                        s.name, w.kind
                    ),
                    format!(
                        "Move {} to initContainers with restartPolicy: Always: the kubelet stops native sidecars once the app containers have exited",
                        s.name
                    ),
                ),
        );
    }
}

pub(super) fn native_sidecar(
    w: &Workload,
    s: &ContainerInfo,
    opts: &Options,
    out: &mut Vec<Finding>,
) {
    let served = served_ports(s);
    if served.is_empty() {
        return;
    }
    let Some(probe) = &s.startup_probe else {
        let spec = probe_for(w, s, opts);
        out.push(
            Finding::new(
                w,
                Rule::NativeSidecarWithoutStartupProbe,
                Severity::Warning,
                vec![s.name.clone()],
            )
            .says(
                format!(
                    "{} is a native sidecar serving {} without a startupProbe: the app containers start as soon as it has started, not once it serves",
                    s.name,
                    list(&served)
                ),
                format!("Give {} a startupProbe{}", s.name, spec.map_or_else(String::new, |p| format!(" ({p})"))),
            ),
        );
        return;
    };
    let Some(port) = probe.port() else {
        return;
    };
    // The documented readiness endpoint, asked over HTTP, is right whatever the port.
    let ready_endpoint = matches!(
        (probe, known::ready_endpoint(s)),
        (ProbeTarget::HttpGet { port: Some(p), path: Some(path) }, Some((rp, rpath)))
            if *p == rp && path == rpath
    );
    let dialed = dialed(w, s);
    // What clients use: the ports they are seen dialing, else a mesh proxy's redirect
    // ports, else what it declares.
    let redirect = known::proxy(s).map_or(&[][..], |p| p.redirect_ports);
    let clients_use = if !dialed.is_empty() {
        dialed
    } else if !redirect.is_empty() {
        redirect.to_vec()
    } else {
        s.ports.clone()
    };
    if ready_endpoint || clients_use.is_empty() || clients_use.contains(&port) {
        return;
    }
    out.push(
        Finding::new(
            w,
            Rule::StartupProbeWrongPort,
            Severity::Warning,
            vec![s.name.clone()],
        )
        .says(
            format!(
                "the startupProbe of native sidecar {} checks port {port}, but clients use {}: \"started\" is not \"serving\"",
                s.name,
                list(&clients_use)
            ),
            match known::ready_endpoint(s) {
                Some((rp, path)) => format!(
                    "Make {}'s startupProbe an httpGet of {path} on port {rp}, which answers once it serves",
                    s.name
                ),
                None => format!(
                    "Point {}'s startupProbe at port {}",
                    s.name, clients_use[0]
                ),
            },
        ),
    );
}
