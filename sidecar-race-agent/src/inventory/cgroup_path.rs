//! What a cgroup v2 path identifies: a pod's container, a pod, a plain container or the host.
//!
//! Paths are relative to the cgroup2 mount, as the kernel's cgroup_mkdir tracepoint reports
//! them. The pod part is named by the kubelet's cgroup driver (systemd:
//! `kubepods-burstable-pod<uid_with_underscores>.slice`, cgroupfs: `kubepods/burstable/pod<uid>`),
//! the container part by the runtime (`cri-containerd-<id>.scope`, `crio-<id>.scope`,
//! `docker-<id>.scope`, `libpod-<id>.scope`, or the bare id under cgroupfs). The kubelet may itself
//! run nested (kind and k3d nodes are containers, rootless k3s runs under a user service), so
//! these are searched for anywhere in the path. A pod segment below another pod's container
//! is not trusted: a pod that can write its own cgroup tree (privileged, Sysbox,
//! Docker-in-Docker) could name one after any pod UID and spoof that pod, so such paths are
//! `Unknown` (unattributed).

use crate::pods::container_id::{Runtime, is_container_id};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathInfo {
    /// A container of a Kubernetes pod. pod_uid in canonical form with dashes
    /// (the systemd driver writes underscores; convert them). container_id lowercase hex.
    ///
    /// Under the kubelet's cgroupfs driver the container cgroup is the bare id, whichever
    /// runtime made it; such containers report `Runtime::Containerd`, by far the usual one
    /// there (k3s, kind, kubeadm). cri-dockerd writes the same shape, so match containers by id.
    PodContainer {
        pod_uid: String,
        container_id: String,
        runtime: Runtime,
    },
    /// The pod-level cgroup itself, or a non-container child of it (e.g. CRI-O's
    /// crio-conmon-<id>.scope inside a pod slice is NOT a container: report the pod).
    Pod { pod_uid: String },
    /// A container outside Kubernetes (plain docker or podman).
    Container {
        container_id: String,
        runtime: Runtime,
    },
    /// A cgroup that is clearly not a container: the root "/", system services,
    /// user sessions, kubepods QoS slices without a pod, conmon scopes outside pods.
    Host,
    /// Looks like it belongs to a pod or a container runtime (contains a kubepods /
    /// docker / libpod / crio / cri-containerd marker) but matches no known layout.
    /// Never guessed: the caller counts these.
    Unknown,
}

/// What the cgroup at `path` (relative to the cgroup2 mount) identifies. Total: any input,
/// including "" and trailing or doubled slashes, gets an answer.
pub fn parse(path: &str) -> PathInfo {
    let segs = segments(path);
    // A kind node's pods sit below the host's docker scope for the node (no pod above).
    let is_pod = |s: &Seg| matches!(s, Seg::Pod(_) | Seg::BadPod);
    match segs.iter().position(is_pod) {
        Some(i) if segs[i + 1..].iter().any(is_pod) => PathInfo::Unknown,
        Some(i) => in_pod(&segs[i], segs.get(i + 1)),
        None => outside_pods(&segs),
    }
}

/// Substrings that tie a cgroup name to Kubernetes or a container runtime.
const MARKERS: [&str; 5] = ["kubepods", "docker", "libpod", "crio", "cri-containerd"];

/// One path segment, classified knowing its parent.
#[derive(Debug, PartialEq, Eq)]
enum Seg<'a> {
    /// `kubepods`, `kubepods.slice`, or nested under a prefix (`kubelet-kubepods.slice`).
    Kubepods,
    /// A QoS level below kubepods: `besteffort`, `kubepods-burstable.slice`, ...
    Qos,
    /// A pod cgroup; the UID in canonical form.
    Pod(String),
    /// Named like a pod cgroup, but its UID is not a UID.
    BadPod,
    Container(Runtime, &'a str),
    /// A runtime's monitor process (`crio-conmon-<id>`, `libpod-conmon-<id>`), not a container.
    Conmon,
    /// The cgroupfs docker parent `/docker`, whose children are bare container ids.
    DockerRoot,
    /// Carries a marker but fits no known layout.
    Malformed,
    /// No marker: system services, user sessions, slices.
    Other,
}

fn segments(path: &str) -> Vec<Seg<'_>> {
    let mut segs = Vec::new();
    for name in path.split('/').filter(|s| !s.is_empty()) {
        // containerd/runc hand the cgroupfs driver the systemd-style "slice:prefix:id" when
        // the two drivers are mismatched, and it becomes one literal directory name.
        if let Some((slice, unit)) = name.split_once(':') {
            let seg = classify(slice, segs.last());
            segs.push(seg);
            let seg = unit
                .split_once(':')
                .and_then(|(prefix, id)| runtime_unit(prefix, id))
                .unwrap_or_else(|| unrecognized(name));
            segs.push(seg);
        } else {
            let seg = classify(name, segs.last());
            segs.push(seg);
        }
    }
    segs
}

fn classify<'a>(name: &'a str, parent: Option<&Seg>) -> Seg<'a> {
    // cgroupfs layouts name a container's cgroup by its bare id: only the parent says what it is.
    match parent {
        Some(Seg::Pod(_)) if is_container_id(name) => {
            return Seg::Container(Runtime::Containerd, name);
        }
        // Docker's cgroupfs parent should hold containers only; others (buildkit's build
        // steps in `/docker/buildkit`) fit no layout we can attribute.
        Some(Seg::DockerRoot) if is_container_id(name) => {
            return Seg::Container(Runtime::Docker, name);
        }
        Some(Seg::DockerRoot) => return Seg::Malformed,
        _ => {}
    }
    if let Some(seg) = kube_slice(name) {
        return seg;
    }
    if let Some(parent @ (Seg::Kubepods | Seg::Qos)) = parent {
        return cgroupfs_kube_child(name, *parent == Seg::Kubepods);
    }
    match name {
        "kubepods" => Seg::Kubepods,
        "docker" => Seg::DockerRoot,
        _ => runtime_scope(name).unwrap_or_else(|| unrecognized(name)),
    }
}

/// systemd-driver names: the kubelet's cgroup path joined with '-', e.g.
/// `kubepods-burstable-pod<uid>.slice`, possibly behind a prefix (kind's `kubelet-kubepods.slice`).
fn kube_slice(name: &str) -> Option<Seg<'static>> {
    let stem = name.strip_suffix(".slice")?;
    // Neither the QoS names nor a UID contain "-pod", so the last one starts the UID.
    if let Some((parent, uid)) = stem.rsplit_once("-pod")
        && kube_level(parent).is_some()
    {
        return Some(pod_seg(uid));
    }
    kube_level(stem)
}

/// `[<prefix>-]kubepods` → Kubepods, `[<prefix>-]kubepods-{besteffort,burstable}` → Qos.
fn kube_level(stem: &str) -> Option<Seg<'static>> {
    let is_root = |s: &str| s == "kubepods" || s.ends_with("-kubepods");
    match stem
        .strip_suffix("-besteffort")
        .or_else(|| stem.strip_suffix("-burstable"))
    {
        Some(root) if is_root(root) => Some(Seg::Qos),
        _ if is_root(stem) => Some(Seg::Kubepods),
        _ => None,
    }
}

/// Children of `kubepods` / `kubepods/<qos>` under the cgroupfs driver. The kubelet makes
/// nothing else there, so anything else is Malformed.
fn cgroupfs_kube_child(name: &str, parent_is_root: bool) -> Seg<'static> {
    if parent_is_root && matches!(name, "besteffort" | "burstable") {
        return Seg::Qos;
    }
    match name.strip_prefix("pod") {
        Some(uid) => pod_seg(uid),
        None => Seg::Malformed,
    }
}

fn pod_seg(raw_uid: &str) -> Seg<'static> {
    canonical_uid(raw_uid).map_or(Seg::BadPod, Seg::Pod)
}

/// Runtime-made cgroups: `<prefix>-<id>.scope` under systemd, `<prefix>-<id>` under cgroupfs
/// (CRI-O's `crio-<id>`, `crio-conmon-<id>`).
fn runtime_scope(name: &str) -> Option<Seg<'_>> {
    let stem = name.strip_suffix(".scope").unwrap_or(name);
    let (prefix, id) = stem.rsplit_once('-')?;
    runtime_unit(prefix, id)
}

fn runtime_unit<'a>(prefix: &str, id: &'a str) -> Option<Seg<'a>> {
    let seg = match prefix {
        "cri-containerd" => Seg::Container(Runtime::Containerd, id),
        "crio" => Seg::Container(Runtime::CriO, id),
        "docker" => Seg::Container(Runtime::Docker, id),
        "libpod" => Seg::Container(Runtime::Podman, id),
        "crio-conmon" | "libpod-conmon" => Seg::Conmon,
        _ => return None,
    };
    Some(if is_container_id(id) {
        seg
    } else {
        Seg::Malformed
    })
}

fn unrecognized(name: &str) -> Seg<'static> {
    // The runtimes' own daemons (docker.service, crio.service) and podman's parents for
    // cgroupfs (libpod_parent) and pods (machine-libpod_pod_<id>.slice) hold no container.
    let neutral = name.ends_with(".service")
        || name == "libpod_parent"
        || name.starts_with("machine-libpod_pod_");
    if !neutral && MARKERS.iter().any(|m| name.contains(m)) {
        Seg::Malformed
    } else {
        Seg::Other
    }
}

/// What the innermost pod segment and the one below it identify.
fn in_pod(pod: &Seg, child: Option<&Seg>) -> PathInfo {
    let Seg::Pod(uid) = pod else {
        return PathInfo::Unknown;
    };
    match child {
        None | Some(Seg::Conmon) => PathInfo::Pod {
            pod_uid: uid.clone(),
        },
        // Deeper cgroups (crun's `container`, a nested runtime) still belong to this container.
        Some(Seg::Container(runtime, id)) => PathInfo::PodContainer {
            pod_uid: uid.clone(),
            container_id: (*id).to_owned(),
            runtime: *runtime,
        },
        Some(_) => PathInfo::Unknown,
    }
}

fn outside_pods(segs: &[Seg]) -> PathInfo {
    // Conmon scopes are skipped: they are no container, but one inside an outer container
    // (podman in a docker container) still belongs to that.
    let innermost = segs
        .iter()
        .rev()
        .find(|s| matches!(s, Seg::Container(..) | Seg::Malformed));
    match innermost {
        None => PathInfo::Host,
        Some(Seg::Container(runtime @ (Runtime::Docker | Runtime::Podman), id)) => {
            PathInfo::Container {
                container_id: (*id).to_owned(),
                runtime: *runtime,
            }
        }
        // CRI runtimes name cgroups like this only inside a pod.
        Some(_) => PathInfo::Unknown,
    }
}

fn is_lower_hex(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'a'..=b'f')
}

/// The UID in 8-4-4-4-12 lowercase hex form, from either dashes or the systemd driver's
/// underscores. Static pods' 32-hex md5 UIDs are deliberately not accepted.
fn canonical_uid(raw: &str) -> Option<String> {
    let uid = raw.replace('_', "-");
    let ok = uid.len() == 36
        && uid.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => is_lower_hex(b),
        });
    ok.then_some(uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Runtime::{Containerd, CriO, Docker, Podman};

    const UID: &str = "6f2c1a6e-8b0f-4d8e-9a53-3c1d2e4f5a6b";
    const UID_: &str = "6f2c1a6e_8b0f_4d8e_9a53_3c1d2e4f5a6b";
    const UID2: &str = "68654c22-e322-4f63-b96f-a16363105203";
    const UID2_: &str = "68654c22_e322_4f63_b96f_a16363105203";
    const ID: &str = "0ac0814cd3dc1e341620f880205074403be81d5ed005e3286e5c205fe37f388f";
    const ID2: &str = "7071c532c6d1d2aa56081e5b5f5d475d27c27bc349d03049614ea06c167527c8";
    /// A kind / k3d node's own container id on the host.
    const NODE: &str = "c96429ef5a2f8366f9f16138c17b7360d92256380f274695f86510f14dd4d055";

    fn pc(uid: &str, id: &str, runtime: Runtime) -> PathInfo {
        PathInfo::PodContainer {
            pod_uid: uid.into(),
            container_id: id.into(),
            runtime,
        }
    }

    fn pod(uid: &str) -> PathInfo {
        PathInfo::Pod {
            pod_uid: uid.into(),
        }
    }

    fn ctr(id: &str, runtime: Runtime) -> PathInfo {
        PathInfo::Container {
            container_id: id.into(),
            runtime,
        }
    }

    fn check(cases: &[(String, PathInfo)]) {
        for (path, want) in cases {
            assert_eq!(&parse(path), want, "path {path:?}");
            // Trailing and doubled slashes change nothing.
            assert_eq!(&parse(&format!("{path}/")), want, "path {path:?}/");
            assert_eq!(
                &parse(&path.replace('/', "//")),
                want,
                "path {path:?} doubled"
            );
        }
    }

    #[test]
    fn fixtures_are_well_formed() {
        for id in [ID, ID2, NODE] {
            assert!(is_container_id(id));
        }
        assert_eq!(canonical_uid(UID_).as_deref(), Some(UID));
        assert_eq!(canonical_uid(UID2_).as_deref(), Some(UID2));
    }

    #[test]
    fn systemd_driver_containerd() {
        check(&[
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope"
                ),
                pc(UID, ID, Containerd),
            ),
            (
                format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID2_}.slice/cri-containerd-{ID2}.scope"
                ),
                pc(UID2, ID2, Containerd),
            ),
            // Guaranteed pods have no QoS slice.
            (
                format!("/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope"),
                pc(UID, ID, Containerd),
            ),
        ]);
    }

    #[test]
    fn systemd_driver_crio() {
        let pod_slice =
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice");
        check(&[
            (format!("{pod_slice}/crio-{ID}.scope"), pc(UID, ID, CriO)),
            // conmon watches the container from the pod slice; it is no container itself.
            (format!("{pod_slice}/crio-conmon-{ID}.scope"), pod(UID)),
            // crun puts the payload one level down, in `container`.
            (
                format!("{pod_slice}/crio-{ID}.scope/container"),
                pc(UID, ID, CriO),
            ),
            (
                format!("/kubepods.slice/kubepods-pod{UID2_}.slice/crio-{ID2}.scope"),
                pc(UID2, ID2, CriO),
            ),
        ]);
    }

    #[test]
    fn systemd_driver_docker() {
        check(&[
            (
                format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/docker-{ID}.scope"
                ),
                pc(UID, ID, Docker),
            ),
            (
                format!("/kubepods.slice/kubepods-pod{UID2_}.slice/docker-{ID2}.scope"),
                pc(UID2, ID2, Docker),
            ),
        ]);
    }

    #[test]
    fn cgroupfs_driver() {
        check(&[
            (
                format!("/kubepods/besteffort/pod{UID}/{ID}"),
                pc(UID, ID, Containerd),
            ),
            (
                format!("/kubepods/burstable/pod{UID}/{ID}"),
                pc(UID, ID, Containerd),
            ),
            (
                format!("/kubepods/pod{UID2}/{ID2}"),
                pc(UID2, ID2, Containerd),
            ),
            // CRI-O under cgroupfs keeps its prefixes but drops ".scope".
            (
                format!("/kubepods/burstable/pod{UID}/crio-{ID}"),
                pc(UID, ID, CriO),
            ),
            (
                format!("/kubepods/burstable/pod{UID}/crio-conmon-{ID}"),
                pod(UID),
            ),
        ]);
    }

    #[test]
    fn nested_kubelets() {
        check(&[
            // kind, systemd driver inside the node container.
            (
                format!(
                    "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope"
                ),
                pc(UID, ID, Containerd),
            ),
            (
                format!(
                    "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope"
                ),
                pc(UID, ID, Containerd),
            ),
            // kind, cgroupfs driver with --cgroup-root=/kubelet.
            (
                format!("/kubelet/kubepods/besteffort/pod{UID}/{ID}"),
                pc(UID, ID, Containerd),
            ),
            // A kind node seen from the host: the pod inside wins over the node's scope.
            (
                format!(
                    "/system.slice/docker-{NODE}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope"
                ),
                pc(UID, ID, Containerd),
            ),
            (
                format!(
                    "/system.slice/docker-{NODE}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{UID_}.slice"
                ),
                pod(UID),
            ),
            // The node's own services and its QoS slices belong to the node container.
            (
                format!("/system.slice/docker-{NODE}.scope/system.slice/containerd.service"),
                ctr(NODE, Docker),
            ),
            (
                format!("/system.slice/docker-{NODE}.scope/kubelet.slice/kubelet-kubepods.slice"),
                ctr(NODE, Docker),
            ),
            // k3s (cgroupfs driver by default).
            (
                format!("/kubepods/burstable/pod{UID}/{ID}"),
                pc(UID, ID, Containerd),
            ),
            // Rootless k3s: cgroupfs below its systemd user service.
            (
                format!(
                    "/user.slice/user-1001.slice/user@1001.service/k3s-rootless.service/kubepods/pod{UID}/{ID}"
                ),
                pc(UID, ID, Containerd),
            ),
            // k3d: k3s in a docker container with its own cgroup namespace ...
            (
                format!("/system.slice/docker-{NODE}.scope/kubepods/besteffort/pod{UID}/{ID}"),
                pc(UID, ID, Containerd),
            ),
            (
                format!("/docker/{NODE}/kubepods/burstable/pod{UID}/{ID}"),
                pc(UID, ID, Containerd),
            ),
            // ... after k3s moved its own processes out of the namespace root into /init.
            (
                format!("/system.slice/docker-{NODE}.scope/init"),
                ctr(NODE, Docker),
            ),
            // containerd's systemd-style path taken literally by the cgroupfs driver.
            (
                format!(
                    "/system.slice/containerd.service/kubepods-burstable-pod{UID_}.slice:cri-containerd:{ID}"
                ),
                pc(UID, ID, Containerd),
            ),
            (
                format!("/kubepods-besteffort-pod{UID_}.slice:cri-containerd:{ID}"),
                pc(UID, ID, Containerd),
            ),
            (
                format!("/kubepods-pod{UID_}.slice:crio:{ID}"),
                pc(UID, ID, CriO),
            ),
            // Kubernetes in a pod (kind in CI): the outer pod's container holds it all
            // (pods inside it are not trusted: see `pods_below_a_pods_container_are_not_trusted`).
            (
                format!("/kubepods/burstable/pod{UID}/{ID}/kubelet/kubepods/besteffort"),
                pc(UID, ID, Containerd),
            ),
        ]);
    }

    /// A container that can write its cgroup tree could name a child after another
    /// pod's UID; attributing it to that pod would let it spoof incidents and Events.
    #[test]
    fn pods_below_a_pods_container_are_not_trusted() {
        let unknown = |p: String| (p, PathInfo::Unknown);
        check(&[
            // cgroupfs: a kubelet's tree with a pod inside a pod's container.
            unknown(format!(
                "/kubepods/burstable/pod{UID}/{ID}/kubepods/pod{UID2}/{ID2}"
            )),
            unknown(format!(
                "/kubepods/burstable/pod{UID}/{ID}/kubepods/besteffort/pod{UID2}"
            )),
            unknown(format!(
                "/kubepods/burstable/pod{UID}/{ID}/kubelet/kubepods/besteffort/pod{UID2}/{ID2}"
            )),
            // systemd: the same below a cri-containerd scope.
            unknown(format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope/kubepods-besteffort-pod{UID2_}.slice/cri-containerd-{ID2}.scope"
            )),
            unknown(format!(
                "/kubepods.slice/kubepods-pod{UID_}.slice/crio-{ID}.scope/kubepods-pod{UID2_}.slice"
            )),
            // The systemd-style literal name a mismatched runtime writes, nested.
            unknown(format!(
                "/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope/kubepods-pod{UID2_}.slice:cri-containerd:{ID2}"
            )),
        ]);
        // The container's own cgroups below it still belong to it, whatever their
        // names (cgroupfs names a pod only below kubepods).
        check(&[
            (
                format!("/kubepods/burstable/pod{UID}/{ID}/sub/deeper"),
                pc(UID, ID, Containerd),
            ),
            (
                format!("/kubepods/burstable/pod{UID}/{ID}/pod{UID2}/{ID2}"),
                pc(UID, ID, Containerd),
            ),
        ]);
    }

    #[test]
    fn pod_cgroups() {
        check(&[
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"
                ),
                pod(UID),
            ),
            (
                format!("/kubepods.slice/kubepods-pod{UID2_}.slice"),
                pod(UID2),
            ),
            (format!("/kubepods/besteffort/pod{UID}"), pod(UID)),
            (format!("/kubepods/pod{UID2}"), pod(UID2)),
        ]);
    }

    #[test]
    fn outside_kubernetes() {
        check(&[
            (format!("/system.slice/docker-{ID}.scope"), ctr(ID, Docker)),
            (format!("/docker/{ID}"), ctr(ID, Docker)),
            (format!("/machine.slice/libpod-{ID}.scope"), ctr(ID, Podman)),
            (
                format!("/machine.slice/libpod-{ID}.scope/container"),
                ctr(ID, Podman),
            ),
            (
                format!(
                    "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"
                ),
                ctr(ID, Podman),
            ),
            (
                format!("/machine.slice/machine-libpod_pod_{ID2}.slice/libpod-{ID}.scope"),
                ctr(ID, Podman),
            ),
            (format!("/libpod_parent/libpod-{ID}"), ctr(ID, Podman)),
            // Docker in docker: the innermost container.
            (
                format!("/system.slice/docker-{NODE}.scope/docker/{ID}"),
                ctr(ID, Docker),
            ),
            (
                format!("/machine.slice/libpod-conmon-{ID}.scope"),
                PathInfo::Host,
            ),
            // Podman in a docker container: its conmon belongs to the outer container.
            (
                format!("/system.slice/docker-{NODE}.scope/libpod-conmon-{ID}.scope"),
                ctr(NODE, Docker),
            ),
        ]);
    }

    #[test]
    fn host() {
        let host = |p: &str| (p.to_owned(), PathInfo::Host);
        check(&[
            host("/"),
            host(""),
            host("//"),
            host("/system.slice/sshd.service"),
            host("/user.slice/user-0.slice/session-3.scope"),
            host("/init.scope"),
            host("/kubepods.slice"),
            host("/kubepods.slice/kubepods-burstable.slice"),
            host("/kubepods.slice/kubepods-besteffort.slice"),
            host("/kubepods"),
            host("/kubepods/besteffort"),
            host("/kubepods/burstable"),
            host("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice"),
            host("/system.slice/docker.service"),
            host("/system.slice/containerd.service"),
            host("/system.slice/crio.service"),
            host("/system.slice/cri-dockerd.service"),
            host("/system.slice/k3s.service"),
            host("/docker"),
            host("/machine.slice"),
            host("/libpod_parent"),
            // CRI-O with conmon_cgroup = "system.slice".
            (
                format!("/system.slice/crio-conmon-{ID}.scope"),
                PathInfo::Host,
            ),
            (
                format!("/machine.slice/libpod-conmon-{ID}.scope"),
                PathInfo::Host,
            ),
        ]);
    }

    #[test]
    fn unknown() {
        let id63 = &ID[..63];
        let unknown = |p: String| (p, PathInfo::Unknown);
        check(&[
            unknown(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podNOTAUID.slice/cri-containerd-abc.scope".into(),
            ),
            unknown(format!("/kubepods/besteffort/pod{UID}/not-hex-id")),
            unknown(format!("/kubepods/besteffort/pod{UID}/{id63}")),
            unknown(format!("/kubepods/besteffort/pod{UID}/{}", ID.to_uppercase())),
            unknown(format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{id63}.scope"
            )),
            unknown(format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}0.scope"
            )),
            unknown(format!(
                "/kubepods.slice/kubepods-pod{UID_}.slice/unexpected.scope"
            )),
            // Static pods carry 32-hex md5 UIDs, which are not RFC 4122-shaped.
            unknown(format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope",
                &ID[..32]
            )),
            unknown(format!("/kubepods/besteffort/pod{}", UID.to_uppercase())),
            unknown("/kubepods/besteffort/something".into()),
            unknown("/kubepods.slice/kubepods-guaranteed.slice".into()),
            unknown(format!("/kubepods/besteffort/{ID}")),
            // CRI runtimes' container names outside any pod.
            unknown(format!("/system.slice/cri-containerd-{ID}.scope")),
            unknown(format!("/system.slice/crio-{ID}.scope")),
            unknown(format!("/system.slice/docker-{id63}.scope")),
            unknown("/docker/buildkit".into()),
            unknown("/system.slice/docker-weird.slice".into()),
            unknown(format!("/system.slice/docker-{NODE}.scope/libpod-xyz.scope")),
            // The innermost pod is malformed: do not fall back to the outer one.
            unknown(format!(
                "/kubepods/burstable/pod{UID}/{ID}/kubelet/kubepods/besteffort/podNOTAUID/{ID2}"
            )),
            unknown(format!("/kubepods-pod{UID_}.slice:cri-containerd")),
            unknown(format!("/kubepods-pod{UID_}.slice:cri-containerd:{ID}:x")),
        ]);
    }

    /// Whatever comes back satisfies the documented shapes.
    fn assert_well_formed(path: &str) {
        let valid_uid = |u: &str| canonical_uid(u).as_deref() == Some(u);
        match parse(path) {
            PathInfo::PodContainer {
                pod_uid,
                container_id,
                ..
            } => assert!(
                valid_uid(&pod_uid) && is_container_id(&container_id),
                "{path:?}"
            ),
            PathInfo::Pod { pod_uid } => assert!(valid_uid(&pod_uid), "{path:?}"),
            PathInfo::Container { container_id, .. } => {
                assert!(is_container_id(&container_id), "{path:?}")
            }
            PathInfo::Host | PathInfo::Unknown => {}
        }
    }

    /// xorshift64: deterministic pseudo-random picks in 0..n without a dependency.
    fn rng(mut state: u64) -> impl FnMut(usize) -> usize {
        move |n| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        }
    }

    #[test]
    fn shuffled_real_segments_stay_well_formed() {
        let segments = format!(
            "kubepods kubepods.slice besteffort kubepods-burstable.slice pod{UID} \
             kubepods-pod{UID_}.slice kubelet-kubepods-besteffort-pod{UID2_}.slice {ID} \
             cri-containerd-{ID}.scope crio-{ID2}.scope crio-conmon-{ID}.scope docker \
             docker-{NODE}.scope libpod-{ID}.scope libpod-conmon-{ID}.scope system.slice \
             containerd.service kubepods-pod{UID_}.slice:cri-containerd:{ID} init"
        );
        let segments: Vec<&str> = segments.split_whitespace().collect();
        let mut pick = rng(42);
        let mut outcomes = std::collections::HashSet::new();
        for _ in 0..500 {
            let path: String = (0..pick(7))
                .map(|_| format!("/{}", segments[pick(segments.len())]))
                .collect();
            assert_well_formed(&path);
            outcomes.insert(std::mem::discriminant(&parse(&path)));
        }
        assert_eq!(outcomes.len(), 5, "every kind of PathInfo comes up");
    }

    #[test]
    fn garbage_never_panics() {
        let fragments = format!(
            "/ / / - _ : . .slice .scope pod -pod kubepods besteffort docker libpod crio- \
             crio-conmon- cri-containerd- \u{0} \u{7f} é 💥 0 f g {UID} {UID_} {ID}"
        );
        let fragments: Vec<&str> = fragments.split(' ').filter(|f| !f.is_empty()).collect();
        let mut pick = rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..500 {
            let path: String = (0..pick(16))
                .map(|_| fragments[pick(fragments.len())])
                .collect();
            assert_well_formed(&path);
        }
        // Every cut of a real path, at every char boundary.
        let real = format!(
            "/system.slice/docker-{NODE}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope/é/x:y:z"
        );
        for (i, _) in real.char_indices() {
            assert_well_formed(&real[..i]);
            assert_well_formed(&real[i..]);
        }
    }
}
