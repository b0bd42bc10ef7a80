//! Kernel events and pipelines for the crate's unit tests: a systemd-layout pod with
//! containerd containers, and the classic-deployment fixture pod.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    detect::DetectorConfig,
    ingest::events::{CgroupFact, KernelEvent, Sender, SocketFact},
    inventory::cgroups::CgroupIndex,
    inventory::{Inventory, store::PodStore},
    pipeline::Pipeline,
    pods::pod_info::PodInfo,
};

pub const MS: u64 = 1_000_000;
/// The pod of the fixture `classic-deployment.json` (checkout, app `a…`, proxy `b…`).
pub const CHECKOUT: &str = "6f2c1a6e-8b0f-4d8e-9a53-3c1d2e4f5a6b";
/// A second pod, with no metadata.
pub const OTHER_POD: &str = "0b7e4c1d-2f3a-4b5c-8d9e-1a2b3c4d5e6f";

pub fn pod_path(uid: &str) -> String {
    format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        uid.replace('-', "_")
    )
}

pub fn container_path(uid: &str, id: &str) -> String {
    format!("{}/cri-containerd-{id}.scope", pod_path(uid))
}

pub fn created(ts: u64, id: u64, path: String) -> KernelEvent {
    KernelEvent::CgroupCreated(CgroupFact {
        ts_boot_ns: ts,
        cgroup_id: id,
        level: 4,
        path,
        truncated: false,
        path_unread: false,
    })
}

pub fn socket(ts: u64, cgroup: u64, src: &str, dst: Option<&str>) -> SocketFact {
    SocketFact {
        ts_boot_ns: ts,
        owner: Sender {
            cgroup_id: cgroup,
            pid: 7,
            tgid: 7,
            comm: "x".into(),
        },
        ipv6: false,
        src: src.parse::<SocketAddr>().unwrap(),
        dst: dst.map(|d| d.parse().unwrap()),
        local_dst: None,
        start_boot_ns: 0,
    }
}

/// The fixture's pod (`classic-deployment.json`).
pub fn checkout_pod() -> PodInfo {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods/classic-deployment.json");
    PodInfo::from_json(serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap())
        .unwrap()
}

/// A pipeline over the cgroup tree `cgroups`, with `pods` as the whole pod source.
pub fn pipeline(cgroups: &Path, pods: Option<PodInfo>, cfg: DetectorConfig) -> Pipeline {
    let mut store = PodStore::new(Duration::from_secs(600));
    let has_source = pods.is_some();
    if let Some(p) = pods {
        store.apply(p);
    }
    let inventory = Inventory::new(CgroupIndex::new(cgroups, u64::MAX), store, has_source);
    Pipeline::new(inventory, cfg, 0).with_metadata_wait(Duration::from_secs(10), None)
}

/// A fresh directory under the temp dir, per test process.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sr-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
