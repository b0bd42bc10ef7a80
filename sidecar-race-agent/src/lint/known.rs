//! What lint knows about particular sidecars, read from the known-sidecars table
//! ([`crate::pods::catalog`]): the ports a sidecar serves (redirects, fixed ports, its own
//! flags), the readiness endpoint that says it serves (better than a TCP connect),
//! and Istio's and Linkerd's annotations the mesh rules read. docs/lint.md documents
//! the table.

use k8s_openapi::api::core::v1::Container;

use super::workload::Workload;
use crate::{
    pods::catalog::{CATALOG, Sidecar},
    pods::pod_info::ContainerInfo,
};

/// The known sidecar `c` is, by name first, then image.
pub fn sidecar(c: &ContainerInfo) -> Option<&'static Sidecar> {
    CATALOG.known(&c.name, c.image.as_deref())
}

/// The sidecar serves the app (a proxy, or an agent with a listener the app may
/// use), as against one that only ships logs or telemetry, or that serves only an
/// app seen dialing it (`uses_listener`: a collector's readiness endpoint is no
/// sign that the app sends to it).
pub fn serves_app(s: &Sidecar) -> bool {
    let serves_something = !s.redirect_ports.is_empty()
        || !s.ports.is_empty()
        || !s.port_flags.is_empty()
        || !s.address_flags.is_empty()
        || s.ready.is_some()
        || s.health.is_some();
    !s.uses_listener && serves_something
}

/// The ports a known sidecar gets by redirect (no client names them).
pub fn redirect_ports(c: &ContainerInfo) -> &'static [u16] {
    sidecar(c).map_or(&[], |s| &s.redirect_ports)
}

/// A container's command line and environment, as its flags read them.
struct Flags<'a> {
    words: Vec<&'a str>,
    env: Vec<(&'a str, &'a str)>,
    env_prefix: Option<&'a str>,
}

impl<'a> Flags<'a> {
    fn of(c: &'a Container, env_prefix: Option<&'a str>) -> Self {
        let words = c
            .command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .map(String::as_str)
            .collect();
        let env = c
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.as_str(), e.value.as_deref()?)))
            .collect();
        Flags {
            words,
            env,
            env_prefix,
        }
    }

    /// `--flag=v`, `--flag v`, or the env var the sidecar maps the flag to
    /// (`CSQL_PROXY_HTTP_PORT` for `--http-port`).
    fn value(&self, flag: &str) -> Option<&'a str> {
        for (i, w) in self.words.iter().enumerate() {
            if let Some(v) = w.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                return Some(v);
            }
            if *w == flag
                && let Some(next) = self.words.get(i + 1)
                && !next.starts_with('-')
            {
                return Some(next);
            }
        }
        let var = self.env_name(flag)?;
        self.env.iter().find(|(k, _)| *k == var).map(|(_, v)| *v)
    }

    /// A boolean flag: `--flag`, `--flag=true`, or its env var set to `true`.
    fn on(&self, flag: &str) -> bool {
        self.words.contains(&flag) || self.value(flag) == Some("true")
    }

    fn env_name(&self, flag: &str) -> Option<String> {
        let name = flag.trim_start_matches('-');
        let prefix = self.env_prefix?;
        (flag.starts_with("--") && !name.is_empty())
            .then(|| format!("{prefix}{}", name.to_uppercase().replace('-', "_")))
    }

    /// Positional words (not flags, not a flag's value).
    fn positional(&self) -> Vec<&'a str> {
        let mut out = Vec::new();
        let mut skip = false;
        for w in &self.words {
            if std::mem::take(&mut skip) {
                continue;
            }
            if w.starts_with('-') {
                skip = !w.contains('=') && !is_switch(w);
            } else {
                out.push(*w);
            }
        }
        out
    }
}

/// Flags that take no value in the sidecars the table knows.
fn is_switch(w: &str) -> bool {
    matches!(
        w,
        "--health-check"
            | "--structured-logs"
            | "--auto-iam-authn"
            | "--private-ip"
            | "--psc"
            | "--quiet"
            | "--debug-logs"
            | "--prometheus"
            | "--run-connection-test"
    )
}

/// The port in `host:port` (or `http://host:port`).
fn address_port(v: &str) -> Option<u16> {
    v.rsplit(':').next()?.trim_end_matches('/').parse().ok()
}

fn loopback(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "::1" | "[::1]")
}

/// The host in `host:port`, or the whole value.
fn address_host(v: &str) -> &str {
    let v = v
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    match v.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => v,
    }
}

fn env_prefix(s: &Sidecar) -> Option<&str> {
    s.env_prefix.as_deref()
}

/// The ports `c` (known sidecar `s`, typed `t`) serves per its own flags: the port
/// flags and per-instance `?port=` (the proxy counts up from the base port for
/// instances without their own), an address flag's port, else its default port.
pub fn flag_ports(s: &Sidecar, t: &Container) -> Vec<u16> {
    let flags = Flags::of(t, env_prefix(s));
    let mut out: Vec<u16> = s.ports.clone();
    let base = s
        .port_flags
        .iter()
        .find_map(|f| flags.value(f))
        .and_then(|v| v.parse::<u16>().ok());
    if let Some(param) = &s.instance_port_param {
        let instances: Vec<&str> = flags
            .positional()
            .into_iter()
            .filter(|w| w.contains(':') || w.starts_with("projects/"))
            .collect();
        let mut next = base.or(s.default_port);
        for inst in &instances {
            let own = inst.split_once('?').and_then(|(_, q)| {
                q.split('&').find_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    (k == param).then(|| v.parse::<u16>().ok()).flatten()
                })
            });
            match own {
                Some(p) => out.push(p),
                None => {
                    if let Some(p) = next {
                        out.push(p);
                        next = p.checked_add(1);
                    }
                }
            }
        }
        if instances.is_empty() {
            out.extend(base);
        }
    } else {
        out.extend(base);
    }
    for f in &s.address_flags {
        out.extend(flags.value(f).and_then(address_port));
    }
    if out.is_empty() && s.instance_port_param.is_none() {
        out.extend(s.default_port);
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The UDP ports `c` (typed `t`, when known) receives datagrams on: declared with
/// `protocol: UDP` or a known sidecar's own (`udp_ports`), and those its UDP flags
/// name (`--statsd.listen-udp=:9125`).
pub fn udp_ports(c: &ContainerInfo, t: Option<&Container>) -> Vec<u16> {
    let mut out = c.udp_ports.clone();
    if let Some(s) = sidecar(c) {
        // A receiver its config may leave off: only when the container declares it.
        let declared = |p: &u16| {
            t.and_then(|t| t.ports.as_deref())
                .into_iter()
                .flatten()
                .any(|d| d.protocol.as_deref() == Some("UDP") && d.container_port == i32::from(*p))
        };
        out.retain(|p| !s.udp_receivers.contains(p) || declared(p));
    }
    if let (Some(s), Some(t)) = (sidecar(c), t) {
        let flags = Flags::of(t, env_prefix(s));
        let flagged: Vec<u16> = s
            .udp_flags
            .iter()
            .filter_map(|f| flags.value(f).and_then(address_port))
            .collect();
        // A flag moves it off its default port.
        if !flagged.is_empty() {
            out.retain(|p| !s.udp_ports.contains(p));
            out.extend(flagged);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The directories known sidecar `c` (typed `t`) creates its Unix sockets in, per
/// its socket flags (`--unix-socket=/cloudsql`).
pub fn socket_dirs(c: &ContainerInfo, t: &Container) -> Vec<String> {
    let Some(s) = sidecar(c) else {
        return Vec::new();
    };
    let flags = Flags::of(t, env_prefix(s));
    s.socket_flags
        .iter()
        .filter_map(|f| flags.value(f))
        .map(str::to_string)
        .collect()
}

/// A readiness endpoint of a known sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub port: u16,
    pub path: String,
    /// Flags `--fix` must add so that the sidecar serves it where the kubelet reaches
    /// it (empty when it already does).
    pub add_args: Vec<String>,
}

/// The readiness endpoint of `c` (typed `t`): a fixed one (for Envoy: when it
/// declares the admin port), the one its flags turn on (`--health-check`), or a path
/// on its serving port. `add_args` says what the fix must add for the health endpoint
/// a sidecar serves only when asked; `None` when none is known or reachable.
pub fn ready_endpoint(c: &ContainerInfo, t: Option<&Container>) -> Option<Endpoint> {
    let s = sidecar(c)?;
    if let Some(r) = &s.ready {
        return (!r.only_if_declared || c.ports.contains(&r.port)).then(|| Endpoint {
            port: r.port,
            path: r.path.clone(),
            add_args: Vec::new(),
        });
    }
    let t = t?;
    let flags = Flags::of(t, env_prefix(s));
    if let Some(h) = &s.health {
        let port = flags
            .value(&h.port_flag)
            .and_then(|v| v.parse().ok())
            .unwrap_or(h.default_port);
        let mut add_args = Vec::new();
        if !flags.on(&h.enable_flag) {
            add_args.push(h.enable_flag.clone());
        }
        let address = flags.value(&h.address_flag).unwrap_or(&h.default_address);
        if loopback(address) {
            add_args.push(format!("{}=0.0.0.0", h.address_flag));
        }
        return Some(Endpoint {
            port,
            path: h.path.clone(),
            add_args,
        });
    }
    let path = s.ready_on_serving_port.as_ref()?;
    if listens_on_loopback(c, Some(t)) {
        return None;
    }
    let listen = s.listen.as_ref()?;
    let port = flags
        .value(&listen.flag)
        .and_then(address_port)
        .or_else(|| c.ports.first().copied())
        .or(s.default_port)?;
    Some(Endpoint {
        port,
        path: path.clone(),
        add_args: Vec::new(),
    })
}

/// The sidecar listens for the app on loopback only (its listen flag says so, or
/// it is unset, its default is loopback and the container declares no port: a
/// declared port suggests a config file sets the address): a kubelet probe, sent to
/// the pod IP, cannot reach it.
pub fn listens_on_loopback(c: &ContainerInfo, t: Option<&Container>) -> bool {
    let Some((s, listen)) = sidecar(c).and_then(|s| Some((s, s.listen.as_ref()?))) else {
        return false;
    };
    match t.and_then(|t| Flags::of(t, env_prefix(s)).value(&listen.flag)) {
        Some(address) => loopback(address_host(address)),
        None => c.ports.is_empty() && loopback(address_host(&listen.default)),
    }
}

pub const LINKERD_NATIVE: &str = "config.beta.linkerd.io/proxy-enable-native-sidecar";
pub const ISTIO_PROXY_CONFIG: &str = "proxy.istio.io/config";
/// Linkerd's preStop sleep for its proxy (not to be used with native sidecars).
pub const LINKERD_WAIT_BEFORE_EXIT: &str = "config.alpha.linkerd.io/proxy-wait-before-exit-seconds";

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

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(v: serde_json::Value) -> Container {
        serde_json::from_value(v).unwrap()
    }

    fn info(t: &Container) -> ContainerInfo {
        ContainerInfo {
            name: t.name.clone(),
            role: crate::pods::pod_info::Role::ClassicSidecar,
            sidecar_by: None,
            image: t.image.clone(),
            ports: Vec::new(),
            udp_ports: vec![],
            startup_probe: None,
            readiness_probe: None,
            mounts: Vec::new(),
        }
    }

    #[test]
    fn ports_from_the_sidecars_own_flags() {
        let csql = CATALOG.sidecar("cloud-sql-proxy").unwrap();
        let one = typed(serde_json::json!({"name": "cloud-sql-proxy",
            "args": ["--structured-logs", "--port=5432", "p:r:orders"]}));
        assert_eq!(flag_ports(csql, &one), [5432]);
        let many = typed(serde_json::json!({"name": "cloud-sql-proxy",
            "args": ["-p", "6000", "p:r:a", "p:r:b?port=7000", "p:r:c"]}));
        assert_eq!(flag_ports(csql, &many), [6000, 6001, 7000]);
        let unknown = typed(serde_json::json!({"name": "cloud-sql-proxy", "args": ["p:r:a"]}));
        assert!(
            flag_ports(csql, &unknown).is_empty(),
            "no default: MySQL or Postgres?"
        );
        let env = typed(
            serde_json::json!({"name": "cloud-sql-proxy", "args": ["p:r:a"],
            "env": [{"name": "CSQL_PROXY_PORT", "value": "3306"}]}),
        );
        assert_eq!(flag_ports(csql, &env), [3306]);
        let alloy = CATALOG.sidecar("alloydb-auth-proxy").unwrap();
        let a = typed(serde_json::json!({"name": "alloydb-auth-proxy",
            "args": ["projects/p/locations/r/clusters/c/instances/i"]}));
        assert_eq!(flag_ports(alloy, &a), [5432]);
        let oauth = CATALOG.sidecar("oauth2-proxy").unwrap();
        let o = typed(serde_json::json!({"name": "oauth2-proxy",
            "args": ["--http-address=0.0.0.0:4181", "--upstream=http://127.0.0.1:8080"]}));
        assert_eq!(flag_ports(oauth, &o), [4181]);
    }

    #[test]
    fn readiness_endpoints_from_flags() {
        let on = typed(
            serde_json::json!({"name": "cloud-sql-proxy", "image": "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.14.1",
            "args": ["--health-check", "--http-address=0.0.0.0", "--http-port", "9191", "p:r:a"]}),
        );
        assert_eq!(
            ready_endpoint(&info(&on), Some(&on)),
            Some(Endpoint {
                port: 9191,
                path: "/startup".into(),
                add_args: vec![]
            })
        );
        let off = typed(serde_json::json!({"name": "cloud-sql-proxy", "args": ["p:r:a"]}));
        assert_eq!(
            ready_endpoint(&info(&off), Some(&off)).unwrap().add_args,
            ["--health-check", "--http-address=0.0.0.0"]
        );
        assert!(listens_on_loopback(&info(&off), Some(&off)));
        let oauth = typed(
            serde_json::json!({"name": "oauth2-proxy", "args": ["--http-address=0.0.0.0:4180"]}),
        );
        assert_eq!(
            ready_endpoint(&info(&oauth), Some(&oauth)).unwrap().path,
            "/ping"
        );
        let local = typed(
            serde_json::json!({"name": "oauth2-proxy", "args": ["--http-address=127.0.0.1:4180"]}),
        );
        assert_eq!(ready_endpoint(&info(&local), Some(&local)), None);
    }
}
