//! The test cluster keeps its pods' traffic on the machine: an iptables chain of our
//! own drops what is forwarded from the pod CIDR to anything but the node's bridge
//! (pod to pod, pod to Service after DNAT) and loopback. The CNI bridge turns on
//! `ip_forward` and gives pods a default route through the node with no masquerade, so
//! without it a pod dialing an outside address would be routed off the host.

use std::process::Command;

use anyhow::Context;

use super::node::{BRIDGE, POD_CIDR};
use crate::run::{checked, output};

/// Our chain in the filter table, jumped to from FORWARD.
pub const CHAIN: &str = "SR-CLUSTER-EGRESS";

/// The FORWARD rule that sends the pods' forwarded traffic to [`CHAIN`].
fn jump() -> [&'static str; 4] {
    ["-s", POD_CIDR, "-j", CHAIN]
}

fn iptables() -> Command {
    let mut c = Command::new("iptables");
    c.arg("-w");
    c
}

/// Makes the chain (bridge and loopback return, the rest is dropped) and puts its jump
/// first in FORWARD, before kube-proxy's and the CNI plugin's rules can accept.
pub fn install() -> anyhow::Result<()> {
    remove();
    checked(iptables().args(["-N", CHAIN]))
        .with_context(|| format!("cannot create the iptables chain {CHAIN}"))?;
    for out in [BRIDGE, "lo"] {
        checked(iptables().args(["-A", CHAIN, "-o", out, "-j", "RETURN"]))?;
    }
    checked(iptables().args([
        "-A",
        CHAIN,
        "-m",
        "comment",
        "--comment",
        "sidecar-race test cluster: pod traffic stays on this machine",
        "-j",
        "DROP",
    ]))?;
    checked(iptables().args(["-I", "FORWARD", "1"]).args(jump()))?;
    Ok(())
}

/// Removes the jump and the chain; what is left of them (should be nothing).
pub fn remove() -> Vec<String> {
    while iptables()
        .args(["-D", "FORWARD"])
        .args(jump())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {}
    for op in ["-F", "-X"] {
        let _ = iptables()
            .args([op, CHAIN])
            .stderr(std::process::Stdio::null())
            .status();
    }
    output(Command::new("iptables-save").args(["-t", "filter"]))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(CHAIN))
        .map(|l| format!("iptables filter: {l}"))
        .collect()
}
