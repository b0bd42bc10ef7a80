//! Kernel modules `up` loads (overlay for containerd, br_netfilter for kube-proxy) when
//! the kernel has them as modules and they are not loaded yet: recorded in the state
//! directory, unloaded by `down` when nothing uses them any more. A kernel with them
//! built in (no `/proc/modules`, as this project's VMs) loads nothing and unloads
//! nothing.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use super::node::STATE_DIR;

fn loaded_file() -> PathBuf {
    Path::new(STATE_DIR).join("modules.loaded")
}

/// Whether `module` is loaded as a module (built-in ones have no `refcnt`).
fn is_loaded(module: &str) -> bool {
    Path::new("/sys/module")
        .join(module)
        .join("refcnt")
        .exists()
}

/// `modprobe module`; whether this call loaded it (it was not loaded before).
pub fn load(module: &str) -> bool {
    if !Path::new("/proc/modules").exists() || is_loaded(module) {
        return false;
    }
    let ok = Command::new("modprobe")
        .arg(module)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok && is_loaded(module)
}

/// Records `modules` as loaded by `up` (the state directory exists).
pub fn record(modules: &[String]) -> std::io::Result<()> {
    fs::write(loaded_file(), modules.join("\n"))
}

/// Unloads `modules` that nothing uses now (`refcnt` 0); the ones left loaded and why.
pub fn unload(modules: &[String]) -> Vec<String> {
    let mut left = Vec::new();
    for m in modules {
        let users = fs::read_to_string(Path::new("/sys/module").join(m).join("refcnt"))
            .ok()
            .and_then(|r| r.trim().parse::<u64>().ok());
        match users {
            None => {} // already gone
            Some(0) => {
                let removed = Command::new("modprobe")
                    .args(["-r", m])
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if !removed {
                    left.push(format!("{m} (modprobe -r failed)"));
                }
            }
            Some(n) => left.push(format!("{m} ({n} users)")),
        }
    }
    left
}

/// Unloads what `up` recorded; the modules kept loaded, said but not an error (another
/// user of the host may need them).
pub fn unload_recorded() -> Vec<String> {
    let recorded: Vec<String> = fs::read_to_string(loaded_file())
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    unload(&recorded)
}
