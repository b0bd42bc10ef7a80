//! The node's container runtime: containerd with its CRI plugin and the CNI bridge on
//! the node bridge (`sidecar_race_testbed`, as the CRI test tier has them), started as a
//! cluster process, with the busybox-static images imported.

use std::{fs, process::Command, time::Duration};

use anyhow::Context;
use sidecar_race_testbed::{cni::BridgeNetwork, containerd, images};

use super::{
    clients::ctr,
    node::{BRIDGE, NODE_IP, POD_CIDR, containerd_dir, state},
    otelcol, procs,
    sidecars::{CLOUD_SQL_PROXY, OAUTH2_PROXY},
};
use crate::run::{checked, succeeds};

pub fn start() -> anyhow::Result<()> {
    let d = containerd_dir();
    let cni = state("cni");
    for sub in ["conf", "ipam"] {
        fs::create_dir_all(cni.join(sub))?;
    }
    fs::create_dir_all(&d)?;
    let network = BridgeNetwork {
        name: "sidecar-race-cluster",
        bridge: BRIDGE,
        subnet: POD_CIDR,
        ipam_dir: &cni.join("ipam"),
        // Pods route everything to the node: the Service CIDR goes through kube-proxy's
        // DNAT there.
        default_gateway: Some(NODE_IP),
        loopback: true,
    };
    fs::write(
        cni.join("conf/10-sidecar-race.conflist"),
        network.conflist(),
    )?;
    let config = containerd::Config {
        dir: &d,
        log_level: "info",
        cri: Some(containerd::Cri {
            cni_conf_dir: &cni.join("conf"),
        }),
    };
    fs::write(d.join("config.toml"), config.render())?;
    procs::spawn(
        "containerd",
        Command::new("containerd")
            .arg("--config")
            .arg(d.join("config.toml")),
    )?;
    procs::wait_ready("containerd", Duration::from_secs(30), || {
        succeeds(ctr().args(["version"]))
    })?;
    let mut archives = images::write(&state("images"))?;
    // The cluster tier's real sidecars, where the test tier's set-up built them (the
    // demo's set-up does not).
    let sidecars = [
        (&images::COLLECTOR, otelcol::binary()),
        (&images::CLOUD_SQL_PROXY, CLOUD_SQL_PROXY.binary()),
        (&images::OAUTH2_PROXY, OAUTH2_PROXY.binary()),
    ];
    for (image, binary) in sidecars {
        if binary.exists() {
            archives.push(images::write_vendor(&state("images"), image, &binary)?);
        }
    }
    for (archive, reference) in archives {
        checked(ctr().args(["images", "import"]).arg(&archive))
            .with_context(|| format!("cannot import {reference}"))?;
    }
    Ok(())
}
