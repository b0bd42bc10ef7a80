//! Decoding the kernel's Unix socket records (`unix_refused`, `unix_listen`,
//! `unix_listen_closed`) into typed facts; called from [`super::decode`].

use sidecar_race_ebpf::unix::{ECONNREFUSED, ENOENT, UnixEvent, hook};

use super::sender::Sender;
use crate::names::UnixName;

/// The last few names decoded, by their raw bytes. A refusal storm retries the same
/// one or two paths: sharing the decoded name saves an allocation and a UTF-8 pass per
/// record (the record path of a Unix refusal allocated nothing else).
#[derive(Debug, Default)]
pub struct RecentNames {
    entries: Vec<(Box<[u8]>, UnixName)>,
    /// The entry the next new name replaces once all are taken.
    next: usize,
}

impl RecentNames {
    const SIZE: usize = 8;

    /// [`UnixName::from_sun_path`], shared with an earlier record of the same bytes.
    pub fn name(&mut self, sun_path: &[u8]) -> UnixName {
        if let Some((_, name)) = self.entries.iter().find(|(raw, _)| **raw == *sun_path) {
            return name.clone();
        }
        let name = UnixName::from_sun_path(sun_path);
        let entry = (Box::from(sun_path), name.clone());
        if self.entries.len() < Self::SIZE {
            self.entries.push(entry);
        } else {
            self.entries[self.next] = entry;
            self.next = (self.next + 1) % Self::SIZE;
        }
        name
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
    /// The `bind` syscall tracepoint on a Unix datagram socket.
    SyscallDgramBind,
}

impl UnixHook {
    fn from_code(code: u8) -> Option<UnixHook> {
        Some(match code {
            hook::CONNECT => UnixHook::Connect,
            hook::SENDMSG => UnixHook::Sendmsg,
            hook::SYSCALL_CONNECT => UnixHook::SyscallConnect,
            hook::SYSCALL_SENDTO => UnixHook::SyscallSendto,
            hook::LISTENER => UnixHook::Listener,
            hook::SYSCALL_DGRAM_BIND => UnixHook::SyscallDgramBind,
            _ => return None,
        })
    }
}

/// `unix_refused`, `unix_listen`, `unix_listen_closed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixFact {
    pub ts_boot_ns: u64,
    pub owner: Sender,
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

pub fn unix_fact(ev: &UnixEvent, owner: Sender, names: &mut RecentNames) -> UnixFact {
    let len = usize::from(ev.path_len).min(ev.path.len());
    UnixFact {
        ts_boot_ns: ev.header.ts_boot_ns,
        owner,
        name: names.name(&ev.path[..len]),
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
    use std::sync::Arc;

    use super::*;

    #[test]
    fn recent_names_are_shared_and_a_ninth_replaces_the_oldest() {
        let mut names = RecentNames::default();
        let a = names.name(b"/sockets/app.sock\0");
        let again = names.name(b"/sockets/app.sock\0");
        let (UnixName::Path(x), UnixName::Path(y)) = (&a, &again) else {
            panic!("{a:?}")
        };
        assert!(
            Arc::ptr_eq(x, y),
            "the second record shares the first one's name"
        );
        assert_eq!(names.name(b"\0otel"), UnixName::Abstract("otel".into()));
        for i in 0..8 {
            names.name(format!("/tmp/{i}").as_bytes());
        }
        let fresh = names.name(b"/sockets/app.sock\0");
        let UnixName::Path(z) = &fresh else { panic!() };
        assert!(!Arc::ptr_eq(x, z), "evicted after eight newer names");
        assert_eq!(fresh, a);
    }

    #[test]
    fn only_enoent_and_econnrefused_are_refusals() {
        assert_eq!(UnixRefusal::from_errno(2), Some(UnixRefusal::NoSuchPath));
        assert_eq!(UnixRefusal::from_errno(111), Some(UnixRefusal::NoListener));
        assert_eq!(UnixRefusal::from_errno(13), None);
        assert_eq!(UnixRefusal::NoSuchPath.name(), "no_such_path");
    }
}
