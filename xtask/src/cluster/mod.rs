//! `cargo xtask cluster up | down | status`: a throwaway single-node Kubernetes on this
//! machine, built from source (Go modules, no image pulls), with the agent installed
//! from `deploy/` the way the README tells a user. Also what the `cluster` test tier
//! runs against (tests/tests/cluster.rs).
//!
//! Everything stays on this machine: the control plane listens on loopback or on the
//! node's own bridge, whose address is the node IP; the Service CIDR is routed to that
//! bridge, so a packet kube-proxy did not translate never leaves through the default
//! route. See docs/cluster.md.

pub mod build;
mod down;
mod host;
mod images;
mod operator;
mod pki;
mod procs;
mod status;
mod up;

use std::path::PathBuf;

use clap::Subcommand;

pub use build::ensure as build_binaries;
pub use down::down;
pub use up::up;

/// Kubernetes 1.34: the last minor that accepts both Debian 12's containerd 1.6 and a
/// hybrid cgroup host without overrides (docs/cluster.md).
pub const KUBERNETES_VERSION: &str = "v1.34.4";
/// What kube-apiserver 1.34 requires and kubeadm 1.34 ships.
pub const ETCD_VERSION: &str = "v3.6.16";
/// The chart's tests (deploy/helm/, tests/tests/helm_chart.rs and the cluster tier).
pub const HELM_VERSION: &str = "v3.22.0";
/// Its CRDs (example/prometheus-operator-crd/) before `kubectl apply -k deploy/monitoring`,
/// and the operator itself (cmd/operator), built by setup.
pub const OPERATOR_VERSION: &str = "v0.87.1";
/// The Prometheus the cluster tier runs on the operator's generated configuration
/// (Debian's 2.42 is built without `kubernetes_sd_configs`). 3.10 is the first release
/// whose service discoveries can be left out by build tags (`remove_all_sd`); the
/// operator generates for any version at or above its matrix's last (v3.7.3).
pub const PROMETHEUS_VERSION: &str = "v3.10.0";

/// The node's bridge: the CNI bridge plugin's, created with its address before the
/// API server starts so that the address can be the node IP.
pub const BRIDGE: &str = "srk8s0";
pub const NODE_NAME: &str = "sr-node";
pub const NODE_IP: &str = "10.238.0.1";
pub const POD_CIDR: &str = "10.238.0.0/24";
/// Virtual: kube-proxy translates it; routed to the bridge so nothing leaves the host.
pub const SERVICE_CIDR: &str = "10.239.0.0/24";
/// The `kubernetes` Service's cluster IP (the first of the Service CIDR).
pub const KUBERNETES_SERVICE_IP: &str = "10.239.0.1";
/// The kubelet's cgroup root: its `kubepods` tree lives below this, apart from the
/// `/kubepods` tree of the CRI test tier, whose pods this kubelet would otherwise take
/// for orphans and kill.
pub const CGROUP_ROOT: &str = "sidecar-race-cluster";

/// The cluster's state: PKI, kubeconfigs, etcd's data, containerd's root, the kubelet's
/// root dir, pid files. `down` removes it.
pub const STATE_DIR: &str = "/var/lib/sidecar-race-cluster";
/// The components' logs, kept after `down` (overwritten by the next `up`).
pub const LOG_DIR: &str = "/var/log/sidecar-race-cluster";

/// The kubeconfig `up` prints (cluster-admin).
pub fn admin_kubeconfig() -> PathBuf {
    PathBuf::from(STATE_DIR).join("admin.kubeconfig")
}

#[derive(Subcommand)]
pub enum Action {
    /// Start the cluster and install the agent (and deploy/monitoring); prints the
    /// kubeconfig path.
    Up,
    /// Stop everything `up` started and remove what it made.
    Down,
    /// Say what runs.
    Status,
}

pub fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::Up => {
            let kubeconfig = up()?;
            println!("{}", kubeconfig.display());
            Ok(())
        }
        Action::Down => down(),
        Action::Status => status::print(),
    }
}

/// `cargo xtask test`'s cluster tier, after the others: a cluster for
/// tests/tests/cluster.rs, cluster_helm.rs and cluster_admission.rs (their cases are
/// `#[ignore]`d in a plain `cargo test`), one
/// case at a time, then `down`. When `up` fails the tier still runs and every case
/// fails with the reason. Runs when `args` is empty or names the tier.
pub fn test_tier(args: &[String], tally: &mut crate::run::Tally) -> anyhow::Result<()> {
    if !args.is_empty() && !args.iter().any(|a| a.contains("cluster")) {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        const WHY: &str =
            "the cluster tier needs root (a kubelet, containerd, kube-proxy); CI runs as root";
        if std::env::var("SIDECAR_RACE_SKIP_ROOT").as_deref() == Ok("1") {
            eprintln!("SKIPPED {WHY}");
            tally.skip_tier(WHY);
            return Ok(());
        }
        anyhow::bail!("{WHY} (set SIDECAR_RACE_SKIP_ROOT=1 to skip it)");
    }
    let mut cmd = crate::run::cargo();
    cmd.args([
        "test",
        "--no-fail-fast",
        "-p",
        "sidecar-race-tests",
        "--test",
        "cluster",
        "--test",
        "cluster_helm",
        "--test",
        "cluster_admission",
        "--",
        "--ignored",
        "--test-threads=1",
    ]);
    let started = std::time::Instant::now();
    let up = up();
    match &up {
        Ok(kubeconfig) => {
            cmd.env("SIDECAR_RACE_KUBECONFIG", kubeconfig)
                .env("SIDECAR_RACE_KUBECTL", build::kubernetes_bin("kubectl"))
                .env("SIDECAR_RACE_HELM", build::helm_bin())
                .env("SIDECAR_RACE_PROMETHEUS_BIN", build::prometheus_bin());
        }
        Err(e) => {
            cmd.env("SIDECAR_RACE_CLUSTER_ERROR", format!("{e:#}"));
        }
    }
    let result = crate::run::tests(&mut cmd, tally);
    if up.is_ok() {
        down()?;
    }
    eprintln!(
        "xtask: cluster tier (up, cases, down) took {} s",
        started.elapsed().as_secs()
    );
    result
}
