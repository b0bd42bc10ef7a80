//! What lint knows about particular sidecars and meshes: the ports a proxy serves
//! through a redirect (no client names them), the readiness endpoint that says it
//! serves (better than a TCP connect), and the meshes' annotations. docs/reference.md's
//! `lint` section documents each entry; change both together.

use super::workload::Workload;
use crate::inventory::{pod_info::ContainerInfo, sidecars::repository_name};

/// A well-known proxy.
#[derive(Debug)]
pub struct Proxy {
    /// Container names and image repositories it is known by.
    pub names: &'static [&'static str],
    /// Ports the app reaches through an iptables redirect, without naming them.
    pub redirect_ports: &'static [u16],
    /// An HTTP endpoint that answers 200 once the proxy serves: (port, path).
    pub ready: Option<(u16, &'static str)>,
    /// The endpoint's port is configurable: count it only when the container
    /// declares that port (Envoy's admin listener).
    pub ready_if_declared: bool,
}

pub const PROXIES: &[Proxy] = &[
    Proxy {
        names: &["istio-proxy", "proxyv2"],
        redirect_ports: &[15001, 15006],
        ready: Some((15021, "/healthz/ready")),
        ready_if_declared: false,
    },
    Proxy {
        names: &["linkerd-proxy"],
        redirect_ports: &[4140, 4143],
        ready: Some((4191, "/ready")),
        ready_if_declared: false,
    },
    Proxy {
        names: &[
            "envoy",
            "envoy-sidecar",
            "consul-dataplane",
            "kuma-sidecar",
            "kuma-dp",
        ],
        redirect_ports: &[],
        ready: Some((9901, "/ready")),
        ready_if_declared: true,
    },
    Proxy {
        names: &[
            "cloud-sql-proxy",
            "cloudsql-proxy",
            "gce-proxy",
            "alloydb-auth-proxy",
        ],
        redirect_ports: &[],
        ready: None,
        ready_if_declared: false,
    },
    Proxy {
        names: &["oauth2-proxy"],
        redirect_ports: &[],
        ready: None,
        ready_if_declared: false,
    },
];

/// The well-known proxy `c` is, by name first, then image (Linkerd's image repository
/// is just `proxy`, so the image counts only for names no other proxy uses).
pub fn proxy(c: &ContainerInfo) -> Option<&'static Proxy> {
    PROXIES
        .iter()
        .find(|p| p.names.contains(&c.name.as_str()))
        .or_else(|| {
            let repo = repository_name(c.image.as_deref()?);
            (repo != "proxy")
                .then(|| PROXIES.iter().find(|p| p.names.contains(&repo)))
                .flatten()
        })
}

/// The readiness endpoint of `c`, when it is a known proxy that has one (for Envoy:
/// when it declares the admin port).
pub fn ready_endpoint(c: &ContainerInfo) -> Option<(u16, &'static str)> {
    let p = proxy(c)?;
    p.ready
        .filter(|(port, _)| !p.ready_if_declared || c.ports.contains(port))
}

/// A service mesh that injects its proxy at admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mesh {
    Istio,
    Linkerd,
}

impl Mesh {
    pub fn name(self) -> &'static str {
        match self {
            Mesh::Istio => "Istio",
            Mesh::Linkerd => "Linkerd",
        }
    }

    pub fn proxy_container(self) -> &'static str {
        match self {
            Mesh::Istio => "istio-proxy",
            Mesh::Linkerd => "linkerd-proxy",
        }
    }

    /// The pod annotation that makes the mesh inject its proxy as a native sidecar
    /// (Istio 1.25+ `sidecar.istio.io/nativeSidecar`; Linkerd 2.15+, beta key from 2.16).
    pub fn native_annotation(self) -> &'static str {
        match self {
            Mesh::Istio => ISTIO_NATIVE,
            Mesh::Linkerd => LINKERD_NATIVE,
        }
    }
}

pub const ISTIO_NATIVE: &str = "sidecar.istio.io/nativeSidecar";
pub const LINKERD_NATIVE: &str = "config.beta.linkerd.io/proxy-enable-native-sidecar";
const LINKERD_NATIVE_ALPHA: &str = "config.alpha.linkerd.io/proxy-enable-native-sidecar";
const ISTIO_INJECT: &str = "sidecar.istio.io/inject";
const LINKERD_INJECT: &str = "linkerd.io/inject";
const ISTIO_STATUS: &str = "sidecar.istio.io/status";
const LINKERD_VERSION: &str = "linkerd.io/proxy-version";
pub const ISTIO_PROXY_CONFIG: &str = "proxy.istio.io/config";
/// Linkerd's preStop sleep for its proxy (not to be used with native sidecars).
pub const LINKERD_WAIT_BEFORE_EXIT: &str = "config.alpha.linkerd.io/proxy-wait-before-exit-seconds";

/// The meshes this workload's pods get a proxy from: already injected (the
/// annotations injection leaves), or asked for on the template.
pub fn meshes(w: &Workload) -> Vec<Mesh> {
    let mut out = Vec::new();
    let istio_asked = w.labels.get(ISTIO_INJECT).map(String::as_str) == Some("true")
        || w.annotation(ISTIO_INJECT) == Some("true");
    if istio_asked || w.annotation(ISTIO_STATUS).is_some() {
        out.push(Mesh::Istio);
    }
    let linkerd_asked = matches!(w.annotation(LINKERD_INJECT), Some("enabled" | "ingress"));
    if linkerd_asked || w.annotation(LINKERD_VERSION).is_some() {
        out.push(Mesh::Linkerd);
    }
    out
}

/// The template already asks the mesh for a native sidecar.
pub fn native_mode(w: &Workload, mesh: Mesh) -> bool {
    let on = |key| w.annotation(key) == Some("true");
    match mesh {
        Mesh::Istio => on(ISTIO_NATIVE),
        Mesh::Linkerd => on(LINKERD_NATIVE) || on(LINKERD_NATIVE_ALPHA),
    }
}

/// Istio's `holdApplicationUntilProxyStarts`, set per pod in `proxy.istio.io/config`
/// (YAML or JSON), or as the injected `pilot-agent wait` postStart hook.
pub fn istio_holds_application(w: &Workload) -> bool {
    let in_config = w.annotation(ISTIO_PROXY_CONFIG).is_some_and(|cfg| {
        cfg.lines().any(|l| {
            let l = l.replace(['"', ' ', '{', '}', ','], "");
            l.contains("holdApplicationUntilProxyStarts:true")
        })
    });
    let hook = w.pod.spec.iter().flat_map(|s| &s.containers).any(|c| {
        c.lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
            .and_then(|h| h.exec.as_ref())
            .and_then(|e| e.command.as_ref())
            .is_some_and(|cmd| cmd.join(" ").contains("pilot-agent wait"))
    });
    in_config || hook
}
