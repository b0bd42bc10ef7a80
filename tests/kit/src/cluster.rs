//! The `cluster` tier's view of the cluster `cargo xtask cluster up` starts (a real
//! kubelet, API server and kube-proxy; the agent installed from deploy/): kubectl
//! against it, pods and their containers' state, the agent's pod and its HTTP API.
//!
//! `cargo xtask test` brings the cluster up before the tier, passes its kubeconfig and
//! kubectl in `SIDECAR_RACE_KUBECONFIG` / `SIDECAR_RACE_KUBECTL` (or why it could not
//! start, in `SIDECAR_RACE_CLUSTER_ERROR`), and takes it down after. By hand:
//! `cargo xtask cluster up`, then `cargo test -p sidecar-race-tests --test cluster --
//! --ignored --test-threads=1`.

use std::{
    path::PathBuf,
    process::Command,
    sync::OnceLock,
    time::{Duration, Instant},
};

use serde_json::Value;
use sidecar_race_testbed::agent;

use crate::command::run;

/// Where `cargo xtask cluster up` writes the admin kubeconfig (xtask/src/cluster).
const DEFAULT_KUBECONFIG: &str = "/var/lib/sidecar-race-cluster/admin.kubeconfig";
/// The kubectl `cargo xtask setup` builds (same version as the cluster).
const DEFAULT_KUBECTL: &str = ".cache/sidecar-race/go/k8s-v1.34.4/bin/kubectl";
pub const AGENT_SELECTOR: &str = "app.kubernetes.io/name=sidecar-race-agent";
pub use sidecar_race_testbed::{agent::NAMESPACE as AGENT_NAMESPACE, images::BUSYBOX_IMAGE};

pub struct Cluster {
    pub kubeconfig: PathBuf,
    pub kubectl: PathBuf,
}

/// The cluster, or a panic that says why there is none (the tier fails, it never
/// passes without a cluster).
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        if let Ok(why) = std::env::var("SIDECAR_RACE_CLUSTER_ERROR") {
            panic!("the cluster could not be started: {why}");
        }
        let kubeconfig = std::env::var_os("SIDECAR_RACE_KUBECONFIG")
            .map_or_else(|| PathBuf::from(DEFAULT_KUBECONFIG), PathBuf::from);
        let kubectl = std::env::var_os("SIDECAR_RACE_KUBECTL").map_or_else(
            || PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(DEFAULT_KUBECTL),
            PathBuf::from,
        );
        assert!(
            kubeconfig.exists() && kubectl.exists(),
            "no cluster: {} or {} is missing. The cluster tier runs against the cluster of \
             `cargo xtask cluster up` (`cargo xtask test` starts one for it)",
            kubeconfig.display(),
            kubectl.display()
        );
        Cluster {
            kubeconfig,
            kubectl,
        }
    })
}

impl Cluster {
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(&self.kubectl);
        c.arg("--kubeconfig").arg(&self.kubeconfig);
        c
    }

    /// kubectl `args`; its stdout, or a panic with what it printed.
    pub fn kubectl(&self, args: &[&str]) -> String {
        run(self.cmd().args(args), None)
    }

    /// kubectl `args` with `stdin`.
    pub fn kubectl_in(&self, args: &[&str], stdin: &str) -> String {
        run(self.cmd().args(args), Some(stdin))
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(&a)).expect("kubectl -o json")
    }

    pub fn apply(&self, yaml: &str) {
        self.kubectl_in(&["apply", "-f", "-"], yaml);
    }

    /// A fresh namespace (deleted first if an earlier run left it).
    pub fn namespace(&self, ns: &str) {
        let _ = self
            .cmd()
            .args([
                "delete",
                "namespace",
                ns,
                "--ignore-not-found",
                "--wait=true",
                "--timeout=60s",
            ])
            .output();
        self.kubectl(&["create", "namespace", ns]);
    }

    /// The pods matching `selector` in `ns`.
    pub fn pods(&self, ns: &str, selector: &str) -> Vec<Value> {
        self.json(&["-n", ns, "get", "pods", "-l", selector])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits for one pod matching `selector` for which `ok` holds; that pod.
    pub fn wait_pod(
        &self,
        ns: &str,
        selector: &str,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_until(what, timeout, || {
            self.pods(ns, selector).into_iter().find(|p| ok(p))
        })
    }

    /// `kubectl logs` of a container.
    pub fn logs(&self, ns: &str, pod: &str, container: &str) -> String {
        self.kubectl(&["-n", ns, "logs", pod, "-c", container])
    }

    /// The agent's Ready pod.
    pub fn agent_pod(&self) -> Value {
        self.wait_pod(
            AGENT_NAMESPACE,
            AGENT_SELECTOR,
            "a Ready agent pod",
            Duration::from_secs(120),
            |p| p["metadata"]["deletionTimestamp"].is_null() && condition(p, "Ready"),
        )
    }

    /// The token Prometheus scrapes the agents with (`--auth kubernetes`): the scraper
    /// ServiceAccount's, from the Secret the PodMonitor names, once
    /// deploy/monitoring/scraper.yaml is applied and the token controller filled it.
    pub fn scraper_token(&self) -> &'static str {
        static TOKEN: OnceLock<String> = OnceLock::new();
        TOKEN.get_or_init(|| {
            let scraper = crate::command::workspace().join("deploy/monitoring/scraper.yaml");
            self.kubectl(&["apply", "-f", scraper.to_str().unwrap()]);
            wait_until(
                "the scraper token Secret filled in",
                Duration::from_secs(60),
                || {
                    let token = self.kubectl(&[
                        "-n",
                        AGENT_NAMESPACE,
                        "get",
                        "secret",
                        "sidecar-race-scraper-token",
                        "-o",
                        "go-template={{if .data.token}}{{.data.token | base64decode}}{{end}}",
                    ]);
                    (!token.trim().is_empty()).then(|| token.trim().to_string())
                },
            )
        })
    }

    /// Waits for the agent's DaemonSet to finish rolling out (3 minutes at most).
    pub fn agent_rolled_out(&self) {
        self.kubectl(&agent::ROLLOUT_STATUS);
    }

    /// `podIP:9965` of the agent's Ready pod (reachable from the node).
    pub fn agent_addr(&self) -> String {
        let pod = self.agent_pod();
        format!(
            "{}:9965",
            pod["status"]["podIP"].as_str().expect("the agent pod's IP")
        )
    }
}

/// A namespace a case made, deleted (without waiting) when the case ends, whether it
/// passed or panicked.
pub struct TestNamespace(String);

impl TestNamespace {
    /// A fresh namespace `name` (deleted first if an earlier run left it).
    pub fn create(name: String) -> Self {
        cluster().namespace(&name);
        TestNamespace(name)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for TestNamespace {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let _ = cluster()
            .cmd()
            .args(["delete", "namespace", &self.0, "--wait=false"])
            .output();
    }
}

/// Whether the pod's condition `kind` is True.
pub fn condition(pod: &Value, kind: &str) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// A container's status (containers or initContainers) by name.
pub fn container_status<'a>(pod: &'a Value, name: &str) -> &'a Value {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|k| pod["status"][k].as_array())
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no status for container {name}: {pod:#}"))
}

/// The node's container runtime, as its container IDs' scheme: `cri-o` or
/// `containerd` (`SIDECAR_RACE_CLUSTER_RUNTIME`, which `cargo xtask test` sets for each
/// variant of the tier; containerd without it).
pub fn runtime() -> String {
    std::env::var("SIDECAR_RACE_CLUSTER_RUNTIME").unwrap_or_else(|_| "containerd".into())
}

/// The Kubernetes release the node runs (`SIDECAR_RACE_KUBERNETES_VERSION`, which
/// `cargo xtask test` sets for each variant of the tier; v1.34.4 without it).
pub fn kubernetes_version() -> String {
    std::env::var("SIDECAR_RACE_KUBERNETES_VERSION").unwrap_or_else(|_| "v1.34.4".into())
}

/// Checks the node's `containerRuntimeVersion` (`containerd://2.4.2`): the runtime of
/// this variant of the tier (its scheme), at the version xtask built for it
/// (`SIDECAR_RACE_CLUSTER_RUNTIME_VERSION`, set for the runtimes built here; Debian's
/// packages are checked by scheme only). The reason when it is not.
pub fn check_runtime_version(reported: &str) -> Result<(), String> {
    let built = std::env::var("SIDECAR_RACE_CLUSTER_RUNTIME_VERSION").ok();
    runtime_version_is(reported, &runtime(), built.as_deref())
}

fn runtime_version_is(reported: &str, runtime: &str, built: Option<&str>) -> Result<(), String> {
    let scheme = format!("{runtime}://");
    let Some(version) = reported.strip_prefix(&scheme) else {
        return Err(format!("the node runs {reported}, not a {scheme} runtime"));
    };
    match built {
        Some(want) if version != want => Err(format!(
            "the node runs {reported}, not {scheme}{want} as built for this variant"
        )),
        _ => Ok(()),
    }
}

/// The runtime's container ID, without its scheme, which must be the node's runtime's
/// (`cri-o://<id>` on CRI-O).
pub fn container_id(pod: &Value, name: &str) -> String {
    let id = container_status(pod, name)["containerID"]
        .as_str()
        .unwrap_or_else(|| panic!("container {name} has no ID yet"));
    let scheme = format!("{}://", runtime());
    id.strip_prefix(&scheme)
        .unwrap_or_else(|| panic!("container {name}'s ID {id} is not a {scheme} one"))
        .to_string()
}

pub fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    wait_for(what, timeout, || f().ok_or_else(String::new))
}

/// Like `wait_until`, but `f` says what it saw instead (`Err`), and a timeout shows the
/// last of it: a case that fails says what the cluster held instead.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let seen = match f() {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {} s waiting for {what}{}{seen}",
            timeout.as_secs(),
            if seen.is_empty() { "" } else { "; last seen: " }
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The kubelet's cgroup root on the node (xtask/src/cluster: `cgroupRoot`).
const CGROUP_ROOT: &str = "sidecar-race-cluster";

/// Pids of a container, from its cgroup (`.../pod<uid>/<container id>`, CRI-O's
/// `.../pod<uid>/crio-<container id>`) in the v1 `pids` hierarchy or the v2 tree.
pub fn container_pids(container_id: &str) -> Vec<u32> {
    fn find(dir: &std::path::Path, id: &str) -> Option<PathBuf> {
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            if !e.file_type().ok()?.is_dir() {
                continue;
            }
            let name = e.file_name();
            let name = name.to_str().unwrap_or_default();
            if name == id || name.strip_prefix("crio-") == Some(id) {
                return Some(e.path());
            }
            if let Some(p) = find(&e.path(), id) {
                return Some(p);
            }
        }
        None
    }
    [
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup",
    ]
    .iter()
    .filter_map(|m| find(&std::path::Path::new(m).join(CGROUP_ROOT), container_id))
    .find_map(|dir| {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
        let pids: Vec<u32> = procs
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        (!pids.is_empty()).then_some(pids)
    })
    .unwrap_or_default()
}

/// The Event with `reason` on pod `pod` in `ns`, as `kubectl get events` lists it.
pub fn wait_event(ns: &str, pod: &str, reason: &str) -> Value {
    let c = cluster();
    wait_until(
        &format!("the {reason} Event on {ns}/{pod}"),
        Duration::from_secs(30),
        || {
            let selector = format!("involvedObject.name={pod}");
            c.json(&["-n", ns, "get", "events", "--field-selector", &selector])["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["reason"] == reason)
                .cloned()
        },
    )
}

/// A pod's UID.
pub fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().unwrap().to_string()
}

/// A pod's name.
pub fn name(pod: &Value) -> String {
    pod["metadata"]["name"].as_str().unwrap().to_string()
}

/// The count a dialer printed.
pub fn refused_printed(ns: &str, pod: &str, container: &str) -> u64 {
    let c = cluster();
    let line = wait_until(
        "the app's refusal count in its log",
        Duration::from_secs(60),
        || {
            c.logs(ns, pod, container)
                .lines()
                .find_map(|l| l.strip_prefix("refused ").map(str::to_string))
        },
    );
    line.trim().parse().expect("a count")
}

/// The Running pod of a Deployment, with every container's ID known.
pub fn running_pod(ns: &str, app: &str) -> Value {
    running_pod_matching(ns, &format!("app={app}"))
}

/// The Running pod `selector` matches, with every container's ID known.
pub fn running_pod_matching(ns: &str, selector: &str) -> Value {
    cluster().wait_pod(
        ns,
        selector,
        &format!("{ns}/{selector}'s pod running"),
        Duration::from_secs(90),
        |p| {
            p["status"]["phase"] == "Running"
                && p["status"]["containerStatuses"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().all(|c| c["containerID"].is_string()))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::runtime_version_is;

    #[test]
    fn the_node_must_run_the_variants_runtime_at_its_built_version() {
        assert!(runtime_version_is("containerd://2.4.2", "containerd", Some("2.4.2")).is_ok());
        assert!(runtime_version_is("containerd://1.6.20~ds1", "containerd", None).is_ok());
        // Debian's 1.6 where containerd 2 was built and started: refused.
        let old = runtime_version_is("containerd://1.6.20~ds1", "containerd", Some("2.4.2"));
        assert!(old.unwrap_err().contains("not containerd://2.4.2"));
        assert!(runtime_version_is("cri-o://1.34.0", "containerd", None).is_err());
    }
}
