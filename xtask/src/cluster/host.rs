//! What the cluster changes on the host, and how `down` undoes it: the node bridge and
//! the Service CIDR's route, the kubelet's cgroup root in every hierarchy, the sysctls
//! the kubelet and kube-proxy set, the KUBE-* iptables chains, mounts and network
//! namespaces. Plus the checks `up` makes first, each failing with its cause.

use std::{
    fs,
    net::{Ipv4Addr, TcpListener},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};
use sidecar_race_mountinfo::{self as mountinfo, Mount};
use sidecar_race_testbed::containerd::CNI_BIN_DIR;

use super::{
    modules,
    node::{BRIDGE, CGROUP_ROOT, NODE_IP, POD_CIDR, SERVICE_CIDR, STATE_DIR},
    operator,
};
use crate::run::{checked, output, succeeds};

/// Ports the components listen on, with who listens: `up` refuses to start when one is
/// taken.
pub const PORTS: [(&str, u16, &str); 10] = [
    ("127.0.0.1", 2379, "etcd (clients)"),
    ("127.0.0.1", 2380, "etcd (peers)"),
    (NODE_IP, 6443, "kube-apiserver"),
    ("127.0.0.1", 10257, "kube-controller-manager"),
    ("127.0.0.1", 10259, "kube-scheduler"),
    ("127.0.0.1", 10249, "kube-proxy (metrics)"),
    ("127.0.0.1", 10256, "kube-proxy (healthz)"),
    (NODE_IP, 10250, "kubelet"),
    ("127.0.0.1", 10248, "kubelet (healthz)"),
    ("127.0.0.1", operator::PORT, "prometheus-operator"),
];

/// Sysctls the kubelet (kernel tunables), kube-proxy and the CNI bridge (`isGateway`
/// turns on forwarding) set; saved at `up` before anything runs, restored at `down`,
/// after a failed `up`, and by the next `up` after an interrupted one. A key the
/// kernel does not have (the bridge's without br_netfilter) is not saved.
pub const SYSCTLS: [&str; 11] = [
    "net/ipv4/ip_forward",
    "net/ipv6/conf/all/forwarding",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/conf/all/route_localnet",
];

fn saved_sysctls() -> PathBuf {
    Path::new(STATE_DIR).join("sysctls.saved")
}

/// The checks before anything is started; the kernel modules it loaded (recorded by
/// `up` for `down`). On failure, what it loaded is unloaded again.
pub fn preflight() -> anyhow::Result<Vec<String>> {
    let mut loaded = Vec::new();
    let checked = checks(&mut loaded);
    if checked.is_err() {
        modules::unload(&loaded);
    }
    checked.map(|()| loaded)
}

fn checks(loaded: &mut Vec<String>) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "`cargo xtask cluster up` needs root (it starts a kubelet, a container runtime and kube-proxy)"
        );
    }
    for (tool, package) in [
        ("openssl", "openssl"),
        ("containerd", "containerd"),
        ("ctr", "containerd"),
        ("runc", "runc"),
        ("iptables", "iptables"),
        ("ip", "iproute2"),
    ] {
        if !succeeds(Command::new("sh").args(["-c", &format!("command -v {tool}")])) {
            bail!("{tool} is missing (Debian package {package}; `cargo xtask setup` installs it)");
        }
    }
    let bridge = Path::new(CNI_BIN_DIR).join("bridge");
    if !bridge.exists() {
        bail!(
            "the CNI bridge plugin is missing ({}: Debian's containernetworking-plugins)",
            bridge.display()
        );
    }
    kernel_features(loaded)?;
    routes_do_not_collide()?;
    for (addr, port, who) in PORTS {
        // The node IP is not on the host until the bridge exists: check loopback ones
        // now and the node IP's after the bridge is up.
        if addr == NODE_IP && !has_address(NODE_IP) {
            continue;
        }
        port_free(addr, port, who)?;
    }
    Ok(())
}

pub fn port_free(addr: &str, port: u16, who: &str) -> anyhow::Result<()> {
    let ip: Ipv4Addr = addr.parse()?;
    if let Err(e) = TcpListener::bind((ip, port)) {
        bail!(
            "port {port} on {addr} is in use ({e}): {who} needs it. `ss -ltnp 'sport = :{port}'` shows who has it"
        );
    }
    Ok(())
}

fn kernel_features(loaded: &mut Vec<String>) -> anyhow::Result<()> {
    let mut load = |m: &str| {
        if modules::load(m) {
            loaded.push(m.to_string());
        }
    };
    let filesystems = fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems.contains("\toverlay") {
        // containerd's overlayfs snapshotter.
        load("overlay");
        if !fs::read_to_string("/proc/filesystems")
            .unwrap_or_default()
            .contains("\toverlay")
        {
            bail!(
                "missing kernel feature: overlayfs (containerd's snapshotter); `modprobe overlay` did not help"
            );
        }
    }
    let mounts = mountinfo::read_self().unwrap_or_default();
    if !mounts.iter().any(|m| m.fs_type == "cgroup2") {
        bail!(
            "missing kernel feature: no cgroup2 hierarchy is mounted (the agent names pods from cgroup v2 ids)"
        );
    }
    if !Path::new("/proc/sys/net/bridge").exists() {
        load("br_netfilter");
    }
    if !Path::new("/proc/sys/net/bridge").exists() {
        bail!(
            "missing kernel feature: br_netfilter (/proc/sys/net/bridge), which kube-proxy needs; `modprobe br_netfilter` did not help"
        );
    }
    if !Path::new("/proc/self/ns/net").exists() || !Path::new("/sys/fs/bpf").exists() {
        bail!("missing kernel feature: network namespaces or the BPF filesystem");
    }
    Ok(())
}

fn has_address(ip: &str) -> bool {
    output(Command::new("ip").args(["-o", "-4", "addr", "show"])).is_some_and(|o| {
        o.split_whitespace()
            .any(|w| w.split('/').next() == Some(ip))
    })
}

/// `a.b.c.d/n` as (network, prefix length).
fn parse_cidr(s: &str) -> Option<(u32, u32)> {
    let (ip, len) = s.split_once('/').unwrap_or((s, "32"));
    let ip: Ipv4Addr = ip.parse().ok()?;
    Some((u32::from(ip), len.parse().ok()?))
}

fn overlaps(a: &str, b: &str) -> bool {
    let (Some((na, la)), Some((nb, lb))) = (parse_cidr(a), parse_cidr(b)) else {
        return false;
    };
    let len = la.min(lb);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    na & mask == nb & mask
}

/// The pod and Service CIDRs must not overlap a route the host already has (other than
/// the default route, and our own bridge's).
fn routes_do_not_collide() -> anyhow::Result<()> {
    let routes = output(Command::new("ip").args(["-4", "route", "show", "table", "all"]))
        .unwrap_or_default();
    for line in routes.lines() {
        let dst = line.split_whitespace().next().unwrap_or_default();
        let dst = dst
            .trim_start_matches("local ")
            .trim_start_matches("broadcast ");
        if dst == "default"
            || line.contains(&format!("dev {BRIDGE}"))
            || line.starts_with("local ")
            || line.starts_with("broadcast ")
        {
            continue;
        }
        for ours in [POD_CIDR, SERVICE_CIDR] {
            if overlaps(dst, ours) {
                bail!(
                    "the host already routes {dst} (`{line}`), which overlaps the cluster's {ours}"
                );
            }
        }
    }
    Ok(())
}

/// The node bridge with the node IP, and the Service CIDR routed to it.
pub fn create_bridge() -> anyhow::Result<()> {
    checked(Command::new("ip").args(["link", "add", BRIDGE, "type", "bridge"]))
        .with_context(|| format!("cannot create the bridge {BRIDGE}"))?;
    checked(Command::new("ip").args(["addr", "add", &format!("{NODE_IP}/24"), "dev", BRIDGE]))?;
    checked(Command::new("ip").args(["link", "set", BRIDGE, "up"]))?;
    checked(Command::new("ip").args(["route", "add", SERVICE_CIDR, "dev", BRIDGE]))?;
    Ok(())
}

pub fn bridge_exists() -> bool {
    Path::new("/sys/class/net").join(BRIDGE).exists()
}

pub fn delete_bridge() {
    if bridge_exists() {
        let _ = Command::new("ip").args(["link", "del", BRIDGE]).status();
    }
}

/// Every cgroup hierarchy's mount point.
fn cgroup_mounts() -> Vec<PathBuf> {
    mountinfo::read_self()
        .unwrap_or_default()
        .into_iter()
        .filter(Mount::is_cgroup)
        .map(|m| m.mount_point)
        .collect()
}

/// The kubelet's cgroup root in every hierarchy. On a v1 host the kubelet also checks
/// for its cgroups in the `name=systemd` hierarchy, where its cgroupfs driver never
/// makes them ("root container [kubepods] doesn't exist"): made here.
pub fn create_cgroups() -> anyhow::Result<()> {
    for mount in cgroup_mounts() {
        fs::create_dir_all(mount.join(CGROUP_ROOT))
            .with_context(|| format!("cannot create {}", mount.join(CGROUP_ROOT).display()))?;
        if mount.ends_with("systemd") {
            for sub in ["kubepods", "kubepods/burstable", "kubepods/besteffort"] {
                fs::create_dir_all(mount.join(CGROUP_ROOT).join(sub))?;
            }
        }
    }
    Ok(())
}

/// Removes the cgroup root's trees, deepest first; the cgroups that are left (a process
/// still in one).
pub fn remove_cgroups() -> Vec<PathBuf> {
    fn dirs(p: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(p).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs(&e.path(), out);
            }
        }
        out.push(p.to_path_buf());
    }
    let mut left = Vec::new();
    for mount in cgroup_mounts() {
        let root = mount.join(CGROUP_ROOT);
        if !root.exists() {
            continue;
        }
        let mut all = Vec::new();
        dirs(&root, &mut all);
        for d in all {
            if fs::remove_dir(&d).is_err() {
                left.push(d);
            }
        }
    }
    left
}

/// Processes still in the cgroup root (containers whose shim is gone).
pub fn cgroup_pids() -> Vec<u32> {
    let mut pids = Vec::new();
    for mount in cgroup_mounts() {
        let root = mount.join(CGROUP_ROOT);
        let mut stack = vec![root];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
            for p in fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
            {
                if let Ok(pid) = p.trim().parse()
                    && !pids.contains(&pid)
                {
                    pids.push(pid);
                }
            }
        }
    }
    pids
}

pub fn save_sysctls() -> anyhow::Result<()> {
    let saved: String = SYSCTLS
        .iter()
        .filter_map(|s| {
            Some(format!(
                "{s}={}\n",
                fs::read_to_string(format!("/proc/sys/{s}")).ok()?.trim()
            ))
        })
        .collect();
    fs::write(saved_sysctls(), saved)?;
    Ok(())
}

pub fn restore_sysctls() {
    for line in fs::read_to_string(saved_sysctls())
        .unwrap_or_default()
        .lines()
    {
        if let Some((key, value)) = line.split_once('=') {
            let _ = fs::write(format!("/proc/sys/{key}"), value);
        }
    }
}

/// Deletes every rule that jumps to a KUBE-* chain from a built-in chain, then flushes
/// and deletes the KUBE-* chains (kube-proxy's, and the kubelet's canaries), for IPv4
/// and IPv6; the rules left (should be none).
pub fn remove_kube_chains() -> Vec<String> {
    let mut left = Vec::new();
    for (save, tool) in [
        ("iptables-save", "iptables"),
        ("ip6tables-save", "ip6tables"),
    ] {
        for table in ["filter", "nat", "mangle", "raw"] {
            let Some(dump) = output(Command::new(save).args(["-t", table])) else {
                continue;
            };
            for line in dump.lines() {
                let Some(rule) = line.strip_prefix("-A ") else {
                    continue;
                };
                let chain = rule.split_whitespace().next().unwrap_or_default();
                if !chain.starts_with("KUBE-") && rule.contains(" -j KUBE-") {
                    let args: Vec<String> = shell_words(rule);
                    let _ = Command::new(tool)
                        .args(["-w", "-t", table, "-D"])
                        .args(&args)
                        .status();
                }
            }
            let chains: Vec<String> = dump
                .lines()
                .filter_map(|l| l.strip_prefix(':'))
                .filter_map(|l| l.split_whitespace().next())
                .filter(|c| c.starts_with("KUBE-"))
                .map(str::to_string)
                .collect();
            for c in &chains {
                let _ = Command::new(tool)
                    .args(["-w", "-t", table, "-F", c])
                    .status();
            }
            for c in &chains {
                let _ = Command::new(tool)
                    .args(["-w", "-t", table, "-X", c])
                    .status();
            }
            if let Some(after) = output(Command::new(save).args(["-t", table])) {
                left.extend(
                    after
                        .lines()
                        .filter(|l| l.contains("KUBE-"))
                        .map(|l| format!("{tool} {table}: {l}")),
                );
            }
        }
    }
    left
}

/// iptables-save's quoting: words, with "..." kept together (comments).
fn shell_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            _ => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// Mount points at or below `dir`, deepest first.
pub fn mounts_under(dir: &str) -> Vec<PathBuf> {
    mountinfo::mount_points_under(&mountinfo::read_self().unwrap_or_default(), Path::new(dir))
}

/// Makes /run/netns a shared bind mount of itself before containerd starts, as
/// `ip netns add` does when it is not a mount point yet. containerd 1.6 mounts the
/// pods' network namespaces on files there without one; a later `ip netns add` (a host
/// test, a case's own namespace) then binds /run/netns over them, and the kubelet can
/// never remove those pods' namespaces ("remove netns: device or resource busy"): the
/// pods stay Terminating. With the bind first, both put their files in the same mount.
/// Left as it is when anything is mounted there already. `down` undoes it once empty.
pub fn share_netns_dir() -> anyhow::Result<()> {
    let dir = "/run/netns";
    fs::create_dir_all(dir)?;
    if !mounts_under(dir).is_empty() {
        return Ok(());
    }
    checked(Command::new("mount").args(["--bind", dir, dir]))?;
    checked(Command::new("mount").args(["--make-shared", dir]))
}

pub fn unmount_all_under(dir: &str) {
    for m in mounts_under(dir) {
        let _ = Command::new("umount").arg("-l").arg(&m).status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_overlap() {
        assert!(overlaps("10.238.0.0/16", POD_CIDR));
        assert!(overlaps("10.239.0.7", SERVICE_CIDR));
        assert!(!overlaps("192.0.2.0/24", POD_CIDR));
        assert!(!overlaps("10.237.5.0/24", POD_CIDR));
    }

    #[test]
    fn iptables_save_rules_split_like_the_shell() {
        assert_eq!(
            shell_words(
                r#"PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#
            ),
            [
                "PREROUTING",
                "-m",
                "comment",
                "--comment",
                "kubernetes service portals",
                "-j",
                "KUBE-SERVICES"
            ]
        );
    }
}
