//! Decoding ring-buffer records into typed kernel facts: the one place that knows
//! the byte layout, with length checks.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use sidecar_race_ebpf::abi::{
    self, AF_INET, AF_INET6, CGROUP_EVENT_SIZE, CgroupEvent, Header, SOCKET_EVENT_SIZE,
    SocketEvent, flags, kind,
};
use sidecar_race_ebpf::unix::{UNIX_EVENT_SIZE, UnixEvent};
use thiserror::Error;

pub use crate::comm::Comm;
pub use crate::unix_events::UnixFact;
use crate::unix_events::{RecentNames, unix_fact};

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than the {1}-byte header")]
    Short(usize, usize),
    #[error("record kind {0} is unknown")]
    UnknownKind(u8),
    #[error("record of kind {kind} has {len} bytes, expected {expected}")]
    WrongSize {
        kind: u8,
        len: usize,
        expected: usize,
    },
}

/// The kinds of kernel event, with the names users see (`trace --kinds`, JSON `kind`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Kind {
    Refused,
    Listen,
    ListenClosed,
    CgroupCreated,
    CgroupRemoved,
    UnixRefused,
    UnixListen,
    UnixListenClosed,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Refused,
        Kind::Listen,
        Kind::ListenClosed,
        Kind::CgroupCreated,
        Kind::CgroupRemoved,
        Kind::UnixRefused,
        Kind::UnixListen,
        Kind::UnixListenClosed,
    ];

    pub fn name(self) -> &'static str {
        self.into()
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        name.parse().ok()
    }

    /// The ABI code of this kind.
    pub fn code(self) -> u8 {
        match self {
            Kind::Refused => kind::REFUSED,
            Kind::Listen => kind::LISTEN,
            Kind::ListenClosed => kind::LISTEN_CLOSED,
            Kind::CgroupCreated => kind::CGROUP_CREATED,
            Kind::CgroupRemoved => kind::CGROUP_REMOVED,
            Kind::UnixRefused => kind::UNIX_REFUSED,
            Kind::UnixListen => kind::UNIX_LISTEN,
            Kind::UnixListenClosed => kind::UNIX_LISTEN_CLOSED,
        }
    }
}

/// The task behind a socket event, as the kernel saw it: its process and cgroup (who
/// the event belongs to, pod and container, is the inventory's `Attribution`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    pub cgroup_id: u64,
    pub pid: u32,
    pub tgid: u32,
    pub comm: Comm,
}

/// `refused`, `listen`, `listen_closed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketFact {
    pub ts_boot_ns: u64,
    pub owner: Sender,
    pub ipv6: bool,
    /// The client end for `refused`; the listening address for listeners.
    pub src: SocketAddr,
    /// The destination as dialed (`refused` only).
    pub dst: Option<SocketAddr>,
    /// Where the local stack refused the SYN, when that differs from `dst` (a NAT redirect).
    pub local_dst: Option<SocketAddr>,
    /// When the listen started, boot ns; 0 when unknown, and for refusals.
    pub start_boot_ns: u64,
}

/// `cgroup_created`, `cgroup_removed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupFact {
    pub ts_boot_ns: u64,
    pub cgroup_id: u64,
    pub level: u32,
    /// Relative to the cgroup2 mount, starting with `/`.
    pub path: String,
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelEvent {
    Refused(SocketFact),
    Listen(SocketFact),
    ListenClosed(SocketFact),
    CgroupCreated(CgroupFact),
    CgroupRemoved(CgroupFact),
    UnixRefused(UnixFact),
    UnixListen(UnixFact),
    UnixListenClosed(UnixFact),
}

impl KernelEvent {
    pub fn kind(&self) -> Kind {
        match self {
            KernelEvent::Refused(_) => Kind::Refused,
            KernelEvent::Listen(_) => Kind::Listen,
            KernelEvent::ListenClosed(_) => Kind::ListenClosed,
            KernelEvent::CgroupCreated(_) => Kind::CgroupCreated,
            KernelEvent::CgroupRemoved(_) => Kind::CgroupRemoved,
            KernelEvent::UnixRefused(_) => Kind::UnixRefused,
            KernelEvent::UnixListen(_) => Kind::UnixListen,
            KernelEvent::UnixListenClosed(_) => Kind::UnixListenClosed,
        }
    }

    pub fn ts_boot_ns(&self) -> u64 {
        match self {
            KernelEvent::Refused(s) | KernelEvent::Listen(s) | KernelEvent::ListenClosed(s) => {
                s.ts_boot_ns
            }
            KernelEvent::CgroupCreated(c) | KernelEvent::CgroupRemoved(c) => c.ts_boot_ns,
            KernelEvent::UnixRefused(u)
            | KernelEvent::UnixListen(u)
            | KernelEvent::UnixListenClosed(u) => u.ts_boot_ns,
        }
    }

    pub fn cgroup_id(&self) -> u64 {
        match self {
            KernelEvent::Refused(s) | KernelEvent::Listen(s) | KernelEvent::ListenClosed(s) => {
                s.owner.cgroup_id
            }
            KernelEvent::CgroupCreated(c) | KernelEvent::CgroupRemoved(c) => c.cgroup_id,
            KernelEvent::UnixRefused(u)
            | KernelEvent::UnixListen(u)
            | KernelEvent::UnixListenClosed(u) => u.owner.cgroup_id,
        }
    }
}

/// Decodes one ring-buffer record.
pub fn decode(bytes: &[u8]) -> Result<KernelEvent, DecodeError> {
    Decoder::default().decode(bytes)
}

/// Decodes a stream of records, sharing what repeats between them (Unix socket names).
#[derive(Debug, Default)]
pub struct Decoder {
    names: RecentNames,
}

impl Decoder {
    pub fn decode(&mut self, bytes: &[u8]) -> Result<KernelEvent, DecodeError> {
        if bytes.len() < abi::HEADER_SIZE {
            return Err(DecodeError::Short(bytes.len(), abi::HEADER_SIZE));
        }
        let header: Header = read(bytes);
        let expect = |expected: usize| {
            if bytes.len() == expected {
                Ok(())
            } else {
                Err(DecodeError::WrongSize {
                    kind: header.kind,
                    len: bytes.len(),
                    expected,
                })
            }
        };
        match header.kind {
            kind::REFUSED | kind::LISTEN | kind::LISTEN_CLOSED => {
                expect(SOCKET_EVENT_SIZE)?;
                let fact = socket_fact(&read::<SocketEvent>(bytes));
                Ok(match header.kind {
                    kind::REFUSED => KernelEvent::Refused(fact),
                    kind::LISTEN => KernelEvent::Listen(fact),
                    _ => KernelEvent::ListenClosed(fact),
                })
            }
            kind::CGROUP_CREATED | kind::CGROUP_REMOVED => {
                expect(CGROUP_EVENT_SIZE)?;
                let fact = cgroup_fact(&read::<CgroupEvent>(bytes));
                Ok(if header.kind == kind::CGROUP_CREATED {
                    KernelEvent::CgroupCreated(fact)
                } else {
                    KernelEvent::CgroupRemoved(fact)
                })
            }
            kind::UNIX_REFUSED | kind::UNIX_LISTEN | kind::UNIX_LISTEN_CLOSED => {
                expect(UNIX_EVENT_SIZE)?;
                let ev = read::<UnixEvent>(bytes);
                let fact = unix_fact(&ev, owner(&ev.owner), &mut self.names);
                Ok(match header.kind {
                    kind::UNIX_REFUSED => KernelEvent::UnixRefused(fact),
                    kind::UNIX_LISTEN => KernelEvent::UnixListen(fact),
                    _ => KernelEvent::UnixListenClosed(fact),
                })
            }
            other => Err(DecodeError::UnknownKind(other)),
        }
    }
}

/// Reads a `#[repr(C)]` plain-data record from the front of `bytes`.
fn read<T: Copy>(bytes: &[u8]) -> T {
    assert!(bytes.len() >= size_of::<T>());
    // SAFETY: length checked; T is a repr(C) struct of integers and byte arrays, valid
    // for every bit pattern; read_unaligned because ring records are only 8-aligned.
    unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) }
}

fn socket_fact(ev: &SocketEvent) -> SocketFact {
    let ipv6 = match ev.family {
        AF_INET6 => true,
        AF_INET => false,
        // Kernel without a family field: v4-mapped addresses are IPv4 sockets.
        _ => Ipv6Addr::from(ev.src_addr).to_ipv4_mapped().is_none(),
    };
    let addr = |a: [u8; 16], port: u16| SocketAddr::new(ip(a, ipv6), port);
    let is_refused = ev.header.kind == kind::REFUSED;
    let dst = is_refused.then(|| addr(ev.dst_addr, ev.dst_port));
    let local_dst = (is_refused && ev.header.flags & flags::HAS_LOCAL_DST != 0)
        .then(|| addr(ev.local_dst_addr, ev.local_dst_port))
        .filter(|local| Some(*local) != dst);
    SocketFact {
        ts_boot_ns: ev.header.ts_boot_ns,
        owner: owner(&ev.owner),
        ipv6,
        src: addr(ev.src_addr, ev.src_port),
        dst,
        local_dst,
        start_boot_ns: ev.start_boot_ns,
    }
}

fn owner(o: &abi::Owner) -> Sender {
    Sender {
        cgroup_id: o.cgroup_id,
        pid: o.pid,
        tgid: o.tgid,
        comm: Comm::from_c_bytes(&o.comm),
    }
}

/// IPv4 sockets carry v4-mapped addresses; IPv6 sockets keep theirs as they are
/// (a v4-mapped destination dialed from an IPv6 socket stays `::ffff:a.b.c.d`).
fn ip(a: [u8; 16], ipv6: bool) -> IpAddr {
    let v6 = Ipv6Addr::from(a);
    match (ipv6, v6.to_ipv4_mapped()) {
        (false, Some(v4)) => IpAddr::V4(v4),
        (false, None) => IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
        (true, _) => IpAddr::V6(v6),
    }
}

fn cgroup_fact(ev: &CgroupEvent) -> CgroupFact {
    let len = (ev.path_len as usize).min(ev.path.len());
    CgroupFact {
        ts_boot_ns: ev.header.ts_boot_ns,
        cgroup_id: ev.cgroup_id,
        level: ev.level,
        path: c_string(&ev.path[..len]),
        truncated: ev.header.flags & flags::PATH_TRUNCATED != 0,
    }
}

fn c_string(b: &[u8]) -> String {
    String::from_utf8_lossy(until_nul(b)).into_owned()
}

/// A kernel string field's bytes up to its first NUL (all of them when it has none).
pub(crate) fn until_nul(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

#[cfg(test)]
mod tests {
    use super::*;
    use sidecar_race_ebpf::abi::{Owner as AbiOwner, v4_mapped};

    fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: plain-data repr(C) value; reading its bytes is fine.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    fn comm(s: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..s.len()].copy_from_slice(s.as_bytes());
        c
    }

    fn refused_v4(local: Option<([u8; 4], u16)>) -> SocketEvent {
        let mut ev = SocketEvent::default();
        ev.header.kind = kind::REFUSED;
        ev.header.flags = flags::OWNER_FROM_START;
        ev.header.ts_boot_ns = 123_456_789;
        ev.owner = AbiOwner {
            cgroup_id: 4242,
            pid: 77,
            tgid: 70,
            comm: comm("app"),
        };
        ev.family = AF_INET;
        ev.src_addr = v4_mapped([10, 200, 0, 2]);
        ev.src_port = 40_000;
        ev.dst_addr = v4_mapped([10, 96, 0, 10]);
        ev.dst_port = 80;
        if let Some((a, p)) = local {
            ev.header.flags |= flags::HAS_LOCAL_DST;
            ev.local_dst_addr = v4_mapped(a);
            ev.local_dst_port = p;
        }
        ev
    }

    /// A `refused` record of a REDIRECT case, byte by byte as the kernel lays it out
    /// (little-endian), decoded field by field.
    #[test]
    fn decodes_recorded_redirect_refusal() {
        let recorded: [u8; SOCKET_EVENT_SIZE] = [
            1, 3, 0, 0, 0, 0, 0, 0, 21, 205, 91, 7, 0, 0, 0, 0, // header: refused, flags, ts
            146, 16, 0, 0, 0, 0, 0, 0, 77, 0, 0, 0, 70, 0, 0,
            0, // cgroup 4242, pid 77, tgid 70
            b'a', b'p', b'p', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // comm
            2, 0, 64, 156, 80, 0, 153, 58, // family 2, sport 40000, dport 80, local 15001
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 10, 200, 0, 2, // src
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 10, 96, 0, 10, // dst
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 127, 0, 0, 1, // local_dst
            0, 0, 0, 0, 0, 0, 0, 0, // start
        ];
        assert_eq!(
            bytes_of(&refused_v4(Some(([127, 0, 0, 1], 15001)))),
            recorded
        );
        let KernelEvent::Refused(f) = decode(&recorded).unwrap() else {
            panic!()
        };
        assert_eq!(
            f.owner,
            Sender {
                cgroup_id: 4242,
                pid: 77,
                tgid: 70,
                comm: "app".into()
            }
        );
        assert_eq!(f.src.to_string(), "10.200.0.2:40000");
        assert_eq!(f.dst.unwrap().to_string(), "10.96.0.10:80");
        assert_eq!(f.local_dst.unwrap().to_string(), "127.0.0.1:15001");
        assert_eq!(f.ts_boot_ns, 123_456_789);
    }

    #[test]
    fn local_dst_equal_to_dst_is_not_a_redirect() {
        let mut ev = refused_v4(Some(([10, 96, 0, 10], 80)));
        ev.dst_port = 80;
        let KernelEvent::Refused(f) = decode(&bytes_of(&ev)).unwrap() else {
            panic!()
        };
        assert_eq!(f.local_dst, None);
        let KernelEvent::Refused(f) = decode(&bytes_of(&refused_v4(None))).unwrap() else {
            panic!()
        };
        assert_eq!(f.local_dst, None);
    }

    #[test]
    fn ipv6_and_v4_mapped_render_as_dialed() {
        let mut ev = refused_v4(None);
        ev.family = AF_INET6;
        ev.dst_addr = Ipv6Addr::LOCALHOST.octets();
        ev.src_addr = Ipv6Addr::LOCALHOST.octets();
        let KernelEvent::Refused(f) = decode(&bytes_of(&ev)).unwrap() else {
            panic!()
        };
        assert_eq!(f.dst.unwrap().to_string(), "[::1]:80");
        ev.dst_addr = v4_mapped([127, 0, 0, 1]);
        let KernelEvent::Refused(f) = decode(&bytes_of(&ev)).unwrap() else {
            panic!()
        };
        assert_eq!(f.dst.unwrap().to_string(), "[::ffff:127.0.0.1]:80");
    }

    #[test]
    fn listener_has_no_destination() {
        let mut ev = refused_v4(None);
        ev.header.kind = kind::LISTEN;
        ev.src_addr = v4_mapped([0, 0, 0, 0]);
        ev.src_port = 15001;
        let KernelEvent::Listen(f) = decode(&bytes_of(&ev)).unwrap() else {
            panic!()
        };
        assert_eq!(f.src.to_string(), "0.0.0.0:15001");
        assert_eq!(f.dst, None);
    }

    #[test]
    fn cgroup_round_trip_and_truncation_flag() {
        let path = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice";
        let mut ev = CgroupEvent {
            header: Header {
                kind: kind::CGROUP_CREATED,
                flags: 0,
                _pad: [0; 6],
                ts_boot_ns: 9,
            },
            cgroup_id: 99,
            level: 3,
            path_len: path.len() as u32,
            path: [0; abi::CGROUP_PATH_LEN],
        };
        ev.path[..path.len()].copy_from_slice(path.as_bytes());
        let KernelEvent::CgroupCreated(f) = decode(&bytes_of(&ev)).unwrap() else {
            panic!()
        };
        assert_eq!(
            (f.cgroup_id, f.level, f.path.as_str(), f.truncated),
            (99, 3, path, false)
        );
        ev.header.kind = kind::CGROUP_REMOVED;
        ev.header.flags = flags::PATH_TRUNCATED;
        let KernelEvent::CgroupRemoved(f) = decode(&bytes_of(&ev)).unwrap() else {
            panic!()
        };
        assert!(f.truncated);
    }

    #[test]
    fn wrong_sizes_and_kinds_are_rejected() {
        let ev = bytes_of(&refused_v4(None));
        assert_eq!(decode(&ev[..10]), Err(DecodeError::Short(10, 16)));
        assert_eq!(
            decode(&ev[..100]),
            Err(DecodeError::WrongSize {
                kind: 1,
                len: 100,
                expected: SOCKET_EVENT_SIZE
            })
        );
        let mut bad = ev.clone();
        bad[0] = 200;
        assert_eq!(decode(&bad), Err(DecodeError::UnknownKind(200)));
        let mut cg = ev.clone();
        cg[0] = kind::CGROUP_CREATED;
        assert!(matches!(decode(&cg), Err(DecodeError::WrongSize { .. })));
    }

    #[test]
    fn kind_names_round_trip() {
        for k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()), Some(k));
        }
        assert_eq!(Kind::from_name("nope"), None);
    }
}
