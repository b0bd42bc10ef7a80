//! The pinned versions of what the cluster runs and `cargo xtask setup` builds
//! (`build.rs`); the tests' defaults name the same (tests/src/manifests.rs,
//! tests/src/operator_prometheus.rs, tests/tests/krew_plugin.rs).

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
/// OpenShift's API types (no releases: a commit of its master, as operators pin it),
/// for the SecurityContextConstraints CRD the chart's SCC is checked against.
pub const OPENSHIFT_API_VERSION: &str = "v0.0.0-20251021124544-a2cb0c5d994d";
/// The newer node (`cluster up --kubernetes 1.36`): from 1.35 the kubelet needs a CRI
/// with the `RuntimeConfig` call (containerd 2) and refuses cgroup v1 unless told.
pub const KUBERNETES_1_36_VERSION: &str = "v1.36.3";
/// The newest node (`cluster up --kubernetes 1.37`), on the same containerd 2 and runc
/// as 1.36. Its go.mod says `go 1.26.0`: Go 1.26.8 builds it.
pub const KUBERNETES_1_37_VERSION: &str = "v1.37.2";
/// The runtime of the 1.36 and 1.37 nodes: containerd 2 (`containerd`, its runc shim, `ctr`).
pub const CONTAINERD2_VERSION: &str = "v2.4.2";
/// containerd 2's runc (Debian's 1.1.5 stays with containerd 1.6 and CRI-O).
pub const RUNC_VERSION: &str = "v1.5.3";
