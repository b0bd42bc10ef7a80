//! The node's container runtime: containerd with its CRI plugin (cgroupfs, runc,
//! overlayfs) and the CNI bridge on the node bridge, started as a cluster process, with
//! the locally made images imported.

use std::{fs, process::Command, time::Duration};

use anyhow::Context;

use super::{
    clients::ctr,
    images,
    node::{BRIDGE, NODE_IP, POD_CIDR, state},
    procs,
};
use crate::run::{checked, succeeds};

pub fn start() -> anyhow::Result<()> {
    let d = state("containerd");
    let cni = state("cni");
    for sub in ["conf", "ipam"] {
        fs::create_dir_all(cni.join(sub))?;
    }
    fs::create_dir_all(&d)?;
    let cni_dir = cni.display();
    // isDefaultGateway: pods route everything to the node (the Service CIDR goes
    // through kube-proxy's DNAT there); no masquerade, so nothing is forwarded out.
    fs::write(
        cni.join("conf/10-sidecar-race.conflist"),
        serde_json::json!({
            "cniVersion": "0.4.0",
            "name": "sidecar-race-cluster",
            "plugins": [{
                "type": "bridge", "bridge": BRIDGE, "isGateway": true, "isDefaultGateway": true,
                "ipMasq": false, "hairpinMode": true,
                "ipam": {"type": "host-local", "dataDir": format!("{cni_dir}/ipam"),
                         "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]]},
            }, {"type": "loopback"}],
        })
        .to_string(),
    )?;
    let dd = d.display();
    let config = format!(
        r#"version = 2
root = "{dd}/root"
state = "{dd}/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{dd}/containerd.sock"
[ttrpc]
  address = "{dd}/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # Lowering oom_score_adj needs CAP_SYS_RESOURCE, which root may lack in a VM
  # sandbox: keep containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_dir}/conf"
    max_conf_num = 1
"#,
        sandbox = images::SANDBOX_IMAGE
    );
    fs::write(d.join("config.toml"), config)?;
    procs::spawn(
        "containerd",
        Command::new("containerd")
            .arg("--config")
            .arg(d.join("config.toml")),
    )?;
    procs::wait_ready("containerd", Duration::from_secs(30), || {
        succeeds(ctr().args(["version"]))
    })?;
    for (archive, reference) in images::write(&state("images"))? {
        checked(ctr().args(["images", "import"]).arg(&archive))
            .with_context(|| format!("cannot import {reference}"))?;
    }
    Ok(())
}
