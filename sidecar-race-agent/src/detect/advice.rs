//! One sentence per incident: the fix that applies, in the names the user knows.

use std::net::{IpAddr, SocketAddr};

use super::{
    incident::{Kind, Phase},
    listeners::canonical,
    service::Protocol,
};
use crate::{
    pods::catalog::Sidecar,
    pods::pod_info::{Pattern, ProbeTarget},
};

/// What the advice is about.
pub struct Subject<'a> {
    pub kind: Kind,
    pub phase: Phase,
    pub pattern: Pattern,
    /// The client container (for a stuck Job: none).
    pub container: Option<&'a str>,
    /// The serving container (for a stuck Job: the sidecar that keeps running).
    pub sidecar: Option<&'a str>,
    /// The refused port (after a redirect, the local one).
    pub port: u16,
    /// The port the client dialed when a NAT redirect sent it to `port`.
    pub dialed_port: Option<u16>,
    /// The sidecar's startupProbe, when it has one.
    pub startup_probe: Option<&'a ProbeTarget>,
    /// Whether the pod source told the containers' roles.
    pub roles_known: bool,
    /// The client is a sidecar (for `app_not_ready`: a proxy forwarding to the app).
    pub client_is_sidecar: bool,
    /// A listener on the port that does not take the address dialed (another family).
    pub listening_on: Option<SocketAddr>,
    /// The address refused.
    pub dialed: Option<SocketAddr>,
    /// For a Unix socket incident: the socket as the client dialed it, and as the
    /// serving container binds it (through its own mount of the volume), if known.
    pub socket: Option<(&'a str, Option<&'a str>)>,
    /// The serving container is this known sidecar (`crate::pods::catalog`).
    pub known: Option<&'a Sidecar>,
    /// For a Unix socket incident: a container's mount of the socket's volume whose
    /// `subPathExpr` could not be expanded, and why (`app's subPathExpr $(DIR): …`).
    pub unexpanded: Option<&'a str>,
    /// How the refused data travelled: datagrams were lost, and a UDP socket is probed
    /// by exec (`tcpSocket` cannot test UDP).
    pub protocol: Protocol,
}

impl Subject<'_> {
    /// What was refused: `port 15001`, or `socket /var/run/dapr/app.sock`.
    pub fn target(&self) -> String {
        match self.socket {
            Some((dialed, _)) => format!("socket {dialed}"),
            None if self.protocol == Protocol::Udp => format!("UDP port {}", self.port),
            None => format!("port {}", self.port),
        }
    }

    /// The startupProbe that would hold the client back until the target serves: a
    /// known sidecar's health endpoint where its flags serve one; a tcpSocket probe
    /// cannot test a Unix socket, an exec probe that connects can, where the image
    /// has a shell.
    pub fn probe(&self) -> String {
        // A health endpoint its flags turn on: its port for the app may be loopback
        // only (the Cloud SQL proxy's), where a kubelet probe cannot reach.
        if let Some(h) = self.known.and_then(|k| k.health.as_ref()) {
            return format!(
                "a startupProbe on its readiness endpoint (httpGet {} on its {} port, {} by default, served with {} and {}=0.0.0.0 where the kubelet reaches it)",
                h.path, h.port_flag, h.default_port, h.enable_flag, h.address_flag
            );
        }
        match self.socket {
            None if self.protocol == Protocol::Udp => format!(
                "an exec startupProbe that tests the bound UDP socket (e.g. command: [\"sh\", \"-c\", \"ss -Hlun 'sport = :{}' | grep -q .\"]; a tcpSocket probe cannot test UDP)",
                self.port
            ),
            Some((dialed, served))
                if self.protocol == Protocol::Unixgram
                    && !self.known.is_some_and(|k| k.no_shell) =>
            {
                let path = served.unwrap_or(dialed);
                let test = match path.strip_prefix('@') {
                    Some(name) => format!("\"sh\", \"-c\", \"ss -Hlx src @{name} | grep -q .\""),
                    None => format!("\"test\", \"-S\", \"{path}\""),
                };
                format!(
                    "an exec startupProbe that tests the bound datagram socket (e.g. command: [{test}]; a tcpSocket probe cannot test a Unix socket)"
                )
            }
            Some(_) if let Some(known) = self.known.filter(|k| k.no_shell) => match &known.ready {
                Some(r) => format!(
                    "a startupProbe on its readiness endpoint (httpGet {} on port {}{}; its image has no shell for an exec probe of the socket)",
                    r.path,
                    r.port,
                    r.enable.as_deref().map_or(String::new(), |e| format!(", {e}"))
                ),
                None => "a startupProbe that tests the socket (its image has no shell for an exec probe: it needs a readiness endpoint)".to_string(),
            },
            Some((dialed, served)) => {
                let path = served.unwrap_or(dialed);
                format!(
                    "an exec startupProbe that connects to the socket (e.g. command: [\"nc\", \"-zU\", \"{path}\"]; a tcpSocket probe cannot test a Unix socket)"
                )
            }
            None => format!("a startupProbe that tests port {}", self.port),
        }
    }
}

pub fn advice(s: &Subject) -> String {
    let text = match s.kind {
        Kind::StuckJob => stuck_job(s),
        Kind::InitDeadlock => init_deadlock(s),
        Kind::AppNotReady => app_not_ready(s),
        Kind::SidecarRace => sidecar_race(s),
    };
    // A refused datagram is gone: no connect failed for the app to retry.
    let text = if s.protocol.is_datagram() && s.kind != Kind::StuckJob {
        format!(
            "The datagrams {} sent to {} while nothing was bound there were lost, not retried. {text}",
            s.container.unwrap_or("the app container"),
            s.target()
        )
    } else {
        text
    };
    let text = if s.kind == Kind::SidecarRace && !s.roles_known {
        format!(
            "{text} (No pod metadata: container roles are unknown, so this assumes the serving container is a sidecar.)"
        )
    } else {
        text
    };
    match s.unexpanded {
        Some(why) => format!(
            "{text} (The agent could not expand {why}; the socket is matched by the expression as written, which may not be the directory the kubelet mounts.)"
        ),
        None => text,
    }
}

fn stuck_job(s: &Subject) -> String {
    let sidecar = s.sidecar.unwrap_or("the sidecar");
    format!(
        "{sidecar} kept running after every app container of this Job's pod finished, so the Job never completes: move {sidecar} to initContainers with restartPolicy: Always (the kubelet stops native sidecars once the app containers have exited)."
    )
}

fn init_deadlock(s: &Subject) -> String {
    let init = s.container.unwrap_or("the init container");
    let sidecar = s.sidecar.unwrap_or("the sidecar");
    let (target, probe) = (s.target(), s.probe());
    if matches!(s.pattern, Pattern::Native | Pattern::NativeProbed) {
        return format!(
            "Init container {init} waits for {target} of native sidecar {sidecar}, but {sidecar} is listed after {init} in initContainers and the kubelet starts them in order: a deadlock. Move {sidecar} above {init} in initContainers, with {probe}."
        );
    }
    format!(
        "Init container {init} waits for {target} of {sidecar}, but {sidecar} is in containers and starts only after every init container has finished: a deadlock. Make {sidecar} a native sidecar (initContainers, restartPolicy: Always) listed before {init}, with {probe}."
    )
}

fn app_not_ready(s: &Subject) -> String {
    let client = s.container.unwrap_or("a container");
    let app = s.sidecar.unwrap_or("the app container");
    let target = s.target();
    if s.client_is_sidecar {
        // An app behind an auth proxy often binds loopback only (oauth2-proxy's
        // upstream 127.0.0.1:8080), where a kubelet probe, sent to the pod IP, fails.
        let loopback = if s.dialed.is_some_and(|a| a.ip().is_loopback()) {
            format!(
                " (if {app} listens on loopback only, a probe cannot reach it there: probe through {client} instead, an httpGet on {client}'s port to a path it forwards to {app})"
            )
        } else {
            String::new()
        };
        format!(
            "Not a sidecar race: {client} forwarded connections (inbound requests or rewritten probes) to {target} of {app} before {app} listened. Nothing to migrate; if those requests matter, give {app} a readinessProbe (or startupProbe) on {target}{loopback} so traffic waits for it."
        )
    } else {
        format!(
            "Not a sidecar race: {client} dialed {target} of app container {app} before it listened. If {app} is a sidecar that {client} depends on, name it in the pod annotation sidecar-race.io/sidecars (or --sidecar-names) and it is reported as one; otherwise give {client} retries with backoff."
        )
    }
}

fn sidecar_race(s: &Subject) -> String {
    let app = s.container.unwrap_or("the app container");
    let port = s.port;
    let (target, probe) = (s.target(), s.probe());
    let dialed = dialed_prefix(s, app, port);
    if let (Phase::Unresolved, Some(listen), Some(dialed)) = (s.phase, s.listening_on, s.dialed) {
        let server = s.sidecar.unwrap_or("a container of the pod");
        return format!(
            "{dialed_note}{server} listens on {listen}, which does not take {app}'s connections to {dialed}: {fix}; this is a misconfiguration, not a race.",
            dialed_note = dialed_prefix(s, app, port),
            fix = address_fix(server, listen, app, dialed),
        );
    }
    let Some(sidecar) = s.sidecar else {
        return match s.phase {
            Phase::Unresolved if s.socket.is_some() => format!(
                "Nothing in the pod listened on {target} within the window: check the path {app} dials and the volume both containers mount; this is a misconfiguration, not a race."
            ),
            _ if s.socket.is_some() => format!(
                "Run the sidecar that serves {target} as a native sidecar (initContainers, restartPolicy: Always) with {probe}, so {app} starts only once it serves."
            ),
            Phase::Unresolved => format!(
                "{dialed}Nothing in the pod listened on {target} within the window: check the address and port {app} dials; this is a misconfiguration, not a race."
            ),
            _ => format!(
                "{dialed}Declare {target} on the sidecar that serves it (containerPort) and run that sidecar as a native sidecar (initContainers, restartPolicy: Always) with {probe}."
            ),
        };
    };
    let text = match (s.phase, s.pattern) {
        (Phase::Startup, Pattern::Classic) => format!(
            "Move {sidecar} from containers to initContainers with restartPolicy: Always and give it {probe}, so {app} starts only once {sidecar} serves."
        ),
        (Phase::Startup, Pattern::Native) => format!(
            "Give native sidecar {sidecar} {probe}: without one, \"started\" does not mean \"serving\" and {app} starts too early."
        ),
        (Phase::Startup, Pattern::NativeProbed) => {
            match s.startup_probe.and_then(ProbeTarget::port) {
                Some(p) if p != port => format!(
                    "The startupProbe of {sidecar} tests port {p}, not {target} that {app} dials: make it test {target}."
                ),
                _ => format!(
                    "The startupProbe of {sidecar} passes before {target} accepts connections: make it test {target}, which {app} dials."
                ),
            }
        }
        (Phase::Drain, Pattern::Classic) => format!(
            "Move {sidecar} to initContainers with restartPolicy: Always: the kubelet stops a native sidecar only after the app containers have exited. Until then, delay {sidecar}'s own shutdown until {app} is done (e.g. Istio's terminationDrainDuration or EXIT_ON_ZERO_ACTIVE_CONNECTIONS); a preStop hook on {app} does not delay {sidecar}'s SIGTERM."
        ),
        (Phase::Drain, _) => format!(
            "{app} still dialed {target} after {sidecar} stopped: the kubelet stops native sidecars only after the app containers exit, so {sidecar} exited on its own or {app} outlived its grace period; make {app} finish within terminationGracePeriodSeconds."
        ),
        (Phase::Steady, _) => format!(
            "{sidecar} stopped listening on {target} and came back while the pod ran: give {app} retries with backoff, and {sidecar} a livenessProbe so it restarts fast."
        ),
        (Phase::Unresolved, _) => format!(
            "Nothing listened on {target} within the window although {sidecar} declares it: check {sidecar}'s listen address and port; this is a misconfiguration, not a race."
        ),
        (Phase::Startup, Pattern::Unknown) => format!(
            "Run {sidecar} as a native sidecar (initContainers, restartPolicy: Always) with {probe}, so {app} starts only once it serves."
        ),
    };
    format!("{dialed}{text}")
}

/// How to make `server`'s listener on `listen` take `app`'s connections to `dialed`:
/// the other family wants a dual-stack address; an address of the same family (the
/// pod IP where the app dials loopback, or the reverse) wants the wildcard or the
/// address dialed, or the app dialing the one served.
fn address_fix(server: &str, listen: SocketAddr, app: &str, dialed: SocketAddr) -> String {
    let (l, d) = (canonical(listen.ip()), canonical(dialed.ip()));
    if l.is_ipv4() != d.is_ipv4() {
        return format!(
            "make {server} listen on an address that does (e.g. [::] for both families) or have {app} dial {listen}"
        );
    }
    let (any, dialed_ip) = match d {
        IpAddr::V4(_) => ("0.0.0.0", d.to_string()),
        IpAddr::V6(_) => ("[::]", format!("[{d}]")),
    };
    let what = if l.is_loopback() {
        "loopback"
    } else {
        "the pod IP"
    };
    format!(
        "make {server} listen on {any} (or on {dialed_ip}, the address {app} dials) or have {app} dial {what} ({listen})"
    )
}

/// After a redirect (a mesh's outbound capture) the app dialed another port.
fn dialed_prefix(s: &Subject, app: &str, port: u16) -> String {
    match s.dialed_port {
        Some(d) if d != port => format!("{app} dialed port {d}, redirected to port {port}: "),
        _ => String::new(),
    }
}

/// Whether a `guarded` incident's advice says the pod works around the start order:
/// a sidecar race at startup (an init deadlock's wait never ends, an `unresolved`
/// port is no race).
pub fn shows_workaround(kind: Kind, phase: Phase) -> bool {
    kind == Kind::SidecarRace && phase == Phase::Startup
}

/// The sentence that ends a `guarded` incident's advice: wait tool `tool` (a process
/// name) was refused, so the pod already holds the client back until `port` serves.
pub fn workaround(tool: &str, sidecar: Option<&str>, s: &Subject) -> String {
    let sidecar = sidecar.unwrap_or("the sidecar");
    let (target, probe) = (s.target(), s.probe());
    format!(
        " The pod works around the start order: {tool} waits until {target} accepts connections (its refusals are counted here); running {sidecar} as a native sidecar with {probe} makes that workaround unnecessary."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic startup race of `app` against `sidecar` on `port`, roles known.
    fn base<'a>(sidecar: &'a str, port: u16) -> Subject<'a> {
        Subject {
            kind: Kind::SidecarRace,
            phase: Phase::Startup,
            pattern: Pattern::Classic,
            container: Some("app"),
            sidecar: Some(sidecar),
            port,
            dialed_port: None,
            startup_probe: None,
            roles_known: true,
            client_is_sidecar: false,
            listening_on: None,
            dialed: None,
            socket: None,
            known: None,
            unexpanded: None,
            protocol: Protocol::Tcp,
        }
    }

    fn subject(phase: Phase, pattern: Pattern, probe: Option<&ProbeTarget>) -> String {
        advice(&Subject {
            phase,
            pattern,
            startup_probe: probe,
            ..base("istio-proxy", 15001)
        })
    }

    #[test]
    fn a_datagram_race_says_the_data_was_lost_and_probes_the_bound_socket_by_exec() {
        let udp = advice(&Subject {
            protocol: Protocol::Udp,
            ..base("statsd", 8125)
        });
        assert!(udp.starts_with("The datagrams app sent to UDP port 8125 while nothing was bound there were lost, not retried."), "{udp}");
        assert!(
            udp.contains("initContainers with restartPolicy: Always"),
            "{udp}"
        );
        assert!(udp.contains("ss -Hlun 'sport = :8125'"), "{udp}");
        assert!(udp.contains("a tcpSocket probe cannot test UDP"), "{udp}");
        let unixgram = advice(&Subject {
            protocol: Protocol::Unixgram,
            socket: Some(("/var/log/app/log.sock", Some("/log/log.sock"))),
            ..base("rsyslog", 0)
        });
        assert!(unixgram.contains("lost, not retried"), "{unixgram}");
        assert!(
            unixgram.contains(r#"command: ["test", "-S", "/log/log.sock"]"#),
            "{unixgram}"
        );
        let tcp = advice(&base("istio-proxy", 15001));
        assert!(!tcp.contains("lost"), "{tcp}");
    }

    #[test]
    fn a_sidecar_whose_image_has_no_shell_gets_its_readiness_endpoint_not_an_exec_probe() {
        let collector = crate::pods::catalog::CATALOG
            .sidecar("otel-collector")
            .expect("the collector in the catalog");
        let text = advice(&Subject {
            socket: Some(("/var/run/otel/otlp.sock", Some("/sockets/otlp.sock"))),
            known: Some(collector),
            ..base("otc-container", 0)
        });
        assert_eq!(
            text,
            "Move otc-container from containers to initContainers with restartPolicy: Always and give it a startupProbe on its readiness endpoint (httpGet / on port 13133, the health_check extension with `endpoint: 0.0.0.0:13133` in its config; its image has no shell for an exec probe of the socket), so app starts only once otc-container serves."
        );
    }

    #[test]
    fn a_proxy_with_a_health_endpoint_gets_it_not_a_probe_of_its_loopback_port() {
        let text = advice(&Subject {
            known: crate::pods::catalog::CATALOG.sidecar("cloud-sql-proxy"),
            ..base("cloud-sql-proxy", 5432)
        });
        assert_eq!(
            text,
            "Move cloud-sql-proxy from containers to initContainers with restartPolicy: Always and give it a startupProbe on its readiness endpoint (httpGet /startup on its --http-port port, 9090 by default, served with --health-check and --http-address=0.0.0.0 where the kubelet reaches it), so app starts only once cloud-sql-proxy serves."
        );
    }

    #[test]
    fn a_proxy_forwarding_to_a_loopback_app_is_told_to_probe_through_itself() {
        let text = |dialed: &str| {
            advice(&Subject {
                kind: Kind::AppNotReady,
                container: Some("oauth2-proxy"),
                client_is_sidecar: true,
                dialed: Some(dialed.parse().unwrap()),
                ..base("app", 8080)
            })
        };
        assert_eq!(
            text("127.0.0.1:8080"),
            "Not a sidecar race: oauth2-proxy forwarded connections (inbound requests or rewritten probes) to port 8080 of app before app listened. Nothing to migrate; if those requests matter, give app a readinessProbe (or startupProbe) on port 8080 (if app listens on loopback only, a probe cannot reach it there: probe through oauth2-proxy instead, an httpGet on oauth2-proxy's port to a path it forwards to app) so traffic waits for it."
        );
        assert!(!text("10.1.0.7:8080").contains("loopback"));
    }

    #[test]
    fn a_unix_socket_race_gets_an_exec_probe_on_the_sidecars_own_path() {
        let advice = |phase, served| {
            advice(&Subject {
                phase,
                socket: Some(("/var/run/dapr/app.sock", served)),
                ..base("daprd", 0)
            })
        };
        assert_eq!(
            advice(Phase::Startup, Some("/sockets/app.sock")),
            "Move daprd from containers to initContainers with restartPolicy: Always and give it an exec startupProbe that connects to the socket (e.g. command: [\"nc\", \"-zU\", \"/sockets/app.sock\"]; a tcpSocket probe cannot test a Unix socket), so app starts only once daprd serves."
        );
        let steady = advice(Phase::Steady, None);
        assert!(
            steady.starts_with(
                "daprd stopped listening on socket /var/run/dapr/app.sock and came back"
            ),
            "{steady}"
        );
        assert!(!steady.contains("port"), "{steady}");
    }

    #[test]
    fn each_pattern_gets_its_fix() {
        assert!(
            subject(Phase::Startup, Pattern::Classic, None)
                .starts_with("Move istio-proxy from containers to initContainers")
        );
        assert!(
            subject(Phase::Startup, Pattern::Native, None)
                .contains("startupProbe that tests port 15001")
        );
        let probe = ProbeTarget::HttpGet {
            port: Some(15021),
            path: Some("/healthz/ready".into()),
        };
        assert_eq!(
            subject(Phase::Startup, Pattern::NativeProbed, Some(&probe)),
            "The startupProbe of istio-proxy tests port 15021, not port 15001 that app dials: make it test port 15001."
        );
        let drain = subject(Phase::Drain, Pattern::Classic, None);
        assert!(
            drain.starts_with("Move istio-proxy to initContainers"),
            "{drain}"
        );
        assert!(
            drain.contains("a preStop hook on app does not delay istio-proxy's SIGTERM"),
            "an app's preStop is not offered as the fix: {drain}"
        );
        assert!(subject(Phase::Steady, Pattern::Classic, None).contains("retries with backoff"));
        assert!(subject(Phase::Unresolved, Pattern::Classic, None).contains("not a race"));
    }
}
