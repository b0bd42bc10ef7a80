//! CRI-O as the node's runtime (`cluster up --runtime cri-o`): the patched build of
//! `build`, with runc and Debian's conmon, configured by `config` to keep all it writes
//! in the state directory; images put into its storage with skopeo; pods removed with
//! crictl, which runs each pod's CNI DEL.

pub mod build;
mod config;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::Context;
use sidecar_race_testbed::images::PAUSE_IMAGE;

use crate::{
    cluster::{node::state, procs},
    run::{checked, output},
};

use super::removed::Removed;

/// Its process's name among the cluster's.
pub const PROCESS: &str = "crio";

/// Host paths CRI-O or skopeo create although every configured path is in the state
/// directory: skopeo's blob-info cache (/var/lib/containers/cache), its run dir, and
/// crun's state dir, which CRI-O probes where crun is installed. `start` records which
/// of them were absent; `stop` removes those.
pub const HOST_PATHS: [&str; 3] = ["/var/lib/containers", "/run/containers", "/run/crun"];

fn dir() -> PathBuf {
    state("crio")
}

pub fn socket() -> PathBuf {
    dir().join("crio.sock")
}

/// The host paths of `HOST_PATHS` that were absent before `start`.
fn made_file() -> PathBuf {
    dir().join("host-paths-made")
}

/// crictl's configuration: CRI-O's socket, and a deadline that covers stopping a pod.
fn crictl_config() -> PathBuf {
    dir().join("crictl.yaml")
}

/// crictl on CRI-O (never /etc/crictl.yaml's endpoint).
fn crictl() -> Command {
    let mut c = Command::new(build::CRICTL.binary());
    c.arg("--config").arg(crictl_config());
    c
}

pub fn start(cni_conf: &Path) -> anyhow::Result<()> {
    let d = dir();
    fs::create_dir_all(d.join("conf.d"))?;
    super::host_paths::record_absent(&HOST_PATHS, &made_file())?;
    let policy = d.join("policy.json");
    fs::write(
        &policy,
        r#"{"default": [{"type": "insecureAcceptAnything"}]}"#,
    )?;
    let paths = config::Paths {
        dir: &d,
        cni_conf,
        pinns: &build::pinns_bin(),
        policy: &policy,
    };
    fs::write(d.join("crio.conf"), paths.render(PAUSE_IMAGE))?;
    let endpoint = format!("unix://{}", socket().display());
    fs::write(
        crictl_config(),
        format!("runtime-endpoint: {endpoint}\nimage-endpoint: {endpoint}\ntimeout: 60\n"),
    )?;
    procs::spawn(
        PROCESS,
        Command::new(build::crio_bin())
            .arg("--config")
            .arg(d.join("crio.conf"))
            // Its own drop-in directory: never /etc/crio/crio.conf.d's.
            .arg("--config-dir")
            .arg(d.join("conf.d"))
            .args(["--log-level", "info"]),
    )?;
    procs::wait_ready(PROCESS, Duration::from_secs(60), ready)
}

/// Whether CRI-O's status says both the runtime and the network are ready.
fn ready() -> bool {
    output(crictl().args(["info", "-o", "json"]))
        .and_then(|o| serde_json::from_str::<serde_json::Value>(&o).ok())
        .and_then(|info| info["status"]["conditions"].as_array().cloned())
        .is_some_and(|conditions| {
            ["RuntimeReady", "NetworkReady"].iter().all(|kind| {
                conditions
                    .iter()
                    .any(|c| c["type"] == *kind && c["status"] == true)
            })
        })
}

/// skopeo copies the archive into CRI-O's storage (the same driver, root and run
/// root), named `reference`.
pub fn import(archive: &Path, reference: &str) -> anyhow::Result<()> {
    let (root, runroot) = config::Paths::storage(&dir());
    checked(
        Command::new("skopeo")
            .args(["copy", "--quiet"])
            .arg(format!("oci-archive:{}", archive.display()))
            .arg(format!(
                "containers-storage:[overlay@{root}+{runroot}]{reference}"
            )),
    )
    .context("skopeo could not copy it into CRI-O's storage")
}

/// Stops and removes every pod through CRI-O (their CNI DEL included): the pods' UIDs
/// and the sandboxes' and containers' IDs, for what is left to clean.
pub fn remove_pods() -> Removed {
    let mut removed = Removed::default();
    if procs::running(PROCESS).is_none() {
        return removed;
    }
    let pods = output(crictl().args(["pods", "-o", "json"]))
        .and_then(|o| serde_json::from_str::<serde_json::Value>(&o).ok());
    for pod in pods
        .iter()
        .flat_map(|p| p["items"].as_array().cloned())
        .flatten()
    {
        if let Some(id) = pod["id"].as_str() {
            removed.ids.push(id.to_string());
        }
        if let Some(uid) = pod["metadata"]["uid"].as_str() {
            removed.pod_uids.push(uid.to_string());
        }
    }
    let containers = output(crictl().args(["ps", "--all", "--quiet"])).unwrap_or_default();
    removed.ids.extend(
        containers
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string),
    );
    if let Err(e) = checked(crictl().args(["rmp", "--all", "--force"])) {
        eprintln!("xtask: crictl could not remove every pod ({e:#}); killing what is left");
    }
    removed
}

/// Stops CRI-O, then the conmons that outlive it (their command lines name its
/// directory), and removes the host paths it or skopeo made.
pub fn stop() {
    procs::stop(PROCESS, Duration::from_secs(10));
    for pid in procs::pids_with_arg(&dir().display().to_string()) {
        procs::stop_pid(pid, Duration::from_secs(2));
    }
    super::host_paths::remove_made(&HOST_PATHS, &made_file());
}
