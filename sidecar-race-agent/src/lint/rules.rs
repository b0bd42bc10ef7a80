//! The lint rules. Each finding has a stable ID (`SR001` …, never reused), a
//! severity, the containers involved, the reason and the fix, in the names the user
//! knows. The README's "Lint" section lists them; change both together.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Container;
use serde::Serialize;

use super::{
    KubeVersion, Options,
    input::Location,
    known::{self, Mesh},
    refs,
    workload::Workload,
};
use crate::inventory::pod_info::{ContainerInfo, ProbeTarget, Role};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    ClassicSidecarServesPort,
    JobWithClassicSidecar,
    NativeSidecarWithoutStartupProbe,
    StartupProbeWrongPort,
    SleepBeforeApp,
    PreStopSleep,
    InitWaitsForContainer,
    IstioHoldApplication,
    MeshNativeSidecarMode,
    ClusterTooOld,
}

impl Rule {
    pub const ALL: [Rule; 10] = [
        Rule::ClassicSidecarServesPort,
        Rule::JobWithClassicSidecar,
        Rule::NativeSidecarWithoutStartupProbe,
        Rule::StartupProbeWrongPort,
        Rule::SleepBeforeApp,
        Rule::PreStopSleep,
        Rule::InitWaitsForContainer,
        Rule::IstioHoldApplication,
        Rule::MeshNativeSidecarMode,
        Rule::ClusterTooOld,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Rule::ClassicSidecarServesPort => "SR001",
            Rule::JobWithClassicSidecar => "SR002",
            Rule::NativeSidecarWithoutStartupProbe => "SR003",
            Rule::StartupProbeWrongPort => "SR004",
            Rule::SleepBeforeApp => "SR005",
            Rule::PreStopSleep => "SR006",
            Rule::InitWaitsForContainer => "SR007",
            Rule::IstioHoldApplication => "SR008",
            Rule::MeshNativeSidecarMode => "SR009",
            Rule::ClusterTooOld => "SR010",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Rule::ClassicSidecarServesPort => "classic-sidecar-serves-port",
            Rule::JobWithClassicSidecar => "job-with-classic-sidecar",
            Rule::NativeSidecarWithoutStartupProbe => "native-sidecar-without-startup-probe",
            Rule::StartupProbeWrongPort => "startup-probe-wrong-port",
            Rule::SleepBeforeApp => "sleep-before-app",
            Rule::PreStopSleep => "prestop-sleep",
            Rule::InitWaitsForContainer => "init-waits-for-container",
            Rule::IstioHoldApplication => "istio-hold-application",
            Rule::MeshNativeSidecarMode => "mesh-native-sidecar-mode",
            Rule::ClusterTooOld => "cluster-too-old",
        }
    }

    /// Rules about start/stop ordering: none of them is left after `lint --fix`.
    pub fn is_ordering(self) -> bool {
        matches!(
            self,
            Rule::ClassicSidecarServesPort
                | Rule::JobWithClassicSidecar
                | Rule::NativeSidecarWithoutStartupProbe
                | Rule::StartupProbeWrongPort
                | Rule::SleepBeforeApp
                | Rule::InitWaitsForContainer
        )
    }
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub id: &'static str,
    pub rule: Rule,
    pub severity: Severity,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub containers: Vec<String>,
    pub reason: String,
    pub fix: String,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

impl Finding {
    fn new(w: &Workload, rule: Rule, severity: Severity, containers: Vec<String>) -> Self {
        Finding {
            id: rule.id(),
            rule,
            severity,
            kind: w.kind.clone(),
            namespace: w.namespace.clone(),
            name: w.name.clone(),
            containers,
            reason: String::new(),
            fix: String::new(),
            location: w.location.clone(),
        }
    }

    fn says(mut self, reason: String, fix: String) -> Self {
        self.reason = reason;
        self.fix = fix;
        self
    }

    pub fn workload(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

/// The startupProbe `lint --fix` gives a sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeSpec {
    Http { port: u16, path: &'static str },
    Tcp { port: u16 },
}

impl std::fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            ProbeSpec::Http { port, path } => write!(f, "httpGet {path} on port {port}"),
            ProbeSpec::Tcp { port } => write!(f, "tcpSocket on port {port}"),
        }
    }
}

/// The typed container `name` of the template (any list).
pub fn container<'a>(w: &'a Workload, name: &str) -> Option<&'a Container> {
    let spec = w.pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == name)
}

/// Ports `c` serves: declared, plus the ports a known proxy gets by redirect.
pub fn served_ports(c: &ContainerInfo) -> Vec<u16> {
    let mut ports = c.ports.clone();
    if let Some(p) = known::proxy(c) {
        ports.extend(p.redirect_ports.iter().filter(|p| !c.ports.contains(p)));
    }
    ports
}

/// Other containers that dial `port` (command, args, env) or probe it.
pub fn dialers(w: &Workload, server: &str, port: u16) -> Vec<String> {
    w.info
        .containers
        .iter()
        .filter(|c| c.name != server && c.role != Role::Ephemeral)
        .filter(|c| {
            let probes = [&c.startup_probe, &c.readiness_probe]
                .into_iter()
                .flatten()
                .any(|p| p.port() == Some(port));
            probes || container(w, &c.name).is_some_and(|t| refs::dialed_ports(t).contains(&port))
        })
        .map(|c| c.name.clone())
        .collect()
}

/// The ports of `sidecar` that other containers dial.
fn dialed(w: &Workload, sidecar: &ContainerInfo) -> Vec<u16> {
    served_ports(sidecar)
        .into_iter()
        .filter(|p| !dialers(w, &sidecar.name, *p).is_empty())
        .collect()
}

/// The startupProbe for `sidecar`: its documented readiness endpoint, else the port
/// clients were seen dialing (evidence), else the one they name, else its first.
pub fn probe_for(w: &Workload, sidecar: &ContainerInfo, opts: &Options) -> Option<ProbeSpec> {
    if let Some((port, path)) = known::ready_endpoint(sidecar) {
        return Some(ProbeSpec::Http { port, path });
    }
    let port = opts
        .probe_ports
        .get(&sidecar.name)
        .copied()
        .or_else(|| dialed(w, sidecar).first().copied())
        .or_else(|| sidecar.ports.first().copied())?;
    Some(ProbeSpec::Tcp { port })
}

fn list(ports: &[u16]) -> String {
    let words: Vec<String> = ports.iter().map(u16::to_string).collect();
    match words.len() {
        1 => format!("port {}", words[0]),
        _ => format!("ports {}", words.join(", ")),
    }
}

fn names(names: &[String]) -> String {
    names.join(", ")
}

fn probe_clause(probe: Option<&ProbeSpec>) -> String {
    probe.map_or_else(String::new, |p| format!(" and a startupProbe ({p})"))
}

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
        classic_sidecar(w, s, opts, &mut out);
    }
    for s in w
        .info
        .containers
        .iter()
        .filter(|c| c.role == Role::NativeSidecar)
    {
        native_sidecar(w, s, opts, &mut out);
    }
    sleep_hacks(w, &classic, &mut out);
    init_waits(w, &mut out);
    meshes(w, &mut out);
    if let Some(v) = opts.kube_version {
        cluster_version(w, v, !out.is_empty(), &mut out);
    }
    out
}

fn classic_sidecar(w: &Workload, s: &ContainerInfo, opts: &Options, out: &mut Vec<Finding>) {
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

fn native_sidecar(w: &Workload, s: &ContainerInfo, opts: &Options, out: &mut Vec<Finding>) {
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

fn sleep_hacks(w: &Workload, classic: &[&ContainerInfo], out: &mut Vec<Finding>) {
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
        let Some(typed) = container(w, &app.name) else {
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
        let Some(sleep) = container(w, &c.name).and_then(refs::prestop_sleep) else {
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

fn init_waits(w: &Workload, out: &mut Vec<Finding>) {
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
                .find(|c| c.role.in_containers() && served_ports(c).contains(&port))
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

fn meshes(w: &Workload, out: &mut Vec<Finding>) {
    for mesh in known::meshes(w) {
        let proxy = mesh.proxy_container();
        if mesh == Mesh::Linkerd
            && let Some(secs) = w.annotation(known::LINKERD_WAIT_BEFORE_EXIT)
        {
            out.push(
                Finding::new(w, Rule::PreStopSleep, Severity::Warning, vec![proxy.into()]).says(
                    format!(
                        "{} gives the injected {proxy} a preStop sleep of {secs} s so that it outlives the app's drain: a tuned race",
                        known::LINKERD_WAIT_BEFORE_EXIT
                    ),
                    format!(
                        "Use Linkerd's native-sidecar mode ({}: \"true\"), which stops {proxy} after the app, and drop this annotation (Linkerd: not to be used with native sidecars)",
                        mesh.native_annotation()
                    ),
                ),
            );
        }
        let native = known::native_mode(w, mesh) || w.info.role(proxy) == Some(Role::NativeSidecar);
        if native {
            continue;
        }
        let annotation = format!("{}: \"true\"", mesh.native_annotation());
        if mesh == Mesh::Istio && known::istio_holds_application(w) {
            out.push(
                Finding::new(w, Rule::IstioHoldApplication, Severity::Warning, vec![proxy.into()])
                    .says(
                        "holdApplicationUntilProxyStarts starts the app once istio-proxy is ready, but covers startup only: at drain istio-proxy gets SIGTERM together with the app and can stop serving first".into(),
                        format!("Use Istio's native-sidecar mode (pod annotation {annotation}), which orders both startup and drain"),
                    ),
            );
        }
        out.push(
            Finding::new(w, Rule::MeshNativeSidecarMode, Severity::Warning, vec![proxy.into()]).says(
                format!(
                    "{} injects {proxy} into this pod as a classic sidecar",
                    mesh.name()
                ),
                format!(
                    "Set the pod template annotation {annotation}: {} then injects {proxy} as a native sidecar with its own startupProbe (Kubernetes 1.29+)",
                    mesh.name()
                ),
            ),
        );
    }
}

fn cluster_version(w: &Workload, v: KubeVersion, needs_fix: bool, out: &mut Vec<Finding>) {
    let natives: Vec<String> = w
        .info
        .containers
        .iter()
        .filter(|c| c.role == Role::NativeSidecar)
        .map(|c| c.name.clone())
        .collect();
    let old = v < KubeVersion {
        major: 1,
        minor: 29,
    };
    let beta = !old
        && v < KubeVersion {
            major: 1,
            minor: 33,
        };
    let finding = if old && !natives.is_empty() {
        Finding::new(w, Rule::ClusterTooOld, Severity::Error, natives.clone()).says(
            format!(
                "Kubernetes {v} does not run native sidecars by default (1.28 only behind the SidecarContainers feature gate, earlier versions reject restartPolicy on init containers): {} would not start first",
                names(&natives)
            ),
            "Upgrade the cluster to 1.29 or later (native sidecars are GA in 1.33) before deploying this".into(),
        )
    } else if old && needs_fix {
        Finding::new(w, Rule::ClusterTooOld, Severity::Warning, Vec::new()).says(
            format!("the fix for this workload needs native sidecars, which Kubernetes {v} does not run by default"),
            "Upgrade the cluster to 1.29 or later (native sidecars are GA in 1.33); until then the sidecar ordering cannot be fixed in the pod spec".into(),
        )
    } else if beta && !natives.is_empty() {
        Finding::new(w, Rule::ClusterTooOld, Severity::Info, natives.clone()).says(
            format!("native sidecars are beta in Kubernetes {v}: on by default, GA from 1.33"),
            "Check that the SidecarContainers feature gate is not turned off on this cluster"
                .into(),
        )
    } else {
        return;
    };
    out.push(finding);
}
