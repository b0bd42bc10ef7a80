//! Which Kubernetes the node runs: 1.34 (the default: Debian's containerd 1.6 or
//! CRI-O), 1.36 or 1.37 (`cluster up --kubernetes 1.36|1.37`), on containerd 2 and
//! runc built here. `up` records it, so that `status`, `down` and xtask's `kubectl` use that
//! version's binaries. etcd, the Prometheus Operator and Prometheus are the same for
//! both.

use std::{fs, path::PathBuf};

use anyhow::bail;

use super::{
    build::{self, KUBERNETES_BINARIES},
    go_module,
    node::state,
    runtime::{Runtime, containerd2},
    versions::{KUBERNETES_1_36_VERSION, KUBERNETES_1_37_VERSION, KUBERNETES_VERSION},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kubernetes {
    /// v1.34.4 on containerd 1.6 or CRI-O 1.34.
    #[value(name = "1.34")]
    V1_34,
    /// v1.36.3 on containerd 2 and runc, built by the set-up.
    #[value(name = "1.36")]
    V1_36,
    /// v1.37.2 on the same containerd 2 and runc; opt-in in the test tier
    /// (`cargo xtask test kube-1.37`).
    #[value(name = "1.37")]
    V1_37,
}

impl Kubernetes {
    /// The pinned release (`v1.36.3`).
    pub fn version(self) -> &'static str {
        match self {
            Self::V1_34 => KUBERNETES_VERSION,
            Self::V1_36 => KUBERNETES_1_36_VERSION,
            Self::V1_37 => KUBERNETES_1_37_VERSION,
        }
    }

    /// One of its cached binaries (`kubectl`, `kubelet`, ...).
    pub fn bin(self, name: &str) -> PathBuf {
        build::kubernetes_dir(self.version()).join("bin").join(name)
    }

    /// Its binaries not built yet (1.34's are the set-up's, `build::missing`).
    pub fn missing(self) -> Vec<PathBuf> {
        KUBERNETES_BINARIES
            .iter()
            .map(|b| self.bin(b))
            .filter(|p| !p.exists())
            .collect()
    }

    /// The runtime its node runs on, given the one asked for: 1.36 and 1.37 need
    /// containerd 2 (containerd 1.x lacks the CRI `RuntimeConfig` call the kubelet needs
    /// from 1.35, and the module proxy serves no CRI-O of those minors).
    pub fn runtime(self, asked: Runtime) -> anyhow::Result<Runtime> {
        match (self, asked) {
            (Self::V1_34, Runtime::Containerd2) => {
                bail!("containerd 2 runs the Kubernetes 1.36 and 1.37 nodes: use --kubernetes 1.36")
            }
            (Self::V1_34, other) => Ok(other),
            (_, Runtime::Containerd | Runtime::Containerd2) => Ok(Runtime::Containerd2),
            (_, other) => bail!(
                "Kubernetes {} runs on containerd 2 only, not {}: CRI-O's minor must match \
                 the kubelet's and only CRI-O 1.34 is built here",
                self.minor(),
                other.name()
            ),
        }
    }

    /// `1.36`, as `--kubernetes` spells it.
    pub fn minor(self) -> &'static str {
        match self {
            Self::V1_34 => "1.34",
            Self::V1_36 => "1.36",
            Self::V1_37 => "1.37",
        }
    }

    /// The kubelet configuration's lines this version needs besides the common ones.
    /// No feature gate: the pod lifecycles the tier proves on 1.36 and 1.37 are on by
    /// default there (`ContainerRestartRules`, KEP-5307, beta from 1.35;
    /// `RestartAllContainersOnContainerExits`, KEP-5532, beta from 1.36; its
    /// `NodeDeclaredFeatures` beta in 1.36, GA in 1.37). KEP-4438's
    /// `SidecarsRestartableDuringPodTermination` is in neither: v1.37.2's kubelet
    /// refuses to start with it (`unrecognized feature gate`), docs/cluster.md.
    pub fn kubelet_config(self) -> &'static str {
        match self {
            Self::V1_34 => "",
            // A hybrid host (v1 controllers, cgroup2 at /sys/fs/cgroup/unified) counts
            // as cgroup v1, which the kubelet refuses from 1.35 unless told.
            Self::V1_36 | Self::V1_37 => "failCgroupV1: false\n",
        }
    }

    /// Builds what this version's node needs and is not built (1.34's: the set-up's).
    pub fn ensure(self) -> anyhow::Result<()> {
        if self == Self::V1_34 {
            return Ok(());
        }
        containerd2::build::ensure()?;
        if self.missing().is_empty() {
            return Ok(());
        }
        build::build_kubernetes(&go_module::go()?, self.version())
    }

    pub fn record(self) -> anyhow::Result<()> {
        Ok(fs::write(recorded_file(), self.version())?)
    }

    /// The version `up` recorded; 1.34 when none is (no cluster, or one from before
    /// the record).
    pub fn recorded() -> Self {
        match fs::read_to_string(recorded_file())
            .as_deref()
            .map(str::trim)
        {
            Ok(KUBERNETES_1_36_VERSION) => Self::V1_36,
            Ok(KUBERNETES_1_37_VERSION) => Self::V1_37,
            _ => Self::V1_34,
        }
    }
}

fn recorded_file() -> PathBuf {
    state("kubernetes")
}

#[cfg(test)]
mod tests {
    use super::{Kubernetes, Runtime};

    #[test]
    fn kubernetes_1_37_runs_on_containerd_2_only_with_the_1_36_kubelet_config() {
        assert_eq!(
            Kubernetes::V1_37.runtime(Runtime::Containerd).unwrap(),
            Runtime::Containerd2
        );
        let refused = Kubernetes::V1_37.runtime(Runtime::CriO).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("Kubernetes 1.37 runs on containerd 2 only"),
            "{refused}"
        );
        assert_eq!(Kubernetes::V1_37.version(), "v1.37.2");
        assert_eq!(
            Kubernetes::V1_37.kubelet_config(),
            Kubernetes::V1_36.kubelet_config()
        );
    }

    #[test]
    fn kubernetes_1_36_runs_on_containerd_2_only() {
        assert_eq!(
            Kubernetes::V1_36.runtime(Runtime::Containerd).unwrap(),
            Runtime::Containerd2
        );
        let refused = Kubernetes::V1_36.runtime(Runtime::CriO).unwrap_err();
        assert!(
            refused.to_string().contains("containerd 2 only"),
            "{refused}"
        );
        assert_eq!(
            Kubernetes::V1_34.runtime(Runtime::CriO).unwrap(),
            Runtime::CriO
        );
        assert!(Kubernetes::V1_34.runtime(Runtime::Containerd2).is_err());
    }
}
