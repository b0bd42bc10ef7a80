//! `cargo xtask cluster down`: stops what `up` started, by the pids it recorded, and
//! removes what it made: containers and their network namespaces, mounts under the
//! state directory, the kubelet's cgroups, KUBE-* iptables chains, the bridge (and the
//! Service CIDR's route with it), the sysctls it changed, the state directory. Logs stay
//! in LOG_DIR.

use std::{fs, path::Path, process::Command, time::Duration};

use anyhow::bail;

use super::{STATE_DIR, host, procs, up};
use crate::run::output;

/// In stopping order: the kubelet first, so that it restarts nothing.
const COMPONENTS: [&str; 6] = [
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
    let netns = remove_containers();
    procs::stop("containerd", Duration::from_secs(10));
    // Shims outlive containerd: they were started with its socket's path.
    let sock = up::containerd_socket().display().to_string();
    for pid in procs::pids_with_arg(&sock) {
        procs::stop_pid(pid, Duration::from_secs(2));
    }
    for pid in host::cgroup_pids() {
        procs::stop_pid(pid, Duration::from_secs(1));
    }
    for ns in &netns {
        let _ = Command::new("umount").arg(ns).status();
        let _ = fs::remove_file(ns);
    }
    host::unmount_all_under(STATE_DIR);
    remove_container_log_links();
    let cgroups_left = host::remove_cgroups();
    let rules_left = host::remove_kube_chains();
    host::delete_bridge();
    host::restore_sysctls();
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
    if host::bridge_exists() {
        problems.push(format!("the bridge {} is still there", super::BRIDGE));
    }
    if !problems.is_empty() {
        bail!(
            "the cluster is down but some of it could not be removed: {}",
            problems.join("; ")
        );
    }
    eprintln!(
        "xtask: cluster down, nothing left behind (logs kept in {})",
        super::LOG_DIR
    );
    Ok(())
}

/// Kills and deletes every container of our containerd (sandboxes included, so no
/// CNI teardown happens: their network namespaces are returned for removal).
fn remove_containers() -> Vec<String> {
    if procs::running("containerd").is_none() {
        return Vec::new();
    }
    let ids = output(up::ctr().args(["containers", "ls", "-q"])).unwrap_or_default();
    let mut netns = Vec::new();
    for id in ids.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(info) = output(up::ctr().args(["containers", "info", id]))
            .and_then(|i| serde_json::from_str::<serde_json::Value>(&i).ok())
        {
            for ns in info["Spec"]["linux"]["namespaces"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if ns["type"] == "network"
                    && let Some(p) = ns["path"].as_str().filter(|p| {
                        p.starts_with("/var/run/netns/") || p.starts_with("/run/netns/")
                    })
                    && !netns.iter().any(|n| n == p)
                {
                    netns.push(p.to_string());
                }
            }
        }
        let _ = up::ctr()
            .args(["tasks", "kill", "--signal", "SIGKILL", id])
            .output();
        let _ = up::ctr().args(["tasks", "delete", "--force", id]).output();
        let _ = up::ctr().args(["containers", "delete", id]).output();
    }
    netns
}

/// The kubelet links /var/log/containers/*.log to the pod logs under our state dir.
fn remove_container_log_links() {
    for e in fs::read_dir("/var/log/containers")
        .into_iter()
        .flatten()
        .flatten()
    {
        if fs::read_link(e.path()).is_ok_and(|t| t.starts_with(STATE_DIR)) {
            let _ = fs::remove_file(e.path());
        }
    }
}
