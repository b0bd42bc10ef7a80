//! Who holds a socket of a pod's socket table: the process whose fds name its inode,
//! or, where the agent may not read a process's fds, the one container whose processes
//! run as the socket's user. Reading another user's `/proc/<pid>/fd` (and
//! `/proc/<pid>/ns/net`) takes `CAP_SYS_PTRACE`, which the DaemonSet does not grant: a
//! sidecar that runs as `nobody` (as `statsd_exporter`'s image does) keeps its fds
//! from the agent, while its socket's uid (the table's `uid` column) and its process's
//! uid (`/proc/<pid>/status`, readable by all) are there to be matched.

/// A process of one of a pod's cgroups, as the agent can see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Process {
    pub cgroup_id: u64,
    pub pid: u32,
    /// The inodes of the sockets it holds; `None` where its fds could not be read.
    pub sockets: Option<Vec<u64>>,
    /// Its filesystem uid, which a socket it makes takes as its own.
    pub uid: Option<u32>,
}

/// Fds read per process: a listener is among the first.
const FDS_PER_PROCESS: usize = 4096;

/// Process `pid` of cgroup `cgroup_id`, read from `/proc`.
pub(super) fn process(cgroup_id: u64, pid: u32) -> Process {
    Process {
        cgroup_id,
        pid,
        sockets: socket_inodes(pid),
        uid: std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| fs_uid(&s)),
    }
}

/// The (cgroup, pid) holding socket `inode`, whose table gives `uid`: the process whose
/// fds hold it; else, among the processes whose fds are hidden, those of the socket's
/// user, when they all belong to one cgroup (two containers of that user: nobody can
/// tell, and the socket stays unattributed rather than blamed on the wrong one).
pub(super) fn owner_of(inode: u64, uid: Option<u32>, procs: &[Process]) -> Option<(u64, u32)> {
    if let Some(p) = procs
        .iter()
        .find(|p| p.sockets.as_ref().is_some_and(|s| s.contains(&inode)))
    {
        return Some((p.cgroup_id, p.pid));
    }
    let uid = uid?;
    let mut hidden = procs
        .iter()
        .filter(|p| p.sockets.is_none() && p.uid == Some(uid));
    let first = hidden.next()?;
    hidden
        .all(|p| p.cgroup_id == first.cgroup_id)
        .then_some((first.cgroup_id, first.pid))
}

/// The inodes of the sockets process `pid` holds; `None` where its fds cannot be read.
fn socket_inodes(pid: u32) -> Option<Vec<u64>> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        fds.flatten()
            .take(FDS_PER_PROCESS)
            .filter_map(|fd| {
                let target = std::fs::read_link(fd.path()).ok()?;
                let target = target.to_str()?;
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .parse()
                    .ok()
            })
            .collect(),
    )
}

/// The filesystem uid of a `/proc/<pid>/status`: the fourth number of its `Uid:` line
/// (real, effective, saved, filesystem).
fn fs_uid(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hidden(cgroup_id: u64, pid: u32, uid: u32) -> Process {
        Process {
            cgroup_id,
            pid,
            sockets: None,
            uid: Some(uid),
        }
    }

    #[test]
    fn the_process_whose_fds_hold_the_socket_owns_it() {
        let procs = [
            hidden(1, 10, 65534),
            Process {
                cgroup_id: 2,
                pid: 20,
                sockets: Some(vec![7, 4242]),
                uid: Some(0),
            },
        ];
        assert_eq!(owner_of(4242, Some(65534), &procs), Some((2, 20)));
    }

    #[test]
    fn a_socket_of_a_hidden_process_is_owned_by_the_one_container_of_its_user() {
        // statsd_exporter as nobody beside a root app whose fds the agent reads.
        let procs = [
            Process {
                cgroup_id: 1,
                pid: 10,
                sockets: Some(vec![7]),
                uid: Some(0),
            },
            hidden(2, 20, 65534),
            hidden(2, 21, 65534),
        ];
        assert_eq!(owner_of(4242, Some(65534), &procs), Some((2, 20)));
    }

    #[test]
    fn a_user_in_two_containers_leaves_the_socket_unattributed() {
        let procs = [hidden(1, 10, 65534), hidden(2, 20, 65534)];
        assert_eq!(owner_of(4242, Some(65534), &procs), None);
        assert_eq!(
            owner_of(4242, None, &procs),
            None,
            "no uid: nothing to match"
        );
        assert_eq!(
            owner_of(4242, Some(1000), &procs),
            None,
            "nobody of the socket's user"
        );
    }

    #[test]
    fn the_filesystem_uid_is_the_fourth_of_the_status_uids() {
        let status = "Name:\tstatsd_exporter\nUmask:\t0022\nUid:\t65534\t65534\t65534\t65533\nGid:\t65534\t65534\t65534\t65534\n";
        assert_eq!(fs_uid(status), Some(65533));
        assert_eq!(fs_uid("Name:\tx\n"), None);
    }
}
