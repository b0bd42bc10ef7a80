//! The pod the refusal rows dial from: an `app` container and a classic sidecar
//! `proxy` that declares a TCP port and mounts a socket volume the app mounts too,
//! as a mesh proxy or a Dapr sidecar is declared. Cgroups in the kubelet's layout and
//! a pods file naming them; removed on drop. The refusal loops run in the app's
//! cgroup, so each refusal takes the agent's whole path: attribution to the pod and
//! container, the detector, and the pod's incident.

use std::{net::TcpListener, os::unix::net::UnixListener, path::PathBuf, process::Command};

use anyhow::Context;
use sidecar_race_testbed::cgroup;

use super::scale::PodCgroups;

pub struct SidecarPod {
    pub uid: String,
    /// The proxy's declared port, closed: every connect to it is refused.
    pub port: u16,
    /// A path on the shared volume that nobody binds (`ENOENT`).
    pub absent: PathBuf,
    /// A socket file on the shared volume that nobody listens on (`ECONNREFUSED`).
    pub stale: PathBuf,
    volume: PathBuf,
    app_id: String,
    cgroups: PodCgroups,
    pods_file: PathBuf,
}

impl SidecarPod {
    pub fn create() -> anyhow::Result<Self> {
        let uid = format!(
            "5b1e0000-0000-4000-8000-{:06x}000001",
            std::process::id() & 0xff_ffff
        );
        let (app_id, proxy_id) = (format!("{:064x}", 0xa99), format!("{:064x}", 0x960));
        let cgroups = PodCgroups::create(&uid, &[&app_id, &proxy_id])?;
        // A port nobody listens on: the kernel's pick, released again.
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let volume = std::env::temp_dir().join(format!("sr-bench-{}-sock", std::process::id()));
        let _ = std::fs::remove_dir_all(&volume);
        std::fs::create_dir_all(&volume)?;
        let (absent, stale) = (volume.join("absent.sock"), volume.join("stale.sock"));
        drop(UnixListener::bind(&stale).context("make a stale socket file")?);
        let pods_file = std::env::temp_dir().join("sr-bench-pods-sidecar.json");
        let container = |name: &str, ports: &[u16]| {
            serde_json::json!({
                "name": name, "image": format!("example.com/{name}:1"),
                "ports": ports.iter().map(|p| serde_json::json!({"containerPort": p})).collect::<Vec<_>>(),
                "volumeMounts": [{"name": "sock", "mountPath": volume}],
            })
        };
        let status = |name: &str, id: &str| {
            serde_json::json!({
                "name": name, "containerID": format!("containerd://{id}"), "ready": true,
                "restartCount": 0, "state": {"running": {"startedAt": "2026-11-29T10:00:00Z"}},
            })
        };
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "refusals", "namespace": "bench", "uid": uid},
            "spec": {
                "nodeName": "bench",
                "volumes": [{"name": "sock", "emptyDir": {}}],
                "containers": [container("app", &[8080]), container("proxy", &[port])],
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.2",
                "containerStatuses": [status("app", &app_id), status("proxy", &proxy_id)],
            },
        });
        let list = serde_json::json!({"apiVersion": "v1", "kind": "PodList", "items": [pod]});
        std::fs::write(&pods_file, list.to_string())?;
        Ok(SidecarPod {
            uid,
            port,
            absent,
            stale,
            volume,
            app_id,
            cgroups,
            pods_file,
        })
    }

    /// `--pods-from` naming this pod.
    pub fn source(&self) -> String {
        format!("file:{}", self.pods_file.display())
    }

    /// Makes `cmd` start in the app container's cgroup.
    pub fn in_app(&self, cmd: &mut Command) -> anyhow::Result<()> {
        cgroup::start_in(cmd, &self.cgroups.container(&self.app_id))?;
        Ok(())
    }
}

impl Drop for SidecarPod {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.volume);
        let _ = std::fs::remove_file(&self.pods_file);
    }
}
