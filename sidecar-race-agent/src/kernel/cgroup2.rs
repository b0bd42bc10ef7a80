//! Where the cgroup v2 hierarchy is mounted: the kernel's requirements check it
//! before loading, and the inventory indexes the tree below it.

use std::{io, path::PathBuf};

use sidecar_race_mountinfo::{self as mountinfo, Mount};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CgroupError {
    #[error(
        "no cgroup2 filesystem is mounted (checked /proc/self/mountinfo); the agent needs cgroup v2 \
         or a hybrid host (cgroup2 at /sys/fs/cgroup/unified)"
    )]
    NoCgroup2,
    #[error("cannot read /proc/self/mountinfo: {0}")]
    Mountinfo(io::Error),
}

/// Finds the cgroup2 mount that shows the whole hierarchy (root `/`), preferring it
/// over bind mounts of subtrees.
pub fn find_cgroup2() -> Result<PathBuf, CgroupError> {
    let mounts = mountinfo::read_self().map_err(CgroupError::Mountinfo)?;
    cgroup2_in(&mounts).ok_or(CgroupError::NoCgroup2)
}

pub fn cgroup2_in(mounts: &[Mount]) -> Option<PathBuf> {
    let mut cg2 = mounts.iter().filter(|m| m.fs_type == "cgroup2");
    let all: Vec<&Mount> = cg2.by_ref().collect();
    all.iter()
        .find(|m| m.root == "/")
        .or(all.first())
        .map(|m| m.mount_point.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sidecar_race_mountinfo::parse;

    #[test]
    fn prefers_the_whole_hierarchy() {
        let m = parse(
            "1 0 0:1 /kubepods /mnt/sub rw - cgroup2 cgroup2 rw\n\
             2 0 0:1 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
        );
        assert_eq!(
            cgroup2_in(&m),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(cgroup2_in(&parse("1 0 0:1 / /x rw - tmpfs t rw\n")), None);
    }
}
