//! containerd with its CRI plugin, started as a cluster process; `ctr` on it. Either
//! Debian's 1.6 (`sidecar_race_testbed`'s configuration, as the CRI test tier has it)
//! or containerd 2 with runc as built for the Kubernetes 1.36 node (`containerd2`).

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

use super::{containerd2, removed::Removed};

/// Which containerd runs the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Debian's 1.6, from PATH (with Debian's shim and runc).
    Debian,
    /// containerd 2 and runc as `containerd2::build` built them.
    V2,
}

impl Release {
    fn containerd(self) -> PathBuf {
        match self {
            Self::Debian => PathBuf::from("containerd"),
            Self::V2 => containerd2::build::containerd_bin(),
        }
    }

    fn ctr(self) -> PathBuf {
        match self {
            Self::Debian => PathBuf::from("ctr"),
            Self::V2 => containerd2::build::ctr_bin(),
        }
    }
}

/// Its process's name among the cluster's.
pub const PROCESS: &str = "containerd";

/// Host paths containerd's shims make whatever the configuration says: their sockets
/// (`/run/containerd/s`) and runc's state (`/run/containerd/runc`). `start` records
/// whether it was absent; `stop` removes it then.
pub const HOST_PATHS: [&str; 1] = ["/run/containerd"];

fn made_file() -> PathBuf {
    dir().join("host-paths-made")
}

/// containerd's directory: its root, state, sockets and config.
fn dir() -> PathBuf {
    state("containerd")
}

pub fn socket() -> PathBuf {
    containerd::socket(&dir())
}

/// `ctr` in containerd's `k8s.io` namespace (the CRI plugin's).
fn ctr(release: Release) -> Command {
    let mut c = Command::new(release.ctr());
    c.arg("--address")
        .arg(socket())
        .args(["--namespace", "k8s.io"]);
    c
}

pub fn start(cni_conf: &Path, release: Release) -> anyhow::Result<()> {
    let d = dir();
    fs::create_dir_all(&d)?;
    let config = match release {
        Release::Debian => containerd::Config {
            dir: &d,
            log_level: "info",
            cri: Some(containerd::Cri {
                cni_conf_dir: cni_conf,
            }),
        }
        .render(),
        Release::V2 => {
            let drop_ins = Path::new(containerd2::config::HOST_DROP_INS);
            containerd2::config::check_no_host_drop_ins(drop_ins)?;
            containerd2::config::render(&d, cni_conf, &containerd2::build::runc_bin())
        }
    };
    fs::write(d.join("config.toml"), config)?;
    super::host_paths::record_absent(&HOST_PATHS, &made_file())?;
    let mut cmd = Command::new(release.containerd());
    cmd.arg("--config").arg(d.join("config.toml"));
    if release == Release::V2 {
        // Its shim is looked up on PATH: the built one, not Debian's.
        let path = std::env::var_os("PATH").unwrap_or_default();
        let dirs =
            std::iter::once(containerd2::build::bin_dir()).chain(std::env::split_paths(&path));
        cmd.env("PATH", std::env::join_paths(dirs)?);
    }
    procs::spawn(PROCESS, &mut cmd)?;
    procs::wait_ready(PROCESS, Duration::from_secs(30), || {
        succeeds(ctr(release).args(["version"]))
    })
}

/// `ctr images import` (which names the image as the archive does), then the tag
/// `reference` when that is another name.
pub fn import(
    archive: &Path,
    named: &str,
    reference: &str,
    release: Release,
) -> anyhow::Result<()> {
    checked(ctr(release).args(["images", "import"]).arg(archive))?;
    if named != reference {
        checked(ctr(release).args(["images", "tag", "--force", named, reference]))?;
    }
    Ok(())
}

/// Kills and deletes every container (sandboxes included, so no CNI teardown
/// happens): their network namespaces, pod UIDs and IDs, for removal.
pub fn remove_containers(release: Release) -> Removed {
    let mut removed = Removed::default();
    if procs::running(PROCESS).is_none() {
        return removed;
    }
    let listed = output(ctr(release).args(["containers", "ls", "-q"])).unwrap_or_default();
    removed.ids = listed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    for id in &removed.ids {
        let id = id.as_str();
        if let Some(info) = output(ctr(release).args(["containers", "info", id]))
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
        let _ = ctr(release)
            .args(["tasks", "kill", "--signal", "SIGKILL", id])
            .output();
        let _ = ctr(release)
            .args(["tasks", "delete", "--force", id])
            .output();
        let _ = ctr(release).args(["containers", "delete", id]).output();
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
    super::host_paths::remove_made(&HOST_PATHS, &made_file());
}
