//! The `trace` output: one JSON object per kernel event (a public interface: field
//! names are documented in docs/reference.md and kept stable).

use serde::Serialize;

use crate::{
    clock,
    ingest::events::{KernelEvent, Kind, SocketFact, UnixRefusal},
    inventory::Attribution,
};

#[derive(Debug, Serialize, PartialEq)]
pub struct TraceRecord {
    pub kind: Kind,
    pub ts: String,
    pub cgroup_id: u64,
    pub cgroup_path: Option<String>,
    /// `pod_uid`, `container_id`, `namespace`, `pod`, `container`.
    #[serde(flatten)]
    pub attribution: Attribution,
    pub pid: Option<u32>,
    pub tgid: Option<u32>,
    pub comm: Option<String>,
    /// `ipv4` | `ipv6`.
    pub family: Option<&'static str>,
    /// Client end for `refused`, listening address for `listen` / `listen_closed`.
    pub src: Option<String>,
    /// Destination as dialed (`refused`).
    pub dst: Option<String>,
    /// `refused` only: where the local stack refused the SYN after a NAT redirect;
    /// null when not redirected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_dst: Option<Option<String>>,
    /// Unix socket kinds only: the socket's name and what happened to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<TraceSocket>,
}

/// The Unix socket of a `unix_*` record.
#[derive(Debug, Serialize, PartialEq)]
pub struct TraceSocket {
    /// The path as the process gave it, or `@name` for an abstract name.
    pub path: String,
    #[serde(rename = "abstract")]
    pub is_abstract: bool,
    /// `unix_refused`: `no_such_path` (ENOENT) or `no_listener` (ECONNREFUSED).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<UnixRefusal>,
    /// `stream`, `dgram`, `seqpacket`; null when the hook cannot tell.
    #[serde(rename = "type")]
    pub sock_type: Option<&'static str>,
    /// The socket file's inode (listeners on a path).
    pub inode: Option<u64>,
    /// The network namespace's inode (abstract names belong to it).
    pub netns: Option<u32>,
}

impl TraceRecord {
    /// `cgroup_path` comes from the cgroup index (or the event itself).
    pub fn new(ev: &KernelEvent, cgroup_path: Option<String>, attribution: Attribution) -> Self {
        let ts = clock::rfc3339_nanos(clock::boot_to_unix_ns(ev.ts_boot_ns()));
        let kind = ev.kind();
        match ev {
            KernelEvent::Refused(s)
            | KernelEvent::UdpRefused(s)
            | KernelEvent::Listen(s)
            | KernelEvent::ListenClosed(s) => Self::socket(
                kind,
                ts,
                s,
                cgroup_path,
                attribution,
                matches!(ev, KernelEvent::Refused(_) | KernelEvent::UdpRefused(_)),
            ),
            KernelEvent::CgroupCreated(c) | KernelEvent::CgroupRemoved(c) => TraceRecord {
                kind,
                ts,
                cgroup_id: c.cgroup_id,
                cgroup_path: Some(c.path.clone()),
                attribution,
                pid: None,
                tgid: None,
                comm: None,
                family: None,
                src: None,
                dst: None,
                local_dst: None,
                socket: None,
            },
            KernelEvent::UnixRefused(u)
            | KernelEvent::UnixListen(u)
            | KernelEvent::UnixListenClosed(u) => TraceRecord {
                kind,
                ts,
                cgroup_id: u.owner.cgroup_id,
                cgroup_path,
                attribution,
                pid: Some(u.owner.pid),
                tgid: Some(u.owner.tgid),
                comm: Some(u.owner.comm.to_string()),
                family: Some("unix"),
                src: None,
                dst: None,
                local_dst: None,
                socket: Some(TraceSocket {
                    path: u.name.to_string(),
                    is_abstract: u.name.is_abstract(),
                    refusal: u.refusal,
                    sock_type: u.sock_type,
                    inode: u.inode,
                    netns: u.netns,
                }),
            },
        }
    }

    fn socket(
        kind: Kind,
        ts: String,
        s: &SocketFact,
        cgroup_path: Option<String>,
        attribution: Attribution,
        refused: bool,
    ) -> Self {
        TraceRecord {
            kind,
            ts,
            cgroup_id: s.owner.cgroup_id,
            cgroup_path,
            attribution,
            // A refusal read from its socket outside the connecting task's context
            // knows its container, not its process (pid 0, no name): shown as unknown.
            pid: (s.owner.tgid != 0).then_some(s.owner.pid),
            tgid: (s.owner.tgid != 0).then_some(s.owner.tgid),
            comm: (s.owner.tgid != 0).then(|| s.owner.comm.to_string()),
            family: Some(if s.ipv6 { "ipv6" } else { "ipv4" }),
            src: Some(s.src.to_string()),
            dst: s.dst.map(|d| d.to_string()),
            local_dst: refused.then(|| s.local_dst.map(|d| d.to_string())),
            socket: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::events::{CgroupFact, Sender};

    fn refused(local: Option<&str>) -> KernelEvent {
        KernelEvent::Refused(SocketFact {
            ts_boot_ns: 1,
            owner: Sender {
                cgroup_id: 7,
                pid: 10,
                tgid: 9,
                comm: "app".into(),
            },
            ipv6: false,
            src: "10.200.0.2:40000".parse().unwrap(),
            dst: Some("10.96.0.10:80".parse().unwrap()),
            local_dst: local.map(|l| l.parse().unwrap()),
            start_boot_ns: 0,
        })
    }

    #[test]
    fn refused_has_every_documented_field() {
        let v = serde_json::to_value(TraceRecord::new(
            &refused(Some("127.0.0.1:15001")),
            Some("/pod".into()),
            Attribution {
                pod_uid: Some("u".into()),
                container: Some("app".into()),
                ..Attribution::default()
            },
        ))
        .unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        let mut documented = [
            "kind",
            "ts",
            "cgroup_id",
            "cgroup_path",
            "pod_uid",
            "container_id",
            "namespace",
            "pod",
            "container",
            "pid",
            "tgid",
            "comm",
            "family",
            "src",
            "dst",
            "local_dst",
        ];
        documented.sort();
        assert_eq!(keys, documented);
        assert_eq!(v["kind"], "refused");
        assert_eq!(v["local_dst"], "127.0.0.1:15001");
        assert_eq!(v["dst"], "10.96.0.10:80");
        assert_eq!(v["family"], "ipv4");
        assert_eq!(v["pod_uid"], "u");
        assert_eq!(v["container"], "app");
        assert!(v["namespace"].is_null() && v["pod"].is_null() && v["container_id"].is_null());
        assert!(v["ts"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn refused_without_redirect_has_null_local_dst_and_others_have_none() {
        let v = serde_json::to_value(TraceRecord::new(
            &refused(None),
            None,
            Attribution::default(),
        ))
        .unwrap();
        assert!(v["local_dst"].is_null() && v.as_object().unwrap().contains_key("local_dst"));
        let cg = KernelEvent::CgroupCreated(CgroupFact {
            ts_boot_ns: 1,
            cgroup_id: 5,
            level: 1,
            path: "/a".into(),
            truncated: false,
            path_unread: false,
        });
        let v = serde_json::to_value(TraceRecord::new(&cg, None, Attribution::default())).unwrap();
        assert!(!v.as_object().unwrap().contains_key("local_dst"));
        assert_eq!(v["cgroup_path"], "/a");
        assert!(v["pid"].is_null());
    }
}
