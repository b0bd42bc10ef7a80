//! Property tests of the parsers of kernel input: ring-buffer records and tracefs
//! `format` files. Any input gets an answer (a fact or a typed error), never a panic,
//! and well-formed input decodes to what was encoded. Case counts are bounded so the
//! set runs in seconds in debug builds.

use std::net::SocketAddr;

use proptest::prelude::*;
use sidecar_race_agent::ingest::events::UnixName;
use sidecar_race_agent::{
    ingest::events::{DecodeError, KernelEvent, decode},
    kernel::{
        layout::{TRACEPOINTS, build},
        tracefs::{EventFormat, TracefsError, parse_format},
    },
};
use sidecar_race_ebpf::{
    abi::{
        self, AF_INET, AF_INET6, CGROUP_EVENT_SIZE, CgroupEvent, Header, SOCKET_EVENT_SIZE,
        SocketEvent, flags, kind,
    },
    unix::{UNIX_EVENT_SIZE, UnixEvent},
};

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: plain-data repr(C) value; reading its bytes is fine.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        ..ProptestConfig::default()
    }
}

prop_compose! {
    fn socket_event()(
        k in prop::sample::select(vec![kind::REFUSED, kind::LISTEN, kind::LISTEN_CLOSED, kind::UDP_REFUSED]),
        fl in any::<u8>(),
        ts in any::<u64>(),
        cgroup_id in any::<u64>(),
        pid in any::<u32>(),
        tgid in any::<u32>(),
        comm in any::<[u8; 16]>(),
        family in prop_oneof![Just(AF_INET), Just(AF_INET6), any::<u16>()],
        ports in any::<(u16, u16, u16)>(),
        addrs in any::<([u8; 16], [u8; 16], [u8; 16])>(),
        start in any::<u64>(),
    ) -> SocketEvent {
        let mut ev = SocketEvent::default();
        ev.header.kind = k;
        ev.header.flags = fl;
        ev.header.ts_boot_ns = ts;
        ev.owner.cgroup_id = cgroup_id;
        ev.owner.pid = pid;
        ev.owner.tgid = tgid;
        ev.owner.comm = comm;
        ev.family = family;
        (ev.src_port, ev.dst_port, ev.local_dst_port) = ports;
        (ev.src_addr, ev.dst_addr, ev.local_dst_addr) = addrs;
        ev.start_boot_ns = start;
        ev
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any bytes: a fact only for a known kind at exactly its size, else a typed error.
    #[test]
    fn any_bytes_decode_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..700)) {
        match decode(&bytes) {
            Ok(ev) => {
                let size = match ev {
                    KernelEvent::Refused(_) | KernelEvent::UdpRefused(_) | KernelEvent::Listen(_) | KernelEvent::ListenClosed(_) => SOCKET_EVENT_SIZE,
                    KernelEvent::CgroupCreated(_) | KernelEvent::CgroupRemoved(_) => CGROUP_EVENT_SIZE,
                    KernelEvent::UnixRefused(_) | KernelEvent::UnixListen(_) | KernelEvent::UnixListenClosed(_) => UNIX_EVENT_SIZE,
                };
                prop_assert_eq!(bytes.len(), size);
                prop_assert_eq!(ev.kind().code(), bytes[0]);
            }
            Err(DecodeError::Short(len, header)) => {
                prop_assert_eq!(len, bytes.len());
                prop_assert!(len < header);
            }
            Err(DecodeError::UnknownKind(k)) => prop_assert_eq!(k, bytes[0]),
            Err(DecodeError::WrongSize { len, expected, .. }) => {
                prop_assert_eq!(len, bytes.len());
                prop_assert_ne!(len, expected);
            }
        }
    }

    /// A Unix socket record of any content decodes: a path ends at its first NUL, an
    /// abstract name keeps every byte after its leading NUL, within `path_len`.
    #[test]
    fn unix_records_round_trip(
        k in prop::sample::select(vec![kind::UNIX_REFUSED, kind::UNIX_LISTEN, kind::UNIX_LISTEN_CLOSED]),
        path in prop::collection::vec(any::<u8>(), 108),
        path_len in any::<u16>(),
        error in any::<i32>(),
        cgroup_id in any::<u64>(),
    ) {
        let mut ev = UnixEvent {
            header: Header { kind: k, ..Header::default() },
            owner: abi::Owner { cgroup_id, ..abi::Owner::default() },
            start_boot_ns: 0,
            inode: 0,
            netns: 0,
            error,
            path_len,
            sock_type: 0,
            hook: 0,
            _pad: [0; 7],
            path: [0; 108],
        };
        ev.path.copy_from_slice(&path);
        let decoded = decode(&bytes_of(&ev)).expect("a well-sized unix record decodes");
        prop_assert_eq!(decoded.kind().code(), k);
        prop_assert_eq!(decoded.cgroup_id(), cgroup_id);
        let (KernelEvent::UnixRefused(f) | KernelEvent::UnixListen(f) | KernelEvent::UnixListenClosed(f)) = decoded else {
            unreachable!("a unix kind");
        };
        let used = &path[..usize::from(path_len).min(108)];
        match f.name {
            UnixName::Unnamed => prop_assert!(used.is_empty()),
            UnixName::Abstract(n) => {
                prop_assert_eq!(used[0], 0);
                prop_assert_eq!(&*n, &*String::from_utf8_lossy(&used[1..]));
            }
            UnixName::Path(p) => {
                prop_assert_ne!(used[0], 0);
                prop_assert!(!p.contains('\0'));
            }
        }
    }

    /// A socket record of any content decodes to the same numbers it carries.
    #[test]
    fn socket_records_round_trip(ev in socket_event()) {
        let bytes = bytes_of(&ev);
        let decoded = decode(&bytes).expect("a well-sized socket record decodes");
        prop_assert_eq!(decoded.kind().code(), ev.header.kind);
        prop_assert_eq!(decoded.ts_boot_ns(), ev.header.ts_boot_ns);
        prop_assert_eq!(decoded.cgroup_id(), ev.owner.cgroup_id);
        let (KernelEvent::Refused(f) | KernelEvent::UdpRefused(f) | KernelEvent::Listen(f) | KernelEvent::ListenClosed(f)) = decoded else {
            unreachable!("a socket kind");
        };
        prop_assert_eq!(f.owner.pid, ev.owner.pid);
        prop_assert_eq!(f.owner.tgid, ev.owner.tgid);
        prop_assert!(f.owner.comm.chars().count() <= abi::COMM_LEN);
        prop_assert!(!f.owner.comm.contains('\0'));
        prop_assert_eq!(f.src.port(), ev.src_port);
        prop_assert_eq!(f.start_boot_ns, ev.start_boot_ns);
        let refused = matches!(ev.header.kind, kind::REFUSED | kind::UDP_REFUSED);
        prop_assert_eq!(f.dst.map(|d| d.port()), refused.then_some(ev.dst_port));
        if let Some(local) = f.local_dst {
            prop_assert!(refused && ev.header.flags & flags::HAS_LOCAL_DST != 0);
            prop_assert_eq!(local.port(), ev.local_dst_port);
            prop_assert_ne!(Some(local), f.dst, "a local destination equal to dst is not a redirect");
        }
        let same_family = |a: SocketAddr| a.is_ipv6() == f.ipv6;
        prop_assert!(same_family(f.src) && f.dst.is_none_or(same_family) && f.local_dst.is_none_or(same_family));
    }

    /// A cgroup record with any path length (even one beyond the buffer) gives a path
    /// no longer than the buffer, cut at the first NUL.
    #[test]
    fn cgroup_records_never_read_past_the_path(
        created in any::<bool>(),
        path_len in prop_oneof![0u32..=600, any::<u32>()],
        path in prop::collection::vec(any::<u8>(), abi::CGROUP_PATH_LEN),
        id in any::<u64>(),
        level in any::<u32>(),
        fl in any::<u8>(),
    ) {
        let mut ev = CgroupEvent {
            header: Header::default(),
            cgroup_id: 0,
            level: 0,
            path_len: 0,
            path: [0; abi::CGROUP_PATH_LEN],
        };
        ev.header.kind = if created { kind::CGROUP_CREATED } else { kind::CGROUP_REMOVED };
        ev.header.flags = fl;
        ev.cgroup_id = id;
        ev.level = level;
        ev.path_len = path_len;
        ev.path.copy_from_slice(&path);
        let (KernelEvent::CgroupCreated(c) | KernelEvent::CgroupRemoved(c)) = decode(&bytes_of(&ev)).expect("decodes") else {
            unreachable!("a cgroup kind");
        };
        prop_assert_eq!(c.cgroup_id, id);
        prop_assert_eq!(c.level, level);
        prop_assert_eq!(c.truncated, fl & flags::PATH_TRUNCATED != 0);
        prop_assert!(!c.path.contains('\0'));
        let visible = (path_len as usize).min(abi::CGROUP_PATH_LEN);
        let end = path[..visible].iter().position(|&b| b == 0).unwrap_or(visible);
        prop_assert_eq!(c.path, String::from_utf8_lossy(&path[..end]).into_owned());
    }
}

/// One `field:` line as tracefs prints it.
fn field_line(decl: &str, offset: u16, size: u16) -> String {
    format!("\tfield:{decl};\toffset:{offset};\tsize:{size};\tsigned:0;")
}

proptest! {
    #![proptest_config(config())]

    /// Any text: a format or a `Malformed` error naming the event, never a panic.
    #[test]
    fn any_format_text_parses_or_fails_cleanly(text in "(\\PC|\n|\t|;|:|field|offset|size|signed|\\[|\\])*") {
        match parse_format("sock:inet_sock_set_state", &text) {
            Ok(f) => prop_assert!(!f.fields.is_empty()),
            Err(TracefsError::Malformed { event, .. }) => prop_assert_eq!(event, "sock:inet_sock_set_state"),
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }

    /// Well-formed field lines give back every field's name, offset and size, and the
    /// layout built from them takes offsets only from fields of the expected size.
    #[test]
    fn field_lines_round_trip(fields in prop::collection::btree_map("[a-z_][a-z0-9_]{0,12}", (any::<u16>(), prop::sample::select(vec![1u16, 2, 4, 8, 16, 28, 3]), any::<bool>()), 1..12)) {
        let mut text = String::from("name: x\nID: 1\nformat:\n");
        for (name, (offset, size, array)) in &fields {
            let decl = if *array { format!("__u8 {name}[{size}]") } else { format!("unsigned long {name}") };
            text.push_str(&field_line(&decl, *offset, *size));
            text.push('\n');
        }
        text.push_str("\nprint fmt: \"x\"\n");
        let parsed = parse_format("t", &text).expect("well-formed");
        prop_assert_eq!(parsed.fields.len(), fields.len());
        for (name, (offset, size, _)) in &fields {
            let f = parsed.field(name).expect("every field is found");
            prop_assert_eq!((f.offset, f.size), (*offset, *size));
        }
        // Every tracepoint gets this format: never a panic; usable only when each field
        // it needs is there with its size.
        let layout = build(|_| Ok::<EventFormat, TracefsError>(parsed.clone()));
        for tp in TRACEPOINTS {
            let needed: &[(&str, u16)] = match tp.name {
                "inet_sock_set_state" => &[("skaddr", 8), ("oldstate", 4), ("newstate", 4), ("sport", 2), ("dport", 2), ("family", 2), ("protocol", 2), ("saddr_v6", 16), ("daddr_v6", 16)],
                "tcp_receive_reset" => &[("skaddr", 8), ("sport", 2), ("saddr_v6", 16)],
                "tcp_send_reset" => &[("skaddr", 8), ("saddr", 28), ("daddr", 28)],
                _ => &[("root", 4), ("level", 4), ("id", 8), ("path", 4)],
            };
            let has_all = needed.iter().all(|(n, s)| fields.get(*n).is_some_and(|(_, size, _)| size == s));
            prop_assert_eq!(layout.is_usable(tp.program), has_all, "{}", tp.name);
        }
    }
}
