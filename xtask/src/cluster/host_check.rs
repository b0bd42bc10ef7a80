//! The cluster tier's own check that `down` leaves the host as `up` found it: every
//! sysctl `up` or its components change, our iptables chain, the loaded modules, the
//! bpffs mount at /sys/fs/bpf, the agent's pins and state dir on the node, the host
//! paths CRI-O, skopeo and containerd's shims make, and the CNI results libcni caches per pod.
//! `ip_forward` is already 1 on these machines, so the check first sets it to 0, a
//! value the CNI bridge is known to change, and puts the machine's own value back
//! after.

use std::{fs, path::Path, process::Command};

use super::{
    bpffs::{AGENT_LEFTOVERS, bpffs_mount},
    down::CNI_RESULTS,
    egress,
    host::SYSCTLS,
    runtime::{containerd, cri_o},
};
use crate::run::output;

const IP_FORWARD: &str = "net/ipv4/ip_forward";

/// The host before `up`.
pub struct Before {
    sysctls: Vec<(&'static str, Option<String>)>,
    modules: Option<String>,
    /// The machine's own `ip_forward`, put back after the check.
    ip_forward: Option<String>,
    /// What is mounted at /sys/fs/bpf (type, shared or slave).
    bpffs: Option<(String, bool)>,
    /// Which of the agent's node paths and the runtimes' host paths exist.
    leftovers: Vec<(&'static str, bool)>,
    /// The CNI results libcni cached (one per pod network attachment).
    cni_results: Vec<String>,
}

fn cni_results() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(CNI_RESULTS)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort_unstable();
    names
}

fn leftovers() -> Vec<(&'static str, bool)> {
    AGENT_LEFTOVERS
        .iter()
        .chain(&cri_o::HOST_PATHS)
        .chain(&containerd::HOST_PATHS)
        .map(|p| (*p, Path::new(p).exists()))
        .collect()
}

fn sysctl(key: &str) -> Option<String> {
    fs::read_to_string(Path::new("/proc/sys").join(key))
        .ok()
        .map(|v| v.trim().to_string())
}

/// Loaded modules' names, sorted (`None` without loadable modules).
fn modules() -> Option<String> {
    let text = fs::read_to_string("/proc/modules").ok()?;
    let mut names: Vec<&str> = text.lines().filter_map(|l| l.split(' ').next()).collect();
    names.sort_unstable();
    Some(names.join(" "))
}

/// Sets `ip_forward` to 0 (a known value) and reads the host.
pub fn before() -> Before {
    let ip_forward = sysctl(IP_FORWARD);
    let _ = fs::write(Path::new("/proc/sys").join(IP_FORWARD), "0");
    Before {
        sysctls: SYSCTLS.iter().map(|k| (*k, sysctl(k))).collect(),
        modules: modules(),
        ip_forward,
        bpffs: bpffs_mount(),
        leftovers: leftovers(),
        cni_results: cni_results(),
    }
}

/// What differs after `down` (nothing: `Ok`); the machine's `ip_forward` is put back.
pub fn after(before: Before) -> Result<(), String> {
    let mut differs: Vec<String> = before
        .sysctls
        .iter()
        .filter_map(|(k, was)| {
            let now = sysctl(k);
            // A key that appeared with a module `up` loaded and `down` unloaded is gone
            // again; one that appeared and stayed is a module left loaded (below).
            (was.is_some() && now != *was).then(|| format!("{k}: {was:?} before, {now:?} after"))
        })
        .collect();
    let rules = output(Command::new("iptables-save").args(["-t", "filter"])).unwrap_or_default();
    if rules.contains(egress::CHAIN) {
        differs.push(format!(
            "the iptables chain {} is still there",
            egress::CHAIN
        ));
    }
    let now = modules();
    if now != before.modules {
        differs.push(format!(
            "loaded modules: {:?} before, {now:?} after",
            before.modules
        ));
    }
    let bpffs = bpffs_mount();
    if bpffs != before.bpffs {
        differs.push(format!(
            "/sys/fs/bpf mount (type, shared): {:?} before, {bpffs:?} after",
            before.bpffs
        ));
    }
    for ((path, was), (_, is)) in before.leftovers.iter().zip(leftovers()) {
        if *was != is {
            differs.push(format!("{path}: exists {was} before, {is} after"));
        }
    }
    let new: Vec<String> = cni_results()
        .into_iter()
        .filter(|n| !before.cni_results.contains(n))
        .collect();
    if !new.is_empty() {
        differs.push(format!("CNI results left in {CNI_RESULTS}: {new:?}"));
    }
    if let Some(v) = before.ip_forward {
        let _ = fs::write(Path::new("/proc/sys").join(IP_FORWARD), v);
    }
    if differs.is_empty() {
        Ok(())
    } else {
        Err(differs.join("; "))
    }
}
