//! Which Kubernetes the node runs: 1.34 (the default: Debian's containerd 1.6 or
//! CRI-O) or 1.36 (`cluster up --kubernetes 1.36`), on containerd 2 and runc built
//! here. `up` records it, so that `status`, `down` and xtask's `kubectl` use that
//! version's binaries. etcd, the Prometheus Operator and Prometheus are the same for
//! both.

use std::{fs, path::PathBuf};

use anyhow::bail;

use super::{
    build::{self, KUBERNETES_BINARIES},
    go_module,
    node::state,
    runtime::{Runtime, containerd2},
    versions::{KUBERNETES_1_36_VERSION, KUBERNETES_VERSION},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kubernetes {
    /// v1.34.4 on containerd 1.6 or CRI-O 1.34.
    #[value(name = "1.34")]
    V1_34,
    /// v1.36.3 on containerd 2 and runc, built by the set-up.
    #[value(name = "1.36")]
    V1_36,
}

impl Kubernetes {
    /// The pinned release (`v1.36.3`).
    pub fn version(self) -> &'static str {
        match self {
            Self::V1_34 => KUBERNETES_VERSION,
            Self::V1_36 => KUBERNETES_1_36_VERSION,
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

    /// The runtime its node runs on, given the one asked for: 1.36 needs containerd 2
    /// (containerd 1.x lacks the CRI `RuntimeConfig` call the kubelet needs from 1.35,
    /// and the module proxy serves no CRI-O of that minor).
    pub fn runtime(self, asked: Runtime) -> anyhow::Result<Runtime> {
        match (self, asked) {
            (Self::V1_34, Runtime::Containerd2) => {
                bail!("containerd 2 runs the Kubernetes 1.36 node: use --kubernetes 1.36")
            }
            (Self::V1_34, other) => Ok(other),
            (Self::V1_36, Runtime::Containerd | Runtime::Containerd2) => Ok(Runtime::Containerd2),
            (Self::V1_36, other) => bail!(
                "Kubernetes 1.36 runs on containerd 2 only, not {}: CRI-O's minor must match \
                 the kubelet's and only CRI-O 1.34 is built here",
                other.name()
            ),
        }
    }

    /// The kubelet configuration's lines this version needs besides the common ones.
    pub fn kubelet_config(self) -> &'static str {
        match self {
            Self::V1_34 => "",
            // A hybrid host (v1 controllers, cgroup2 at /sys/fs/cgroup/unified) counts
            // as cgroup v1, which the kubelet refuses from 1.35 unless told.
            Self::V1_36 => "failCgroupV1: false\n",
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
