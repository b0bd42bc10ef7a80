//! CRI-O's `crio.conf` for the cluster's node: every path it writes in the cluster's
//! state directory (nothing in /etc, /var/lib/crio or /run/crio), the cgroupfs driver
//! the kubelet is configured with, runc, the node's CNI bridge network, and the
//! locally imported pause image. Its seccomp profile is CRI-O's own default, as a
//! user's node has it.

use std::path::Path;

/// Where CRI-O keeps what it writes, and what it reads from us.
pub struct Paths<'a> {
    /// Its directory in the state directory.
    pub dir: &'a Path,
    /// The CNI conflist's directory.
    pub cni_conf: &'a Path,
    pub pinns: &'a Path,
    /// The image signature policy (accept anything: images are imported, never pulled).
    pub policy: &'a Path,
}

impl Paths<'_> {
    fn at(&self, sub: &str) -> String {
        self.dir.join(sub).display().to_string()
    }

    /// The image store's root and run root (skopeo writes to the same).
    pub fn storage(dir: &Path) -> (String, String) {
        (
            dir.join("root").display().to_string(),
            dir.join("run").display().to_string(),
        )
    }

    pub fn render(&self, pause_image: &str) -> String {
        let (root, runroot) = Self::storage(self.dir);
        let at = |s| self.at(s);
        format!(
            r#"[crio]
root = "{root}"
runroot = "{runroot}"
storage_driver = "overlay"
log_dir = "{logs}"
version_file = "{runroot}/version"
version_file_persist = "{lib}/version"
clean_shutdown_file = "{lib}/clean.shutdown"
internal_wipe = true

[crio.api]
listen = "{sock}"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
container_exits_dir = "{exits}"
container_attach_socket_dir = "{attach}"
namespaces_dir = "{ns}"
pinns_path = "{pinns}"
hooks_dir = ["{hooks}"]
cdi_spec_dirs = ["{cdi}"]
irqbalance_config_file = "{irqbalance}"
irqbalance_config_restore_file = "disable"
seccomp_profile = ""
apparmor_profile = ""
selinux = false
disable_hostport_mapping = true
decryption_keys_path = "{keys}"

[crio.runtime.runtimes.runc]
runtime_type = "oci"
runtime_root = "{runc_root}"
monitor_cgroup = "pod"

[crio.image]
signature_policy = "{policy}"
signature_policy_dir = "{policies}"
pause_image = "{pause_image}"
pause_command = ""
pinned_images = ["{pause_image}"]

[crio.network]
network_dir = "{cni}"
plugin_dirs = ["/usr/lib/cni"]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
nri_listen = "{nri_sock}"
nri_plugin_dir = "{nri_plugins}"
nri_plugin_config_dir = "{nri_conf}"
"#,
            logs = at("logs"),
            lib = at("lib"),
            sock = at("crio.sock"),
            exits = at("exits"),
            attach = at("attach"),
            ns = at("ns"),
            pinns = self.pinns.display(),
            hooks = at("hooks"),
            cdi = at("cdi"),
            irqbalance = at("irqbalance"),
            keys = at("keys"),
            runc_root = at("runtime-root/runc"),
            policy = self.policy.display(),
            policies = at("policies"),
            cni = self.cni_conf.display(),
            nri_sock = at("nri.sock"),
            nri_plugins = at("nri-plugins"),
            nri_conf = at("nri-conf"),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::Paths;

    #[test]
    fn every_path_crio_writes_is_in_its_directory() {
        let dir = Path::new("/state/crio");
        let paths = Paths {
            dir,
            cni_conf: Path::new("/state/cni/conf"),
            pinns: Path::new("/cache/bin/pinns"),
            policy: Path::new("/state/crio/policy.json"),
        };
        let conf = paths.render("sr-test.local/pause:1");
        // Every quoted value of the file: the odd pieces between double quotes.
        let quoted: Vec<&str> = conf.split('"').skip(1).step_by(2).collect();
        assert!(quoted.len() > 20, "{conf}");
        for s in quoted.iter().filter(|s| s.starts_with('/')) {
            assert!(
                s.starts_with("/state/") || *s == "/usr/lib/cni" || s.starts_with("/cache/"),
                "{s} is outside the state directory"
            );
        }
        assert!(conf.contains("cgroup_manager = \"cgroupfs\"\n"), "{conf}");
        assert!(
            conf.contains("pinned_images = [\"sr-test.local/pause:1\"]\n"),
            "{conf}"
        );
    }
}
