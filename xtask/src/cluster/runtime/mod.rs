//! The node's container runtime behind the kubelet's CRI socket: containerd 1.6 (the
//! default), CRI-O (`cluster up --runtime cri-o`) or containerd 2 (the runtime of
//! `cluster up --kubernetes 1.36`). All run pods on the same CNI bridge from the same
//! locally imported images. `up` records which one it started, so that `down` and
//! `status` deal with that one.

pub mod containerd;
pub mod containerd2;
pub mod cri_o;
mod host_paths;
mod removed;

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::Context;
use sidecar_race_testbed::{cni::BridgeNetwork, images};

pub use removed::Removed;

use super::{
    node::{BRIDGE, NODE_IP, POD_CIDR, state},
    otelcol,
    sidecars::{CLOUD_SQL_PROXY, OAUTH2_PROXY, STATSD_EXPORTER},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Runtime {
    /// Debian's containerd 1.6 with its CRI plugin.
    Containerd,
    /// CRI-O 1.34, built by `cargo xtask setup` (the test tier), with runc and conmon.
    #[value(name = "cri-o")]
    CriO,
    /// containerd 2 with runc, both built by the set-up: what Kubernetes 1.36 runs on
    /// (`--kubernetes 1.36` picks it; `--runtime` does not name it).
    #[value(skip)]
    Containerd2,
}

impl Runtime {
    /// The scheme of its container IDs in a pod's status (`cri-o://<id>`), and the name
    /// `cluster up --runtime` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Containerd | Self::Containerd2 => "containerd",
            Self::CriO => "cri-o",
        }
    }

    /// What `up` records (and the tier's names for the variant): `name`, except that
    /// containerd 2 is told from Debian's.
    pub fn label(self) -> &'static str {
        match self {
            Self::Containerd2 => "containerd2",
            other => other.name(),
        }
    }

    /// The version the node reports after the scheme (`containerd://2.4.2`: the CRI
    /// version call drops the tag's `v`), for the runtimes built here; Debian's packages
    /// report theirs.
    pub fn built_version(self) -> Option<&'static str> {
        match self {
            Self::Containerd2 => Some(super::versions::CONTAINERD2_VERSION.trim_start_matches('v')),
            Self::Containerd | Self::CriO => None,
        }
    }

    fn containerd_release(self) -> containerd::Release {
        match self {
            Self::Containerd2 => containerd::Release::V2,
            _ => containerd::Release::Debian,
        }
    }

    /// Its process's name, as `up` records its pid.
    pub fn process(self) -> &'static str {
        match self {
            Self::Containerd | Self::Containerd2 => containerd::PROCESS,
            Self::CriO => cri_o::PROCESS,
        }
    }

    /// The CRI endpoint the kubelet is given.
    pub fn socket(self) -> PathBuf {
        match self {
            Self::Containerd | Self::Containerd2 => containerd::socket(),
            Self::CriO => cri_o::socket(),
        }
    }

    /// Whatever `up` needs built for it and is not (the cause, for `up` to refuse).
    pub fn missing(self) -> Vec<PathBuf> {
        match self {
            Self::Containerd => Vec::new(),
            Self::CriO => cri_o::build::missing(),
            Self::Containerd2 => containerd2::build::missing(),
        }
    }

    /// Starts it on the node's CNI network and imports the cluster's images.
    pub fn start(self) -> anyhow::Result<()> {
        fs::write(recorded_file(), self.label())?;
        let cni_conf = write_cni_conf()?;
        match self {
            Self::Containerd | Self::Containerd2 => {
                containerd::start(&cni_conf, self.containerd_release())?
            }
            Self::CriO => cri_o::start(&cni_conf)?,
        }
        for (archive, reference) in image_archives()? {
            self.import(&archive, reference, reference)
                .with_context(|| format!("cannot import {reference}"))?;
        }
        Ok(())
    }

    /// Puts the OCI archive `archive` (of one image, `named` in it) into its image
    /// store as `reference`.
    pub fn import(self, archive: &Path, named: &str, reference: &str) -> anyhow::Result<()> {
        match self {
            Self::Containerd | Self::Containerd2 => {
                containerd::import(archive, named, reference, self.containerd_release())
            }
            Self::CriO => cri_o::import(archive, reference),
        }
    }

    /// Kills and removes every pod and container it runs (with the kubelet stopped).
    pub fn remove_containers(self) -> Removed {
        match self {
            Self::Containerd | Self::Containerd2 => {
                containerd::remove_containers(self.containerd_release())
            }
            Self::CriO => cri_o::remove_pods(),
        }
    }

    /// Stops it and the per-container processes that outlive it (shims, conmons), and
    /// removes what it made outside the state directory.
    pub fn stop(self) {
        match self {
            Self::Containerd | Self::Containerd2 => containerd::stop(),
            Self::CriO => cri_o::stop(),
        }
    }

    /// The runtime `up` recorded; containerd when none is (an `up` that failed before
    /// starting one, or one from before the record).
    pub fn recorded() -> Self {
        match fs::read_to_string(recorded_file())
            .as_deref()
            .map(str::trim)
        {
            Ok("cri-o") => Self::CriO,
            Ok("containerd2") => Self::Containerd2,
            _ => Self::Containerd,
        }
    }
}

fn recorded_file() -> PathBuf {
    state("runtime")
}

/// The CNI bridge network on the node bridge, as both runtimes read it: its conflist's
/// directory.
fn write_cni_conf() -> anyhow::Result<PathBuf> {
    let cni = state("cni");
    for sub in ["conf", "ipam"] {
        fs::create_dir_all(cni.join(sub))?;
    }
    let network = BridgeNetwork {
        name: NETWORK,
        bridge: BRIDGE,
        subnet: POD_CIDR,
        ipam_dir: &cni.join("ipam"),
        // Pods route everything to the node: the Service CIDR goes through kube-proxy's
        // DNAT there.
        default_gateway: Some(NODE_IP),
        loopback: true,
    };
    let conf = cni.join("conf");
    fs::write(conf.join("10-sidecar-race.conflist"), network.conflist())?;
    Ok(conf)
}

/// The pods' CNI network (libcni names its cached results after it).
pub const NETWORK: &str = "sidecar-race-cluster";

/// The images pods run, as OCI archives with the references they are imported as: the
/// busybox-static and glibc images, the pause image, and the cluster tier's real
/// sidecars where the test tier's set-up built them (the demo's set-up does not).
fn image_archives() -> anyhow::Result<Vec<(PathBuf, &'static str)>> {
    let dir = state("images");
    let mut archives = images::write(&dir)?;
    let sidecars = [
        (&images::COLLECTOR, otelcol::binary()),
        (&images::CLOUD_SQL_PROXY, CLOUD_SQL_PROXY.binary()),
        (&images::OAUTH2_PROXY, OAUTH2_PROXY.binary()),
        (&images::STATSD_EXPORTER, STATSD_EXPORTER.binary()),
    ];
    for (image, binary) in sidecars {
        if binary.exists() {
            archives.push(images::write_vendor(&dir, image, &binary)?);
        }
    }
    Ok(archives)
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::Runtime;

    #[test]
    fn the_flag_takes_the_container_id_schemes() {
        for r in [Runtime::Containerd, Runtime::CriO] {
            assert_eq!(Runtime::from_str(r.name(), false), Ok(r));
        }
    }
}
