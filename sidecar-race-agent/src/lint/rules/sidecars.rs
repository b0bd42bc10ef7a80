//! SR001–SR004, SR012: classic sidecars that serve ports or Unix sockets (or keep a
//! Job's pod running), and native sidecars whose startupProbe is missing or checks
//! the wrong port.

use super::evidence::{ProbePlan, dialed, dialers, list, names, probe_plan, served_ports};
use crate::{
    lint::{
        finding::{Finding, Rule, Severity},
        known,
        options::Options,
        sockets::{self, SharedSocket},
        workload::Workload,
    },
    pods::pod_info::{ContainerInfo, ProbeTarget},
};

pub(super) fn classic_sidecar(
    w: &Workload,
    s: &ContainerInfo,
    opts: &Options,
    out: &mut Vec<Finding>,
) {
    let by = s.sidecar_by.map_or("name", |e| e.as_str());
    let served = served_ports(w, s);
    let shared = sockets::shared(w, s);
    // A known proxy seen serving sockets only is SR012's, not a port of no number.
    let serves_app = known::sidecar(s).is_some_and(known::serves_app) && shared.is_empty();
    if !shared.is_empty() {
        classic_socket(w, s, by, &shared, opts, out);
    }
    if !served.is_empty() || serves_app {
        let plan = probe_plan(w, s, opts);
        let mut evidence = Vec::new();
        let mut clients = Vec::new();
        for port in &served {
            let d = dialers(w, &s.name, *port);
            if !d.is_empty() {
                evidence.push(format!("{} dials port {port}", names(&d)));
                clients.extend(d);
            }
        }
        if serves_app {
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
                    plan.clause(&s.name)
                ),
            ),
        );
    }
    let udp = known::udp_ports(s, w.container(&s.name));
    if !udp.is_empty() {
        let ports = udp
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        out.push(
            Finding::new(w, Rule::ClassicSidecarServesPort, Severity::Warning, vec![s.name.clone()])
                .says(
                    format!(
                        "{} is a classic sidecar (in containers[], recognised by {by}) receiving datagrams on UDP {ports}: what the app sends there before it binds, or after it has stopped, is lost, not retried, and the app sees no error",
                        s.name
                    ),
                    format!(
                        "Move {} to initContainers with restartPolicy: Always and give it an exec startupProbe that tests the bound UDP socket (a tcpSocket probe cannot test UDP), so the app starts once it receives and it stops after the app",
                        s.name
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

/// SR012: a classic sidecar serving Unix sockets that app containers reach through a
/// volume they mount too.
fn classic_socket(
    w: &Workload,
    s: &ContainerInfo,
    by: &str,
    shared: &[SharedSocket],
    opts: &Options,
    out: &mut Vec<Finding>,
) {
    let mut containers = vec![s.name.clone()];
    for c in shared.iter().flat_map(|x| &x.clients) {
        if !containers.contains(c) {
            containers.push(c.clone());
        }
    }
    let sockets: Vec<String> = shared.iter().map(SharedSocket::describe).collect();
    out.push(
        Finding::new(w, Rule::ClassicSidecarServesSocket, Severity::Error, containers.clone())
            .says(
                format!(
                    "{} is a classic sidecar (in containers[], recognised by {by}) serving {}, which {} also mount{}: it starts and stops together with the app, so the app's first and last connections find no socket (ENOENT) or a dead one",
                    s.name,
                    sockets.join(" and "),
                    names(&containers[1..]),
                    if containers.len() == 2 { "s" } else { "" }
                ),
                match probe_plan(w, s, opts) {
                    ProbePlan::Unknown(why) => format!(
                        "Move {} to initContainers with restartPolicy: Always, so that it stops after the app; {why} (without one, the app starts once it has started, not once it serves)",
                        s.name
                    ),
                    plan => format!(
                        "Move {} to initContainers with restartPolicy: Always{}, so the app starts once it serves and it stops after the app",
                        s.name,
                        plan.clause(&s.name)
                    ),
                },
            ),
    );
}

pub(super) fn native_sidecar(
    w: &Workload,
    s: &ContainerInfo,
    opts: &Options,
    out: &mut Vec<Finding>,
) {
    let served = served_ports(w, s);
    let shared = sockets::shared(w, s);
    if served.is_empty() && shared.is_empty() && !known::sidecar(s).is_some_and(known::serves_app) {
        return;
    }
    let Some(probe) = &s.startup_probe else {
        let fix = match probe_plan(w, s, opts) {
            ProbePlan::Add(p, args) if args.is_empty() => {
                format!("Give {} a startupProbe ({p}); --fix adds it", s.name)
            }
            ProbePlan::Add(p, args) => format!(
                "Give {} a startupProbe ({p}) and add {} to its args so that it serves that endpoint to the kubelet; --fix does both",
                s.name,
                args.join(" ")
            ),
            ProbePlan::Unknown(why) => format!("Give {} a startupProbe: {why}", s.name),
            ProbePlan::Keep => unreachable!("it has no startupProbe"),
        };
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
                    if served.is_empty() && !shared.is_empty() {
                        shared.iter().map(SharedSocket::describe).collect::<Vec<_>>().join(" and ")
                    } else {
                        list(&served)
                    }
                ),
                fix,
            ),
        );
        return;
    };
    let Some(port) = probe.port() else {
        return;
    };
    // The documented readiness endpoint, asked over HTTP, is right whatever the port.
    let endpoint = known::ready_endpoint(s, w.container(&s.name));
    let ready_endpoint = matches!(
        (probe, &endpoint),
        (ProbeTarget::HttpGet { port: Some(p), path: Some(path) }, Some(e))
            if *p == e.port && *path == e.path
    );
    let dialed = dialed(w, s);
    // What clients use: the ports they are seen dialing, else a mesh proxy's redirect
    // ports, else what it declares.
    let redirect = known::redirect_ports(s);
    let clients_use = if !dialed.is_empty() {
        dialed
    } else if !redirect.is_empty() {
        redirect.to_vec()
    } else {
        served
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
            match endpoint {
                Some(e) => format!(
                    "Make {}'s startupProbe an httpGet of {} on port {}, which answers once it serves",
                    s.name, e.path, e.port
                ),
                None => format!(
                    "Point {}'s startupProbe at port {}",
                    s.name, clients_use[0]
                ),
            },
        ),
    );
}
