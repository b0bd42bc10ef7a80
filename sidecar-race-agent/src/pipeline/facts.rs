//! Kernel events as detector facts: attributed to a pod and client by cgroup path
//! alone (names come later); events with no pod are counted.

use std::sync::Arc;

use super::state::Pipeline;
use crate::{
    detect::{Client, Fact},
    ingest::events::{KernelEvent, Sender, UnixHook},
    inventory::{
        PodOwner,
        cgroup_path::{self, PathInfo},
    },
};

impl Pipeline {
    pub(super) fn fact(&mut self, ev: &KernelEvent) -> Option<Fact> {
        match ev {
            KernelEvent::Refused(s) => {
                let (pod_uid, client) = self.pod_client(&s.owner)?;
                Some(Fact::Refused {
                    ts: s.ts_boot_ns,
                    pod_uid,
                    client,
                    dst: s.dst?,
                    local_dst: s.local_dst,
                    process: s.owner.comm,
                })
            }
            KernelEvent::UdpRefused(s) => {
                let (pod_uid, client) = self.pod_client(&s.owner)?;
                Some(Fact::UdpRefused {
                    ts: s.ts_boot_ns,
                    pod_uid,
                    client,
                    dst: s.dst?,
                    process: s.owner.comm,
                })
            }
            KernelEvent::Listen(s) | KernelEvent::ListenClosed(s) => {
                let (pod_uid, client) = self.pod_client(&s.owner)?;
                let container_id = client.container_id().map(str::to_string);
                let (ts, addr) = (s.ts_boot_ns, s.src);
                Some(if matches!(ev, KernelEvent::Listen(_)) {
                    Fact::ListenerUp {
                        ts,
                        pod_uid,
                        container_id,
                        addr,
                    }
                } else {
                    Fact::ListenerDown {
                        ts,
                        pod_uid,
                        container_id,
                        addr,
                    }
                })
            }
            KernelEvent::UnixRefused(u) => {
                let (pod_uid, client) = self.pod_client(&u.owner)?;
                Some(Fact::UnixRefused {
                    ts: u.ts_boot_ns,
                    pod_uid,
                    client,
                    name: u.name.clone(),
                    process: u.owner.comm,
                    // A datagram socket's, or a send to a path (only datagrams name one).
                    datagram: u.sock_type == Some("dgram")
                        || matches!(u.hook, Some(UnixHook::Sendmsg | UnixHook::SyscallSendto)),
                })
            }
            KernelEvent::UnixListen(u) | KernelEvent::UnixListenClosed(u) => {
                let (pod_uid, client) = self.pod_client(&u.owner)?;
                let container_id = client.container_id().map(str::to_string);
                let (ts, name) = (u.ts_boot_ns, u.name.clone());
                Some(if matches!(ev, KernelEvent::UnixListen(_)) {
                    Fact::UnixListenerUp {
                        ts,
                        pod_uid,
                        container_id,
                        name,
                        datagram: u.sock_type == Some("dgram"),
                    }
                } else {
                    Fact::UnixListenerDown {
                        ts,
                        pod_uid,
                        container_id,
                        name,
                    }
                })
            }
            KernelEvent::CgroupCreated(c) => match cgroup_path::parse(&c.path) {
                PathInfo::Pod { pod_uid } => {
                    self.unknown_pod_seen(&pod_uid);
                    Some(Fact::PodStarted {
                        ts: c.ts_boot_ns,
                        pod_uid: pod_uid.into(),
                    })
                }
                PathInfo::PodContainer {
                    pod_uid,
                    container_id,
                    ..
                } => {
                    self.unknown_pod_seen(&pod_uid);
                    Some(Fact::ContainerStarted {
                        ts: c.ts_boot_ns,
                        pod_uid: pod_uid.into(),
                        container_id,
                    })
                }
                _ => None,
            },
            KernelEvent::CgroupRemoved(c) => match cgroup_path::parse(&c.path) {
                PathInfo::Pod { pod_uid } => Some(Fact::PodRemoved {
                    ts: c.ts_boot_ns,
                    pod_uid: pod_uid.into(),
                }),
                PathInfo::PodContainer {
                    pod_uid,
                    container_id,
                    ..
                } => Some(Fact::ContainerRemoved {
                    ts: c.ts_boot_ns,
                    pod_uid: pod_uid.into(),
                    container_id,
                }),
                _ => None,
            },
        }
    }

    /// The pod and client of a socket event; counted when there is no pod.
    fn pod_client(&mut self, owner: &Sender) -> Option<(Arc<str>, Client)> {
        // Only the path's pod and container are needed here: names come later.
        let Some(PodOwner {
            pod_uid,
            container_id,
        }) = self.inventory.pod_owner(owner.cgroup_id)
        else {
            self.counts.events_without_pod += 1;
            return None;
        };
        self.unknown_pod_seen(&pod_uid);
        Some((pod_uid, Client::of(container_id, owner.cgroup_id)))
    }
}
