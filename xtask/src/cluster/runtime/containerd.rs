//! containerd with its CRI plugin (`sidecar_race_testbed`'s configuration, as the CRI
//! test tier has it), started as a cluster process; `ctr` on it.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use sidecar_race_testbed::containerd;

use crate::{
    cluster::{node::state, procs},
    run::{checked, output, succeeds},
};

use super::removed::Removed;

/// Its process's name among the cluster's.
pub const PROCESS: &str = "containerd";

/// containerd's directory: its root, state, sockets and config.
fn dir() -> PathBuf {
    state("containerd")
}

pub fn socket() -> PathBuf {
    containerd::socket(&dir())
}

/// `ctr` in containerd's `k8s.io` namespace (the CRI plugin's).
fn ctr() -> Command {
    let mut c = Command::new("ctr");
    c.arg("--address")
        .arg(socket())
        .args(["--namespace", "k8s.io"]);
    c
}

pub fn start(cni_conf: &Path) -> anyhow::Result<()> {
    let d = dir();
    fs::create_dir_all(&d)?;
    let config = containerd::Config {
        dir: &d,
        log_level: "info",
        cri: Some(containerd::Cri {
            cni_conf_dir: cni_conf,
        }),
    };
    fs::write(d.join("config.toml"), config.render())?;
    procs::spawn(
        PROCESS,
        Command::new("containerd")
            .arg("--config")
            .arg(d.join("config.toml")),
    )?;
    procs::wait_ready(PROCESS, Duration::from_secs(30), || {
        succeeds(ctr().args(["version"]))
    })
}

/// `ctr images import` (which names the image as the archive does), then the tag
/// `reference` when that is another name.
pub fn import(archive: &Path, named: &str, reference: &str) -> anyhow::Result<()> {
    checked(ctr().args(["images", "import"]).arg(archive))?;
    if named != reference {
        checked(ctr().args(["images", "tag", "--force", named, reference]))?;
    }
    Ok(())
}

/// Kills and deletes every container (sandboxes included, so no CNI teardown
/// happens): their network namespaces, pod UIDs and IDs, for removal.
pub fn remove_containers() -> Removed {
    let mut removed = Removed::default();
    if procs::running(PROCESS).is_none() {
        return removed;
    }
    let listed = output(ctr().args(["containers", "ls", "-q"])).unwrap_or_default();
    removed.ids = listed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    for id in &removed.ids {
        let id = id.as_str();
        if let Some(info) = output(ctr().args(["containers", "info", id]))
            .and_then(|i| serde_json::from_str::<serde_json::Value>(&i).ok())
        {
            let namespaces = info["Spec"]["linux"]["namespaces"].as_array().cloned();
            for ns in namespaces.into_iter().flatten() {
                if let Some(p) = ns["path"].as_str().filter(|p| {
                    ns["type"] == "network"
                        && (p.starts_with("/var/run/netns/") || p.starts_with("/run/netns/"))
                }) && !removed.netns.iter().any(|n| n == p)
                {
                    removed.netns.push(p.to_string());
                }
            }
            if let Some(uid) = info["Labels"]["io.kubernetes.pod.uid"].as_str()
                && !removed.pod_uids.iter().any(|p| p == uid)
            {
                removed.pod_uids.push(uid.to_string());
            }
        }
        let _ = ctr()
            .args(["tasks", "kill", "--signal", "SIGKILL", id])
            .output();
        let _ = ctr().args(["tasks", "delete", "--force", id]).output();
        let _ = ctr().args(["containers", "delete", id]).output();
    }
    removed
}

/// Stops containerd, then its shims: they outlive it, started with its socket's path.
pub fn stop() {
    procs::stop(PROCESS, Duration::from_secs(10));
    let sock = socket().display().to_string();
    for pid in procs::pids_with_arg(&sock) {
        procs::stop_pid(pid, Duration::from_secs(2));
    }
}
