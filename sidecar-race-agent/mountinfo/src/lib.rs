//! `/proc/self/mountinfo`: where cgroup2 and tracefs really are (hybrid hosts have
//! cgroup2 at `/sys/fs/cgroup/unified`, so nothing may assume `/sys/fs/cgroup`), and
//! what is mounted below a directory. The one parser of the agent, the test kit and
//! xtask (which must not depend on the agent), with mountinfo's octal escapes undone.

use std::{
    io,
    path::{Path, PathBuf},
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub mount_point: PathBuf,
    pub fs_type: String,
    /// The path inside the filesystem that is mounted (`/` for a whole cgroup2).
    pub root: String,
}

impl Mount {
    /// A cgroup hierarchy: a v1 controller's or the v2 one.
    pub fn is_cgroup(&self) -> bool {
        self.fs_type == "cgroup" || self.fs_type == "cgroup2"
    }
}

pub fn read_self() -> io::Result<Vec<Mount>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// Parses mountinfo text; lines it cannot read are skipped.
pub fn parse(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mount> {
    // id parent major:minor root mount_point options [optional...] - fstype source super
    let (left, right) = line.split_once(" - ")?;
    let mut l = left.split(' ');
    let root = unescape(l.nth(3)?);
    let mount_point = PathBuf::from(unescape(l.next()?));
    let fs_type = right.split(' ').next()?.to_string();
    Some(Mount {
        mount_point,
        fs_type,
        root,
    })
}

/// Mount points at or below `dir` (whole path components), deepest first and each
/// once: the order to unmount them in.
pub fn mount_points_under(mounts: &[Mount], dir: &Path) -> Vec<PathBuf> {
    let mut m: Vec<PathBuf> = mounts
        .iter()
        .filter(|m| m.mount_point.starts_with(dir))
        .map(|m| m.mount_point.clone())
        .collect();
    // Longest first; equal lengths by name, so that dedup sees every repeat.
    m.sort_by(|a, b| (b.as_os_str().len().cmp(&a.as_os_str().len())).then_with(|| a.cmp(b)));
    m.dedup();
    m
}

/// mountinfo escapes space, tab, newline and backslash as octal `\040` etc.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..=i + 3].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
35 33 0:30 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
40 25 0:12 / /sys/kernel/tracing rw,nosuid,nodev,noexec,relatime shared:20 - tracefs tracefs rw
41 25 0:40 / /mnt/with\\040space rw - tmpfs tmpfs rw
";

    #[test]
    fn finds_cgroup2_on_hybrid_hosts_and_tracefs() {
        let m = parse(HYBRID);
        let cg2 = m.iter().find(|m| m.fs_type == "cgroup2").unwrap();
        assert_eq!(cg2.mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(cg2.root, "/");
        let t = m.iter().find(|m| m.fs_type == "tracefs").unwrap();
        assert_eq!(t.mount_point, PathBuf::from("/sys/kernel/tracing"));
        assert!(
            m.iter()
                .any(|m| m.mount_point.as_path() == std::path::Path::new("/mnt/with space"))
        );
    }

    #[test]
    fn cgroup_hierarchies_are_v1_and_v2() {
        let m = parse(HYBRID);
        let cgroups: Vec<&Path> = m
            .iter()
            .filter(|m| m.is_cgroup())
            .map(|m| m.mount_point.as_path())
            .collect();
        assert_eq!(
            cgroups,
            [
                Path::new("/sys/fs/cgroup/unified"),
                Path::new("/sys/fs/cgroup/systemd")
            ]
        );
    }

    #[test]
    fn mount_points_under_a_dir_deepest_first_by_components() {
        let m = parse(
            "1 0 0:1 / /tmp/sr-cri-12 rw - tmpfs tmpfs rw\n\
             2 1 0:2 / /tmp/sr-cri-12/root/a\\040b rw - overlay overlay rw\n\
             3 1 0:3 / /tmp/sr-cri-12/state rw - tmpfs tmpfs rw\n\
             4 0 0:4 / /tmp/sr-cri-123 rw - tmpfs tmpfs rw\n\
             5 1 0:3 / /tmp/sr-cri-12/state rw - tmpfs tmpfs rw\n",
        );
        assert_eq!(
            mount_points_under(&m, Path::new("/tmp/sr-cri-12")),
            [
                PathBuf::from("/tmp/sr-cri-12/root/a b"),
                PathBuf::from("/tmp/sr-cri-12/state"),
                PathBuf::from("/tmp/sr-cri-12"),
            ]
        );
    }

    #[test]
    fn skips_unreadable_lines() {
        assert!(parse("garbage\n\n").is_empty());
    }
}
