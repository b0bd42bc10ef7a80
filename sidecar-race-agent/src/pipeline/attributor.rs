//! Attribution, the pipeline's first stage: kernel events as detector facts,
//! attributed to a pod and client by cgroup path alone (names come later from the pod
//! source, which is asked to look again when a pod it has not reported shows up);
//! events with no pod are counted.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::Notify;

use crate::{
    detect::{Client, Fact},
    ingest::events::{KernelEvent, Sender, UnixHook},
    inventory::{
        Inventory, PodOwner,
        cgroup_path::{self, PathInfo},
    },
};

/// How often at most an unknown pod makes the pod source re-read at once.
const REFRESH_EVERY: Duration = Duration::from_millis(500);

/// Attribution's own state. The inventory it attributes with is not its own: the
/// detector, the views and accounting read the same pods, so the pipeline keeps it
/// and lends it to each stage.
#[derive(Default)]
pub(super) struct Attributor {
    /// Kernel events with no pod to attribute them to.
    events_without_pod: u64,
    /// How long what waits for names (an incident's final accounting, a suppressed
    /// count) waits for the pod source to name its pod and containers.
    metadata_wait_ns: u64,
    /// Asks the pod source to re-read now (a pod it has not reported showed up).
    refresh: Option<Arc<Notify>>,
    last_refresh: Option<Instant>,
}

impl Attributor {
    /// Names are waited for up to `wait` from now on, and `refresh` is notified when
    /// a pod the source has not reported shows up.
    pub(super) fn wait_for_names(&mut self, wait: Duration, refresh: Option<Arc<Notify>>) {
        self.metadata_wait_ns = wait.as_nanos() as u64;
        self.refresh = refresh;
    }

    /// How long, in ns, what waits for names waits for them.
    pub(super) fn metadata_wait_ns(&self) -> u64 {
        self.metadata_wait_ns
    }

    /// Kernel events with no pod to attribute them to, so far.
    pub(super) fn events_without_pod(&self) -> u64 {
        self.events_without_pod
    }

    /// Takes a kernel event into `inventory` (a cgroup event keeps its index current,
    /// and one whose path the kernel could not read comes back named by it) and turns
    /// it into the fact the detector reads, when it has a pod.
    pub(super) fn attribute(
        &mut self,
        inventory: &mut Inventory,
        ev: &KernelEvent,
    ) -> Option<Fact> {
        let named = inventory.observe(ev);
        self.fact(inventory, named.as_ref().unwrap_or(ev))
    }

    fn fact(&mut self, inventory: &mut Inventory, ev: &KernelEvent) -> Option<Fact> {
        match ev {
            KernelEvent::Refused(s) => {
                let (pod_uid, client) = self.pod_client(inventory, &s.owner)?;
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
                let (pod_uid, client) = self.pod_client(inventory, &s.owner)?;
                Some(Fact::UdpRefused {
                    ts: s.ts_boot_ns,
                    pod_uid,
                    client,
                    dst: s.dst?,
                    process: s.owner.comm,
                })
            }
            KernelEvent::Listen(s) | KernelEvent::ListenClosed(s) => {
                let (pod_uid, client) = self.pod_client(inventory, &s.owner)?;
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
                let (pod_uid, client) = self.pod_client(inventory, &u.owner)?;
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
                let (pod_uid, client) = self.pod_client(inventory, &u.owner)?;
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
                    self.unknown_pod_seen(inventory, &pod_uid);
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
                    self.unknown_pod_seen(inventory, &pod_uid);
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
    fn pod_client(
        &mut self,
        inventory: &mut Inventory,
        owner: &Sender,
    ) -> Option<(Arc<str>, Client)> {
        // Only the path's pod and container are needed here: names come later.
        let Some(PodOwner {
            pod_uid,
            container_id,
        }) = inventory.pod_owner(owner.cgroup_id)
        else {
            self.events_without_pod += 1;
            return None;
        };
        self.unknown_pod_seen(inventory, &pod_uid);
        Some((pod_uid, Client::of(container_id, owner.cgroup_id)))
    }

    /// A UDP socket of cgroup `cgroup_id` found bound to `addr` at `ts` (the pod's
    /// socket table, read while a UDP incident waits for it), as a fact: none when
    /// the cgroup is no pod's (not counted: no kernel event was lost).
    pub(super) fn udp_bound(
        inventory: &mut Inventory,
        cgroup_id: u64,
        addr: SocketAddr,
        ts: u64,
    ) -> Option<Fact> {
        let owner = inventory.pod_owner(cgroup_id)?;
        Some(Fact::UdpBound {
            ts,
            pod_uid: owner.pod_uid,
            container_id: owner.container_id.map(|c| c.to_string()),
            addr,
        })
    }

    /// A pod the source has not reported: ask it to look again now (rate-limited).
    fn unknown_pod_seen(&mut self, inventory: &Inventory, pod_uid: &str) {
        let Some(refresh) = &self.refresh else { return };
        if inventory.pods.pod(pod_uid).is_some()
            || self
                .last_refresh
                .is_some_and(|t| t.elapsed() < REFRESH_EVERY)
        {
            return;
        }
        self.last_refresh = Some(Instant::now());
        refresh.notify_one();
    }
}
