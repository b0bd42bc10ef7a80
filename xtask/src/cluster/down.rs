//! `cargo xtask cluster down`: stops what `up` started, by the pids it recorded, and
//! removes what it made: pods, containers and their network namespaces (through the
//! runtime `up` recorded), mounts under the state directory, the kubelet's cgroups,
//! KUBE-* iptables chains, the bridge (and the Service CIDR's route with it), the
//! sysctls it changed, the agent's pins and state dir and the bpffs `up` mounted, the
//! state directory. Logs stay in LOG_DIR.

use std::{
    fs,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::bail;

use super::{
    bpffs, egress, host, modules,
    node::{BRIDGE, LOG_DIR, STATE_DIR},
    operator, procs,
    runtime::Runtime,
};

/// In stopping order: the operator (a client only), then the kubelet, so that it
/// restarts nothing.
const COMPONENTS: [&str; 7] = [
    operator::NAME,
    "kubelet",
    "kube-proxy",
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
];

pub fn down() -> anyhow::Result<()> {
    if !Path::new(STATE_DIR).exists() && !host::bridge_exists() {
        bail!("no cluster is up: nothing to take down ({STATE_DIR} does not exist)");
    }
    teardown()
}

/// Everything `up` may have made, whether or not it got far; errors only for what
/// could not be removed.
pub fn teardown() -> anyhow::Result<()> {
    for name in COMPONENTS {
        if procs::stop(name, Duration::from_secs(10)) {
            eprintln!("xtask: stopped {name}");
        }
    }
    let runtime = Runtime::recorded();
    let removed = runtime.remove_containers();
    runtime.stop();
    for pid in host::cgroup_pids() {
        procs::stop_pid(pid, Duration::from_secs(1));
    }
    for ns in &removed.netns {
        let _ = Command::new("umount")
            .arg(ns)
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_file(ns);
    }
    remove_netns_dir();
    host::unmount_all_under(STATE_DIR);
    // No agent runs now: its pins (still attached) and state dir go, then the bpffs.
    let bpffs_left = bpffs::restore();
    remove_pod_logs(&removed.pod_uids);
    remove_cni_results(&removed.ids);
    let cgroups_left = host::remove_cgroups();
    let mut rules_left = host::remove_kube_chains();
    rules_left.extend(egress::remove());
    host::delete_bridge();
    host::restore_sysctls();
    for kept in modules::unload_recorded() {
        eprintln!("xtask: kernel module {kept} kept loaded");
    }
    let mounts_left = host::mounts_under(STATE_DIR);
    if mounts_left.is_empty() {
        let _ = fs::remove_dir_all(STATE_DIR);
    }
    let mut problems = Vec::new();
    if !cgroups_left.is_empty() {
        problems.push(format!("cgroups still in use: {cgroups_left:?}"));
    }
    if !rules_left.is_empty() {
        problems.push(format!("iptables rules left: {rules_left:?}"));
    }
    if !mounts_left.is_empty() {
        problems.push(format!("mounts left: {mounts_left:?}"));
    }
    if !bpffs_left.is_empty() {
        problems.push(format!("the agent's node state left: {bpffs_left:?}"));
    }
    if host::bridge_exists() {
        problems.push(format!("the bridge {} is still there", BRIDGE));
    }
    if !problems.is_empty() {
        bail!(
            "the cluster is down but some of it could not be removed: {}",
            problems.join("; ")
        );
    }
    eprintln!(
        "xtask: cluster down, nothing left behind (logs kept in {})",
        LOG_DIR
    );
    Ok(())
}

/// Where libcni caches each attachment's result (`<network>-<sandbox id>-<interface>`):
/// a sandbox removed without its CNI DEL leaves its files there.
pub const CNI_RESULTS: &str = "/var/lib/cni/results";

/// The cached CNI results of the containers `ids` (sandboxes among them).
fn remove_cni_results(ids: &[String]) {
    for e in fs::read_dir(CNI_RESULTS).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if ids.iter().any(|id| name.contains(&format!("-{id}-"))) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// The kubelet keeps container logs in /var/log/pods/<ns>_<pod>_<uid>/ and links them
/// from /var/log/containers/: those of our pods, and links left dangling.
fn remove_pod_logs(pod_uids: &[String]) {
    for e in fs::read_dir("/var/log/pods")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if pod_uids
            .iter()
            .any(|uid| name.ends_with(&format!("_{uid}")))
        {
            let _ = fs::remove_dir_all(e.path());
        }
    }
    for e in fs::read_dir("/var/log/containers")
        .into_iter()
        .flatten()
        .flatten()
    {
        if fs::read_link(e.path()).is_ok_and(|t| t.starts_with("/var/log/pods/") && !t.exists()) {
            let _ = fs::remove_file(e.path());
        }
    } // Made by the kubelet; removed when nothing else is in them.
    let _ = fs::remove_dir("/var/log/containers");
    let _ = fs::remove_dir("/var/log/pods");
}

/// containerd makes /run/netns a shared bind mount of itself for the pods' network
/// namespaces: undone when no namespace is left in it.
fn remove_netns_dir() {
    let dir = Path::new("/run/netns");
    if fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none()) {
        if !host::mounts_under("/run/netns").is_empty() {
            let _ = Command::new("umount").arg(dir).status();
        }
        let _ = fs::remove_dir(dir);
    }
}
