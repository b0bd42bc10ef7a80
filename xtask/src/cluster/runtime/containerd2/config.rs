//! containerd 2's `config.toml` (version 3, where the CRI plugin is split into
//! `io.containerd.cri.v1.images`, `io.containerd.cri.v1.runtime` and
//! `io.containerd.grpc.v1.cri`) for the kubelet: what the 1.6 node's configuration says
//! (`sidecar_race_testbed::containerd`), with the built runc, and without the plugins
//! that would write outside its directory.

use std::{fmt::Write as _, path::Path};

use sidecar_race_testbed::{
    containerd::{CNI_BIN_DIR, socket},
    images::PAUSE_IMAGE,
};

/// Plugins left out: the snapshotters and the tracing processor nothing uses, `opt`
/// (it makes /opt/containerd), NRI (its socket is /var/run/nri) and the image verifier
/// (it reads /opt/containerd/image-verifier).
const DISABLED_PLUGINS: [&str; 8] = [
    "io.containerd.internal.v1.opt",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.snapshotter.v1.erofs",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.nri.v1.nri",
    "io.containerd.image-verifier.v1.bindir",
];

/// What containerd 2.4 imports into every configuration, whatever its own `imports`
/// say (they are added to it): the host's drop-ins.
pub const HOST_DROP_INS: &str = "/etc/containerd/conf.d";

/// Refuses a host whose containerd drop-ins (`HOST_DROP_INS`) would change the node's
/// runtime: containerd 2 would import them into our configuration.
pub fn check_no_host_drop_ins(dir: &Path) -> anyhow::Result<()> {
    let drop_ins: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    anyhow::ensure!(
        drop_ins.is_empty(),
        "{} has containerd drop-ins ({}), which containerd 2 imports into every \
         configuration, the node's included: move them away while the 1.36 cluster runs",
        dir.display(),
        drop_ins.join(", ")
    );
    Ok(())
}

/// The configuration of a containerd 2 in `dir` with its CRI plugin on the CNI
/// networks of `cni_conf_dir`, running containers with `runc`.
pub fn render(dir: &Path, cni_conf_dir: &Path, runc: &Path) -> String {
    let d = dir.display();
    let mut s = format!("version = 3\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n");
    s.push_str("disabled_plugins = [\n");
    for p in DISABLED_PLUGINS {
        let _ = writeln!(s, "  \"{p}\",");
    }
    s.push_str("]\n");
    let _ = write!(
        s,
        r#"[debug]
  level = "info"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"
[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  disable_apparmor = true
  # As on the 1.6 node: root may lack CAP_SYS_RESOURCE in a VM sandbox.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{CNI_BIN_DIR}"]
    conf_dir = "{conf}"
    max_conf_num = 1
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#,
        sock = socket(dir).display(),
        runc = runc.display(),
        conf = cni_conf_dir.display(),
    );
    s
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn a_host_drop_in_is_refused() {
        let dir = std::env::temp_dir().join(format!("sr-drop-ins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // None, or no TOML: nothing would be imported.
        std::fs::write(dir.join("README"), "").unwrap();
        assert!(super::check_no_host_drop_ins(&dir).is_ok());
        assert!(super::check_no_host_drop_ins(&dir.join("absent")).is_ok());
        std::fs::write(dir.join("10-gpu.toml"), "").unwrap();
        let refused = super::check_no_host_drop_ins(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(refused.contains("10-gpu.toml"), "{refused}");
    }

    #[test]
    fn the_kubelet_gets_the_built_runc_on_cgroupfs_and_the_node_network() {
        let text = super::render(
            Path::new("/s/containerd"),
            Path::new("/s/cni/conf"),
            Path::new("/c/runc-v1.5.3/bin/runc"),
        );
        for line in [
            "version = 3",
            "root = \"/s/containerd/root\"",
            "state = \"/s/containerd/state\"",
            "  address = \"/s/containerd/containerd.sock\"",
            "    sandbox = \"sr-test.local/pause:1\"",
            "        BinaryName = \"/c/runc-v1.5.3/bin/runc\"",
            "        SystemdCgroup = false",
            "    bin_dirs = [\"/usr/lib/cni\"]",
            "    conf_dir = \"/s/cni/conf\"",
            "  \"io.containerd.nri.v1.nri\",",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing:\n{text}");
        }
    }
}
