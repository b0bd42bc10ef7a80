//! One sentence per incident: the fix that applies, in the names the user knows.

use super::incident::Phase;
use crate::inventory::pod_info::{Pattern, ProbeTarget};

/// What the advice is about.
pub struct Subject<'a> {
    pub phase: Phase,
    pub pattern: Pattern,
    pub container: Option<&'a str>,
    pub sidecar: Option<&'a str>,
    pub port: u16,
    /// The sidecar's startupProbe, when it has one.
    pub startup_probe: Option<&'a ProbeTarget>,
}

pub fn advice(s: &Subject) -> String {
    let app = s.container.unwrap_or("the app container");
    let port = s.port;
    let Some(sidecar) = s.sidecar else {
        return match s.phase {
            Phase::Unresolved => format!(
                "Nothing in the pod listened on port {port} within the window: check the address and port {app} dials; this is a misconfiguration, not a race."
            ),
            _ => format!(
                "Declare port {port} on the sidecar that serves it (containerPort) and run that sidecar as a native sidecar (initContainers, restartPolicy: Always) with a startupProbe on port {port}."
            ),
        };
    };
    match (s.phase, s.pattern) {
        (Phase::Startup, Pattern::Classic) => format!(
            "Move {sidecar} from containers to initContainers with restartPolicy: Always and give it a startupProbe that tests port {port}, so {app} starts only once {sidecar} serves."
        ),
        (Phase::Startup, Pattern::Native) => format!(
            "Give native sidecar {sidecar} a startupProbe that tests port {port}: without one, \"started\" does not mean \"serving\" and {app} starts too early."
        ),
        (Phase::Startup, Pattern::NativeProbed) => {
            match s.startup_probe.and_then(ProbeTarget::port) {
                Some(p) if p != port => format!(
                    "The startupProbe of {sidecar} tests port {p}, not port {port} that {app} dials: make it test port {port}."
                ),
                _ => format!(
                    "The startupProbe of {sidecar} passes before port {port} accepts connections: make it test port {port}, the port {app} dials."
                ),
            }
        }
        (Phase::Drain, Pattern::Classic) => format!(
            "Move {sidecar} to initContainers with restartPolicy: Always so it stops only after {app} has exited, or give {app} a preStop hook that finishes its work before {sidecar} stops."
        ),
        (Phase::Drain, _) => format!(
            "{app} still dialed port {port} after {sidecar} stopped: make {app} finish within terminationGracePeriodSeconds, leaving time for {sidecar} to stop after it."
        ),
        (Phase::Steady, _) => format!(
            "{sidecar} stopped listening on port {port} and came back while the pod ran: give {app} retries with backoff, and {sidecar} a livenessProbe so it restarts fast."
        ),
        (Phase::Unresolved, _) => format!(
            "Nothing listened on port {port} within the window although {sidecar} declares it: check {sidecar}'s listen address and port; this is a misconfiguration, not a race."
        ),
        (Phase::Startup, Pattern::Unknown) => format!(
            "Run {sidecar} as a native sidecar (initContainers, restartPolicy: Always) with a startupProbe that tests port {port}, so {app} starts only once it serves."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(phase: Phase, pattern: Pattern, probe: Option<&ProbeTarget>) -> String {
        advice(&Subject {
            phase,
            pattern,
            container: Some("app"),
            sidecar: Some("istio-proxy"),
            port: 15001,
            startup_probe: probe,
        })
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
        assert!(subject(Phase::Drain, Pattern::Classic, None).contains("preStop"));
        assert!(subject(Phase::Steady, Pattern::Classic, None).contains("retries with backoff"));
        assert!(subject(Phase::Unresolved, Pattern::Classic, None).contains("not a race"));
    }
}
