//! containerd's configuration for a private instance: its root, state and sockets in a
//! directory of its own, and either the CRI plugin as the kubelet needs it (cgroupfs
//! driver, runc, overlayfs, one CNI network, the locally imported pause image) or no
//! CRI plugin at all (a containerd for `ctr run` only).

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use crate::images::PAUSE_IMAGE;

/// The CNI plugins' directory in Debian's `containernetworking-plugins`.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// Plugins that would only get in the way: `opt` creates /opt/containerd, the other
/// snapshotters and the tracing processor are not used.
const DISABLED_PLUGINS: [&str; 6] = [
    "io.containerd.internal.v1.opt",
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.tracing.processor.v1.otlp",
];
const CRI_PLUGIN: &str = "io.containerd.grpc.v1.cri";

/// One private containerd.
pub struct Config<'a> {
    /// Where its root (`root/`), state (`state/`) and sockets (`containerd.sock`,
    /// `containerd.sock.ttrpc`) go.
    pub dir: &'a Path,
    /// `debug` for containerd's and runc's debug logs; `info` is containerd's default.
    pub log_level: &'a str,
    /// The CRI plugin, or `None` to disable it.
    pub cri: Option<Cri<'a>>,
}

/// What the CRI plugin's callers choose.
pub struct Cri<'a> {
    /// The CNI network configurations' directory; the plugin loads one network from it.
    pub cni_conf_dir: &'a Path,
}

/// containerd's gRPC socket (`ctr --address`, the CRI endpoint) in `dir`.
pub fn socket(dir: &Path) -> PathBuf {
    dir.join("containerd.sock")
}

impl Config<'_> {
    /// The `config.toml` (version 2).
    pub fn render(&self) -> String {
        let d = self.dir.display();
        let mut s = format!("version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n");
        s.push_str("disabled_plugins = [\n");
        let cri_disabled = self.cri.is_none().then_some(CRI_PLUGIN);
        for p in cri_disabled.into_iter().chain(DISABLED_PLUGINS) {
            let _ = writeln!(s, "  \"{p}\",");
        }
        s.push_str("]\n");
        let _ = write!(
            s,
            "[debug]\n  level = \"{level}\"\n\
             [grpc]\n  address = \"{sock}\"\n\
             [ttrpc]\n  address = \"{sock}.ttrpc\"\n",
            level = self.log_level,
            sock = socket(self.dir).display(),
        );
        if let Some(cri) = &self.cri {
            let _ = write!(
                s,
                r#"[plugins."{CRI_PLUGIN}"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # The kubelet asks for oom_score_adj -998 for sandboxes; lowering it needs
  # CAP_SYS_RESOURCE, which root may lack (in a VM sandbox, on this machine): keep it
  # at containerd's own (as rootless set-ups do). Nothing here depends on it.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."{CRI_PLUGIN}".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."{CRI_PLUGIN}".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."{CRI_PLUGIN}".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."{CRI_PLUGIN}".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{conf}"
    max_conf_num = 1
"#,
                conf = cri.cni_conf_dir.display(),
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_config_as_the_kubelet_needs_it() {
        let text = Config {
            dir: Path::new("/tmp/sr-cri-7"),
            log_level: "info",
            cri: Some(Cri {
                cni_conf_dir: Path::new("/tmp/sr-cri-7/cni"),
            }),
        }
        .render();
        for line in [
            "root = \"/tmp/sr-cri-7/root\"",
            "state = \"/tmp/sr-cri-7/state\"",
            "  level = \"info\"",
            "  address = \"/tmp/sr-cri-7/containerd.sock\"",
            "  address = \"/tmp/sr-cri-7/containerd.sock.ttrpc\"",
            "  sandbox_image = \"sr-test.local/pause:1\"",
            "  restrict_oom_score_adj = true",
            "    snapshotter = \"overlayfs\"",
            "        SystemdCgroup = false",
            "    bin_dir = \"/usr/lib/cni\"",
            "    conf_dir = \"/tmp/sr-cri-7/cni\"",
            "    max_conf_num = 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing:\n{text}");
        }
        assert!(!text.contains(&format!("  \"{CRI_PLUGIN}\",")));
    }

    #[test]
    fn without_cri_the_plugin_is_disabled() {
        let text = Config {
            dir: Path::new("/tmp/sr-seccomp-7"),
            log_level: "debug",
            cri: None,
        }
        .render();
        assert!(text.contains("disabled_plugins = [\n  \"io.containerd.grpc.v1.cri\",\n"));
        assert!(text.contains("  level = \"debug\"\n"));
        assert!(!text.contains("[plugins."));
    }
}
