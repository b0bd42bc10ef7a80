//! Where pod metadata comes from (`--pods-from`): the API server, the kubelet, a
//! file, or nowhere. Each source sends [`PodUpdate`]s on a channel; errors are logged
//! and counted, never fatal: attribution by cgroup goes on without names.

pub mod api;
pub mod file;
pub mod kubelet;

use std::{
    fmt,
    path::PathBuf,
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
};

use std::time::Duration;

use tokio::sync::{Notify, mpsc};

use super::pod_info::PodInfo;

/// `--pods-from`.
#[derive(Debug, Clone, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum PodSourceSpec {
    Api,
    Kubelet,
    File(PathBuf),
    None,
}

impl PodSourceSpec {
    /// `api` inside a cluster (the service-account environment is there), else `none`.
    pub fn default_for_environment() -> Self {
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            PodSourceSpec::Api
        } else {
            PodSourceSpec::None
        }
    }

    /// The `source` label of `pod_source_errors`.
    pub fn name(&self) -> &'static str {
        self.into()
    }
}

impl FromStr for PodSourceSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "api" => Ok(PodSourceSpec::Api),
            "kubelet" => Ok(PodSourceSpec::Kubelet),
            "none" => Ok(PodSourceSpec::None),
            _ => match s.strip_prefix("file:") {
                Some(path) if !path.is_empty() => Ok(PodSourceSpec::File(path.into())),
                _ => Err(format!(
                    "`{s}` is not a pod source: use api, kubelet, file:PATH or none"
                )),
            },
        }
    }
}

impl fmt::Display for PodSourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PodSourceSpec::File(p) => write!(f, "file:{}", p.display()),
            other => f.write_str(other.name()),
        }
    }
}

/// A change to this node's pods.
#[derive(Debug, Clone, PartialEq)]
pub enum PodUpdate {
    Apply(Box<PodInfo>),
    Delete {
        uid: String,
    },
    /// A complete list: pods not in it are gone, except the `unparsable` ones (uids
    /// of listed objects that could not be read), which keep their last good version.
    Replace {
        pods: Vec<PodInfo>,
        unparsable: Vec<String>,
    },
}

/// Health of a pod source, shared with logs and metrics.
#[derive(Debug, Default)]
pub struct SourceStats {
    /// Failures to reach or read the source, and objects that could not be used.
    errors: AtomicU64,
    /// Objects skipped because they were not valid pods (part of `errors`).
    malformed: AtomicU64,
}

impl SourceStats {
    pub fn error(&self) {
        self.errors.fetch_add(1, Relaxed);
    }

    pub fn malformed(&self) {
        self.malformed.fetch_add(1, Relaxed);
        self.error();
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Relaxed)
    }

    pub fn malformed_objects(&self) -> u64 {
        self.malformed.load(Relaxed)
    }
}

/// Options of the network sources.
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// `spec.nodeName` to watch (`NODE_NAME` from the downward API).
    pub node_name: Option<String>,
    /// The kubelet's address (`NODE_IP`).
    pub node_ip: Option<String>,
    pub kubelet_port: u16,
    /// CA bundle for the kubelet's serving certificate.
    pub kubelet_ca: Option<PathBuf>,
    pub kubelet_insecure: bool,
    /// Bearer token file for the kubelet (the pod's service-account token).
    pub token_file: Option<PathBuf>,
    pub poll_interval: std::time::Duration,
    /// Notified when the agent sees a pod the source has not reported: polling
    /// sources (kubelet, file) read again at once.
    pub refresh: Arc<Notify>,
}

/// When a polling source reads next: every `interval`, or at once when asked to.
pub struct Pacer {
    interval: Duration,
    tick: Option<tokio::time::Interval>,
    refresh: Arc<Notify>,
}

impl Pacer {
    pub fn new(interval: Duration, refresh: Arc<Notify>) -> Self {
        Self {
            interval,
            tick: None,
            refresh,
        }
    }

    /// Only every `interval`.
    pub fn every(interval: Duration) -> Self {
        Self::new(interval, Arc::default())
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Waits for the next read (the first one is immediate).
    pub async fn wait(&mut self) {
        let interval = self.interval;
        let tick = self.tick.get_or_insert_with(|| {
            let mut t = tokio::time::interval(interval);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        tokio::select! {
            _ = tick.tick() => {}
            _ = self.refresh.notified() => tick.reset(),
        }
    }
}

/// Turns JSON objects into pods, skipping (and counting) the ones that are not.
pub(crate) fn pods_from_values(
    values: impl IntoIterator<Item = serde_json::Value>,
    stats: &SourceStats,
    source: &str,
) -> Vec<PodInfo> {
    let PodUpdate::Replace { pods, .. } = full_list(values, stats, source) else {
        unreachable!("full_list returns a Replace")
    };
    pods
}

/// A full list of the node's pods. An object that cannot be read is counted and
/// logged, and its uid (when it has one) listed as unparsable so the pod keeps its
/// last good version rather than being taken as deleted.
pub(crate) fn full_list(
    values: impl IntoIterator<Item = serde_json::Value>,
    stats: &SourceStats,
    source: &str,
) -> PodUpdate {
    let mut pods = Vec::new();
    let mut unparsable = Vec::new();
    for v in values {
        let field = |f: &str| v["metadata"][f].as_str().map(str::to_string);
        let (uid, namespace, name) = (field("uid"), field("namespace"), field("name"));
        match PodInfo::from_json(v) {
            Ok(p) => pods.push(p),
            Err(e) => {
                stats.malformed();
                let pod = format!(
                    "{}/{}",
                    namespace.as_deref().unwrap_or("?"),
                    name.as_deref().unwrap_or("?")
                );
                match uid {
                    Some(uid) => {
                        tracing::warn!(
                            source,
                            pod,
                            uid,
                            "cannot read pod object ({e}); keeping its last good version"
                        );
                        unparsable.push(uid);
                    }
                    None => tracing::warn!(source, pod, "skipping a pod object without uid: {e}"),
                }
            }
        }
    }
    PodUpdate::Replace { pods, unparsable }
}

/// Starts the source; its updates arrive on `tx`.
pub fn spawn(
    spec: &PodSourceSpec,
    opts: SourceOptions,
    tx: mpsc::Sender<PodUpdate>,
    stats: Arc<SourceStats>,
) -> Option<tokio::task::JoinHandle<()>> {
    let handle = match spec.clone() {
        PodSourceSpec::None => return None,
        PodSourceSpec::Api => tokio::spawn(api::run(opts.node_name, tx, stats)),
        PodSourceSpec::Kubelet => tokio::spawn(kubelet::run(opts, tx, stats)),
        PodSourceSpec::File(path) => {
            let pacer = Pacer::new(opts.poll_interval, opts.refresh);
            tokio::spawn(file::run(path, pacer, tx, stats))
        }
    };
    Some(handle)
}

/// An error followed by its causes, `: `-separated. kube's errors print only their top
/// ("client error (Connect)"), hiding what an operator needs to act on, such as a
/// kubelet certificate that does not verify.
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!("api".parse(), Ok(PodSourceSpec::Api));
        assert_eq!("kubelet".parse(), Ok(PodSourceSpec::Kubelet));
        assert_eq!("none".parse(), Ok(PodSourceSpec::None));
        assert_eq!(
            "file:/tmp/pods.json".parse(),
            Ok(PodSourceSpec::File("/tmp/pods.json".into()))
        );
        assert!("file:".parse::<PodSourceSpec>().is_err());
        let err = "apiserver".parse::<PodSourceSpec>().unwrap_err();
        assert!(err.contains("api, kubelet, file:PATH or none"), "{err}");
        assert_eq!(PodSourceSpec::File("/x".into()).to_string(), "file:/x");
    }
}
