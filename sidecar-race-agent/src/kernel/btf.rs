//! Socket field offsets from the kernel's BTF (`/sys/kernel/btf/vmlinux`), for the
//! BTF tracepoint on `inet_sock_set_state`. Rust eBPF has no CO-RE, and aya does not
//! expose member offsets, so this reads the few it needs itself: struct members by
//! name, through anonymous unions and structs.

use sidecar_race_ebpf::{
    layout::{CgroupFields, MISSING, SockFields, TaskFields},
    udp::UdpConfig,
};
use thiserror::Error;

pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("not BTF data (bad magic or header)")]
    Header,
    #[error("truncated BTF data")]
    Truncated,
    #[error("BTF type kind {0} is unknown")]
    Kind(u32),
    #[error("no struct {0} in the kernel's BTF")]
    NoStruct(&'static str),
    #[error("no member {1} in struct {0} (or a bit field)")]
    NoMember(&'static str, &'static str),
}

const STRUCT: u32 = 4;
const UNION: u32 = 5;
const TYPEDEF: u32 = 8;
const VOLATILE: u32 = 9;
const CONST: u32 = 10;

#[derive(Clone, Copy)]
struct Type {
    name_off: u32,
    kind: u32,
    kind_flag: bool,
    vlen: u32,
    size_or_type: u32,
    /// Where its trailing data (members) starts in the type section.
    data: usize,
}

/// Parsed BTF data: the type table, parsed once and asked for each struct's offsets.
pub struct Btf<'a> {
    types: Vec<Type>,
    type_section: &'a [u8],
    strings: &'a [u8],
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, BtfError> {
    let bytes = b.get(at..at + 4).ok_or(BtfError::Truncated)?;
    Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
}

impl<'a> Btf<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Self, BtfError> {
        if data.len() < 24 || data[0..2] != [0x9f, 0xeb] {
            return Err(BtfError::Header);
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let (type_off, type_len) = (u32_at(data, 8)? as usize, u32_at(data, 12)? as usize);
        let (str_off, str_len) = (u32_at(data, 16)? as usize, u32_at(data, 20)? as usize);
        let section = |off: usize, len: usize| {
            data.get(hdr_len + off..hdr_len + off + len)
                .ok_or(BtfError::Truncated)
        };
        let type_section = section(type_off, type_len)?;
        let strings = section(str_off, str_len)?;
        // Type id 0 is void; ids count from 1 in section order.
        let mut types = vec![Type {
            name_off: 0,
            kind: 0,
            kind_flag: false,
            vlen: 0,
            size_or_type: 0,
            data: 0,
        }];
        let mut at = 0;
        while at < type_section.len() {
            let info = u32_at(type_section, at + 4)?;
            let t = Type {
                name_off: u32_at(type_section, at)?,
                kind: (info >> 24) & 0x1f,
                kind_flag: info >> 31 == 1,
                vlen: info & 0xffff,
                size_or_type: u32_at(type_section, at + 8)?,
                data: at + 12,
            };
            let n = t.vlen as usize;
            let extra = match t.kind {
                1 | 14 | 17 => 4,          // int, var, decl_tag
                3 => 12,                   // array
                4 | 5 | 15 | 19 => 12 * n, // struct, union, datasec, enum64
                6 | 13 => 8 * n,           // enum, func_proto
                2 | 7..=12 | 16 | 18 => 0, // ptr, fwd, typedef, modifiers, func, float, type_tag
                k => return Err(BtfError::Kind(k)),
            };
            types.push(t);
            at += 12 + extra;
        }
        Ok(Btf {
            types,
            type_section,
            strings,
        })
    }

    fn name(&self, off: u32) -> &[u8] {
        let rest = self.strings.get(off as usize..).unwrap_or(&[]);
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    }

    fn struct_named(&self, name: &'static str) -> Result<u32, BtfError> {
        (1..self.types.len() as u32)
            .find(|&id| {
                let t = self.types[id as usize];
                t.kind == STRUCT && t.vlen > 0 && self.name(t.name_off) == name.as_bytes()
            })
            .ok_or(BtfError::NoStruct(name))
    }

    /// Skips typedefs and const/volatile to the type they name.
    fn resolve(&self, mut id: u32) -> Option<Type> {
        for _ in 0..16 {
            let t = *self.types.get(id as usize)?;
            if matches!(t.kind, TYPEDEF | VOLATILE | CONST) {
                id = t.size_or_type;
            } else {
                return Some(t);
            }
        }
        None
    }

    /// Byte offset of member `name` in the struct or union `t`, looking into anonymous
    /// members; `None` for a bit field or an offset not on a byte.
    fn member(&self, t: Type, name: &[u8]) -> Option<u32> {
        for i in 0..t.vlen as usize {
            let at = t.data + 12 * i;
            let m_name = u32_at(self.type_section, at).ok()?;
            let m_type = u32_at(self.type_section, at + 4).ok()?;
            let raw = u32_at(self.type_section, at + 8).ok()?;
            let (bits, bitfield) = if t.kind_flag {
                (raw & 0xff_ffff, raw >> 24 != 0)
            } else {
                (raw, false)
            };
            let m_name = self.name(m_name);
            if m_name == name {
                return (!bitfield && bits % 8 == 0).then_some(bits / 8);
            }
            if m_name.is_empty()
                && let Some(inner) = self.resolve(m_type)
                && matches!(inner.kind, STRUCT | UNION)
                && let Some(off) = self.member(inner, name)
            {
                return Some(bits / 8 + off);
            }
        }
        None
    }

    pub(crate) fn offset(&self, st: &'static str, member: &'static str) -> Result<u16, BtfError> {
        let t = self.types[self.struct_named(st)? as usize];
        self.member(t, member.as_bytes())
            .and_then(|o| u16::try_from(o).ok())
            .ok_or(BtfError::NoMember(st, member))
    }
}

/// The socket field offsets from BTF data, relative to a `struct sock *` (which is
/// also the start of its `inet_sock`).
pub fn sock_fields(btf: &Btf) -> Result<SockFields, BtfError> {
    let common = btf.offset("sock", "__sk_common")?;
    let c = |m| Ok::<_, BtfError>(common + btf.offset("sock_common", m)?);
    if btf.offset("inet_sock", "sk")? != 0 {
        return Err(BtfError::NoMember("inet_sock", "sk"));
    }
    Ok(SockFields {
        protocol: btf.offset("sock", "sk_protocol")?,
        family: c("skc_family")?,
        sport: c("skc_num")?,
        saddr: c("skc_rcv_saddr")?,
        v6_saddr: c("skc_v6_rcv_saddr")?,
        state: c("skc_state")?,
        dport: c("skc_dport")?,
        daddr: c("skc_daddr")?,
        v6_daddr: c("skc_v6_daddr")?,
        _pad: [0; 3],
    })
}

/// The offsets that let the programs find a socket's or a task's cgroup ancestors
/// (see `programs/charge.rs`). Kernels before 6.0 keep the ancestors' ids
/// (`ancestor_ids`), later ones pointers to them (`ancestors`).
pub fn cgroup_fields(btf: &Btf) -> Result<CgroupFields, BtfError> {
    let (ancestors, ancestors_are_ids) = match btf.offset("cgroup", "ancestors") {
        Ok(off) => (off, 0),
        Err(_) => (btf.offset("cgroup", "ancestor_ids")?, 1),
    };
    Ok(CgroupFields {
        sk_cgrp: btf.offset("sock", "sk_cgrp_data")?,
        task_cgroups: btf.offset("task_struct", "cgroups")?,
        dfl_cgrp: btf.offset("css_set", "dfl_cgrp")?,
        level: btf.offset("cgroup", "level")?,
        ancestors,
        kn: btf.offset("cgroup", "kn")?,
        kn_id: btf.offset("kernfs_node", "id")?,
        ancestors_are_ids,
        // Only the BTF tracepoints of cgroups read these: without them those are not
        // attached, and budgets still charge containers.
        root: btf.offset("cgroup", "root").unwrap_or(MISSING),
        hierarchy_id: btf.offset("cgroup_root", "hierarchy_id").unwrap_or(MISSING),
        _pad: [0; 2],
    })
}

/// The `sk_buff` members the UDP refusal program reads (`sidecar_race_ebpf::udp`),
/// into the config whose tracefs offsets `layout` filled.
pub fn skb_fields(btf: &Btf, mut udp: UdpConfig) -> Result<UdpConfig, BtfError> {
    udp.head = btf.offset("sk_buff", "head")?;
    udp.network_header = btf.offset("sk_buff", "network_header")?;
    udp.transport_header = btf.offset("sk_buff", "transport_header")?;
    udp.skb_iif = btf.offset("sk_buff", "skb_iif")?;
    udp.skb_protocol = btf.offset("sk_buff", "protocol")?;
    Ok(udp)
}

/// The offsets that name a task by its process (the thread-group leader's `comm`).
pub fn task_fields(btf: &Btf) -> Result<TaskFields, BtfError> {
    Ok(TaskFields {
        group_leader: btf.offset("task_struct", "group_leader")?,
        comm: btf.offset("task_struct", "comm")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob: `u16`, and `struct sock_common { union { u32 skc_addrpair; struct {
    /// u32 skc_daddr; u32 skc_rcv_saddr; }; }; ... }` shaped as the kernel nests it.
    fn blob() -> Vec<u8> {
        let mut strings =
            b"\0u16\0u32\0sock_common\0skc_daddr\0skc_rcv_saddr\0skc_addrpair\0skc_family\0bits\0"
                .to_vec();
        let s = |name: &str, strings: &Vec<u8>| {
            let needle = [name.as_bytes(), b"\0"].concat();
            strings
                .windows(needle.len())
                .position(|w| w == needle.as_slice())
                .unwrap() as u32
        };
        let mut types = Vec::new();
        let mut ty = |name: u32, kind: u32, flag: bool, vlen: u32, st: u32, extra: &[u32]| {
            let info = (u32::from(flag) << 31) | (kind << 24) | vlen;
            for v in [name, info, st].iter().chain(extra) {
                types.extend_from_slice(&v.to_le_bytes());
            }
        };
        // 1: u16, 2: u32 (int; 4 bytes of encoding each)
        ty(s("u16", &strings), 1, false, 0, 2, &[16]);
        ty(s("u32", &strings), 1, false, 0, 4, &[32]);
        // 3: anonymous struct { u32 skc_daddr; u32 skc_rcv_saddr; }
        ty(
            0,
            STRUCT,
            false,
            2,
            8,
            &[
                s("skc_daddr", &strings),
                2,
                0,
                s("skc_rcv_saddr", &strings),
                2,
                32,
            ],
        );
        // 4: anonymous union { u32 skc_addrpair (as u32 here); struct 3; }
        ty(
            0,
            UNION,
            false,
            2,
            8,
            &[s("skc_addrpair", &strings), 2, 0, 0, 3, 0],
        );
        // 5: struct sock_common { u32 bits:4 (bit field); union 4 at 8; u16 skc_family at 16 }
        ty(
            s("sock_common", &strings),
            STRUCT,
            true,
            3,
            24,
            &[
                s("bits", &strings),
                2,
                4 << 24,
                0,
                4,
                64,
                s("skc_family", &strings),
                1,
                128,
            ],
        );
        strings.push(0);
        let mut out = vec![0x9f, 0xeb, 1, 0];
        for v in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&types);
        out.extend_from_slice(&strings);
        out
    }

    #[test]
    fn members_through_anonymous_unions_and_structs() {
        let data = blob();
        let btf = Btf::parse(&data).unwrap();
        assert_eq!(btf.offset("sock_common", "skc_daddr"), Ok(8));
        assert_eq!(btf.offset("sock_common", "skc_rcv_saddr"), Ok(12));
        assert_eq!(btf.offset("sock_common", "skc_family"), Ok(16));
        assert_eq!(
            btf.offset("sock_common", "bits"),
            Err(BtfError::NoMember("sock_common", "bits"))
        );
        assert_eq!(btf.offset("sock", "x"), Err(BtfError::NoStruct("sock")));
    }

    #[test]
    fn not_btf_is_an_error() {
        assert_eq!(Btf::parse(b"hello").err(), Some(BtfError::Header));
        let mut data = blob();
        data.truncate(30);
        assert_eq!(Btf::parse(&data).err(), Some(BtfError::Truncated));
    }

    /// The running kernel's BTF, when it has one: every field is found, the family
    /// sits where every kernel has it (right after the ports and hashes), and both ends
    /// are read from `struct sock` itself (direct loads cannot reach `inet_sock`): the
    /// local port right after the remote one in `skc_portpair`.
    #[test]
    fn this_kernels_sock() {
        let Ok(data) = std::fs::read(VMLINUX) else {
            return;
        };
        let f = sock_fields(&Btf::parse(&data).unwrap()).unwrap();
        assert!(f.family < 64 && f.state < 64, "{f:?}");
        assert!(f.protocol > f.family, "{f:?}");
        assert_eq!(f.sport, f.dport + 2, "{f:?}");
        assert!(f.saddr < 64 && f.v6_saddr < f.protocol, "{f:?}");
    }

    /// The running kernel's cgroup offsets, when it has BTF: all found, and this
    /// kernel (6.0+) keeps pointers to the ancestors.
    #[test]
    fn this_kernels_cgroup() {
        let Ok(data) = std::fs::read(VMLINUX) else {
            return;
        };
        let f = cgroup_fields(&Btf::parse(&data).unwrap()).unwrap();
        assert_eq!(f.ancestors_are_ids, 0, "{f:?}");
        assert!(f.ancestors > f.level && f.kn < f.ancestors, "{f:?}");
    }

    /// The running kernel's BTF, when it has one: both task fields are found, apart.
    #[test]
    fn this_kernels_sk_buff() {
        let Ok(data) = std::fs::read(VMLINUX) else {
            eprintln!("skipped: this kernel has no BTF");
            return;
        };
        let btf = Btf::parse(&data).unwrap();
        let f = skb_fields(&btf, UdpConfig::UNSET).unwrap();
        assert!(f.head > f.transport_header && f.network_header == f.transport_header + 2);
        assert!(f.skb_protocol < f.transport_header, "{f:?}");
    }

    #[test]
    fn this_kernels_task() {
        let Ok(data) = std::fs::read(VMLINUX) else {
            return;
        };
        let f = task_fields(&Btf::parse(&data).unwrap()).unwrap();
        assert!(f.group_leader > 0 && f.comm > 0, "{f:?}");
        assert!(f.group_leader.abs_diff(f.comm) >= 8, "{f:?}");
    }
}
