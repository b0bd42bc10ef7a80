//! The node: its name, its bridge and addresses, the Pod and Service CIDRs, the
//! kubelet's cgroup root, and where the cluster keeps its state and logs.

use std::path::{Path, PathBuf};

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

/// The cluster's state: PKI, kubeconfigs, etcd's data, the runtime's root, the
/// kubelet's root dir, pid files. `down` removes it.
pub const STATE_DIR: &str = "/var/lib/sidecar-race-cluster";
/// The components' logs, kept after `down` (overwritten by the next `up`).
pub const LOG_DIR: &str = "/var/log/sidecar-race-cluster";

/// The kubeconfig `up` prints (cluster-admin).
pub fn admin_kubeconfig() -> PathBuf {
    PathBuf::from(STATE_DIR).join("admin.kubeconfig")
}

/// `sub` under the state directory.
pub fn state(sub: &str) -> PathBuf {
    Path::new(STATE_DIR).join(sub)
}
