//! Decoding one ring-buffer record: its header says the kind, its length must be that
//! kind's record size, and the fact is read from the bytes as the kernel laid them out.

use sidecar_race_ebpf::abi::{
    self, CGROUP_EVENT_SIZE, CgroupEvent, Header, SOCKET_EVENT_SIZE, SocketEvent, kind,
};
use sidecar_race_ebpf::unix::{UNIX_EVENT_SIZE, UnixEvent};
use thiserror::Error;

use super::{
    cgroup::cgroup_fact,
    kernel_event::KernelEvent,
    sender::Sender,
    socket::socket_fact,
    unix::{RecentNames, unix_fact},
};

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
            kind::REFUSED | kind::LISTEN | kind::LISTEN_CLOSED | kind::UDP_REFUSED => {
                expect(SOCKET_EVENT_SIZE)?;
                let fact = socket_fact(&read::<SocketEvent>(bytes));
                Ok(match header.kind {
                    kind::REFUSED => KernelEvent::Refused(fact),
                    kind::UDP_REFUSED => KernelEvent::UdpRefused(fact),
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
                let fact = unix_fact(&ev, Sender::from(&ev.owner), &mut self.names);
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

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::*;
    use sidecar_race_ebpf::abi::{AF_INET, AF_INET6, Owner as AbiOwner, flags, v4_mapped};

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
}
