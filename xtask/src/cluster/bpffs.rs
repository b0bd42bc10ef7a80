//! The node's BPF filesystem for the agent pods: `up` mounts a bpffs at /sys/fs/bpf
//! when none is there and makes it a shared mount (the DaemonSet mounts it with
//! HostToContainer propagation), recording each change and which of the agent's node
//! paths were absent; `down` removes those the agent left (its pins keep its programs
//! attached after its pods are gone) and undoes exactly what `up` recorded.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use super::node::STATE_DIR;
use crate::run::checked;

/// Where the agent's DaemonSet mounts the node's bpffs (hostPath, HostToContainer).
pub const BPFFS: &str = "/sys/fs/bpf";

/// What the agent pods leave on the node: their pins (which keep the programs attached
/// after the pods are gone) and their state dir (lock, checkpoint). `down` removes
/// each that `up` found absent.
pub const AGENT_LEFTOVERS: [&str; 2] = ["/sys/fs/bpf/sidecar-race", "/var/lib/sidecar-race"];

/// One change `prepare` made to the host, recorded for `down`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BpffsChange {
    /// A bpffs mounted at [`BPFFS`] (none was there).
    Mounted,
    /// The bpffs already there made a shared mount (it was private).
    MadeShared,
    /// A path of [`AGENT_LEFTOVERS`] that did not exist before `up`.
    Absent(String),
}

impl BpffsChange {
    fn line(&self) -> String {
        match self {
            Self::Mounted => format!("mounted {BPFFS}"),
            Self::MadeShared => format!("made-shared {BPFFS}"),
            Self::Absent(p) => format!("absent {p}"),
        }
    }

    fn parse(line: &str) -> Option<Self> {
        match line.split_once(' ')? {
            ("mounted", BPFFS) => Some(Self::Mounted),
            ("made-shared", BPFFS) => Some(Self::MadeShared),
            ("absent", p) if AGENT_LEFTOVERS.contains(&p) => Some(Self::Absent(p.to_string())),
            _ => None,
        }
    }
}

fn bpffs_changes_file() -> PathBuf {
    Path::new(STATE_DIR).join("bpffs.changed")
}

fn record_bpffs(changes: &[BpffsChange]) -> anyhow::Result<()> {
    let text: String = changes.iter().map(|c| c.line() + "\n").collect();
    fs::write(bpffs_changes_file(), text).context("cannot record the bpffs changes")
}

fn recorded_bpffs() -> Vec<BpffsChange> {
    fs::read_to_string(bpffs_changes_file())
        .unwrap_or_default()
        .lines()
        .filter_map(BpffsChange::parse)
        .collect()
}

/// The topmost mount at `mount_point` in mountinfo `text`: its filesystem type, and
/// whether it is shared or a slave (its optional fields hold `shared:N` or
/// `master:N`), which containerd demands of a HostToContainer mount's source.
pub fn mount_at(text: &str, mount_point: &str) -> Option<(String, bool)> {
    text.lines().rev().find_map(|line| {
        // id parent major:minor root mount_point options [optional...] - fstype ...
        let (left, right) = line.split_once(" - ")?;
        let fields: Vec<&str> = left.split(' ').collect();
        (fields.get(4) == Some(&mount_point)).then(|| {
            let propagates = fields
                .get(6..)
                .unwrap_or_default()
                .iter()
                .any(|f| f.starts_with("shared:") || f.starts_with("master:"));
            let fs_type = right.split(' ').next().unwrap_or_default().to_string();
            (fs_type, propagates)
        })
    })
}

pub fn bpffs_mount() -> Option<(String, bool)> {
    mount_at(
        &fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
        BPFFS,
    )
}

/// Before containerd starts: a bpffs at /sys/fs/bpf, as systemd mounts it on a node,
/// so the agent pods pin there (the DaemonSet mounts it); a shared mount, as systemd
/// makes every mount, since containerd refuses a HostToContainer volume whose source
/// mount neither shares nor receives mounts ("is not a shared or slave mount"). Each
/// change is recorded for `down`, and so is which of the agent's leftovers were
/// absent, so that `down` removes those and nothing that was here before.
pub fn prepare() -> anyhow::Result<()> {
    let mut changes: Vec<BpffsChange> = AGENT_LEFTOVERS
        .iter()
        .filter(|p| !Path::new(p).exists())
        .map(|p| BpffsChange::Absent(p.to_string()))
        .collect();
    for p in AGENT_LEFTOVERS {
        if Path::new(p).exists() {
            eprintln!(
                "xtask: {p} is there before `up` (another agent's, or one a test left): the cluster's agent finds it, and `down` leaves it"
            );
        }
    }
    record_bpffs(&changes)?;
    match bpffs_mount() {
        Some((fs_type, _)) if fs_type != "bpf" => {
            bail!("{BPFFS} is a {fs_type} mount, not the BPF filesystem the agent pins in")
        }
        Some((_, true)) => {}
        Some((_, false)) => {
            checked(Command::new("mount").args(["--make-shared", BPFFS]))?;
            changes.push(BpffsChange::MadeShared);
        }
        None => {
            checked(Command::new("mount").args(["-t", "bpf", "bpf", BPFFS]))
                .context("cannot mount the BPF filesystem")?;
            changes.push(BpffsChange::Mounted);
            record_bpffs(&changes)?;
            checked(Command::new("mount").args(["--make-shared", BPFFS]))?;
        }
    }
    record_bpffs(&changes)
}

/// Undoes what `prepare` recorded, once no agent runs: the agent's leftovers
/// that were absent before `up` (its pins, which keep its programs attached, and its
/// state dir), the shared flag, the mount. What is still there (none should be).
pub fn restore() -> Vec<String> {
    let changes = recorded_bpffs();
    let mut left = Vec::new();
    for change in &changes {
        if let BpffsChange::Absent(p) = change
            && Path::new(p).exists()
        {
            // On bpffs, unlinking a pin drops its reference: the last one detaches.
            if let Err(e) = fs::remove_dir_all(p) {
                left.push(format!("{p} ({e})"));
            }
        }
    }
    let bpf_there = bpffs_mount().is_some_and(|(t, _)| t == "bpf");
    if changes.contains(&BpffsChange::MadeShared) && bpf_there {
        let _ = Command::new("mount")
            .args(["--make-private", BPFFS])
            .status();
    }
    if changes.contains(&BpffsChange::Mounted) && bpf_there {
        let unmounted = Command::new("umount")
            .arg(BPFFS)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            left.push(format!("the bpffs mounted at {BPFFS}"));
        }
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
46 23 0:40 / /sys/fs/bpf rw,relatime - bpf bpf rw
47 23 0:41 / /sys/fs/bpf/sub rw,relatime shared:9 - bpf bpf rw
48 23 0:42 / /sys/fs/bpf rw,relatime shared:12 master:3 - bpf bpf rw
49 23 0:43 / /mnt/slave rw master:4 - tmpfs tmpfs rw
";

    #[test]
    fn the_topmost_mount_at_a_path_with_its_propagation() {
        assert_eq!(mount_at(MOUNTINFO, BPFFS), Some(("bpf".into(), true)));
        assert_eq!(
            mount_at(
                &MOUNTINFO.lines().take(2).collect::<Vec<_>>().join("\n"),
                BPFFS
            ),
            Some(("bpf".into(), false)),
            "no optional field: private"
        );
        assert_eq!(
            mount_at(MOUNTINFO, "/mnt/slave"),
            Some(("tmpfs".into(), true))
        );
        assert_eq!(mount_at(MOUNTINFO, "/sys/fs"), None);
        assert_eq!(mount_at(MOUNTINFO, "/sys"), Some(("sysfs".into(), false)));
    }

    #[test]
    fn bpffs_changes_read_back_and_nothing_else_is_undone() {
        let changes = [
            BpffsChange::Absent("/sys/fs/bpf/sidecar-race".into()),
            BpffsChange::Absent("/var/lib/sidecar-race".into()),
            BpffsChange::Mounted,
            BpffsChange::MadeShared,
        ];
        for c in &changes {
            assert_eq!(BpffsChange::parse(&c.line()).as_ref(), Some(c));
        }
        // Never a path that is not the agent's, whatever the file says.
        assert_eq!(BpffsChange::parse("absent /var/lib"), None);
        assert_eq!(BpffsChange::parse("mounted /sys"), None);
        assert_eq!(BpffsChange::parse("unmounted /sys/fs/bpf"), None);
    }
}
