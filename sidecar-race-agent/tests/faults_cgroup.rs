//! A cgroup removed between the kernel event and the agent's lookup: the event is
//! attributed from the cached index when the agent saw the cgroup before (its creation
//! event, or the start-up walk), else counted as unattributed; never a panic, never
//! another pod. The hierarchy is a plain directory tree laid out as the kubelet's
//! (a cgroup's id is its directory's inode number, as on cgroup2), so no root needed.

use std::path::{Path, PathBuf};

use sidecar_race_agent::{
    detect::DetectorConfig,
    ingest::events::{CgroupFact, KernelEvent, Sender, SocketFact},
    inventory::cgroups::{CgroupIndex, id_of},
    inventory::{Inventory, store::PodStore},
    pipeline::Pipeline,
};

const UID: &str = "3b1f2c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
const CID: &str = "0ac0814cd3dc1e341620f880205074403be81d5ed005e3286e5c205fe37f388f";
const S: u64 = 1_000_000_000;

/// A kubelet-layout pod with one container under a fresh root; (root, container dir).
fn hierarchy(tag: &str) -> (PathBuf, PathBuf) {
    let root = std::env::temp_dir().join(format!("sr-cgroup-gone-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let ctr = root.join(format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope",
        UID.replace('-', "_")
    ));
    std::fs::create_dir_all(&ctr).unwrap();
    (root, ctr)
}

fn relative(root: &Path, dir: &Path) -> String {
    format!("/{}", dir.strip_prefix(root).unwrap().display())
}

fn pipeline(index: CgroupIndex) -> Pipeline {
    let inventory = Inventory::new(
        index,
        PodStore::new(std::time::Duration::from_secs(600)),
        false,
    );
    Pipeline::new(inventory, DetectorConfig::default(), 0)
}

fn refused(ts: u64, cgroup_id: u64) -> KernelEvent {
    KernelEvent::Refused(SocketFact {
        ts_boot_ns: ts,
        owner: Sender {
            cgroup_id,
            pid: 4242,
            tgid: 4242,
            comm: "app".into(),
        },
        ipv6: false,
        src: "127.0.0.1:40000".parse().unwrap(),
        dst: Some("127.0.0.1:15001".parse().unwrap()),
        local_dst: None,
        start_boot_ns: 0,
    })
}

fn cgroup(ts: u64, id: u64, path: &str) -> CgroupFact {
    CgroupFact {
        ts_boot_ns: ts,
        cgroup_id: id,
        level: 5,
        path: path.into(),
        truncated: false,
        path_unread: false,
    }
}

/// The incidents' (pod uid, client container id) once every fact is in.
fn incidents(p: &mut Pipeline) -> Vec<(String, Option<String>)> {
    p.flush(1000 * S);
    p.detector()
        .incidents()
        .newest_first()
        .map(|i| {
            (
                i.pod_uid.clone(),
                i.client_container_id().map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn removed_before_the_agent_ever_saw_it_is_unattributed() {
    let (root, ctr) = hierarchy("unseen");
    let id = id_of(&ctr).unwrap();
    std::fs::remove_dir(&ctr).unwrap();
    // The index is walked when an unknown id shows up; the directory is gone by then.
    let mut p = pipeline(CgroupIndex::new(&root, 600 * S));
    p.kernel_event(&refused(S, id));
    assert!(incidents(&mut p).is_empty(), "no pod is guessed");
    assert_eq!(p.inventory().unattributed_events(), 1);
    assert_eq!(p.counts().events_without_pod, 1);
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn removed_after_its_creation_event_is_attributed_from_the_index() {
    let (root, ctr) = hierarchy("created");
    let id = id_of(&ctr).unwrap();
    let path = relative(&root, &ctr);
    let mut p = pipeline(CgroupIndex::new(&root, 600 * S));
    p.kernel_event(&KernelEvent::CgroupCreated(cgroup(S, id, &path)));
    std::fs::remove_dir(&ctr).unwrap();
    p.kernel_event(&KernelEvent::CgroupRemoved(cgroup(2 * S, id, &path)));
    // The refusal's record was read after the container's cgroup went away.
    p.kernel_event(&refused(2 * S - 1, id));
    assert_eq!(
        incidents(&mut p),
        [(UID.to_string(), Some(CID.to_string()))]
    );
    assert_eq!(p.inventory().unattributed_events(), 0);
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn removed_after_the_start_up_walk_is_attributed_from_the_index() {
    let (root, ctr) = hierarchy("walked");
    let id = id_of(&ctr).unwrap();
    let mut index = CgroupIndex::new(&root, 600 * S);
    index.scan().unwrap();
    std::fs::remove_dir(&ctr).unwrap();
    let mut p = pipeline(index);
    p.kernel_event(&refused(S, id));
    assert_eq!(
        incidents(&mut p),
        [(UID.to_string(), Some(CID.to_string()))]
    );
    std::fs::remove_dir_all(root).unwrap();
}

/// Under lockdown for confidentiality the kernel cannot read a cgroup's path: its
/// creation is named from cgroupfs by its id, its removal from the index, and the
/// refusals of the container in between are its own.
#[test]
fn a_cgroup_event_without_its_path_is_named_from_cgroupfs() {
    let (root, ctr) = hierarchy("unread");
    let id = id_of(&ctr).unwrap();
    let unread = |ts| CgroupFact {
        path_unread: true,
        ..cgroup(ts, id, "")
    };
    let mut p = pipeline(CgroupIndex::new(&root, 600 * S));
    p.kernel_event(&KernelEvent::CgroupCreated(unread(S)));
    assert_eq!(
        p.inventory().cgroups.path(id),
        Some(relative(&root, &ctr).as_str())
    );
    std::fs::remove_dir(&ctr).unwrap();
    p.kernel_event(&KernelEvent::CgroupRemoved(unread(2 * S)));
    assert!(p.inventory().cgroups.is_removed(id));
    p.kernel_event(&refused(2 * S - 1, id));
    assert_eq!(
        incidents(&mut p),
        [(UID.to_string(), Some(CID.to_string()))]
    );
    assert_eq!(p.inventory().unattributed_events(), 0);
    std::fs::remove_dir_all(root).unwrap();
}
