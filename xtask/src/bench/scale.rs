//! A node's worth of simulated pods: pod and container cgroups in the kubelet's
//! systemd layout under the real cgroup2 hierarchy, and a pods file naming them, as
//! `kubectl get pods -o json` would. Removed again on drop.

use std::path::PathBuf;

use anyhow::Context;

pub struct SimulatedPods {
    cgroups: Vec<PodCgroups>,
    pub pods_file: PathBuf,
}

impl SimulatedPods {
    /// `n` pods of one app container each (the kubelet's default maximum is 110).
    pub fn create(n: usize, tag: &str) -> anyhow::Result<Self> {
        let mut sim = SimulatedPods {
            cgroups: Vec::new(),
            pods_file: std::env::temp_dir().join(format!("sr-bench-pods-{tag}.json")),
        };
        let mut items = Vec::new();
        for i in 0..n {
            let uid = format!(
                "5b1e0000-0000-4000-8000-{:06x}{:06x}",
                std::process::id() & 0xff_ffff,
                i
            );
            let cid = format!("{:056x}{:08x}", 0xbe4c4, i);
            sim.cgroups.push(PodCgroups::create(&uid, &[&cid])?);
            items.push(format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"bench-{i}","namespace":"bench","uid":"{uid}","ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"bench-{i}-5d4f8","uid":"00000000-0000-4000-8000-00000000{i:04x}","controller":true}}]}},"spec":{{"nodeName":"bench","containers":[{{"name":"app","image":"app","ports":[{{"containerPort":8080}}]}}]}},"status":{{"phase":"Running","podIP":"10.0.{}.{}","containerStatuses":[{{"name":"app","containerID":"containerd://{cid}","ready":true,"restartCount":0,"state":{{"running":{{}}}}}}]}}}}"#,
                i / 250,
                i % 250 + 1
            ));
        }
        std::fs::write(
            &sim.pods_file,
            format!(
                r#"{{"apiVersion":"v1","kind":"PodList","items":[{}]}}"#,
                items.join(",")
            ),
        )?;
        Ok(sim)
    }
}

impl Drop for SimulatedPods {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.pods_file);
    }
}

/// One pod's cgroups in the kubelet's systemd layout (containerd's scope names) under
/// the real cgroup2 hierarchy; removed on drop, containers first.
pub struct PodCgroups {
    pod: PathBuf,
    containers: Vec<PathBuf>,
}

impl PodCgroups {
    pub fn create(uid: &str, container_ids: &[&str]) -> anyhow::Result<Self> {
        let pod = cgroup2_mount()?
            .join("kubepods.slice/kubepods-besteffort.slice")
            .join(format!(
                "kubepods-besteffort-pod{}.slice",
                uid.replace('-', "_")
            ));
        let mut made = PodCgroups {
            pod,
            containers: Vec::new(),
        };
        for id in container_ids {
            let dir = made.container(id);
            std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
            made.containers.push(dir);
        }
        Ok(made)
    }

    /// The cgroup directory of the container with this id.
    pub fn container(&self, id: &str) -> PathBuf {
        self.pod.join(format!("cri-containerd-{id}.scope"))
    }
}

impl Drop for PodCgroups {
    fn drop(&mut self) {
        for d in self.containers.iter().chain([&self.pod]) {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// `n` bare cgroups (for the index build time), removed on drop.
pub struct BareCgroups(Vec<PathBuf>);

impl BareCgroups {
    pub fn create(n: usize) -> anyhow::Result<Self> {
        let base = cgroup2_mount()?.join(format!("sr-bench-{}", std::process::id()));
        let mut dirs = Vec::new();
        for i in 0..n {
            let d = base.join(format!("c{i}"));
            std::fs::create_dir_all(&d).with_context(|| format!("mkdir {}", d.display()))?;
            dirs.push(d);
        }
        dirs.push(base);
        Ok(BareCgroups(dirs))
    }
}

impl Drop for BareCgroups {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The cgroup2 mount showing the whole hierarchy (unified or hybrid hosts).
fn cgroup2_mount() -> anyhow::Result<PathBuf> {
    sidecar_race_mountinfo::read_self()?
        .into_iter()
        .find(|m| m.fs_type == "cgroup2" && m.root == "/")
        .map(|m| m.mount_point)
        .context("no cgroup2 mount in /proc/self/mountinfo")
}
