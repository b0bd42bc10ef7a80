//! Decoding the kernel's Unix socket records (`unix_refused`, `unix_listen`,
//! `unix_listen_closed`) into typed facts; called from `events::decode`.

use sidecar_race_ebpf::unix::{ECONNREFUSED, ENOENT, UnixEvent, hook};

use crate::events::Owner;

/// A Unix socket's name as bound or dialed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnixName {
    /// A path in the filesystem, as the process gave it.
    Path(String),
    /// An abstract name (Linux), without its leading NUL; shown as `@name`.
    Abstract(String),
    /// No name (an unbound socket, or the path could not be read).
    Unnamed,
}

impl UnixName {
    /// From `sun_path`'s used bytes: a leading NUL makes it abstract (every byte after
    /// it is the name); a path ends at its first NUL.
    pub fn from_sun_path(bytes: &[u8]) -> UnixName {
        match bytes.split_first() {
            None => UnixName::Unnamed,
            Some((0, name)) => UnixName::Abstract(String::from_utf8_lossy(name).into_owned()),
            Some(_) => {
                let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
                UnixName::Path(String::from_utf8_lossy(&bytes[..end]).into_owned())
            }
        }
    }

    pub fn is_abstract(&self) -> bool {
        matches!(self, UnixName::Abstract(_))
    }
}

impl std::fmt::Display for UnixName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnixName::Path(p) => f.write_str(p),
            UnixName::Abstract(n) => write!(f, "@{n}"),
            UnixName::Unnamed => f.write_str("(unnamed)"),
        }
    }
}

/// Why a Unix connect or send was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum UnixRefusal {
    /// `ENOENT`: no socket file at the path (not bound yet, or unlinked).
    NoSuchPath,
    /// `ECONNREFUSED`: a socket file nothing listens on (a stale file after a crash),
    /// or an abstract name nothing holds.
    NoListener,
}

impl UnixRefusal {
    pub fn from_errno(errno: i32) -> Option<UnixRefusal> {
        match errno {
            ENOENT => Some(UnixRefusal::NoSuchPath),
            ECONNREFUSED => Some(UnixRefusal::NoListener),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// How the kernel saw the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum UnixHook {
    Connect,
    Sendmsg,
    SyscallConnect,
    SyscallSendto,
    Listener,
}

impl UnixHook {
    fn from_code(code: u8) -> Option<UnixHook> {
        Some(match code {
            hook::CONNECT => UnixHook::Connect,
            hook::SENDMSG => UnixHook::Sendmsg,
            hook::SYSCALL_CONNECT => UnixHook::SyscallConnect,
            hook::SYSCALL_SENDTO => UnixHook::SyscallSendto,
            hook::LISTENER => UnixHook::Listener,
            _ => return None,
        })
    }
}

/// `unix_refused`, `unix_listen`, `unix_listen_closed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixFact {
    pub ts_boot_ns: u64,
    pub owner: Owner,
    pub name: UnixName,
    /// `unix_refused` only.
    pub refusal: Option<UnixRefusal>,
    /// `stream`, `dgram`, `seqpacket`; `None` when the hook cannot tell.
    pub sock_type: Option<&'static str>,
    /// The socket's network namespace inode (abstract names belong to it).
    pub netns: Option<u32>,
    /// The socket file's inode (listeners on a path).
    pub inode: Option<u64>,
    pub hook: Option<UnixHook>,
    /// When the listener started, boot ns; 0 when unknown.
    pub start_boot_ns: u64,
}

pub fn unix_fact(ev: &UnixEvent, owner: Owner) -> UnixFact {
    let len = usize::from(ev.path_len).min(ev.path.len());
    UnixFact {
        ts_boot_ns: ev.header.ts_boot_ns,
        owner,
        name: UnixName::from_sun_path(&ev.path[..len]),
        refusal: UnixRefusal::from_errno(ev.error),
        sock_type: match ev.sock_type {
            1 => Some("stream"),
            2 => Some("dgram"),
            5 => Some("seqpacket"),
            _ => None,
        },
        netns: (ev.netns != 0).then_some(ev.netns),
        inode: (ev.inode != 0).then_some(ev.inode),
        hook: UnixHook::from_code(ev.hook),
        start_boot_ns: ev.start_boot_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_end_at_their_nul_and_abstract_names_keep_every_byte() {
        assert_eq!(
            UnixName::from_sun_path(b"/var/run/dapr/app.sock\0\0garbage"),
            UnixName::Path("/var/run/dapr/app.sock".into())
        );
        let abs = UnixName::from_sun_path(b"\0otel\0x");
        assert_eq!(abs, UnixName::Abstract("otel\0x".into()));
        assert!(abs.is_abstract());
        assert_eq!(UnixName::Abstract("otel".into()).to_string(), "@otel");
        assert_eq!(UnixName::from_sun_path(b""), UnixName::Unnamed);
    }

    #[test]
    fn only_enoent_and_econnrefused_are_refusals() {
        assert_eq!(UnixRefusal::from_errno(2), Some(UnixRefusal::NoSuchPath));
        assert_eq!(UnixRefusal::from_errno(111), Some(UnixRefusal::NoListener));
        assert_eq!(UnixRefusal::from_errno(13), None);
        assert_eq!(UnixRefusal::NoSuchPath.name(), "no_such_path");
    }
}
