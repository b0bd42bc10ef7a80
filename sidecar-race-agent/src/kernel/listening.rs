//! Who listens now, as the kernel's socket tables tell it: the TCP and Unix listeners
//! held by the processes of a set of cgroups, read from `/proc/<pid>/net/tcp{,6}` and
//! `/proc/<pid>/net/unix` (the tables of the process's network namespace) and matched
//! to their owner through its fds, or its user where the fds are hidden
//! ([`socket_owners`](super::socket_owners)). The pids are the host's, so the agent
//! runs in the host's pid namespace (the DaemonSet's `hostPID`). A
//! restored agent asks this for its open incidents: a listener that came up after the
//! checkpoint, and whose record the agent before read and took with it, is still
//! there to be seen. The UDP sockets bound in the pod are read the same way while a
//! UDP incident is open: no hook sees a UDP bind.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::Path,
};

use super::socket_owners::{self, Process};
use crate::names::UnixName;

/// Processes read per cgroup: a listener is among the first.
const PIDS_PER_CGROUP: usize = 256;
/// `TCP_LISTEN` in the tables' `st` column.
const LISTEN: &str = "0A";
/// A UDP socket bound and not connected: `TCP_CLOSE` in `/proc/net/udp{,6}`.
const UDP_UNCONNECTED: &str = "07";

/// A socket listening now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listening {
    /// The cgroup of the process that holds it.
    pub cgroup_id: u64,
    pub pid: u32,
    pub addr: SocketAddr,
}

/// The TCP listeners on `port` held by the processes of `cgroups` (id, directory).
pub fn tcp_listeners(cgroups: &[(u64, &Path)], port: u16) -> Vec<Listening> {
    sockets_in(cgroups, port, ["tcp", "tcp6"], LISTEN)
}

/// The UDP sockets bound to `port` (and not connected: a receiver) held by the
/// processes of `cgroups`: the datagram sidecar that came up, whose bind is not hooked.
pub fn udp_bound(cgroups: &[(u64, &Path)], port: u16) -> Vec<Listening> {
    sockets_in(cgroups, port, ["udp", "udp6"], UDP_UNCONNECTED)
}

/// The sockets on `port` in state `st` of `tables` held by the processes of `cgroups`.
fn sockets_in(cgroups: &[(u64, &Path)], port: u16, tables: [&str; 2], st: &str) -> Vec<Listening> {
    held(cgroups, &tables, |text| {
        in_state(text, st)
            .filter(|(_, _, a)| a.port() == port)
            .collect()
    })
    .into_iter()
    .map(|(cgroup_id, pid, addr)| Listening {
        cgroup_id,
        pid,
        addr,
    })
    .collect()
}

/// The sockets that `parse` picks (inode, the table's uid where it has one, the
/// socket) from the `tables` of each network namespace the processes of `cgroups` are
/// in (each namespace's tables read once; a process whose namespace link is hidden has
/// its tables read once per cgroup), with the cgroup and process holding each.
fn held<T>(
    cgroups: &[(u64, &Path)],
    tables: &[&str],
    parse: impl Fn(&str) -> Vec<(u64, Option<u32>, T)>,
) -> Vec<(u64, u32, T)> {
    let mut tables_read = Vec::new();
    let mut hidden_ns_read: Vec<u64> = Vec::new();
    let mut sockets: HashMap<u64, (Option<u32>, T)> = HashMap::new();
    let mut owners: Vec<(u64, u32)> = Vec::new();
    for &(cgroup_id, dir) in cgroups {
        for pid in pids(dir) {
            owners.push((cgroup_id, pid));
            match std::fs::read_link(format!("/proc/{pid}/ns/net")) {
                Ok(netns) if tables_read.contains(&netns) => continue,
                Ok(netns) => tables_read.push(netns),
                Err(_) if hidden_ns_read.contains(&cgroup_id) => continue,
                Err(_) => hidden_ns_read.push(cgroup_id),
            }
            for table in tables {
                if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) {
                    sockets.extend(parse(&text).into_iter().map(|(i, u, t)| (i, (u, t))));
                }
            }
        }
    }
    if sockets.is_empty() {
        return Vec::new();
    }
    // Fds and uids are read only when the tables hold a socket to match.
    let procs: Vec<Process> = owners
        .into_iter()
        .map(|(cgroup_id, pid)| socket_owners::process(cgroup_id, pid))
        .collect();
    sockets
        .into_iter()
        .filter_map(|(inode, (uid, socket))| {
            let (cgroup_id, pid) = socket_owners::owner_of(inode, uid, &procs)?;
            Some((cgroup_id, pid, socket))
        })
        .collect()
}

/// A Unix socket listening now, with the name it was bound to (as the binder gave it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixListening {
    pub cgroup_id: u64,
    pub pid: u32,
    pub name: UnixName,
}

/// The Unix listeners held by the processes of `cgroups` (id, directory) whose name
/// `wanted` keeps.
pub fn unix_listeners(
    cgroups: &[(u64, &Path)],
    wanted: impl Fn(&UnixName) -> bool,
) -> Vec<UnixListening> {
    held(cgroups, &["unix"], |text| {
        unix_listeners_in(text)
            .filter(|(_, n)| wanted(n))
            .map(|(inode, n)| (inode, None, n))
            .collect()
    })
    .into_iter()
    .map(|(cgroup_id, pid, name)| UnixListening {
        cgroup_id,
        pid,
        name,
    })
    .collect()
}

/// `__SO_ACCEPTCON` in `/proc/net/unix`'s `Flags` column: the socket listens.
const UNIX_ACCEPTCON: u32 = 0x10000;

/// (inode, name) of each listening, named socket of a `/proc/net/unix` table. Its
/// columns: `Num RefCount Protocol Flags Type St Inode Path`; the path is the rest of
/// the line (it may hold spaces), an abstract name shown with `@` for its NUL.
fn unix_listeners_in(table: &str) -> impl Iterator<Item = (u64, UnixName)> + '_ {
    table.lines().skip(1).filter_map(|line| {
        let mut rest = line;
        let mut cols = [""; 7];
        for col in &mut cols {
            rest = rest.trim_start();
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            *col = &rest[..end];
            rest = &rest[end..];
        }
        let flags = u32::from_str_radix(cols[3], 16).ok()?;
        if flags & UNIX_ACCEPTCON == 0 {
            return None;
        }
        let inode = cols[6].parse().ok()?;
        let name = match rest.trim_start() {
            "" => return None,
            path => match path.strip_prefix('@') {
                Some(abs) => UnixName::Abstract(abs.into()),
                None => UnixName::Path(path.into()),
            },
        };
        Some((inode, name))
    })
}

/// The processes of the cgroup at `dir`.
fn pids(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| {
            s.lines()
                .filter_map(|l| l.trim().parse().ok())
                .take(PIDS_PER_CGROUP)
                .collect()
        })
        .unwrap_or_default()
}

/// (inode, uid, address) of each socket in state `st` of a `/proc/net/{tcp,udp}{,6}`
/// table.
fn in_state<'a>(
    table: &'a str,
    st: &'a str,
) -> impl Iterator<Item = (u64, Option<u32>, SocketAddr)> + 'a {
    table.lines().skip(1).filter_map(move |line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.get(3) != Some(&st) {
            return None;
        }
        let addr = local_address(cols.get(1)?)?;
        let inode = cols.get(9)?.parse().ok()?;
        Some((inode, cols.get(7).and_then(|u| u.parse().ok()), addr))
    })
}

/// `0100007F:3A99` (IPv4) or 32 hex digits and a port (IPv6): the kernel prints each
/// 32-bit word of the address as a number of the host's byte order.
fn local_address(col: &str) -> Option<SocketAddr> {
    let (addr, port) = col.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| {
        u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16)
            .ok()
            .map(u32::to_ne_bytes)
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_listeners_are_read_with_their_addresses_in_host_order() {
        let w = |b: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(b));
        let v4 = format!("{}:3A99", w([127, 0, 0, 1]));
        let v6 = format!(
            "{}{}{}{}:1F90",
            w([0; 4]),
            w([0; 4]),
            w([0; 4]),
            w([0, 0, 0, 1])
        );
        let table = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             0: {v4} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n\
             1: {v4} 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0 100 0 0 10 0\n\
             2: {v6} 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1\n"
        );
        let found: Vec<_> = in_state(&table, LISTEN).collect();
        assert_eq!(
            found,
            [
                (4242, Some(0), "127.0.0.1:15001".parse().unwrap()),
                (4444, Some(0), "[::1]:8080".parse().unwrap()),
            ],
            "an established socket (st 01) is no listener"
        );
    }

    #[test]
    fn the_unix_tables_named_listeners_are_read_with_their_names() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
             ffff8881: 00000002 00000000 00010000 0001 01 5151 /var/run/app sock/app.sock\n\
             ffff8882: 00000002 00000000 00010000 0001 01 5252 @otel\n\
             ffff8883: 00000003 00000000 00000000 0001 03 5353 /var/run/app.sock\n\
             ffff8884: 00000002 00000000 00010000 0001 01 5454\n\
             ffff8885: 00000002 00000000 00010000 0005 01 5555 /sockets/db.sock\n";
        let found: Vec<_> = unix_listeners_in(table).collect();
        assert_eq!(
            found,
            [
                (5151, UnixName::Path("/var/run/app sock/app.sock".into())),
                (5252, UnixName::Abstract("otel".into())),
                (5555, UnixName::Path("/sockets/db.sock".into())),
            ],
            "a connected socket (no __SO_ACCEPTCON) and an unnamed listener are left out"
        );
    }

    #[test]
    fn a_unix_listener_of_this_process_is_found_by_its_cgroup() {
        let dir = std::env::temp_dir().join(format!("sr-unix-listening-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("app.sock");
        let _ = std::fs::remove_file(&path);
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        // A cgroup directory whose one process is this one.
        let cgroup = dir.join("cgroup");
        std::fs::create_dir_all(&cgroup).unwrap();
        std::fs::write(
            cgroup.join("cgroup.procs"),
            format!("{}\n", std::process::id()),
        )
        .unwrap();
        let name = UnixName::Path(path.display().to_string().into());
        let found = unix_listeners(&[(7, cgroup.as_path())], |n| *n == name);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            found,
            [UnixListening {
                cgroup_id: 7,
                pid: std::process::id(),
                name,
            }]
        );
    }

    #[test]
    fn a_bound_udp_receiver_is_told_from_a_connected_sender() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
             1: 0100007F:1FBD 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 5151 2 0 0\n\
             2: 0100007F:C350 0100007F:1FBD 01 00000000:00000000 00:00000000 00000000     0        0 5252 2 0 0\n";
        let found: Vec<_> = in_state(table, UDP_UNCONNECTED).collect();
        assert_eq!(found, [(5151, Some(0), "127.0.0.1:8125".parse().unwrap())]);
    }
}
