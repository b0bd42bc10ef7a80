//! The kinds of kernel event, by the names users see and the ABI codes the kernel
//! writes and counts them by.

use sidecar_race_ebpf::abi::kind;

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
    UdpRefused,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Refused,
        Kind::Listen,
        Kind::ListenClosed,
        Kind::CgroupCreated,
        Kind::CgroupRemoved,
        Kind::UnixRefused,
        Kind::UnixListen,
        Kind::UnixListenClosed,
        Kind::UdpRefused,
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
            Kind::UdpRefused => kind::UDP_REFUSED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_round_trip() {
        for k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()), Some(k));
        }
        assert_eq!(Kind::from_name("nope"), None);
    }
}
