//! What several rules share: the ports a container serves
//! and who dials them, the startupProbe a fix gives, and how findings name them.

use crate::{
    lint::{known, options::Options, refs, sockets, workload::Workload},
    pods::catalog::Sidecar,
    pods::pod_info::{ContainerInfo, Role},
};

/// A startupProbe `lint --fix` gives a sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeSpec {
    Http {
        port: u16,
        path: String,
    },
    Tcp {
        port: u16,
    },
    /// An exec probe running `sh -c TEST`, which passes once the Unix socket exists.
    Socket {
        test: String,
    },
}

impl std::fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            ProbeSpec::Http { port, path } => write!(f, "httpGet {path} on port {port}"),
            ProbeSpec::Tcp { port } => write!(f, "tcpSocket on port {port}"),
            ProbeSpec::Socket { test } => write!(
                f,
                "exec `sh -c '{test}'`, which tests the Unix socket as a tcpSocket probe cannot; the image needs a shell"
            ),
        }
    }
}

/// What `--fix` does about a sidecar's startupProbe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbePlan {
    /// It has its own startupProbe: kept.
    Keep,
    /// It gets this probe, after adding these args (flags that turn its readiness
    /// endpoint on where the kubelet reaches it).
    Add(ProbeSpec, Vec<String>),
    /// No port to probe is known: the reason, said plainly.
    Unknown(String),
}

impl ProbePlan {
    /// The clause a finding's fix text adds: what --fix does about the probe.
    pub fn clause(&self, name: &str) -> String {
        match self {
            ProbePlan::Keep => format!(", keeping {name}'s own startupProbe"),
            ProbePlan::Add(p, args) if args.is_empty() => format!(" and a startupProbe ({p})"),
            ProbePlan::Add(p, args) => format!(
                " and a startupProbe ({p}), adding {} to its args so that it serves that endpoint to the kubelet",
                args.join(" ")
            ),
            ProbePlan::Unknown(why) => format!("; {why}"),
        }
    }
}

/// Ports `c` serves: declared, the ports a known proxy gets by redirect, and those a
/// known sidecar's own flags name; not a known sidecar's readiness port, which only
/// the kubelet's probes reach (a collector's declared health_check port).
pub fn served_ports(w: &Workload, c: &ContainerInfo) -> Vec<u16> {
    let ready = known::ready_endpoint(c, w.container(&c.name)).map(|e| e.port);
    let mut ports: Vec<u16> = c
        .ports
        .iter()
        .copied()
        .filter(|p| Some(*p) != ready)
        .collect();
    let mut more: Vec<u16> = known::redirect_ports(c).to_vec();
    if let (Some(s), Some(t)) = (known::sidecar(c), w.container(&c.name)) {
        more.extend(known::flag_ports(s, t));
    }
    for p in more {
        if !ports.contains(&p) {
            ports.push(p);
        }
    }
    ports
}

/// Other containers that dial `port` of `server` (command, args, env) or probe it;
/// beside a known sidecar, an app that names only a loopback host (`DB_HOST=127.0.0.1`)
/// dials it too.
pub fn dialers(w: &Workload, server: &str, port: u16) -> Vec<String> {
    let known_server = w
        .info
        .containers
        .iter()
        .find(|c| c.name == server)
        .and_then(known::sidecar)
        .is_some_and(|s| s.redirect_ports.is_empty());
    w.info
        .containers
        .iter()
        .filter(|c| c.name != server && c.role != Role::Ephemeral)
        .filter(|c| {
            let probes = [&c.startup_probe, &c.readiness_probe]
                .into_iter()
                .flatten()
                .any(|p| p.port() == Some(port));
            probes
                || w.container(&c.name).is_some_and(|t| {
                    refs::dialed_ports(t).contains(&port)
                        || (known_server && c.role == Role::App && refs::names_loopback_host(t))
                })
        })
        .map(|c| c.name.clone())
        .collect()
}

/// The ports of `sidecar` that other containers dial.
pub(super) fn dialed(w: &Workload, sidecar: &ContainerInfo) -> Vec<u16> {
    served_ports(w, sidecar)
        .into_iter()
        .filter(|p| !dialers(w, &sidecar.name, *p).is_empty())
        .collect()
}

/// The startupProbe for `sidecar`: its documented readiness endpoint, else the port
/// clients were seen dialing (evidence) or that they name, else a test of the Unix
/// socket it serves through a shared volume, else its first port. A TCP connect is no
/// probe for a sidecar that listens on loopback only.
pub fn probe_for(w: &Workload, sidecar: &ContainerInfo, opts: &Options) -> ProbePlan {
    let typed = w.container(&sidecar.name);
    if let Some(e) = known::ready_endpoint(sidecar, typed) {
        return ProbePlan::Add(
            ProbeSpec::Http {
                port: e.port,
                path: e.path,
            },
            e.add_args,
        );
    }
    let evidence = opts
        .probe_ports
        .get(&sidecar.name)
        .copied()
        .or_else(|| dialed(w, sidecar).first().copied());
    let loopback = known::listens_on_loopback(sidecar, typed);
    if let Some(port) = evidence
        && !loopback
    {
        return ProbePlan::Add(ProbeSpec::Tcp { port }, Vec::new());
    }
    if let Some(socket) = sockets::shared(w, sidecar).first() {
        if let Some(s) = known::sidecar(sidecar).filter(|s| s.no_shell) {
            return ProbePlan::Unknown(no_shell_reason(&sidecar.name, s, socket));
        }
        return ProbePlan::Add(
            ProbeSpec::Socket {
                test: socket.test(),
            },
            Vec::new(),
        );
    }
    let port = evidence.or_else(|| served_ports(w, sidecar).first().copied());
    match port {
        Some(_) if loopback => ProbePlan::Unknown(format!(
            "{} listens on loopback only, where a kubelet probe cannot reach it: no startupProbe is added; give it one that checks it serves",
            sidecar.name
        )),
        Some(port) => ProbePlan::Add(ProbeSpec::Tcp { port }, Vec::new()),
        None => ProbePlan::Unknown(format!(
            "the port to probe is unknown (no declared port, no flag naming one, no client seen dialing one): no startupProbe is added; pass --probe-port {}=PORT",
            sidecar.name
        )),
    }
}

/// Why a known sidecar without a shell gets no probe of the socket it serves, and
/// what would let `--fix` give one (its readiness endpoint, where it has one).
fn no_shell_reason(name: &str, s: &Sidecar, socket: &sockets::SharedSocket) -> String {
    let mut why = format!(
        "{name}'s image has no shell, so no exec probe can test {}: no startupProbe is added",
        socket.describe()
    );
    if let Some(r) = &s.ready {
        let enable = r
            .enable
            .as_deref()
            .map_or(String::new(), |e| format!(" ({e})"));
        why.push_str(&format!(
            "; serve its readiness endpoint on port {}{enable} and declare that containerPort, and --fix probes httpGet {} on it",
            r.port, r.path
        ));
    }
    why
}

/// The plan for a sidecar that may already have a startupProbe.
pub fn probe_plan(w: &Workload, sidecar: &ContainerInfo, opts: &Options) -> ProbePlan {
    if sidecar.startup_probe.is_some() {
        ProbePlan::Keep
    } else {
        probe_for(w, sidecar, opts)
    }
}

pub(super) fn list(ports: &[u16]) -> String {
    let words: Vec<String> = ports.iter().map(u16::to_string).collect();
    match words.len() {
        0 => "no port lint can see".into(),
        1 => format!("port {}", words[0]),
        _ => format!("ports {}", words.join(", ")),
    }
}

pub(super) fn names(names: &[String]) -> String {
    names.join(", ")
}
